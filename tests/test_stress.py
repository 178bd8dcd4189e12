"""`npusim stress` / tools.stress: leak trends, the misconfigured shared pool, soak memory, the monitor."""

import csv
import json

import numpy as np
import pytest

from npusim import cli, zoo
from npusim.tools.stress import StressOptions, load_target, parse_duration, stress


@pytest.fixture(scope="module")
def tiny():
    return load_target(zoo.conv_model(cin=8, cout=8, h=8, w=8), name="tiny")


@pytest.fixture(scope="module")
def blob(tmp_path_factory):
    d = tmp_path_factory.mktemp("stress")
    onnx_path = d / "tiny.onnx"
    import onnx

    onnx.save(zoo.conv_model(cin=8, cout=8, h=8, w=8), str(onnx_path))
    assert cli.main(["compile", str(onnx_path), "-o", str(d / "tiny.npu")]) == 0
    return d


class FakeClock:
    """A clock that advances `step` seconds per reading: monitor intervals without waiting."""

    def __init__(self, step):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def test_planted_leak_is_reported_with_its_rate(tiny):
    rep = stress([tiny], StressOptions(runs=120, check_every=0, leak_output_every=5))
    trend = rep.trends["tiny"]
    assert trend.leak and trend.slope == pytest.approx(1024 / 5)  # one 1 KiB output buffer every 5th run
    assert rep.exit_code == 4 and "leak trend  tiny: +204.8 B/run" in rep.text() and "verdict: LEAK" in rep.text()
    rep = stress([tiny], StressOptions(runs=60, check_every=0, short_free=16))
    assert rep.trends["tiny"].slope == pytest.approx(3 * 16)  # arena, input and output freed 16 B short
    assert rep.pools[0].lost == 60 * 48


def test_no_false_leak_over_1000_clean_runs_of_varied_shapes():
    varied = load_target(zoo.conv_model(cin=8, cout=8, h=8, w=8), shapes=[(8, 8), (12, 12), (6, 10)], name="v")
    rep = stress([varied], StressOptions(runs=1000, frames=4, check_every=0))
    assert rep.runs == 1000 and rep.status == {"ok": 1000}
    assert rep.trends["v"].verdict == "flat" and rep.exit_code == 0
    assert rep.pools[0].allocs == rep.pools[0].frees == 3000


def test_misconfigured_pool_faults_for_some_seeds_never_with_partitions(tiny):
    def codes(strategy):
        return [stress([tiny], StressOptions(runs=4, processes=2, strategy=strategy, schedule="random", seed=s,
                                             period_ms=0.05, check_every=0)).exit_code for s in range(8)]

    mis = codes("misconfigured")
    assert 139 in mis and 0 in mis  # "it crashes at random": the seed decides whether two inferences meet
    assert codes("partitioned") == [0] * 8 and codes("serialised") == [0] * 8
    seed = mis.index(139)
    rep = stress([tiny], StressOptions(runs=4, processes=2, strategy="misconfigured", schedule="random", seed=seed,
                                       period_ms=0.05, check_every=0))
    f = rep.first_fault.faults[0]
    assert f.cls == "cross-context-access" and {f.context, f.details["other_context"]} == {"tiny#0", "tiny#1"}
    text = rep.text()
    assert f"seed {seed}, schedule random, pool misconfigured" in text and "interleaving up to it" in text
    assert rep.to_json()["first_fault"]["interleaving"] == rep.first_fault.interleaving


def test_a_fleet_of_seeds_gives_each_seed_its_own_board(tiny):
    from npusim.tools.stress_fleet import fleet, table

    opts = StressOptions(runs=4, processes=2, strategy="misconfigured", schedule="random", period_ms=0.05,
                         check_every=0)
    rows = fleet([tiny], opts, [0, 1, 2, 3])
    assert [r["seed"] for r in rows] == [0, 1, 2, 3]
    alone = [stress([tiny], StressOptions(**{**opts.__dict__, "seed": s})).exit_code for s in range(4)]
    assert [r["exit_code"] for r in rows] == alone  # a task computes what the seed computes alone
    assert "seeds not clean" in table(rows)


def test_drift_against_the_single_process_reference(tiny):
    rep = stress([tiny], StressOptions(runs=3, processes=2, strategy="misconfigured", keep_going=True, frames=2))
    assert rep.checked == 6 and rep.drifted > 0 and rep.max_drift > 0
    clean = stress([tiny], StressOptions(runs=3, processes=2, strategy="shared", frames=2, schedule="random"))
    assert clean.checked == 6 and clean.drifted == 0 and clean.exit_code == 0


def test_monitor_prints_at_its_interval(tiny):
    lines = []
    clock = FakeClock(0.02)
    rep = stress([tiny], StressOptions(runs=60, check_every=0, monitor=0.5), monitor=lines.append, clock=clock)
    stamps = [float(ln.split("]")[0].strip("[ s")) for ln in lines]
    assert len(lines) >= 3 and all(b - a >= 0.5 - 1e-9 for a, b in zip(stamps, stamps[1:]))
    assert len(lines) == pytest.approx(rep.seconds / 0.5, abs=1.5)
    assert "inferences/s" in lines[0] and "npu" in lines[0] and "B in use" in lines[0]


