"""Which RESIZE rule (if any) computes an ONNX Resize/Upsample node: decided by running both.

The RESIZE unit knows nearest (floor of the source coordinate) and bilinear, with the
asymmetric, half_pixel and align_corners coordinates computed from the output / input ratio
(kernels/resample.py). ONNX has more modes, rounding rules, given scales that differ from that
ratio, antialiasing and region-of-interest crops. Instead of re-deriving ONNX's formulas, the
compiler runs ONNX's reference implementation of the node itself on a probe tensor and compares
it with each hardware rule: nearest on an index grid (the pixel each output picks must be the
same), linear on a seeded random map (to float tolerance). The first rule that reproduces ONNX
is used; when none does the node runs on the CPU.
"""

from __future__ import annotations

import numpy as np
import onnx

from ...cpu.kernels import upsample
from ...cpu.reference import evaluator
from ...kernels.resample import nearest_index, resize

from ...errors import ModelError
from ..checks import MAP, rank4_maps
from ..ir import Graph, Node, Step, hwc
from ..recipe import Recipe, one_step

HW_COORDS = ("asymmetric", "half_pixel", "align_corners")
MAX_PROBE = 1 << 22  # probe elements per side; a larger resize is not checked and runs on the CPU
LINEAR_RTOL = 1e-4


def _reference(g: Graph, n: Node, probe: np.ndarray) -> np.ndarray:
    """ONNX's output of node `n` for input `probe` (the node's constant roi/scales/sizes kept)."""
    if n.op == "Upsample":  # the host's own kernel (ONNX's reference implements only whole nearest scales)

        return np.asarray(upsample([probe] + [np.asarray(g.consts[t]) for t in n.inputs[1:] if t], n.attrs))
    ins = ["x"] + [f"c{k}" if t else "" for k, t in enumerate(n.inputs[1:], 1)]
    feeds = {"x": probe}
    for k, t in enumerate(n.inputs[1:], 1):
        if t:
            feeds[f"c{k}"] = np.asarray(g.consts[t])
    sizes = feeds.get("c3")
    if sizes is not None and sizes.size == probe.ndim:  # the probe has one channel: so must the sizes
        feeds["c3"] = np.concatenate([np.asarray(probe.shape[:2], sizes.dtype), sizes.reshape(-1)[2:]])
    node = onnx.NodeProto()
    node.CopyFrom(n.proto)
    node.ClearField("input")
    node.input.extend(ins)
    node.ClearField("output")
    node.output.append("y")
    return np.asarray(evaluator(node, g.opset, list(feeds.values())).run(None, feeds)[0])


def resize_plan(g: Graph, n: Node) -> tuple[str | None, str | None, str]:
    """(unit mode, coord, "") when a hardware rule reproduces the node, else (None, None, reason);
    decided once per node (kept in its attrs)."""
    if "_resize_plan" not in n.attrs:
        n.attrs["_resize_plan"] = _plan(g, n)
    return n.attrs["_resize_plan"]


def _plan(g: Graph, n: Node) -> tuple[str | None, str | None, str]:

    x, y = n.inputs[0], n.outputs[0]
    if any(t and t not in g.consts for t in n.inputs[1:]):
        return None, None, "scales or sizes are computed"
    sx, sy = g.shapes[x], g.shapes[y]
    if len(sx) != 4 or tuple(sx[:2]) != tuple(sy[:2]):
        return None, None, f"resizes N or C ({list(sx)} -> {list(sy)})"
    mode = str(n.attrs.get("mode", "nearest"))
    if mode not in ("nearest", "linear", "bilinear"):
        return None, None, f"mode={mode!r} (the RESIZE unit has nearest and bilinear)"
    (h, w, _), (oh, ow, _) = hwc(sx), hwc(sy)
    if oh * ow > MAX_PROBE or h * w > MAX_PROBE:
        return None, None, f"{h}x{w} -> {oh}x{ow} is too large to check against ONNX's rule"
    try:
        if mode == "nearest":
            grid = np.arange(h * w, dtype=np.float64).reshape(1, 1, h, w)
            ref = _reference(g, n, grid).reshape(oh, ow)
            for coord in HW_COORDS:
                hw = nearest_index(h, oh, coord)[:, None] * w + nearest_index(w, ow, coord)[None, :]
                if np.array_equal(ref, hw):
                    return "nearest", coord, ""
            near = n.attrs.get("nearest_mode", "round_prefer_floor")
            ctm = n.attrs.get("coordinate_transformation_mode", "half_pixel" if n.op == "Resize" else "asymmetric")
            return None, None, (f"nearest_mode={near!r} with {ctm} picks other pixels than the unit's floor rule "
                                f"for {h}x{w} -> {oh}x{ow}")
        probe = np.random.default_rng(0).standard_normal((1, 1, h, w))
        ref = _reference(g, n, probe).reshape(oh, ow)
        for coord in HW_COORDS:
            got = resize(probe[0, 0][:, :, None], oh, ow, mode="bilinear", coord=coord)[:, :, 0]
            if np.allclose(got, ref, rtol=LINEAR_RTOL, atol=LINEAR_RTOL):
                return "bilinear", coord, ""
    except Exception as e:  # the reference refuses the node: not a rule the unit can claim to match
        return None, None, f"ONNX's reference refuses it ({type(e).__name__})"
    return None, None, f"no bilinear rule of the unit reproduces this linear resize ({h}x{w} -> {oh}x{ow})"


def resize_problem(g: Graph, n: Node) -> str | None:
    """The mapping-table check: None when a RESIZE rule reproduces the node, else the reason."""
    mode, _, why = resize_plan(g, n)
    return None if mode else why


# ------------------------------------------------------------------ TFLite's nearest rule


def resize_rule(g: Graph, n: Node):
    """nearest (a pixel choice the RESIZE unit's floor rule reproduces) or linear (asymmetric, half_pixel,
    align_corners), spatial scales only, the given scales equal to output / input, no antialias"""
    return resize_problem(g, n)


def resize_step(g: Graph, n: Node) -> Step:
    mode, coord, why = resize_plan(g, n)
    if mode is None:  # legality checked it: an internal inconsistency
        raise ModelError(f"internal: Resize {n.name!r} lowered although {why}")
    return Step("RESIZE", n.outputs[0], dict(mode=mode, coord=coord))


RECIPES = [
    Recipe("Resize", "RESIZE", MAP + (rank4_maps, resize_rule), one_step(resize_step)),
    Recipe("Upsample", "RESIZE (asymmetric)", MAP + (rank4_maps, resize_rule), one_step(resize_step)),
]
