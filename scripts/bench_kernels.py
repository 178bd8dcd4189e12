"""Benchmark: the functional int8 kernels by family, against one-core peaks measured in the same run.

Each family runs on layer shapes of MobileNet v2 224 (input stream as blocked16 planes, output as its
stream bytes, as a functional run calls them), one BLAS thread; the figure is operations per second
(multiply-accumulates of the window; requantized values for the requantization) and its share of a
peak. Each time is the fastest of `--repeat` wall-clock timings (on a busy shared machine, the least
disturbed one; every call, the peaks' included, is short enough to fit in a scheduler slice). Not CPU
time: this VM's CPU clock ticks in 4 ms steps, and OpenBLAS yields the CPU in its locks, which charges
whole ticks to a BLAS call:

- pointwise (1 x 1) and dense (3 x 3) convolutions: the exact float32 BLAS GEMM plus requantization,
  against the float32 GEMM peak (`np.matmul` of two 512 x 512 matrices, one thread, in MAC/s);
- depthwise 3 x 3 (stride 1 and 2): `kernels.depthwise`, against the peak of the Numba loop it is
  built from (`depthwise._mac9`: float32 lanes summing a 3 x 3 window in one pass over cache-resident
  runs, in MAC/s);
- requantization of float32 sums into blocked16 planes: `kernels.requant.requantize_planes`, against
  the int32 lane loop acc += (x - zp) * w (one requantized value per lane; the depthwise kernel's
  loop before it took float lanes, kept as the requantization's yardstick). The sums are those of a
  layer whose outputs spread over int8 (a few percent saturate), as in a model.

    python scripts/bench_kernels.py [--repeat N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

# (family, H = W of the input, C in, C out, kernel, stride): MobileNet v2 224 layers
SHAPES = [
    ("pointwise", 112, 32, 16, 1, 1), ("pointwise", 56, 24, 144, 1, 1), ("pointwise", 14, 384, 64, 1, 1),
    ("pointwise", 7, 320, 1280, 1, 1),
    ("dense 3x3", 224, 3, 32, 3, 2), ("dense 3x3", 28, 32, 64, 3, 1),
    ("depthwise 3x3", 112, 96, 96, 3, 2), ("depthwise 3x3", 56, 144, 144, 3, 1), ("depthwise 3x3", 14, 576, 576, 3, 1),
    ("depthwise 3x3", 7, 960, 960, 3, 1),
]
REQUANT = [(12544, 96), (3136, 144), (196, 576)]  # (pixels, channels) of float32 sums


def _fastest_s(fn, repeat: int) -> float:
    """The fastest of `repeat` wall-clock timings of fn, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def gemm_peak(repeat: int, n: int = 512) -> float:
    """float32 GEMM MAC/s of one BLAS thread (n x n times n x n)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    out = np.empty_like(a)
    return n ** 3 / _fastest_s(lambda: np.matmul(a, a, out=out), repeat)


def lane_peak(repeat: int, n: int = 2048, passes: int = 50) -> float:
    """MAC/s of the int32 lane loop acc += (x - zp) * w over cache-resident runs of n lanes."""
    import numpy as np
    from numba import njit

    @njit(cache=False)
    def loop(acc, x, w, zp, passes):
        for _ in range(passes):
            for k in range(acc.size):
                acc[k] += (np.int32(x[k]) - zp) * w[k]

    rng = np.random.default_rng(0)
    acc = np.zeros(n, np.int32)
    x = rng.integers(-128, 128, n).astype(np.int8)
    w = rng.integers(-128, 128, n).astype(np.int32)
    return n * passes / _fastest_s(lambda: loop(acc, x, w, np.int32(3), passes), repeat)


def window_peak(repeat: int, n: int = 2048, passes: int = 50) -> float:
    """MAC/s of the depthwise kernel's 3 x 3 float32 loop (`depthwise._mac9`) over cache-resident runs."""
    import numpy as np
    from numba import njit

    from npusim.kernels.depthwise import _mac9

    @njit(cache=False)
    def loop(acc, x, w, passes):
        for _ in range(passes):
            _mac9(acc, x[:n], x[16:n + 16], x[32:n + 32], x[64:n + 64], x[80:n + 80], x[96:n + 96], x[128:n + 128],
                  x[144:n + 144], x[160:n + 160], w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8])

    rng = np.random.default_rng(0)
    acc = np.zeros(n, np.float32)
    x = rng.integers(-128, 128, n + 160).astype(np.float32)
    w = rng.integers(-128, 128, (9, n)).astype(np.float32)
    return 9 * n * passes / _fastest_s(lambda: loop(acc, x, w, passes), repeat)


