"""What the reports say about a faulting run and a blob: the fault on the trace, the bytes a
faulting layer moved before the fault, and a memory map that counts reused memory once."""

import json

import pytest

import npusim
from npusim import zoo
from npusim.compiler import CompileOptions
from npusim.tools.inspect import inspect_program


@pytest.fixture(scope="module")
def faulting():
    prog = npusim.compile(zoo.conv_model(16, 16, 52, 52, 3), CompileOptions(mem_align=16))
    return prog, npusim.run(prog, random_inputs=True, seed=0, options=npusim.RunOptions(trace=True))


def test_trace_marks_the_fault(faulting):
    _, res = faulting
    f = res.faults[0]
    trace = json.loads(res.trace_json())
    marks = [e for e in trace["traceEvents"] if e.get("cat") == "fault"]
    assert len(marks) == 1
    m = marks[0]
    assert m["ph"] == "i" and m["args"]["class"] == f.cls and m["args"]["address"] == f"{f.address:#x}"
    assert m["args"]["unit"] == f.unit and m["args"]["command"] == f.command
    names = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert names[f.unit] == m["tid"]  # on the faulting unit's own track


def test_faulting_layer_counts_the_bytes_moved_before_the_fault(faulting):
    _, res = faulting
    f = res.faults[0]
    assert f.details["stream_offset"] > 0
    layer = next(L for L in res.stats.layers if L.name == f.layer)
    moved = layer.bytes_written if f.access == "write" else layer.bytes_read
    assert moved == f.details["stream_offset"]


def test_memory_map_counts_reused_memory_once():
    prog = npusim.compile(zoo.resnet_style(), CompileOptions())
    info = inspect_program(prog, npusim.load_profile())
    for pool in info["memory_map"]:
        assert pool["buffer_bytes"] <= pool["size"]
        assert pool["buffer_bytes"] <= pool["high_water"] <= pool["size"]
        names = [x["name"] for x in pool["items"]]
        assert len(names) == len(set(names))  # a weight is listed once (buffer table + constant)
    flash = next(p for p in info["memory_map"] if p["pool"] == "octoFlash")
    assert all(x.get("constant") for x in flash["items"])
    assert flash["buffer_bytes"] == sum(len(c.data) for c in prog.constants if c.pool == "octoFlash")


def test_the_hit_region_is_the_one_holding_data_at_the_fault():
    """Buffers that reuse memory overlap: the rule names a region live at the faulting command (or
    the prefetch guard right after the buffer), never a dead buffer that merely encloses the byte."""
    prog = npusim.compile(zoo.yolo_style(size=224), CompileOptions(mem_align=16))
    res = npusim.run(prog, random_inputs=True, seed=0)
    f = res.faults[0]
    from npusim.memmap import live_ranges

    hit = f.details["hit_region"]
    live = live_ranges(prog)
    assert hit.endswith(".guard") or live[hit][0] <= f.command <= live[hit][1], (hit, live.get(hit), f.command)
    dead = [b.name for b in prog.buffers if b.name in live and not live[b.name][0] <= f.command <= live[b.name][1]
            and b.pool == "npuRAM3" and prog.buffer(b.name).offset <= f.address - 0x34200000 < b.offset + b.size]
    assert dead and hit not in dead  # there is a dead enclosing buffer, and it is not the one named
    epoch = next(e for e in res.stats.epochs if e.id == f.epoch)
    assert epoch.status == "fault"
