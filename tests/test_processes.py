"""Several processes on one NPU: the seeded scheduler, pool strategies, faults naming both processes."""

import numpy as np
import pytest

import npusim
from npusim import zoo
from npusim.errors import DataError, UsageError
from npusim.hw import load_profile
from npusim.generative import feedback_pairs, run_steps
from npusim.processes import Job, NpuSystem, RuntimeBugs, RuntimeConfig

PROFILE = load_profile("n657")


@pytest.fixture(scope="module")
def chain():
    """Three 3x3 convs (three epochs) on 1x8x8x8: output shape = input shape."""
    b = zoo.Builder(0)
    x = "input"
    for _ in range(3):
        x = b.cbr(x, 8, 8)
    return npusim.compile(b.model([1, 8, 8, 8], [x], "chain"))


def _system(prog, runs=1, n=2, inputs=None, **cfg):
    """`inputs`: {process name: inputs} (None: timing-only)."""
    system = NpuSystem(PROFILE, RuntimeConfig(**{"timing_only": inputs is None, **cfg}))
    for i in range(n):
        system.add_process("ab"[i], [prog], priority=n - i)
    left = {p.name: runs for p in system.processes}
    results = []

    def next_job(proc):
        if not left[proc.name]:
            return None
        left[proc.name] -= 1
        return Job(0, inputs and inputs[proc.name])

    system.run(next_job, results.append)
    return system, results


def _epochs(system):
    return [name for _, name, label in system.sched.log if label.startswith("e")]


def test_round_robin_priority_and_serialised_interleavings(chain):
    rr, res = _system(chain, schedule="round-robin")
    assert _epochs(rr) == ["a", "b"] * 3 and all(r.status == "ok" for r in res)
    assert rr.sched.interleaving() == "a:in b:in a:e0 b:e0 a:e1 b:e1 a:e2 b:e2 a:out b:out"
    pr, _ = _system(chain, schedule="priority")
    assert _epochs(pr) == ["a"] * 3 + ["b"] * 3  # a has the higher priority; b waits
    se, _ = _system(chain, runs=2, schedule="round-robin", strategy="serialised")
    assert _epochs(se) == ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3  # whole inferences, taking turns


def test_random_schedule_is_reproducible_from_the_seed(chain):
    logs = {seed: _epochs(_system(chain, runs=2, schedule="random", seed=seed)[0]) for seed in range(6)}
    assert logs[3] == _epochs(_system(chain, runs=2, schedule="random", seed=3)[0])
    assert len({tuple(v) for v in logs.values()}) > 1
    assert all(v.count("a") == v.count("b") == 6 for v in logs.values())


def test_misconfigured_pool_faults_naming_both_processes(chain):
    system, res = _system(chain, strategy="misconfigured")
    bad = [r for r in res if r.faults]
    assert bad, "two processes handed the same bytes must fault"
    f = bad[0].faults[0]
    assert f.cls == "cross-context-access"
    assert {f.context, f.details["other_context"]} == {"a", "b"}
    assert f"context '{f.details['other_context']}'" in f.rule
    assert bad[0].interleaving.endswith(f"{f.context}:in")
    for strategy in ("shared", "partitioned", "serialised"):
        _, res = _system(chain, runs=3, strategy=strategy, schedule="random", seed=1)
        assert [r.status for r in res] == ["ok"] * 6, strategy


def test_corruption_without_leaving_a_region_drifts(chain):
    """keep_going: both processes run through each other's data; their outputs differ from a
    single-process run even though each access stays inside its own buffers."""
    x = {p: npusim.runtime.seeded_inputs(chain, seed) for seed, p in enumerate("ab")}
    ref = {p: npusim.run(chain, x[p]).outputs for p in "ab"}
    _, res = _system(chain, inputs=x, strategy="misconfigured", keep_going=True)
    assert all(r.faults for r in res)
    drift = [r.process for r in res if any(not np.array_equal(r.outputs[k], v) for k, v in ref[r.process].items())]
    assert drift
    _, res = _system(chain, inputs=x, strategy="partitioned")
    assert all(np.array_equal(r.outputs[k], v) for r in res for k, v in ref[r.process].items())


def test_planted_runtime_bugs_and_exhaustion(chain):
    big = npusim.compile(zoo.conv_model(16, 16, 64, 64))  # 64 KiB output buffers
    system, res = _system(big, runs=40, n=1, bugs=RuntimeBugs(leak_output_every=1))
    first = next(i for i, r in enumerate(res) if r.status == "pool-exhausted")
    assert 20 < first < 28 and "alloc of" in res[first].message  # the 1.75 MiB npuRAM3..6 stretch fills up
    held = [r.held for r in res[:first]]
    assert held == sorted(held) and held[1] - held[0] == 65536  # one output buffer lost per run
    system, res = _system(chain, runs=5, n=1, bugs=RuntimeBugs(short_free=8))
    assert [r.held for r in res] == [24, 48, 72, 96, 120]  # 3 frees per run, 8 B lost each
    assert system.pool_stats()[0].lost == 120


def test_fixed_buffers_allocate_once(chain):
    system, res = _system(chain, runs=5, n=1, buffering="fixed")
    st = system.pool_stats()[0]
    assert st.allocs == 3 and st.in_use == 0  # arena + input + output, freed when the process ends
    assert [r.held for r in res] == [res[0].held] * 5 and res[0].held > 0


def test_steps_feed_outputs_back(chain):
    x = npusim.runtime.seeded_inputs(chain, 0)
    assert feedback_pairs(chain) == {"input": chain.buffers_of("output")[0].name}
    seen = []
    last = run_steps(chain, x, 3, on_step=lambda k, r: seen.append(r.outputs))
    out = chain.buffers_of("output")[0].name
    again = npusim.run(chain, {"input": seen[1][out]}).outputs[out]
    assert np.array_equal(again, seen[2][out]) and np.array_equal(last.outputs[out], seen[2][out])
    with pytest.raises(UsageError, match="no output of its shape"):
        run_steps(npusim.compile(zoo.conv_model(4, 8, 8, 8)), None, 2)


def test_setup_errors(chain):
    with pytest.raises(UsageError, match="strategy"):
        RuntimeConfig(strategy="lucky")
    system = NpuSystem(PROFILE, RuntimeConfig(timing_only=True))
    with pytest.raises(UsageError, match="already used"):
        system.add_process("a", [chain])
        system.add_process("a", [chain])
    big = npusim.compile(zoo.conv_model(16, 16, 150, 150))  # ~720 KiB of I/O per inference
    system = NpuSystem(PROFILE, RuntimeConfig(strategy="partitioned", timing_only=True))
    for name in "abc":
        system.add_process(name, [big])
    with pytest.raises(DataError, match="needs .* its pool has"):
        system.run(lambda p: None, lambda r: None)
