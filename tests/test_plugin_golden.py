"""Golden snapshot logic (npusim.golden) on plain report dicts and buffer tables."""

import json

import numpy as np
import pytest

from npusim import golden
from npusim.program.model import Buffer


def _report(cycles=1000, layers=(("conv1", 600), ("conv2", 400)), faults=()):
    return {"status": "fault" if faults else "ok", "end_reason": "fault" if faults else "done",
            "cycles": cycles, "faults": list(faults),
            "stats": {"layers": [{"name": n, "cycles": c, "bank_conflicts": 0} for n, c in layers]}}


BUFS = [Buffer("x", "input", "npuRAM3", 0, 8192, 128),
        Buffer("conv1.out", "activation", "npuRAM3", 8192, 43264, 128),
        Buffer("w1", "weight", "octoFlash", 0, 432, 8)]
FAULT = {"class": "buffer-overflow", "layer": "conv2", "access": "write", "address": 0x34201a40,
         "region": {"name": "conv2.out", "kind": "activation", "start": 0, "size": 7200,
                    "state": "live"}, "count": 3}


def _snap(**kw):
    bufs = kw.pop("buffers", BUFS)
    out = kw.pop("out", np.arange(12, dtype=np.float32).reshape(1, 3, 2, 2))
    return golden.build_from_parts(_report(**kw), buffers=bufs, outputs={"y": out}, meta={"model": "m"})


def test_snapshot_contents_and_stable_json(tmp_path):
    s = _snap(layers=(("conv1", 300), ("conv2", 400), ("conv1", 300)))
    assert s["cycles"] == 1000 and s["layers"] == {"conv1": 600, "conv2": 400}
    assert s["memory_map"]["conv1.out"] == {"pool": "npuRAM3", "offset": 8192, "size": 43264}
    out = s["outputs"]["y"]
    assert out["shape"] == [1, 3, 2, 2] and out["dtype"] == "float32" and len(out["sha256"]) == 64
    assert out["absmax"] == 11.0
    p = golden.save(tmp_path / "g" / "a.json", s)
    text = p.read_text()
    assert text == golden.to_json(s) and text.endswith("\n")
    keys = list(json.loads(text))
    assert keys == sorted(keys)
    assert golden.load(p) == json.loads(json.dumps(s))
    assert golden.diff(golden.load(p), s).ok


def test_faults_collapse_and_sort():
    f2 = dict(FAULT, layer="conv1", count=1)
    s = golden.build_from_parts(_report(faults=[FAULT, f2, FAULT]))
    assert s["faults"] == [
        {"class": "buffer-overflow", "layer": "conv1", "region": "conv2.out", "count": 1},
        {"class": "buffer-overflow", "layer": "conv2", "region": "conv2.out", "count": 6}]


def test_cycle_drift_names_the_slower_layer():
    old = _snap()
    new = _snap(cycles=1100, layers=(("conv1", 600), ("conv2", 500)))
    d = golden.diff(old, new, tolerance=0.02)
    assert not d.ok
    assert "cycles +10.0% (1000 -> 1100" in d.headline
    assert "slowest layer conv2 +25.0%" in d.headline
    text = d.text()
    assert "! conv2: 400 -> 500 cycles (+25.0%, slower)" in text
    assert "conv1" not in text.split("cycles:")[1].split("memory")[0]  # unchanged layers hidden
    assert "--npusim-update-golden" in text


def test_within_tolerance_passes_but_is_noted():
    d = golden.diff(_snap(), _snap(cycles=1015, layers=(("conv1", 615), ("conv2", 400))), tolerance=0.02)
    assert d.ok and d.notes == ["cycles +1.5% within tolerance"]
    assert "conv1: 600 -> 615" in d.text()


def test_faster_past_tolerance_fails_and_layer_tolerance():
    d = golden.diff(_snap(), _snap(cycles=800, layers=(("conv1", 400), ("conv2", 400))))
    assert not d.ok and "cycles -20.0%" in d.headline and "faster" in d.text()
    d2 = golden.diff(_snap(), _snap(cycles=1010, layers=(("conv1", 610), ("conv2", 400))),
                     tolerance=0.02, layer_tolerance=0.01)
    assert not d2.ok and "layer conv1 +1.7%" in d2.headline


def test_new_and_vanished_layers():
    new = _snap(layers=(("conv1", 600), ("pool", 400)))
    d = golden.diff(_snap(), new)
    assert d.ok  # total unchanged
    assert "+ pool: new layer, 400 cycles" in d.text() and "- conv2: vanished layer" in d.text()


