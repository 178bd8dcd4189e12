"""CONVs that move values (issue 11 item 3, compiler/recipes/moveconv.py): eltwise ops between two maps broadcast
along channels (the one-channel operand expanded by a 1 -> C all-ones CONV), and Slice/Split boxes off the
bus-word grid or the 16-channel blocks (a grid-aligned cover read, moved into place by a one-hot CONV). Each
compiled int8, fp16 and fp32 at --mem-align 128 and 16, run with the checker (no fault) and compared with ONNX
Runtime, checked to have no HOST epoch; what stays on the CPU gives its reason."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import npusim
import npusim.runtime
from npusim.compiler import CompileOptions, compile
from npusim.compiler.driver import cpu_summary
from npusim.hw import load_profile
from npusim.reference import validate
from npusim.zoo import families

PROFILE = load_profile()
# a host 20x / 10x slower per moved / computed element: the NPU routes win on every shape here (the n657's own
# choices: test_the_routes_are_kept_where_the_n657_host_is_slower)
SLOW_HOST = load_profile(overrides=["host.cycles.movement=40", "host.cycles.elementwise=40"])
FAST_CPU_ADD = load_profile(overrides=["host.cycles.movement=0.01", "host.cycles.elementwise=0.01"])
POINTS = [(q, a) for a in (128, 16) for q in ("int8", "fp16", "fp32")]
TOL = {"int8": 0.99, "fp16": 0.9999, "fp32": 0.999999}


def _i64(*v):
    return np.array(v, np.int64)


def _graph(nodes, inputs: dict, inits=(), outputs=("y",)):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(k, TP.FLOAT, list(s)) for k, s in inputs.items()],
                          [helper.make_tensor_value_info(o, TP.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _run(m, q, align, profile=PROFILE, on_cpu=()):
    prog = compile(m, CompileOptions(quantization=q, mem_align=align), profile=profile)
    cpu = cpu_summary(prog, profile)
    assert sorted(line.split(" ")[0] for line in cpu) == sorted(on_cpu), cpu
    if not on_cpu:
        assert not any(c.op == "HOST" for c in prog.commands)
    rep = validate(prog, m, npusim.runtime.seeded_inputs(prog, 0), profile=profile)
    assert rep.run_result.status == "ok" and not rep.run_result.faults, rep.run_result.report_text()
    assert min(v.cosine for v in rep.metrics.values()) >= TOL[q], rep.text()
    if q == "fp32":
        assert max(v.max_abs for v in rep.metrics.values()) < 1e-5, rep.text()
    return prog, rep


def _moving_convs(prog):
    return [c for c in prog.commands if c.op == "CONV"]


# ------------------------------------------------------------------ broadcasting along channels

def _pair(op, sa, sb, gate="Relu"):
    """op(Relu(a), gate(b)) of two model inputs, numpy-broadcast (Sigmoid: a divisor away from 0)."""
    nodes = [helper.make_node("Relu", ["a"], ["ra"]), helper.make_node(gate, ["b"], ["rb"]),
             helper.make_node(op, ["ra", "rb"], ["y"], name="op")]
    return _graph(nodes, {"a": sa, "b": sb})


CHANNEL_CASES = {
    "mul-attention-map": ("Mul", (1, 32, 8, 16), (1, 1, 8, 16), "Sigmoid"),
    "add-row-on-the-left": ("Add", (1, 1, 1, 16), (1, 32, 8, 16), "Relu"),
    "sub-column": ("Sub", (1, 32, 8, 16), (1, 1, 8, 1), "Relu"),
    "div-attention-map": ("Div", (1, 32, 8, 16), (1, 1, 8, 16), "Sigmoid"),
    "max-with-row-broadcast": ("Max", (1, 32, 1, 16), (1, 1, 8, 1), "Relu"),
    "min-rank3": ("Min", (1, 1, 24), (1, 20, 24), "Relu"),
    "add-image": ("Add", (1, 3, 32, 32), (1, 1, 32, 32), "Relu"),
}


# an expanded [1, C, H, 1] operand is a blocked16 map of 1-pixel lines: at --mem-align 16 its lines are not
# whole 128 B granules and the hardware walks them wrongly (a fault, as for any such map): 128 only
COLUMN_CASES = ("sub-column", "max-with-row-broadcast")


@pytest.mark.parametrize("case,q,align", [(case, q, a) for case in sorted(CHANNEL_CASES) for q, a in POINTS
                                          if a == 128 or case not in COLUMN_CASES])
def test_broadcasting_along_channels_runs_on_the_npu(case, q, align):
    op, sa, sb, gate = CHANNEL_CASES[case]
    prog, _ = _run(_pair(op, sa, sb, gate), q, align, SLOW_HOST)
    convs = _moving_convs(prog)  # one layer, maybe split over CAs
    assert convs and all(c.args["in_c"] == 1 for c in convs)
    assert sum(c.args["out_c"] for c in convs) == max(sa[1], sb[1])
    assert any(c.op == "ARITH" for c in prog.commands)


def test_an_expanded_add_fuses_into_one_epoch():
    prog, _ = _run(_pair("Add", (1, 32, 8, 16), (1, 1, 8, 16)), "int8", 128)
    epochs = [c for c in prog.commands if c.op == "EPOCH"]
    assert _moving_convs(prog) and len(epochs) == 3  # Relu, Relu, CONV -> ARITH add


# ------------------------------------------------------------------ operands of lower rank than the result

def _low(op, x, z, gate="Relu", left=False):
    """op(Relu(x), gate(z)) (left: op(gate(z), Relu(x))) with z of lower rank (numpy aligns the trailing axes);
    gate None: z, a model input of a shape no NPU unit takes ([H, W], [C, 1, 1]), read as it is."""
    nodes = [helper.make_node("Relu", ["x"], ["rx"])]
    if gate:
        nodes.append(helper.make_node(gate, ["z"], ["rz"]))
    ab = ["rz" if gate else "z", "rx"] if left else ["rx", "rz" if gate else "z"]
    return _graph(nodes + [helper.make_node(op, ab, ["y"], name="op")], {"x": x, "z": z})


LOW_RANK_CASES = {
    "add-hw-map": ("Add", (1, 32, 16, 16), (1, 16, 16), "Relu", False),  # stored as 16 channels of 16 pixels
    "mul-hw-map-sigmoid": ("Mul", (1, 48, 8, 16), (1, 8, 16), "Sigmoid", False),
    "sub-row-left": ("Sub", (1, 32, 8, 16), (16,), "Relu", True),  # [W] - map
    "div-row": ("Div", (1, 24, 4, 16), (16,), "Sigmoid", False),
    "max-hw-input": ("Max", (1, 32, 8, 16), (8, 16), None, False),  # [H, W]: linear, dense in ONNX order
    "min-hw-input-left": ("Min", (1, 16, 8, 8), (8, 8), None, True),
    "add-channel-vector": ("Add", (1, 32, 8, 8), (32, 1, 1), None, False),  # linear [C]: a vector
    "mul-chw-input": ("Mul", (1, 32, 4, 8), (32, 4, 8), None, False),  # [C, H, W] to a blocked16 map
    "add-hw-map-image": ("Add", (1, 3, 16, 16), (1, 16, 16), "Relu", False),
}


@pytest.mark.parametrize("q,align", POINTS)
@pytest.mark.parametrize("case", sorted(LOW_RANK_CASES))
def test_lower_rank_operands_run_on_the_npu(case, q, align):
    op, x, z, gate, left = LOW_RANK_CASES[case]
    prog, _ = _run(_low(op, x, z, gate, left), q, align, SLOW_HOST)
    assert any(c.op == "ARITH" and c.args.get("op") not in (None, "copy") for c in prog.commands)


def test_lower_rank_operands_on_the_n657():
    """The probe of issue 11: Add of [1, 32, 16, 16] and [1, 16, 16] runs on the NPU on the n657 profile (a
    copy into a [1, 1, 16, 16] map, its expansion and the ARITH add), in fewer cycles than the host's Add."""
    m = _low("Add", (1, 32, 16, 16), (1, 16, 16))
    for q in ("int8", "fp16"):
        _, rep = _run(m, q, 128, PROFILE)
        host = compile(m, CompileOptions(quantization=q), profile=FAST_CPU_ADD)
        assert cpu_summary(host, FAST_CPU_ADD)  # a host cheaper per element keeps the CPU, naming the estimate
        assert "for copying a lower-rank operand into a map" in cpu_summary(host, FAST_CPU_ADD)[0]


