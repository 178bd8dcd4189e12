"""Operators the NPU runs by stream-engine addressing (issue 11 item 3, compiler/recipes/addressing.py): Slice,
Split, Transpose, Concat on rows/columns and chained channel concats, Reshape of one stream, Pad (edge,
reflect), DepthToSpace and SpaceToDepth. Each compiled int8, fp16 and fp32 at --mem-align 128 and 16, run and
compared with ONNX Runtime, checked to run without CPU epochs; boxes the stream engine cannot walk (and
no cheaper moving CONV reaches, compiler/recipes/moveconv.py) stay on the CPU with the reason; a wrong stride in a
window descriptor is a fault, predicted by the check."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import npusim
import npusim.runtime
from npusim.analysis import check
from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.hw import load_profile
from npusim.program.codec import Command
from npusim.reference import validate
from npusim.runtime import RunOptions
from npusim.zoo import families

PROFILE = load_profile()
POINTS = [(q, a) for a in (128, 16) for q in ("int8", "fp16", "fp32")]


def _model(nodes, x_shape, inits=(), outputs=("y",), opset=17):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TP.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info(o, TP.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


def _i64(*v):
    return np.array(v, np.int64)


def _relu(i, o):
    return helper.make_node("Relu", [i], [o])


def _check(m, q, align=128, on_cpu=()):
    prog = compile(m, CompileOptions(quantization=q, mem_align=align))
    cpu = cpu_summary(prog, PROFILE)
    assert sorted(line.split(" ")[0] for line in cpu) == sorted(on_cpu), cpu
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    tol = {"int8": 0.99, "fp16": 0.9999, "fp32": 0.999999}[q]
    assert min(v.cosine for v in rep.metrics.values()) >= tol, rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-4, rep.text()
    return prog, rep


# each model: a computed map (Relu) into the operator, so its operand is an NPU buffer; W of every
# blocked16 map is 8 or 16 so that --mem-align 16 lines are whole 128 B granules in int8/fp16/fp32
CASES = {
    "slice-channel-planes": ([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a"], ["t"]), _relu("t", "y")],
                             [1, 48, 4, 8], {"s": _i64(16), "e": _i64(48), "a": _i64(1)}, ("y",)),
    "slice-rows-columns-steps": ([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a", "st"], ["y"])],
                                 [1, 32, 7, 16], {"s": _i64(1, 1), "e": _i64(7, 16), "a": _i64(2, 3), "st": _i64(3, 2)},
                                 ("y",)),
    "slice-channels-in-a-block": ([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a", "st"], ["y"])],
                                  [1, 32, 4, 8], {"s": _i64(8), "e": _i64(16), "a": _i64(1), "st": _i64(2)}, ("y",)),
    "split-channels": ([_relu("x", "r"), helper.make_node("Split", ["r", "sp"], ["a", "b", "c"], axis=1),
                        _relu("a", "y"), _relu("b", "z"), helper.make_node("Sigmoid", ["c"], ["w"])],
                       [1, 72, 4, 8], {"sp": _i64(16, 32, 24)}, ("y", "z", "w")),
    "split-rows": ([_relu("x", "r"), helper.make_node("Split", ["r"], ["y", "z"], axis=2)],
                   [1, 20, 6, 8], {}, ("y", "z")),
    "transpose-rows-columns": ([_relu("x", "r"), helper.make_node("Transpose", ["r"], ["y"], perm=[0, 1, 3, 2])],
                               [1, 20, 8, 16], {}, ("y",)),
    "concat-columns": ([_relu("x", "r"), helper.make_node("Sigmoid", ["x"], ["s"]),
                        helper.make_node("Concat", ["r", "s"], ["y"], axis=3)], [1, 20, 3, 8], {}, ("y",)),
    "concat-rows-three-parts": ([_relu("x", "r"), helper.make_node("Sigmoid", ["x"], ["s"]),
                                 helper.make_node("Concat", ["r", "s", "x"], ["y"], axis=2)], [1, 8, 3, 8], {}, ("y",)),
    "concat-channels-off-blocks": ([_relu("x", "r"), helper.make_node("Sigmoid", ["x"], ["s"]),
                                    helper.make_node("Concat", ["r", "s", "x"], ["y"], axis=1)], [1, 6, 3, 8], {},
                                   ("y",)),
    "reshape-hw-to-l": ([_relu("x", "r"), helper.make_node("Reshape", ["r", "shp"], ["t"]),
                         helper.make_node("Sigmoid", ["t"], ["y"])], [1, 24, 4, 8], {"shp": _i64(1, 24, 32)}, ("y",)),
    "depth-to-space-dcr": ([_relu("x", "r"), helper.make_node("DepthToSpace", ["r"], ["y"], blocksize=2)],
                           [1, 64, 4, 8], {}, ("y",)),
    "pad-edge": ([_relu("x", "r"), helper.make_node("Pad", ["r", "p"], ["y"], mode="edge")], [1, 20, 5, 8],
                 {"p": _i64(0, 0, 1, 3, 0, 0, 2, 5)}, ("y",)),
    "pad-reflect": ([_relu("x", "r"), helper.make_node("Pad", ["r", "p"], ["y"], mode="reflect")], [1, 20, 5, 8],
                    {"p": _i64(0, 0, 1, 3, 0, 0, 2, 5)}, ("y",)),
    "space-to-depth": ([_relu("x", "r"), helper.make_node("SpaceToDepth", ["r"], ["y"], blocksize=2)],
                       [1, 16, 8, 16], {}, ("y",)),
}


@pytest.mark.parametrize("q,align", POINTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_addressed_operator_runs_on_the_npu(case, q, align):
    nodes, shape, inits, outs = CASES[case]
    prog, _ = _check(_model(nodes, shape, inits, outs), q, align)
    op = next(n.op_type for n in nodes if n.op_type not in ("Relu", "Sigmoid"))
    layers = set(prog.debug.values())
    assert any(v.startswith(op) for v in layers) or op in ("Slice", "Split", "Concat"), layers  # views: no epoch


@pytest.mark.parametrize("q", ["int8", "fp32"])
def test_boxes_the_stream_engine_cannot_walk_stay_on_the_cpu(q):
    img = [1, 3, 8, 8]  # image layout (C <= 4): a pixel of 3 elements, off the 8 B word grid at odd columns
    focus = _model([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], img,
                   {"s": _i64(1), "e": _i64(8), "a": _i64(3), "st": _i64(2)})
    _check(focus, q, on_cpu=("Slice",))  # a grid-aligned cover moved by a CONV (moveconv) costs more here
    assert "faster on the CPU" in cpu_summary(compile(focus, CompileOptions(quantization=q)), PROFILE)[0]
    back = _model([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a", "st"], ["y"])], [1, 16, 4, 8],
                  {"s": _i64(7), "e": _i64(-9), "a": _i64(3), "st": _i64(-1)})
    _check(back, q, on_cpu=("Slice",))
    off = _model([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a"], ["y"])], [1, 40, 4, 8],
                 {"s": _i64(8), "e": _i64(40), "a": _i64(1)})  # 32 channels from channel 8: not whole pixels
    # int8: a channel-gathering CONV (compiler/recipes/moveconv.py) beats the host's copy; at fp32's CA rate it does not
    _check(off, q, on_cpu=() if q == "int8" else ("Slice",))
    crd = _model([_relu("x", "r"), helper.make_node("DepthToSpace", ["r"], ["y"], blocksize=2, mode="CRD")],
                 [1, 64, 4, 8])  # each phase: 16 channels 4 apart
    _check(crd, q, on_cpu=("DepthToSpace",))
    hwc = _model([_relu("x", "r"), helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 3, 1])], [1, 16, 4, 8])
    _check(hwc, q, on_cpu=("Transpose",))
    cols = _model([helper.make_node("Concat", ["x", "x"], ["y"], axis=3)], [1, 3, 4, 5])
    _check(cols, q, on_cpu=("Concat",))
    s2d = _model([_relu("x", "r"), helper.make_node("SpaceToDepth", ["r"], ["y"], blocksize=2)], [1, 8, 4, 8])
    _check(s2d, q, on_cpu=("SpaceToDepth",))
    prog = compile(s2d, CompileOptions(quantization=q))
    assert any("not whole 16-channel planes" in line for line in cpu_summary(prog, PROFILE))
    for mode, value in (("reflect", None), ("constant", 1.5)):  # 3-channel pixels off the word grid; a value
        node = helper.make_node("Pad", ["r", "p"] + (["v"] if value else []), ["y"], mode=mode)
        inits = {"p": _i64(0, 0, 1, 1, 0, 0, 1, 1), **({"v": np.float32(value)} if value else {})}
        _check(_model([_relu("x", "r"), node], [1, 3 if value is None else 16, 4, 8], inits), q, on_cpu=("Pad",))


def test_model_families_run_their_movement_operators_on_the_npu():
    """The YOLO head's Split, Slice, Reshape and axis-2 Concat run on the NPU in fp32 (its channels-to-rows
    Transpose costs more as an element permutation than on the n657's host, and Exp has no unit); so do
    ShuffleNet's split at channel 24 (not whole 16-channel pixels: a 16-channel block cover moved by a channel-
    selecting CONV, compiler/recipes/moveconv.py) and its shuffle (Reshape - Transpose - Reshape: one CONV gathering
    channels, moveconv.GatherPlan), also on a host 20x slower per moved element."""
    _check(families.yolo_head_style(), "fp32", on_cpu=("Exp", "Transpose"))
    _check(families.shufflenet_block_style(), "int8")
    m = families.shufflenet_block_style()
    prof = load_profile(overrides=["host.cycles.movement=40"])
    prog = compile(m, CompileOptions(quantization="int8"), profile=prof)
    assert cpu_summary(prog, prof) == []
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok" and min(v.cosine for v in rep.metrics.values()) >= 0.99, rep.text()


def _transpose(shape, perm):
    return _model([_relu("x", "r"), helper.make_node("Transpose", ["r"], ["y"], perm=perm)], shape)


# element permutations (compiler/recipes/permute.py): channels moved by stream-engine pattern pairs
PERMUTATIONS = {
    # on the n657 the host's copy is cheaper; on a host 20x slower per moved element the NPU takes these
    "channels-to-columns": (_transpose([1, 8, 256], [0, 2, 1]), ["host.cycles.movement=40"]),  # a YOLO output
    "nchw-to-nhwc": (_transpose([1, 16, 4, 8], [0, 2, 3, 1]), ["host.cycles.movement=40"]),  # image output
    "image-to-blocked": (_transpose([1, 3, 32], [0, 2, 1]), ["host.cycles.movement=40"]),
}


def _shuffle(c, h):
    b = families.Builder(0)
    y = b.channel_shuffle(b.cbr("input", 3, c, k=1), c, h, h)
    return b.model([1, 3, h, h], [b.node("Relu", [y])], "shuffle")


PERMUTATIONS["shuffle-116-channels"] = (_shuffle(116, 16), ["host.cycles.movement=40"])  # a partial last block
# 20 output channels from rows of an image map: no input plane has the output's padding lanes, so an ARITH
# copy of the output's shape zeroes them first
PERMUTATIONS["rows-to-20-channels"] = (_transpose([1, 4, 20, 8], [0, 2, 1, 3]), ["host.cycles.movement=40"])


@pytest.mark.parametrize("q,align", POINTS)
@pytest.mark.parametrize("case", sorted(PERMUTATIONS))
def test_channel_moving_permutations_run_on_the_npu(case, q, align):
    m, overrides = PERMUTATIONS[case]
    prof = load_profile(overrides=overrides)
    prog = compile(m, CompileOptions(quantization=q, mem_align=align), profile=prof)
    assert cpu_summary(prog, prof) == []
    assert any(v.lower().startswith("transpose") for v in prog.debug.values()), prog.debug
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    assert min(v.cosine for v in rep.metrics.values()) >= {"int8": 0.99, "fp16": 0.9999, "fp32": 0.999999}[q]
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-4, rep.text()


def test_a_permutation_dearer_than_the_host_copy_stays_on_the_cpu_with_both_figures():
    prog = compile(_transpose([1, 16, 4, 8], [0, 2, 3, 1]), CompileOptions(quantization="int8"))
    (line,) = cpu_summary(prog, PROFILE)
    assert line.startswith("Transpose x1 -> CPU") and "cycles) is slower than the host's copy (~" in line, line
    zeroed = _transpose([1, 4, 20, 8], [0, 2, 1, 3])  # the padding lanes zeroed first: one more epoch
    (line,) = cpu_summary(compile(zeroed, CompileOptions(quantization="int8")), PROFILE)
    assert "is slower than the host's copy (~" in line, line


def _window_copy(prog):
    """(index, command) of the first read SE of an addressed copy (a linear descriptor with loops)."""
    for i, c in enumerate(prog.commands):
        if c.op == "SE" and c.args["dir"] == "read" and c.args["layout"] == "linear" and c.args["n2"] > 1:
            return i, c
    raise AssertionError("no window read")


def test_a_wrong_window_stride_is_a_fault_the_check_predicts():
    m = _model([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a", "st"], ["y"])], [1, 32, 8, 16],
               {"s": _i64(0), "e": _i64(8), "a": _i64(2), "st": _i64(2)})
    prog = compile(m, CompileOptions(quantization="int8"))
    i, c = _window_copy(prog)
    bad = dataclasses.replace(prog, commands=prog.commands[:i] + [Command("SE", {**c.args, "s2": c.args["s2"] * 2})]
                              + prog.commands[i + 1:])
    res = npusim.run(bad, options=RunOptions(trace=False), random_inputs=True)
    assert res.status == "fault" and res.faults[0].cls == "buffer-overflow", res.report_text()
    rep = check(bad)
    assert [f.cls for f in rep.faults][:1] == ["buffer-overflow"]
    assert rep.faults[0].address == res.faults[0].address


def test_a_quantized_model_moves_its_values_bit_exactly():
    """A QDQ model (the model's own scales): Split views, a column Concat, reflect Pad, a strided Slice and a
    row/column Transpose all on the NPU, equal to ONNX Runtime's quantized run value for value."""
    from npusim.zoo.quantized import quantize_onnx

    rng = np.random.default_rng(0)
    w = {"w": rng.standard_normal((32, 16, 1, 1)).astype(np.float32),
         "w2": rng.standard_normal((16, 16, 1, 1)).astype(np.float32)}
    conv = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]),
            helper.make_node("Split", ["c", "sp"], ["a", "b"], axis=1),
            helper.make_node("Conv", ["a", "w2"], ["d"], kernel_shape=[1, 1]),
            helper.make_node("Concat", ["d", "b"], ["e"], axis=3),
            helper.make_node("Pad", ["e", "p"], ["f"], mode="reflect"),
            helper.make_node("Slice", ["f", "s", "en", "ax", "st"], ["g"]),
            helper.make_node("Transpose", ["g"], ["y"], perm=[0, 1, 3, 2])]
    m = quantize_onnx(_model(conv, [1, 16, 8, 8], {**w, "sp": _i64(16, 16), "p": _i64(0, 0, 1, 1, 0, 0, 1, 1),
                                                   "s": _i64(0, 0), "en": _i64(8, 16), "ax": _i64(2, 3),
                                                   "st": _i64(1, 2)}), "qdq")
    prog = compile(m, CompileOptions(quantization="int8"))
    assert cpu_summary(prog, PROFILE) == []
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0))
    assert rep.run_result.status == "ok" and all(v.max_abs == 0 for v in rep.metrics.values()), rep.text()