def test_moved_buffer_is_reported():
    moved = [BUFS[0], Buffer("conv1.out", "activation", "npuRAM4", 16, 43264, 16), BUFS[2],
             Buffer("pad", "scratch", "npuRAM3", 0x10000, 64, 16)]
    d = golden.diff(_snap(), _snap(buffers=moved))
    assert not d.ok and "memory map changed (conv1.out, pad)" in d.headline
    text = d.text()
    assert "~ moved conv1.out: npuRAM3+0x2000 (43264 B) -> npuRAM4+0x10 (43264 B)" in text
    assert "+ new buffer pad: npuRAM3+0x10000 (64 B)" in text
    d2 = golden.diff(_snap(), _snap(buffers=BUFS[:2]))
    assert "- vanished buffer w1: was octoFlash+0x0 (432 B)" in d2.text()
    assert golden.diff(_snap(), _snap(buffers=moved), checks=("cycles",)).ok


def test_new_fault_comes_first_in_headline():
    new = _snap(cycles=2000, faults=[FAULT])
    d = golden.diff(_snap(), new)
    assert d.headline.split(": ", 1)[1].startswith("new fault buffer-overflow in layer conv2 (region conv2.out)")
    assert "status ok/done -> fault/fault" in d.headline
    again = golden.diff(new, _snap(cycles=2000, faults=[dict(FAULT, count=5)]))
    assert again.ok and "~ buffer-overflow in layer conv2: x3 -> x5" in again.text()
    back = golden.diff(new, _snap())
    assert "vanished fault buffer-overflow in layer conv2" in back.headline


def test_output_modes():
    a = _snap()
    b = _snap(out=np.arange(12, dtype=np.float32).reshape(1, 3, 2, 2) * 1.0001)
    assert "output y values changed" in golden.diff(a, b).headline
    assert golden.diff(a, b, outputs="tolerance", rtol=1e-3).ok
    assert not golden.diff(a, b, outputs="tolerance", rtol=1e-6).ok
    assert golden.diff(a, b, outputs="ignore").ok
    c = _snap(out=np.zeros((1, 4), np.float32))
    assert "shape/dtype changed" in golden.diff(a, c).headline


def test_raw_outputs_are_hashed_natively():
    rep = _report()
    f = golden.build_from_parts(rep, outputs={"y": np.ones(4, np.float32)},
                                raw_outputs={"y": np.full(4, 5, np.int8)})
    assert f["outputs"]["y"]["dtype"] == "int8"


def test_bad_golden_files(tmp_path):
    with pytest.raises(golden.GoldenError, match="does not exist"):
        golden.load(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(golden.GoldenError, match="not readable JSON"):
        golden.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"format": 99}')
    with pytest.raises(golden.GoldenError, match="format-1"):
        golden.load(tmp_path / "other.json")
    (tmp_path / "short.json").write_text('{"format": 1, "cycles": 3}')
    with pytest.raises(golden.GoldenError, match="lacks the key 'layers'"):
        golden.load(tmp_path / "short.json")
    with pytest.raises(golden.GoldenError, match="outputs must be"):
        golden.diff(_snap(), _snap(), outputs="fuzzy")
    with pytest.raises(golden.GoldenError, match="unknown golden check"):
        golden.diff(_snap(), _snap(), checks=("speed",))


def test_save_does_not_rewrite_identical(tmp_path):
    p = golden.save(tmp_path / "a.json", _snap())
    mtime = p.stat().st_mtime_ns
    golden.save(p, _snap())
    assert p.stat().st_mtime_ns == mtime


def test_long_memory_map_diff_is_capped_and_small_drifts_keep_precision():
    many = [Buffer(f"b{i:02d}", "activation", "npuRAM3", 128 * i, 64, 128) for i in range(50)]
    shifted = [Buffer(b.name, b.kind, b.pool, b.offset + 16, b.size, 16) for b in many]
    d = golden.diff(_snap(buffers=many), _snap(buffers=shifted))
    rows = d.sections["memory map"]
    assert len(rows) == 41 and rows[-1] == "... 10 more buffer changes"
    assert "memory map changed (b00, b01, b02 +47 more)" in d.headline
    small = golden.diff(_snap(), _snap(cycles=1003, layers=(("conv1", 603), ("conv2", 400))))
    assert "total: 1000 -> 1003 cycles (+0.30%" in small.text()
