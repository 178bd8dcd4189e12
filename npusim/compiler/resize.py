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

from .ir import Graph, Node, hwc

HW_COORDS = ("asymmetric", "half_pixel", "align_corners")
MAX_PROBE = 1 << 22  # probe elements per side; a larger resize is not checked and runs on the CPU
LINEAR_RTOL = 1e-4


def _reference(g: Graph, n: Node, probe: np.ndarray) -> np.ndarray:
    """ONNX's output of node `n` for input `probe` (the node's constant roi/scales/sizes kept)."""
    import onnx

    from ..cpu.reference import evaluator

    if n.op == "Upsample":  # the host's own kernel (ONNX's reference implements only whole nearest scales)
        from ..cpu.kernels import upsample

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
    from ..kernels.resample import nearest_index, resize

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

def tflite_nearest_index(n_in: int, n_out: int, align: bool, half: bool) -> np.ndarray:
    """The source index of each output position of TFLite's RESIZE_NEAREST_NEIGHBOR along one axis, as its
    kernels compute it in float32: scale = (in-1)/(out-1) with align_corners (out > 1), else in/out;
    v = (y + 0.5 if half_pixel_centers else y) * scale; round half away from zero with align_corners, else
    floor; then at most in - 1 (and at least 0 with half_pixel_centers)."""
    f = np.float32
    scale = f(n_in - 1) / f(n_out - 1) if align and n_out > 1 else f(n_in) / f(n_out)
    v = (np.arange(n_out, dtype=np.float32) + f(0.5 if half else 0.0)) * f(scale)
    v = v.astype(np.float64)  # exact: v + 0.5 rounds nothing in float64
    idx = np.floor(v + 0.5) if align else np.floor(v)
    idx = np.minimum(idx, n_in - 1)
    if half:
        idx = np.maximum(idx, 0)
    return idx.astype(np.int64)


# ONNX Resize attributes that can reproduce TFLite's rule, most natural first (tf_half_pixel_for_nn, ONNX's
# own name for half_pixel_centers, left ONNX in opset 13 and ONNX's reference never implemented it)
_TFLITE_NEAREST = {
    (False, False): [("asymmetric", "floor")],
    (False, True): [("half_pixel", "round_prefer_ceil"), ("asymmetric", "floor")],
    (True, False): [("align_corners", "round_prefer_ceil")],
    (True, True): [("align_corners", "round_prefer_ceil"), ("half_pixel", "round_prefer_ceil")],
}


def _onnx_nearest_index(n_in: int, n_out: int, coord: str, near: str, opset: int) -> np.ndarray:
    """ONNX's reference Resize along one axis: the source index of each output position."""
    from onnx import helper

    from ..cpu.reference import evaluator

    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest",
                            coordinate_transformation_mode=coord, nearest_mode=near)
    x = np.arange(n_in, dtype=np.float32).reshape(1, 1, n_in, 1)
    sizes = np.array([1, 1, n_out, 1], np.int64)
    y = evaluator(node, opset, [x, sizes]).run(None, {"x": x, "sizes": sizes})[0]
    return np.asarray(y).reshape(-1).astype(np.int64)


def tflite_nearest_attrs(hw_in, hw_out, align: bool, half: bool, opset: int) -> dict | None:
    """Attributes of an ONNX nearest Resize whose reference output is TFLite's RESIZE_NEAREST_NEIGHBOR for
    these sizes (checked per axis against `tflite_nearest_index`), or None when none is."""
    for coord, near in _TFLITE_NEAREST[(bool(align), bool(half))]:
        try:
            if all(np.array_equal(_onnx_nearest_index(i, o, coord, near, opset),
                                  tflite_nearest_index(i, o, align, half)) for i, o in zip(hw_in, hw_out)):
                return dict(mode="nearest", coordinate_transformation_mode=coord, nearest_mode=near)
        except Exception:  # the reference refuses this candidate: try the next
            continue
    return None