def conv_case(family, hw, cin, cout, k, stride):
    """(callable, MACs) of one int8 conv as a functional run calls it (planes in, stream bytes out; the
    `Int8Conv` made once, with its prepared weights)."""
    import numpy as np

    from npusim.kernels import Int8Conv, layout as L, quantize_multiplier
    from npusim.kernels.conv import prepare_weights

    rng = np.random.default_rng(0)
    groups = cin if family.startswith("depthwise") else 1
    x = rng.integers(-128, 128, (hw, hw, cin), dtype=np.int8)
    planes = L.planes_view(L.pack(x, "blocked16"), "blocked16", hw, hw, cin, "int8")
    w = rng.integers(-128, 128, (cout, k, k, cin // groups), dtype=np.int8)
    mults = [quantize_multiplier(s) for s in rng.uniform(1e-4, 1e-3, cout)]
    part = (w, rng.integers(-2**15, 2**15, cout), np.array([m for m, _ in mults]), np.array([s for _, s in mults]),
            0, -128, 127)
    pad = k // 2
    prep = prepare_weights(w) if groups == 1 else None
    oh = (hw + 2 * pad - k) // stride + 1
    kw = dict(in_zp=-3, stride=stride, pads=(pad,) * 4, groups=groups)
    macs = oh * oh * cout * k * k * (cin // groups)
    conv = Int8Conv(planes.shape, planes.dtype, [part], prepared=prep, out_layouts=["blocked16"], **kw)
    conv.run(planes)  # made once, as a functional run keeps it: prepared weights (per column, for depthwise)
    return (lambda: conv.run(planes)), macs


def requant_case(m, c):
    import numpy as np

    from npusim.kernels.requant import requantize_planes

    rng = np.random.default_rng(0)
    bias, mult, shift = rng.integers(-2**20, 2**20, c), rng.integers(2**30, 2**31, c), rng.integers(30, 40, c)
    spread = 50.0 / (mult * 2.0 ** -shift)  # requantized values spread over int8, as a calibrated layer's
    acc = np.rint(rng.standard_normal((m, c)) * spread - bias).astype(np.float32)
    out = np.empty((-(-c // 16), m, 16), np.int8)
    return (lambda: requantize_planes(acc, 0, c, bias, mult, shift, 3, -128, 127, out)), m * c


def measure(repeat: int = 25) -> dict:
    """{"gemm_peak", "lane_peak", "window_peak", "rows": [...], "families": {family: {ops_s, peak, share}}}
    (one thread)."""
    import numpy  # noqa: F401  (loaded before the limit: threadpoolctl limits the libraries loaded so far)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        peaks = {"gemm": gemm_peak(repeat), "lanes": lane_peak(repeat), "window": window_peak(repeat)}
        rows = []
        for family, hw, cin, cout, k, s in SHAPES:
            fn, ops = conv_case(family, hw, cin, cout, k, s)
            t = _fastest_s(fn, repeat)
            rows.append(dict(family=family, shape=f"{hw}x{hw}x{cin} -> {cout}, {k}x{k}/{s}", ops=ops, seconds=t,
                             peak="window" if family.startswith("depthwise") else "gemm"))
        for m, c in REQUANT:
            fn, ops = requant_case(m, c)
            rows.append(dict(family="requantization", shape=f"{m} x {c} float32 sums", ops=ops,
                             seconds=_fastest_s(fn, repeat), peak="lanes"))
    fams: dict = {}
    for r in rows:
        r["ops_s"] = r["ops"] / r["seconds"]
        r["share"] = r["ops_s"] / peaks[r["peak"]]
        f = fams.setdefault(r["family"], {"ops": 0, "seconds": 0.0, "peak": r["peak"]})
        f["ops"] += r["ops"]
        f["seconds"] += r["seconds"]
    for f in fams.values():
        f["ops_s"] = f["ops"] / f["seconds"]
        f["share"] = f["ops_s"] / peaks[f["peak"]]
    return {"gemm_peak": peaks["gemm"], "lane_peak": peaks["lanes"], "window_peak": peaks["window"], "rows": rows,
            "families": fams}


PEAK_NAMES = {"gemm": "float32 GEMM peak", "lanes": "int32 lane-loop peak", "window": "float32 3x3 window-loop peak"}
PEAK_KEYS = {"gemm": "gemm_peak", "lanes": "lane_peak", "window": "window_peak"}


def render(res: dict) -> list[str]:
    """Markdown lines: one row per family (its shapes summed), then the peaks."""
    out = ["| kernel family | achieved | peak (one core, same run) | share |", "|---|---|---|---|"]
    for name, f in res["families"].items():
        peak = res[PEAK_KEYS[f["peak"]]]
        out.append(f"| {name} | {f['ops_s'] / 1e9:.2f} G/s | {PEAK_NAMES[f['peak']]} {peak / 1e9:.2f} G/s | "
                   f"{f['share'] * 100:.0f} % |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=25, help="timings per figure (the fastest counts)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    res = measure(args.repeat)
    for r in res["rows"]:
        print(f"{r['family']:<15} {r['shape']:<28} {r['seconds'] * 1e3:8.3f} ms  {r['ops_s'] / 1e9:6.2f} G/s  "
              f"{r['share'] * 100:5.1f} % of the {PEAK_NAMES[r['peak']]}")
    print("\n".join(render(res)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
