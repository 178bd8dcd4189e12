"""Merged npuRAM3..6 end to end (plan, blob, memory, regions, engine, runtime) and the
planner's prefetch guard zones (SE limit = buffer end + guard stays free of other buffers)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.compiler.memplan import arenas, round_up
from npusim.errors import BlobError
from npusim.hw import load_profile
from npusim.memory import AccessPattern, AddressMap, Checker, RegionTable
from npusim.program.blob import encode_blob, load_blob
from npusim.reference import validate
from npusim.runtime import RunOptions, run

PROFILE = load_profile()
NPU = [PROFILE.pool_named(f"npuRAM{i}") for i in range(3, 7)]
NPU_LO, NPU_HI = NPU[0].base, NPU[-1].end


def _span(p, b) -> tuple[int, int]:
    a = b.address(PROFILE)
    return a, a + b.size


def _crosses_pool(b) -> bool:
    a, e = _span(PROFILE, b)
    return PROFILE.pool_at(a) is not PROFILE.pool_at(e - 1)


@pytest.fixture(scope="module")
def yolo416():
    m = zoo.yolo_style(size=416)
    return m, compile(m, CompileOptions())


def test_arenas_merge_contiguous_npuram():
    a = arenas(PROFILE)
    assert a[0] == ("npuRAM3", NPU_LO, 4 * 448 * 1024)
    assert [x[0] for x in a[1:]] == ["cpuRAM2", "hyperRAM"]


def test_yolo416_big_tensors_stay_on_chip_and_run_clean(yolo416):
    m, prog = yolo416
    acts = [b for b in prog.buffers if b.kind != "weight"]
    assert not [b.name for b in acts if b.pool == "hyperRAM"]
    big = [b for b in acts if b.size > 448 * 1024]  # input (520 KiB) and the /2 map (676 KiB)
    assert len(big) >= 2 and all(NPU_LO <= _span(PROFILE, b)[0] and _span(PROFILE, b)[1] <= NPU_HI for b in big)
    assert any(_crosses_pool(b) for b in big)
    prog2 = load_blob(encode_blob(prog, PROFILE), profile=PROFILE)  # the blob accepts the spans
    assert prog2.buffers == prog.buffers
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, 416, 416)).astype(np.float32)}
    rep = validate(prog2, m, x)
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    assert rep.passed, rep.text()
    assert set(rep.run_result.stats.pools) <= {"npuRAM3", "npuRAM4", "npuRAM5", "npuRAM6", "octoFlash"}


def test_blob_refuses_span_into_gap(yolo416):
    _, prog = yolo416
    b = next(b for b in prog.buffers if _crosses_pool(b))
    moved = dataclasses.replace(b, pool="npuRAM6", offset=NPU[-1].size - 64)  # runs past npuRAM6
    bufs = [moved if x is b else x for x in prog.buffers]
    with pytest.raises(BlobError, match="runs past npuRAM6's end 0x343c0000 into unmapped memory") as e:
        load_blob(encode_blob(dataclasses.replace(prog, buffers=bufs), PROFILE), profile=PROFILE, verify=False)
    assert "\n" not in str(e.value)


def test_blob_refuses_span_into_readonly_pool(yolo416):
    _, prog = yolo416
    ro = load_profile(overrides=["pool.npuRAM5.perms='r'"])  # read-only like octoFlash, after npuRAM4
    b = next(b for b in prog.buffers if _crosses_pool(b))
    moved = dataclasses.replace(b, pool="npuRAM4", offset=NPU[1].size - 64)
    bufs = [moved if x is b else x for x in prog.buffers]
    with pytest.raises(BlobError, match=r"runs into pool npuRAM5 \(perms 'r'\)"):
        load_blob(encode_blob(dataclasses.replace(prog, buffers=bufs), ro), profile=ro, verify=False)


def test_spanning_buffer_is_one_region(yolo416):
    _, prog = yolo416
    b = next(b for b in prog.buffers if _crosses_pool(b))
    amap = AddressMap(PROFILE)
    t = RegionTable.from_program_buffers([b], amap)
    (r,) = t.regions
    lo, hi = _span(PROFILE, b)
    assert (r.start, r.end) == (lo, hi)
    ck = Checker(amap, t)
    whole = AccessPattern(lo, b.size)
    assert ck.check(whole, "write", unit="SE5") is None
    t.mark_written(whole)
    assert ck.check(whole, "read", unit="SE0") is None  # crosses the pool boundary, one region
    f = ck.check(AccessPattern(lo, b.size + 1), "read", unit="SE0")
    assert f.cls == "buffer-overflow" and f.address == hi and f.region.name == b.name


def test_spanning_patterns_time_in_burst_mode():
    m = zoo.conv_model(3, 16, 160, 160, k=1)  # 400 KiB output at 0, the 80 KiB input after it
    prog = compile(m, CompileOptions())
    out = prog.buffer(m.graph.output[0].name)
    assert _crosses_pool(prog.buffer("input"))  # npuRAM3 -> npuRAM4
    fast = run(prog, random_inputs=True, options=RunOptions(trace=False))
    burst = run(prog, random_inputs=True, options=RunOptions(trace=False, mode="burst"))
    assert fast.status == burst.status == "ok"
    assert np.array_equal(fast.raw_outputs[out.name], burst.raw_outputs[out.name])
    assert burst.stats.cycles > 0


# ---------------------------------------------------------------- guard zones


def _se_limits(prog):
    """[(epoch index, SE args)] of the program's SE commands."""
    out, ep = [], -1
    for c in prog.commands:
        if c.op == "EPOCH":
            ep += 1
        elif c.op == "SE":
            out.append((ep, c.args))
    return out