def test_channel_broadcasts_the_npu_cannot_do_stay_on_the_cpu_with_the_reason():
    # [C, H, W] of 20 channels: its copy into a blocked16 map has a partial last block, whose padding lanes
    # the permutation planner zeroes first (an ARITH copy): on the NPU since that planner change
    prog, _ = _run(_low("Add", (1, 20, 4, 8), (20, 4, 8), None), "fp32", 128, SLOW_HOST)
    assert not cpu_summary(prog, SLOW_HOST)
    # one pixel of one channel over 16 channels x 4 pixels: the CONV epoch's setup outweighs the host's Add
    prog, _ = _run(_pair("Add", (1, 16, 2, 2), (1, 1, 2, 2)), "fp32", 128, on_cpu=("Add",))
    assert "faster on the CPU" in " ".join(cpu_summary(prog, PROFILE))


# ------------------------------------------------------------------ boxes off the grid or the blocks

def _relu(i, o):
    return helper.make_node("Relu", [i], [o])


SHIFT_CASES = {
    # image map of 3-channel pixels: column 3 starts 3 B (int8) / 6 B (fp16) / 4 B (fp32) off the word grid
    "slice-columns-off-grid": ([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a"], ["t"]), _relu("t", "y")],
                               [1, 3, 8, 32], {"s": _i64(3), "e": _i64(27), "a": _i64(3)}, ("y",)),
    "slice-columns-step": ([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a", "st"], ["y"])],
                           [1, 3, 8, 32], {"s": _i64(1), "e": _i64(32), "a": _i64(3), "st": _i64(2)}, ("y",)),
    # 32 channels from channel 8 of a blocked16 map: not whole 16-channel pixels
    "slice-channels-off-blocks": ([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a"], ["y"])],
                                  [1, 40, 4, 8], {"s": _i64(8), "e": _i64(40), "a": _i64(1)}, ("y",)),
    # a YOLO head's split of 85 channels into box, objectness and classes
    "split-85-into-4-1-80": ([_relu("x", "r"), helper.make_node("Split", ["r", "sp"], ["a", "b", "c"], axis=1),
                              _relu("a", "y"), helper.make_node("Sigmoid", ["b"], ["z"]), _relu("c", "w")],
                             [1, 85, 4, 8], {"sp": _i64(4, 1, 80)}, ("y", "z", "w")),
    # [1, C, L] maps: channels 2..3 of 4 (an image pixel) and two parts of 8 channels
    "split-rank3-image": ([_relu("x", "r"), helper.make_node("Split", ["r", "sp"], ["y", "z"], axis=1)],
                          [1, 8, 40], {"sp": _i64(3, 5)}, ("y", "z")),
    # one channel: column 5 lies 5 / 10 / 20 B off the grid
    "slice-rows-and-columns": ([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a"], ["y"])],
                               [1, 1, 9, 20], {"s": _i64(2, 5), "e": _i64(8, 19), "a": _i64(2, 3)}, ("y",)),
}


@pytest.mark.parametrize("q,align", POINTS)
@pytest.mark.parametrize("case", sorted(SHIFT_CASES))
def test_boxes_off_the_grid_run_on_the_npu(case, q, align):
    nodes, shape, inits, outs = SHIFT_CASES[case]
    prog, _ = _run(_graph(nodes, {"x": shape}, inits, outs), q, align, SLOW_HOST)
    assert any(c.args["kw"] > 1 or c.args["in_c"] != c.args["out_c"] for c in _moving_convs(prog))


def test_the_shift_route_is_kept_where_the_n657_host_is_slower():
    """On the n657 profile: the int8 column shift and the YOLO family's Split and Slice run on the NPU (fewer
    cycles than before); the 85-channel split's 80-channel gather does not (its 1 x 1 CONV uses a fifth of
    the CA's window), and says so."""
    nodes, _, inits, outs = SHIFT_CASES["slice-columns-off-grid"]
    _run(_graph(nodes, {"x": [1, 3, 16, 32]}, inits, outs), "int8", 128)
    nodes, shape, inits, outs = SHIFT_CASES["split-85-into-4-1-80"]
    prog, _ = _run(_graph(nodes, {"x": shape}, inits, outs), "int8", 128, on_cpu=("Split",))
    assert "faster on the CPU (estimated" in cpu_summary(prog, PROFILE)[0]
    _run(families.yolo_head_style(), "int8", 128, on_cpu=("Transpose",))


@pytest.mark.parametrize("q", ["int8", "fp32"])
def test_boxes_no_cover_reaches_stay_on_the_cpu_with_the_reason(q):
    back = _graph([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a", "st"], ["y"])], {"x": [1, 16, 4, 8]},
                  {"s": _i64(7), "e": _i64(-9), "a": _i64(3), "st": _i64(-1)})  # a backward step
    prog, _ = _run(back, q, 128, SLOW_HOST, on_cpu=("Slice",))
    assert "step -1" in cpu_summary(prog, SLOW_HOST)[0]
    wide = _graph([_relu("x", "r"), helper.make_node("Slice", ["r", "s", "e", "a", "st"], ["y"])], {"x": [1, 3, 4, 64]},
                  {"s": _i64(1), "e": _i64(64), "a": _i64(3), "st": _i64(9)})  # a column step beyond the CONV's
    prog, _ = _run(wide, q, 128, SLOW_HOST, on_cpu=("Slice",))
    assert "shifted by a CONV" in cpu_summary(prog, SLOW_HOST)[0]
