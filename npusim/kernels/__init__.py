"""Value kernels of the NPU units (Numba / numpy) and their slow references.

Tensors are dense numpy arrays [H][W][C] (int8, float16 or float32). Submodules:
layout (stream bytes <-> HWC), quant (requantization helpers), conv, pool, resize,
eltwise, activation, host (CPU fallback ops) and reference (slow, obvious versions
that define the semantics).
"""

from .layout import pack, unpack, pack_strided, unpack_strided, nchw_to_hwc, hwc_to_nchw
from .quant import (quantize_multiplier, rshift_round, quantize, dequantize,
                    fp16_bits, from_fp16_bits, int8_bits, int8_from_bits)
from .conv import conv2d_int8, conv2d_float, conv_out_size
from .pool import (maxpool, avgpool_int8, avgpool_float, global_avg_int8, global_avg_float,
                   pool_out_size)
from .resize import resize
from .eltwise import eltwise_int8, eltwise_float, concat
from .activation import lut_int8, act_float, make_lut
from .host import softmax_int8, softmax_float

__all__ = [
    "pack", "unpack", "pack_strided", "unpack_strided", "nchw_to_hwc", "hwc_to_nchw",
    "quantize_multiplier", "rshift_round", "quantize", "dequantize",
    "fp16_bits", "from_fp16_bits", "int8_bits", "int8_from_bits",
    "conv2d_int8", "conv2d_float", "conv_out_size",
    "maxpool", "avgpool_int8", "avgpool_float", "global_avg_int8", "global_avg_float",
    "pool_out_size", "resize", "eltwise_int8", "eltwise_float", "concat",
    "lut_int8", "act_float", "make_lut", "softmax_int8", "softmax_float",
]