def _owner(prog, base, limit):
    spans = [(b, *_span(PROFILE, b)) for b in prog.buffers]
    return max(((b, a, e) for b, a, e in spans if a <= base < e <= limit), key=lambda t: t[2] - t[1])


@pytest.mark.parametrize("plan", ["per-layer", "unified"])
def test_guard_zone_past_each_buffer_is_free(plan):
    m = zoo.yolo_style(size=256)
    prog = compile(m, CompileOptions(mem_align=16, mem_plan=plan))
    guard = PROFILE.stream_engine.limit_guard
    ses = _se_limits(prog)
    spans = [(b, *_span(PROFILE, b)) for b in prog.buffers]
    for ep, a in ses:
        b, lo, hi = _owner(prog, a["base"], a["limit"])
        assert a["limit"] == round_up(hi + guard, PROFILE.stream_engine.limit_granule)
        live = spans if plan == "per-layer" else [
            _owner(prog, x["base"], x["limit"]) for e2, x in ses if e2 == ep]
        for o, ol, oh in live:
            nested = (ol <= lo and hi <= oh) or (lo <= ol and oh <= hi)
            assert nested or oh <= hi or ol >= a["limit"], f"{o.name} lies in the guard zone of {b.name}"
    flash = sorted(_span(PROFILE, b) for b in prog.buffers if b.kind == "weight")
    assert all(nxt[0] >= round_up(cur[1] + guard, 8) for cur, nxt in zip(flash, flash[1:]))


def test_guard_is_not_part_of_the_buffer_and_demand_access_into_it_overflows():
    m = zoo.conv_model(16, 16, 56, 56)
    prog = compile(m, CompileOptions(mem_align=16))
    inp = prog.buffer("input")
    assert inp.size == inp.plane_stride  # 1 plane, no guard inside
    other = [b for b in prog.buffers if b.kind != "weight" and b is not inp]
    assert all(b.address(PROFILE) >= round_up(inp.address(PROFILE) + inp.size + 64, 16) for b in other)
    reads = [i for i, c in enumerate(prog.commands) if c.op == "SE" and c.args["dir"] == "read"
             and inp.address(PROFILE) <= c.args["base"] < inp.address(PROFILE) + inp.size]
    i = max(reads, key=lambda i: prog.commands[i].args["base"])  # the read that ends the buffer (last row band)
    cmds = list(prog.commands)
    cmds[i] = dataclasses.replace(cmds[i], args=dict(cmds[i].args, n1=cmds[i].args["n1"] + 1))  # one line more
    bad = run(dataclasses.replace(prog, commands=cmds), random_inputs=True, options=RunOptions(trace=False))
    f = bad.faults[0]
    assert f.cls == "buffer-overflow" and f.region.name == "input"
    assert f.address == inp.address(PROFILE) + inp.size
    assert "padding guard 'input.guard'" in f.rule
    assert run(prog, random_inputs=True, options=RunOptions(trace=False)).status == "ok"  # prefetch is fine


@pytest.mark.parametrize("model", ["yolo256", "conv56"])
def test_misaligned_buffers_straddle_bank_lines(model):
    m = zoo.yolo_style(size=256) if model == "yolo256" else zoo.conv_model(16, 16, 56, 56)
    res = {}
    for a in (16, 128):
        r = run(compile(m, CompileOptions(mem_align=a)), random_inputs=True,
                options=RunOptions(timing_only=True, trace=False))
        assert r.status == "ok", r.report_text()
        res[a] = r.stats
    assert res[128].cycles <= res[16].cycles
    assert res[16].cross_bank_splits > res[128].cross_bank_splits


def test_guard_option_sets_the_gap():
    m = zoo.conv_model(16, 16, 56, 56)
    for g in (0, 300):
        prog = compile(m, CompileOptions(mem_align=16, guard=g))
        spans = sorted(_span(PROFILE, b) for b in prog.buffers if b.kind != "weight")
        gaps = [nxt[0] - cur[1] for cur, nxt in zip(spans, spans[1:])]
        assert gaps == [round_up(round_up(spans[0][1] + g, 8), 16) - spans[0][1]]


def test_concat_parts_past_a_pool_boundary_name_the_pool_they_start_in():
    """A concat part nested in a buffer that spans npuRAM pools is listed in the pool holding its start."""
    prog = compile(zoo.yolo_style(size=640))
    prof = load_profile()
    for b in prog.buffers:
        assert 0 <= b.offset < prof.pool_named(b.pool).size, b
    assert run(prog, random_inputs=True, options=RunOptions(timing_only=True)).status == "ok"
