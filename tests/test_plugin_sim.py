"""npusim.testing.Sim and the assertion helpers, in process (no pytester)."""


import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from npusim.compiler import CompileOptions
from npusim.errors import UsageError
from npusim.hw.profile import load_profile
from npusim.testing import (CompileCache, NpusimCheckFailed, Sim, assert_cycles, assert_golden,
                            assert_matches_reference, assert_no_faults, random_inputs)
from npusim.testing.sim import model_bytes


def _relu_model(name="g"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2, 2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], name, [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_cache_key_depends_on_model_options_and_profile(tmp_path):
    c = CompileCache(tmp_path)
    p = load_profile()
    m = model_bytes(_relu_model())
    k = c.key(m, CompileOptions(), p)
    assert k == CompileCache(None).key(m, CompileOptions(), p)  # stable across instances
    assert k != c.key(model_bytes(_relu_model("other")), CompileOptions(), p)
    assert k != c.key(m, CompileOptions(mem_align=16), p)
    assert k != c.key(m, CompileOptions(), load_profile(None, ["bus.max_burst_beats=8"]))
    calib = tmp_path / "c.npz"
    np.savez(calib, x=np.zeros((2, 1, 4, 2, 2), np.float32))
    assert k != c.key(m, CompileOptions(), p, calib)


def test_model_bytes_and_blob_detection(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_relu_model(), path)
    assert model_bytes(path) == path.read_bytes()
    with pytest.raises(UsageError, match="cannot read model"):
        model_bytes(tmp_path / "missing.onnx")
    with pytest.raises(UsageError, match="expected an ONNX model"):
        model_bytes(42)
    assert Sim._is_blob(b"NPUS") and Sim._is_blob(tmp_path / "a.npu") and not Sim._is_blob(path)
    with pytest.raises(UsageError, match="cannot read blob"):
        Sim(golden_dir=tmp_path).load(tmp_path / "none.npu")


def test_assert_cycles_needs_one_limit():
    with pytest.raises(UsageError, match="exactly one of budget= or golden="):
        assert_cycles(object())
    with pytest.raises(UsageError, match="exactly one"):
        assert_cycles(object(), budget=1, golden=1)


def test_check_failure_is_an_assertion_and_an_npusim_error():
    from npusim.errors import NpusimError

    assert issubclass(NpusimCheckFailed, AssertionError) and issubclass(NpusimCheckFailed, NpusimError)


# ---------------------------------------------------------------- with the real pipeline

from npusim import golden, zoo  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    sim = Sim(cache=CompileCache(tmp_path_factory.mktemp("cache")), golden_dir=tmp_path_factory.mktemp("g"))
    model = zoo.conv_model(16, 16, 52, 52, 3)
    return sim, model, sim.run(model, CompileOptions(), seed=0), sim.run(model, CompileOptions(mem_align=16), seed=0)


def test_compile_cache_memory_and_disk(runs, tmp_path):
    sim, model, good, _ = runs
    hits, misses = sim.cache.hits, sim.cache.misses
    assert misses == 2  # the two option sets of the fixture
    sim.run(model, CompileOptions(), seed=0)
    assert sim.cache.hits == hits + 1 and sim.cache.misses == misses
    files = sorted(p.name for p in sim.cache.directory.glob("*.npu"))
    assert files == sorted(f"{k}.npu" for k in sim.cache.programs)
    fresh = Sim(cache=CompileCache(sim.cache.directory), golden_dir=tmp_path)  # a later session
    again = fresh.run(model, CompileOptions(), seed=0)
    assert fresh.cache.hits == 1 and fresh.cache.misses == 0
    assert again.stats.cycles == good.stats.cycles
    assert golden.diff(good.snapshot(), again.snapshot()).ok


def test_runs_use_seeded_inputs(runs):
    sim, model, good, _ = runs
    assert set(good.inputs) == {b.name for b in good.program.buffers_of("input")}
    np.testing.assert_array_equal(good.inputs["input"], random_inputs(good.program, 0)["input"])
    other = sim.run(model, CompileOptions(), seed=3)
    assert not np.array_equal(other.inputs["input"], good.inputs["input"])


def test_assert_no_faults(runs):
    _, _, good, bad = runs
    assert_no_faults(good)
    assert_no_faults(good.result)  # a plain RunResult works too
    with pytest.raises(NpusimCheckFailed) as e:
        assert_no_faults(bad)
    first, rest = str(e.value).split("\n", 1)
    f = bad.faults[0]
    assert first.startswith(f"npusim fault: {f.cls} in layer {f.layer} ({f.unit} {f.access} at 0x{f.address:08x}")
    assert bad.report_text() in rest and "SUMMARY: NPUSanitizer:" in rest


def test_cycle_limit_is_not_a_clean_run(runs):
    from npusim.runtime import RunOptions

    sim, model, good, _ = runs
    cut = sim.run(model, CompileOptions(), run_options=RunOptions(max_cycles=int(good.stats.cycles) // 2))
    assert cut.end_reason == "cycle-limit"
    with pytest.raises(NpusimCheckFailed, match="did not finish cleanly: status .*, end reason cycle-limit"):
        assert_no_faults(cut)


def test_assert_matches_reference(runs):
    _, model, good, bad = runs
    m = assert_matches_reference(good, model)
    assert set(m) == set(good.outputs)
    with pytest.raises(NpusimCheckFailed, match=r"npusim output mismatch vs ONNX Runtime: conv max_abs .* > 1e-09"):
        assert_matches_reference(good, model, max_abs=1e-9)
    with pytest.raises(NpusimCheckFailed, match="cosine .* < 1"):
        assert_matches_reference(good, model, cosine=1.0 + 1e-9)
    with pytest.raises(UsageError, match="needs inputs="):
        assert_matches_reference(good.result, model)
    assert_matches_reference(good.result, model, inputs=good.inputs)
    with pytest.raises(NpusimCheckFailed, match="npusim fault: "):
        assert_matches_reference(bad, model)  # a faulting run never gets compared


def test_assert_cycles_budget_and_golden(runs, tmp_path):
    _, _, good, _ = runs
    c = int(good.stats.cycles)
    assert assert_cycles(good, budget=c) == c
    with pytest.raises(NpusimCheckFailed, match=rf"npusim cycles over budget: {c} > {c - 100} .*\n  slowest layers: conv {c}"):
        assert_cycles(good, budget=c - 100)
    assert_cycles(good, golden=int(c * 1.01), tolerance=0.02)
    with pytest.raises(NpusimCheckFailed, match=r"cycles \+25\.0%"):
        assert_cycles(good, golden=int(c / 1.25), tolerance=0.02)
    snap = good.snapshot()
    path = golden.save(tmp_path / "g.json", snap)
    assert_cycles(good, golden=path)
    snap["layers"]["conv"] = int(c * 0.8)
    snap["cycles"] = int(c * 0.8)
    with pytest.raises(NpusimCheckFailed) as e:
        assert_cycles(good, golden=snap)
    assert "slowest layer conv +25.0%" in str(e.value).splitlines()[0]
    assert f"! conv: {int(c * 0.8)} -> {c} cycles (+25.0%, slower)" in str(e.value)


def test_assert_golden_and_update(runs):
    sim, _, good, bad = runs
    with pytest.raises(Exception, match="does not exist"):
        sim.assert_golden(good, name="g1")
    sim.update_golden = True
    try:
        path = sim.assert_golden(good, name="g1")
        assert sim.updated == [path]
        sim.assert_golden(good, name="g1")
        assert sim.updated == [path]  # unchanged file is not counted again
    finally:
        sim.update_golden = False
    sim.assert_golden(good, name="g1")
    with pytest.raises(NpusimCheckFailed) as e:
        assert_golden(bad, path)
    text = str(e.value)
    f = bad.faults[0]
    assert text.splitlines()[0].startswith(
        f"npusim golden mismatch (g1.json): new fault {f.cls} in layer {f.layer}")
    assert "memory map" in text and "~ moved" in text and "==npusim== ERROR" in text
    assert_golden(good.result, path)  # plain RunResult: memory map skipped, rest compared


def test_assert_valid_blob(runs, tmp_path):
    import dataclasses as dc

    from npusim.program.blob import encode_blob
    from npusim.testing import assert_valid_blob

    sim, _, good, _ = runs
    data = encode_blob(good.program, sim.profile)
    (tmp_path / "ok.npu").write_bytes(data)
    prog = assert_valid_blob(tmp_path / "ok.npu")
    assert len(prog.commands) == len(good.program.commands)
    broken = bytearray(data)
    broken[-1] ^= 0xFF
    with pytest.raises(NpusimCheckFailed, match=r"^npusim invalid blob: "):
        assert_valid_blob(bytes(broken))
    # Legal to encode, refused by the hardware contract: a read SE on the wrong bus port.
    i = next(i for i, c in enumerate(good.program.commands) if c.op == "SE")
    c = good.program.commands[i]
    bad_cmd = dc.replace(c, args={**c.args, "port": 1 - int(c.args["port"])})
    cmds = list(good.program.commands)
    cmds[i] = bad_cmd
    bad = encode_blob(dc.replace(good.program, commands=cmds), sim.profile)
    with pytest.raises(NpusimCheckFailed, match=r"^npusim blob violates the ISA: .*port") as e:
        assert_valid_blob(bad)
    assert "\n  - " in str(e.value)
    with pytest.raises(UsageError, match="compile options apply to ONNX models only"):
        sim.run(bad, CompileOptions())
    run = sim.run(bad, verify=False)  # the hardware view of the same blob: a fault, as data
    assert run.status == "fault" and run.faults[0].cls == "bad-descriptor"
