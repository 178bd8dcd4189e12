"""Value kernels of the NPU units (Numba / numpy) and their slow references.

Tensors are dense numpy arrays [H][W][C] (int8, float16 or float32). Submodules:
layout (stream bytes <-> HWC), quant (requantization helpers), conv, depthwise and requant (the
int8 CONV's fused loops), pool, resample (resize),
eltwise, activation and reference (slow, obvious versions
that define the semantics).

Names are loaded lazily (PEP 562), so `npusim.kernels.layout` or `.quant` can be used
(e.g. by the compiler) without importing Numba.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "layout": ["pack", "unpack", "pack_strided", "unpack_strided", "nchw_to_hwc", "hwc_to_nchw", "fmap_hwc",
               "onnx_to_hwc", "hwc_to_onnx"],
    "quant": ["quantize_multiplier", "rshift_round", "quantize", "dequantize",
              "fp16_bits", "from_fp16_bits", "int8_bits", "int8_from_bits"],
    "conv": ["conv2d_int8", "conv2d_int8_parts", "Int8Conv", "Patches", "conv2d_float", "conv_out_size"],
    "pool": ["maxpool", "avgpool_int8", "avgpool_float", "global_avg_int8", "global_avg_float", "global_max",
             "pool_out_size", "maxpool_planes"],
    "resample": ["resize"],
    "eltwise": ["eltwise_int8", "eltwise_float", "concat"],
    "activation": ["lut_int8", "act_float", "make_lut"],
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}

__all__ = [name for names in _EXPORTS.values() for name in names]


def __getattr__(name: str):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'npusim.kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
