"""Legal but huge work never blows up the host (hardening F5-F7, B): kernels work in bounded bands,
access costs come from closed forms, the watchdog charges real work and the timed epoch, and
clean runs print no numpy warnings."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest

import npusim
from npusim.hw import load_profile
from npusim.kernels import conv as kconv
from npusim.kernels import eltwise, pool, resize, tiles  # resize: the function
from npusim.memory import AccessPattern, pattern_cost
from npusim.memory import pattern as pattern_mod
from test_engine_build import Builder, arith_cmd

RNG = np.random.default_rng(5)


def _peak(fn):
    """(result, peak bytes newly allocated while fn runs)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_conv_im2col_in_bounded_bands(monkeypatch):
    """A 15x15 int8 conv over 120x120x16: whole-map patches would take 160 MB of float32; bands of
    TILE_BYTES keep the peak near the padded input, and the result is the same as one band."""
    x = RNG.integers(-128, 128, (120, 120, 16), dtype=np.int8)
    w = RNG.integers(-128, 128, (2, 15, 15, 16), dtype=np.int8)
    args = dict(in_zp=3, out_zp=-2, pads=(7, 7, 7, 7))
    small = lambda: kconv.conv2d_int8(x[:40, :40], w, [5, -5], [1 << 29] * 2, [40] * 2, **args)  # noqa: E731
    want = small()
    monkeypatch.setattr(kconv, "TILE_BYTES", 1 << 16)  # many bands of a few rows
    np.testing.assert_array_equal(small(), want)
    monkeypatch.setattr(kconv, "TILE_BYTES", 8 << 20)
    _, peak = _peak(lambda: kconv.conv2d_int8(x, w, [5, -5], [1 << 29] * 2, [40] * 2, **args))
    assert peak < 24 << 20


def test_eltwise_add_and_resize_without_whole_tensor_temporaries():
    a = RNG.integers(-128, 128, (1024, 1024, 16), dtype=np.int8)  # 16 MB: int64 copies would be 128 MB each
    b = RNG.integers(-128, 128, (1024, 1024, 16), dtype=np.int8)
    y, peak = _peak(lambda: eltwise.eltwise_int8("add", a, b, 1 << 20, 1 << 19, 21, a_zp=3, b_zp=-7, out_zp=1))
    assert peak < a.nbytes + 3 * tiles.BAND_BYTES
    ref = eltwise.eltwise_int8("add", a[:8], b[:8], 1 << 20, 1 << 19, 21, a_zp=3, b_zp=-7, out_zp=1)
    np.testing.assert_array_equal(y[:8], ref)
    src = RNG.integers(-128, 128, (256, 256, 16), dtype=np.int8)
    r, peak = _peak(lambda: resize(src, 1024, 1024, "bilinear", "half_pixel"))
    assert r.shape == (1024, 1024, 16) and peak < r.nbytes + 3 * tiles.BAND_BYTES
    x = RNG.integers(-128, 128, (600, 600, 16), dtype=np.int8)
    p, peak = _peak(lambda: pool.avgpool_int8(x, 5, 1, (2, 2, 2, 2), False, 1, -1, 1 << 20, 24))
    assert peak < p.nbytes + 3 * tiles.BAND_BYTES


def test_pattern_cost_of_millions_of_runs_is_a_closed_form(monkeypatch):
    """2.75 M runs of 128 B (the fuzz campaign's SE->SE copy) cost from the counts: no run is listed."""
    prof = load_profile()
    ram = prof.pool_named("npuRAM3")
    monkeypatch.setattr(pattern_mod, "MAX_RUNS", 0)  # materialising any run would now fail
    p = AccessPattern(ram.base + 64, 128, n1=1750, s1=256, n2=1571, s2=0)
    c = pattern_cost(ram, p, prof)
    assert c.bursts == p.n_runs and c.cross_bank_splits == p.n_runs  # one 16-beat burst, across a bank line
    assert c.bytes == p.nbytes and int(c.bank_bytes.sum()) == p.nbytes