def test_duration_mode_writes_a_time_series(tiny, tmp_path):
    clock = FakeClock(0.002)
    rep = stress([tiny], StressOptions(duration=0.5, check_every=0, csv=str(tmp_path / "s.csv"),
                                       plot=str(tmp_path / "s.png")), clock=clock)
    rows = list(csv.DictReader(open(tmp_path / "s.csv")))
    assert 10 < len(rows) == rep.inferences and rows[-1]["status"] == "ok" and int(rows[-1]["host_rss"]) > 0
    assert (tmp_path / "s.png").stat().st_size > 1000
    assert parse_duration("1h30m") == 5400 and parse_duration("8h") == 28800 and parse_duration("90") == 90


@pytest.mark.slow
def test_soak_keeps_host_memory_flat(tiny):
    rep = stress([tiny], StressOptions(runs=3000, check_every=100, warmup=300))
    assert rep.exit_code == 0 and rep.rss_warm > 0
    assert rep.rss_growth < 0.01, rep.text()


def test_cli_exit_codes_and_outputs(blob, tmp_path, capsys):
    npu = str(blob / "tiny.npu")
    assert cli.main(["stress", npu, "-n", "20", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "20 ok" in out and "verdict: clean" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"] == "clean" and doc["checked"] == 20 and doc["leak"]["tiny"]["verdict"] == "flat"
    assert cli.main(["stress", npu, "-n", "40", "--timing-only", "--plant", "leak-output=4"]) == 4
    assert "+256.0 B/run" in capsys.readouterr().out
    assert cli.main(["stress", npu, npu, "-n", "2", "--timing-only", "--pool-strategy", "misconfigured"]) == 139
    out = capsys.readouterr().out
    assert "cross-context-access" in out and "context 'tiny#0'" in out and "'tiny#1'" in out
    argv = ["stress", npu, npu, "-n", "4", "--timing-only", "--pool-strategy", "misconfigured", "--schedule", "random",
            "--period", "0.05", "--workers", "1", "--seeds"]
    assert cli.main([*argv, "0-7"]) == 139
    out = capsys.readouterr().out
    assert "of 8 seeds not clean" in out and "\nseed " in out
    assert cli.main([*argv[:-1], "--pool-strategy", "partitioned", "--seeds", "0-7"]) == 0
    capsys.readouterr()
    assert cli.main(["stress", npu, "-n", "4", "--reference", str(blob / "tiny.onnx")]) == 0
    assert "ONNX Runtime fp32: worst cosine" in capsys.readouterr().out


def test_cli_inputs_folder_steps_and_errors(blob, tmp_path, capsys):
    npu = str(blob / "tiny.npu")
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(3):
        np.save(frames / f"f{i}.npy", np.random.default_rng(i).standard_normal((1, 8, 8, 8)).astype(np.float32))
    assert cli.main(["stress", npu, "-n", "6", "--inputs", str(frames), "--steps", "3"]) == 0
    assert "6 runs (18 inferences)" in capsys.readouterr().out
    np.save(frames / "bad.npy", np.zeros((1, 8, 4, 4), np.float32))
    for argv, msg in ((["--inputs", str(frames)], "match no program"),
                      (["--plant", "leak-output"], "expected leak-output=K"),
                      (["--duration", "8 hours"], "duration"),
                      (["--shapes", "8x8"], "needs an ONNX model"),
                      (["--timing-only", "--reference", str(blob / "tiny.onnx")], "compares values"),
                      (["--seeds", "5-2"], "--seeds"), (["--seeds", "0-3", "--csv", str(tmp_path / "x.csv")], "fleet")):
        code = cli.main(["stress", npu, "-n", "2", *argv])
        err = capsys.readouterr().err
        assert code in (2, 65) and msg in err and err.count("\n") == 1, (argv, err)
    assert cli.main(["run", npu, "--steps", "3"]) == 0
    assert capsys.readouterr().out.count("step ") == 3


@pytest.mark.slow
def test_detector_and_unet_three_tiers(tmp_path):
    """The seed's tiers on the demo detector and a 1024-channel UNet (timing-only where values are
    not compared): functional vs ONNX Runtime, two processes sharing the NPU, a generative soak."""
    from npusim.compiler import CompileOptions

    det_model = zoo.yolo_style(size=224)
    det = load_target(det_model, compile_options=CompileOptions(mem_align=128), name="detector")
    rep = stress([det], StressOptions(runs=2, frames=2), reference=det_model)
    assert rep.exit_code == 0 and rep.worst_cosine > 0.98
    mis = stress([det], StressOptions(runs=3, processes=2, strategy="misconfigured", check_every=0))
    assert mis.exit_code == 139 and mis.first_fault.faults[0].cls == "cross-context-access"
    part = stress([det], StressOptions(runs=3, processes=2, strategy="partitioned", check_every=0, schedule="random"))
    assert part.exit_code == 0
    unet = load_target(zoo.unet_style(size=16, base=64, depth=4), name="unet")
    assert max(b.shape[1] for b in unet.variants[0].buffers if b.kind == "activation" and len(b.shape) == 4) == 1024
    per = stress([unet], StressOptions(runs=2, steps=8, check_every=0))
    fixed = stress([unet], StressOptions(runs=2, steps=8, check_every=0, buffering="fixed"))
    assert per.exit_code == fixed.exit_code == 0
    assert fixed.pools[0].allocs == 3 < per.pools[0].allocs and fixed.max_fragmentation <= per.max_fragmentation
    leak = stress([unet], StressOptions(runs=3, steps=8, check_every=0, leak_output_every=2))
    assert leak.exit_code == 4 and leak.trends["unet"].slope > 0
