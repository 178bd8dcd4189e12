"""TFLite RESIZE_NEAREST_NEIGHBOR as an ONNX nearest Resize: the attributes whose reference output is
TFLite's pixel choice for the given sizes (checked per axis)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from ...cpu.reference import evaluator


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
