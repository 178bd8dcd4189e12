"""Structure of compiled programs: buffers and strides at mem_align, the layout rule, weights in
octoFlash, SE wiring and limits, debug map, fusion and memory-plan options."""

from __future__ import annotations

import onnx
import pytest

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.compiler.ir import hwc
from npusim.hw import load_profile
from npusim.program.layouts import geometry, required_layout

PROFILE = load_profile()


def _round_up(x, a):
    return -(-x // a) * a


def check_program(prog, model: onnx.ModelProto, align: int, io_pad: int = 0, guard: int = 64):
    names = {n.name for n in model.graph.node}
    acts = [b for b in prog.buffers if b.kind in ("input", "output", "activation")]
    assert {b.name for b in prog.buffers_of("input")} == {i.name for i in model.graph.input}
    assert {b.name for b in prog.buffers_of("output")} == {o.name for o in model.graph.output}
    for b in acts:
        h, w, c = hwc(b.shape)
        geo = geometry(h, w, c, {"int8": 1, "fp16": 2, "fp32": 4}[b.dtype])
        assert b.layout == required_layout(h, w, c)
        assert b.address(PROFILE) % align == 0, b
        assert b.pool in ("npuRAM3", "npuRAM4", "npuRAM5", "npuRAM6", "cpuRAM2", "hyperRAM")
        pad = io_pad if b.kind != "activation" else 0
        if b.layout == "linear":
            assert b.size == geo.stream_bytes + pad
        else:
            assert b.line_stride == _round_up(geo.run_bytes, align)
            assert b.plane_stride == _round_up(h * b.line_stride, align)
            assert b.size == geo.planes * b.plane_stride + pad
        assert b.producer in names or b.kind == "input"
    for b in prog.buffers_of("weight"):
        assert b.pool == "octoFlash" and b.address(PROFILE) % align == 0
        assert set(b.consumers) <= names
    consts = {c.name: c for c in prog.constants}
    assert set(consts) == {b.name for b in prog.buffers_of("weight")}
    for b in prog.buffers_of("weight"):
        assert consts[b.name].offset == b.offset and len(consts[b.name].data) == b.size
    # debug map: one entry per EPOCH and per software epoch (at its first HTENSOR), naming an ONNX node
    for i, c in enumerate(prog.commands):
        if c.op == "EPOCH":
            assert prog.debug[i] in names
        if c.op == "HOST":
            first = i - c["n_in"] - c["n_out"]
            assert prog.debug[first] in names and prog.layer_of(i) == prog.debug[first]
    assert set(prog.debug.values()) <= names
    # stream engines: wiring, engine ranges, limits = end of the buffer holding base + guard, 8 B step
    spans = [(b.address(PROFILE), b.address(PROFILE) + b.size) for b in prog.buffers]
    for c in prog.commands:
        if c.op != "SE":
            continue
        assert c["port"] == PROFILE.bus.stream_engine_port[c["engine"]]
        assert c["engine"] in (range(0, 5) if c["dir"] == "read" else range(5, 10))
        ends = [e for s, e in spans if s <= c["base"] < e]
        assert ends and c["limit"] in [_round_up(e + guard, 8) for e in ends]
    assert prog.commands[-1].op == "END"


@pytest.mark.parametrize("kind", zoo.OPS)
@pytest.mark.parametrize("align", [16, 128])
def test_op_family_structure(kind, align):
    m = zoo.op_model(kind)
    prog = compile(m, CompileOptions(mem_align=align, quantization="fp16"))
    check_program(prog, m, align)


@pytest.mark.parametrize("q", ["int8", "fp16", "fp32"])
def test_dtypes_and_weights(q):
    m = zoo.conv_model(16, 32, 10, 10)
    prog = compile(m, CompileOptions(quantization=q))
    check_program(prog, m, 128)
    conv = next(c for c in prog.commands if c.op == "CONV")
    assert conv["dtype"] == q
    w = next(b for b in prog.buffers_of("weight") if b.name.endswith("::weights"))
    assert w.size == 32 * 3 * 3 * 16 * {"int8": 1, "fp16": 2, "fp32": 4}[q]
    t = next(b for b in prog.buffers_of("weight") if b.name.endswith("::qparams"))
    assert t.size == 32 * (12 if q == "int8" else 4)
    assert conv["qparams"] == t.address(PROFILE)


def test_mem_align_changes_strides_not_hardware_rule():
    m = zoo.conv_model(16, 16, 52, 52)
    a16 = compile(m, CompileOptions(mem_align=16)).buffer("input")
    a128 = compile(m, CompileOptions(mem_align=128)).buffer("input")
    assert (a16.line_stride, a128.line_stride) == (52 * 16, 896)
    assert a16.layout == a128.layout == "blocked16"


def test_io_pad_and_guard():
    m = zoo.conv_model(16, 16, 8, 8)
    prog = compile(m, CompileOptions(io_pad=256, guard=128))
    check_program(prog, m, 128, io_pad=256, guard=128)


def test_fusion_options_change_epoch_count():
    m = zoo.resnet_style(size=16)
    epochs = {f: sum(c.op == "EPOCH" for c in compile(m, CompileOptions(fuse=f, quantization="fp16")).commands)
              for f in ("all", "none", "conv-bn", "conv-bn,conv-act")}
    assert epochs["all"] < epochs["conv-bn,conv-act"] < epochs["conv-bn"] < epochs["none"]
    prog = compile(m, CompileOptions(fuse="none", quantization="fp16"))
    assert any(c.op == "ARITH" and c["op"] == "mul_const" for c in prog.commands)  # standalone BN
    check_program(prog, m, 128)


def test_fused_chain_is_one_epoch():
    m = zoo.op_model("add")
    prog = compile(m, CompileOptions())
    ops = [c.op for c in prog.commands]
    assert ops.count("EPOCH") == 2  # stem; conv(1x1) -> ARITH add with the stem output as operand
    second = ops[ops.index("EPOCH", 1):]
    assert second.count("ARITH") == 1 and second.count("CONV") == 1


def test_softmax_is_a_host_layer():
    m = zoo.op_model("softmax")
    prog = compile(m)
    host = [i for i, c in enumerate(prog.commands) if c.op == "HOST"]
    assert len(host) == 1 and prog.layer_of(host[0]) == prog.host_layers[0] == m.graph.node[-1].name
    ops = [c.op for c in prog.commands[host[0] - 2:host[0] + 1]]
    assert ops == ["HTENSOR", "HTENSOR", "HOST"]


def test_concat_by_addressing_has_no_copy_epoch():
    m = zoo.op_model("concat")
    prog = compile(m, CompileOptions(quantization="fp16"))
    assert not any(c.op == "ARITH" for c in prog.commands)
    out = prog.buffer(m.graph.output[0].name)
    writes = [c for c in prog.commands if c.op == "SE" and c["dir"] == "write"]
    # producers (one write SE per CA slice or row band) write whole lines of whole planes of the
    # concat buffer, tiling it once
    cells = []
    for c in writes:
        off = c["base"] - out.address(PROFILE)
        plane, row = divmod(off, out.plane_stride)
        assert row % out.line_stride == 0
        row //= out.line_stride
        cells += [(p, r) for p in range(plane, plane + c["n2"]) for r in range(row, row + c["n1"])]
    assert sorted(cells) == [(p, r) for p in range(-(-out.shape[1] // 16)) for r in range(out.shape[2])]
    assert len(writes) > 2  # the producers run on several CAs


def test_mem_plans():
    m = zoo.resnet_style(size=16)
    per = compile(m, CompileOptions(mem_plan="per-layer", quantization="fp16"))
    uni = compile(m, CompileOptions(mem_plan="unified", quantization="fp16"))
    spans = sorted((b.address(PROFILE), b.address(PROFILE) + b.size) for b in per.buffers if b.kind != "weight")
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # per-layer: no sharing
    foot = lambda p: max(b.offset + b.size for b in p.buffers if b.pool == "npuRAM3")
    assert foot(uni) < foot(per)


def test_spill_to_hyperram():
    m = zoo.conv_model(3, 64, 128, 128, k=1)  # 64 x 128 x 128 fp16 = 2 MiB > npuRAM3..6 (1.75 MiB)
    prog = compile(m, CompileOptions(quantization="fp16"))
    assert prog.buffer(m.graph.output[0].name).pool == "hyperRAM"
    m = zoo.conv_model(3, 64, 96, 96, k=1)  # 1.1 MiB: too big for one pool, fits npuRAM3..6 merged
    prog = compile(m, CompileOptions(quantization="fp16"))
    assert prog.buffer(m.graph.output[0].name).pool.startswith("npuRAM")


def test_deterministic():
    m = zoo.mobilenet_style(size=16)
    a, b = compile(m), compile(m)
    assert a.commands == b.commands and a.constants == b.constants and a.buffers == b.buffers
