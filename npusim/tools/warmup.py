"""Compile every Numba kernel into Numba's on-disk cache, so the first functional run of a new
installation does not pay for compilation (`npusim warmup`; pip has no post-install step).

The kernels are compiled with the argument types a run uses, by running tiny programs through the
simulator (int8 and fp16 convolutions: dense, 1x1 and depthwise; an elementwise add; a max pool), calling the
memory model's reference kernels once, and warming the kernels of an imported ST program's functional run.
Timing-only runs need none of this: they use no Numba.
"""

from __future__ import annotations

import time


def warm_steps(imported: bool = True) -> list:
    """The warm-up as independent named steps [(name, step)] that share few kernel signatures (the int8 runs;
    the fp16 runs and the direct calls; an imported ST program's run), so that processes sharing one cache
    can each compile some of them (the test suite's xdist workers). `imported`: with the ST step."""
    steps = [("int8 runs", lambda: _tiny_runs("int8")), ("fp16 runs, direct calls", _fp16_and_direct)]
    if imported:
        steps.append(("imported ST run", _imported))
    return steps


def _tiny_runs(quantization: str):
    """Tiny programs through the simulator: int8 or fp16 conv (dense, 1x1 with whole and partial planes,
    depthwise), an elementwise add, a max pool."""
    from .. import zoo
    from ..compiler import CompileOptions, compile as compile_model
    from ..runtime import RunOptions, run

    models = [zoo.op_model(kind, c=16, h=6, w=6) for kind in ("conv", "depthwise", "add", "maxpool")]
    models += [zoo.conv_model(16, 16, 6, 6, k=1), zoo.conv_model(24, 40, 6, 6, k=1)]  # 1x1: whole and partial planes
    for model in models:
        prog = compile_model(model, CompileOptions(quantization=quantization))
        run(prog, random_inputs=True, options=RunOptions(trace=False))


def _fp16_and_direct():
    """The fp16 runs, then the kernels (and signatures) no tiny run reaches, called once each."""
    import numpy as np

    from ..kernels import conv, eltwise, int8_loops, layout, resample
    from ..memory import _kernels as mk

    _tiny_runs("fp16")
    q = np.zeros(2, np.int64)  # float64 sums: an int8 conv whose window takes several exact float32 chunks
    conv._requantize(np.zeros((2, 2), np.float64), q, q, q, 0, -128, 127, np.zeros((2, 2), np.int8))
    # a 1x1 conv's columns cast from planes read in place as a strided band (a non-contiguous view)
    conv._planes_f32(np.zeros((1, 4, 16), np.int8)[:, ::2], 16, np.zeros((2, 16), np.float32))
    int8_loops.lut(np.zeros(2, np.int8), np.zeros(256, np.int8))  # an int8 activation (the models above fuse theirs)
    resample.resize(np.zeros((2, 2, 1), np.int8), 3, 3, "bilinear")  # an int8 bilinear RESIZE (resample_int8)
    planes = layout.planes_view(np.zeros(64, np.uint8), "blocked16", 2, 2, 16, "int8")  # the add model takes `_add_f64`:
    eltwise.Int8PlanesEltwise("mul", planes.planes.shape, 16).run(planes, planes)  # `_eltwise_i64` of a two-map op
    for x in (np.zeros(2, np.float32), np.zeros(2, np.float64)):  # inputs bound as given, or widened
        int8_loops.quantize_finite(x, 1.0, 0)
    starts = np.zeros(1, dtype=np.int64)
    mk.burst_stats(starts, 8, 8, 16, 4096, 128, 16, 8, False, 0, np.zeros(8, np.int64), np.zeros(8, np.int64))
    mk.gather_pool(np.zeros(8, np.uint8), 0, starts, 8, np.zeros(8, np.uint8))  # streams over two pools
    mk.scatter_pool(np.zeros(8, np.uint8), 0, starts, 8, np.zeros(8, np.uint8))
    lines = mk.run_lines(starts, 64, 64)
    mk.cache_access(np.full((2, 2), -1, np.int64), np.zeros((2, 2), np.int64), lines, 0)


def _imported():
    from ..importers.stedgeai import units_jit  # an imported ST program's functional run

    units_jit.warm()


def warm_numba_cache(imported: bool = True) -> dict:
    """Compile the kernels (no-op when the cache is already warm): every step of `warm_steps`; returns
    {"seconds", "kernels": {kernel: signatures}}."""
    from ..kernels import conv, depthwise, eltwise_i64, gemm, int8_loops, pool, requant, resample_int8
    from ..memory import _kernels as mk

    t = time.perf_counter()
    for _, step in warm_steps(imported):
        step()
    kernels = {f"kernels.conv.{n}": getattr(conv, n) for n in ("_gemm_f32", "_grouped_int", "_grouped_f32",
                                                              "_requantize", "_requantize_planes",
                                                              "_im2col_int8", "_planes_f32")}
    kernels["kernels.gemm.row_sums_abs"] = gemm.row_sums_abs
    kernels.update({f"kernels.requant.{n}": getattr(requant, n) for n in ("plane_params", "requantize_kept")})
    kernels["kernels.depthwise.depthwise_into"] = depthwise.depthwise_into
    kernels.update({f"kernels.int8_loops.{n}": getattr(int8_loops, n) for n in ("_lut_bytes", "_quantize")})
    kernels["kernels.eltwise_i64._eltwise_i64"] = eltwise_i64._eltwise_i64
    kernels["kernels.eltwise_i64._add_f64"] = eltwise_i64._add_f64  # the int8 add model's planes
    kernels["kernels.pool._maxpool_planes"] = pool._maxpool_planes
    kernels["kernels.resample_int8._bilinear_int8"] = resample_int8._bilinear_int8
    kernels.update({f"memory._kernels.{n}": getattr(mk, n) for n in ("gather_pool", "scatter_pool", "burst_stats",
                                                                     "run_lines", "cache_access")})
    if imported:
        from ..importers.stedgeai import units_jit

        kernels.update({f"importers.stedgeai.units_jit.{n}": getattr(units_jit, n)
                        for n in dict.fromkeys(k.__name__ for k, _ in units_jit.warm_calls())})
    return {"seconds": time.perf_counter() - t, "kernels": {k: len(f.signatures) for k, f in kernels.items()}}