def _maxpool_program(h, w, c, k):
    b = Builder()
    x = b.fm("x", "input", h, w, c)
    oh, ow = h - k + 1, w - k + 1
    y = b.fm("y", "output", oh, ow, c, pool="npuRAM4")
    b.epoch(0, "pool")
    b.se_buf(0, "read", x)
    b.cmd("POOL", unit=0, dtype="int8", layout="blocked16", mode="max", in_h=h, in_w=w, c=c, kh=k, kw=k, sh=1,
          sw=1, pad_t=0, pad_l=0, pad_b=0, pad_r=0, include_pad=0, in_zp=0, out_zp=0, mult=0, shift=0,
          rounding="half_up")
    b.se_buf(5, "write", y)
    b.link("SE0", "POOL0")
    b.link("POOL0", "SE5")
    b.run_wait()
    return b.program()


def test_max_pool_watchdog_charges_window_work():
    """15x15 windows: the unit streams 65 K elements (4 K cycles) but its kernel does 225 x 42 K
    comparisons; the watchdog charges those, so the epoch hangs before the kernel runs."""
    prof = load_profile(overrides=["epoch.timeout_cycles=100000"])
    res = npusim.run(_maxpool_program(64, 64, 16, 15), random_inputs=True, profile=prof)
    assert res.end_reason == "hang" and res.faults[0].unit == "POOL0"
    assert "window elements" in res.faults[0].message
    ok = npusim.run(_maxpool_program(64, 64, 16, 3), random_inputs=True, profile=prof)
    assert ok.status == "ok"


def _copy(write_engine):
    """SE0 (bus port 0) -> ARITH copy -> a write SE: SE1 shares port 0, SE5 is on port 1."""
    b = Builder()
    x = b.fm("x", "input", 64, 64, 16)
    y = b.fm("y", "output", 64, 64, 16, pool="npuRAM4")
    b.epoch(0, "copy")
    b.se_buf(0, "read", x)
    arith_cmd(b, 0, "copy", 64, 64, 16)
    b.se_buf(write_engine, "write", y)
    b.link("SE0", "ARITH0")
    b.link("ARITH0", f"SE{write_engine}")
    b.run_wait()
    return b.program()


def test_an_epoch_timed_past_the_timeout_hangs():
    """Each SE alone moves 64 KiB well inside the timeout; sharing one port, the timed epoch does not."""
    alone = npusim.run(_copy(5), random_inputs=True, options=npusim.RunOptions(timing_only=True))
    body = alone.stats.epochs[0].cycles - alone.stats.epochs[0].setup_cycles
    prof = load_profile(overrides=[f"epoch.timeout_cycles={int(body * 1.5)}"])
    ok = npusim.run(_copy(5), random_inputs=True, profile=prof, options=npusim.RunOptions(timing_only=True))
    assert ok.status == "ok"
    res = npusim.run(_copy(1), random_inputs=True, profile=prof, options=npusim.RunOptions(timing_only=True))
    assert res.end_reason == "hang" and [f.cls for f in res.faults] == ["hang"]
    assert "port and bank sharing" in res.faults[0].message
    e = res.stats.epochs[0]
    assert e.status == "hang" and e.cycles == e.setup_cycles + prof.epoch.timeout_cycles


def test_clean_runs_print_no_numpy_warnings():
    """int8 convs with extreme zero points and long windows stay exact without overflow warnings."""
    x = RNG.integers(-128, 128, (12, 12, 512), dtype=np.int8)
    w = np.full((4, 3, 3, 512), -128, dtype=np.int8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = kconv.conv2d_int8(x, w, 0, 1 << 30, 50, in_zp=-128, out_zp=0, pads=(1, 1, 1, 1))
        from npusim import zoo

        res = npusim.run(npusim.compile(zoo.conv_model(16, 32, 12, 12)), random_inputs=True)
    ref = kconv.requantize(_window_sums(x, w), 0, np.full(4, 1 << 30), np.full(4, 50), 0)
    np.testing.assert_array_equal(y, ref)
    assert res.status == "ok"


def _window_sums(x, w):
    xp = np.pad(x.astype(np.int64) + 128, ((1, 1), (1, 1), (0, 0)))
    out = np.zeros((12, 12, 4), dtype=np.int64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("hwc,oc->hwo", xp[i:i + 12, j:j + 12], w[:, i, j, :].astype(np.int64))
    return out


@pytest.mark.parametrize("banks", [1 << 30])
def test_absurd_bank_counts_never_size_an_array(banks):
    prof = load_profile()
    ram = prof.pool_named("npuRAM3")
    import dataclasses

    from npusim.errors import NpusimError

    fake = dataclasses.replace(ram, banks=banks)
    with pytest.raises(NpusimError, match="banks"):
        pattern_cost(fake, AccessPattern(ram.base, 128), prof)


def test_many_written_intervals_stay_exact():
    """A write whose 10 000 runs leave gaps keeps one interval per run (as arrays): a read of the
    same runs is clean, a read that reaches into a gap finds its first byte."""
    from npusim.memory import AddressMap, Checker, RegionTable

    prof = load_profile()
    ram = prof.pool_named("npuRAM3")
    t = RegionTable(AddressMap(prof))
    t.add("buf", "activation", ram.base, 160_000)
    t.mark_written(AccessPattern(ram.base, 12, n1=10_000, s1=16))
    ck = Checker(t.map, t)
    assert ck.check(AccessPattern(ram.base, 12, n1=10_000, s1=16), "read") is None
    f = ck.check(AccessPattern(ram.base + 16 * 7000, 14, n1=3, s1=16), "read")
    assert f.cls == "uninitialized-read" and f.address == ram.base + 16 * 7000 + 12
    t.clear_written(ram.base + 16 * 9000, 16)
    f = ck.check(AccessPattern(ram.base + 16 * 8999, 12, n1=3, s1=16), "read")
    assert f.address == ram.base + 16 * 9000 and f.details["run"] == 1


@pytest.mark.slow(cpu_s=28)  # compiles every kernel into an empty cache
def test_warmup_fills_numbas_cache(tmp_path):
    """`npusim warmup` compiles every kernel into the cache: a later process only loads them."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "npusim", "warmup"], env=env, capture_output=True, text=True,
                         timeout=600)
    import re

    assert out.returncode == 0, out.stderr
    kernels = int(re.search(r"(\d+) kernels", out.stdout).group(1))
    index = {p.name.split("-")[0] for p in tmp_path.rglob("*.nbi")}  # one index per cached kernel: module.function
    assert kernels >= 23 and len(index) >= kernels, (kernels, sorted(index))
    assert {"conv._gemm_f32", "pool._maxpool_planes", "_kernels.gather_pool", "units_jit.arith_affine"} <= index, sorted(index)


def test_run_threads_option(tmp_path, capsys):
    """`run --threads N` sets the BLAS threads (same results); a count outside 1..256 is a usage error."""
    from npusim import zoo
    from npusim.cli import main
    from npusim.program.blob import encode_blob

    blob = tmp_path / "m.npu"
    blob.write_bytes(encode_blob(npusim.compile(zoo.conv_model(16, 32, 12, 12)), load_profile()))
    assert main(["run", str(blob), "--threads", "0"]) == 2
    assert "--threads" in capsys.readouterr().err
    outs = []
    for n in (1, 2):
        assert main(["run", str(blob), "--threads", str(n), "--outputs", str(tmp_path / f"o{n}")]) == 0
        outs.append(np.load(next((tmp_path / f"o{n}").glob("*.npy"))))
    np.testing.assert_array_equal(outs[0], outs[1])
