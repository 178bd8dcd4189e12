"""Engine speed: a synthetic ResNet-50-sized program (70 conv epochs, 224x224 input scale).

    python scripts/bench_engine.py            # timing-only and functional wall time
Prints wall seconds per mode; numbers are machine-dependent (compare runs on one machine).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import npusim  # noqa: E402
from test_engine_build import Builder, conv_cmd  # noqa: E402

# (h, c_in, c_out, k, stride) stages roughly shaped like ResNet-50 at 224x224
STAGES = [(112, 16, 64, 3, 2)] + [(56, 64, 64, 3, 1)] * 10 + [(56, 64, 128, 1, 2)] + [(28, 128, 128, 3, 1)] * 16 \
    + [(28, 128, 256, 1, 2)] + [(14, 256, 256, 3, 1)] * 30 + [(14, 256, 512, 1, 2)] + [(7, 512, 512, 3, 1)] * 10


def build():
    b = Builder()
    rng = np.random.default_rng(0)
    pools = ["npuRAM3", "npuRAM4"]
    x = b.fm("x", "input", STAGES[0][0], STAGES[0][0], STAGES[0][1], pool="hyperRAM")
    for i, (h, c, oc, k, s) in enumerate(STAGES):
        wbytes = oc * k * k * c
        waddr = b.const(f"w{i}", rng.integers(-3, 4, wbytes).astype(np.int8).tobytes())
        qaddr = b.const(f"q{i}", np.tile(np.asarray([0, 1 << 30, 40], "<i4"), oc).tobytes())
        pad = k // 2
        oh = (h + 2 * pad - k) // s + 1
        pool = "hyperRAM" if i == len(STAGES) - 1 else pools[i % 2]
        b.next_off[pool] = 0 if pool != "hyperRAM" else b.next_off.get(pool, 0)
        y = b.fm(f"a{i}", "output" if i == len(STAGES) - 1 else "activation", oh, oh, oc, pool=pool)
        b.buffers[-1] = dataclasses.replace(y, producer=f"conv{i}", consumers=(f"conv{i + 1}",))
        b.epoch(i, f"conv{i}")
        b.se_buf(0, "read", x)
        b.se_const(1, waddr, wbytes)
        conv_cmd(b, i % 4, x, oc, k, k, stride=s, pad=pad, qparams=qaddr)
        b.se_buf(5, "write", y)
        b.link("SE0", f"CA{i % 4}", 0)
        b.link("SE1", f"CA{i % 4}", 1)
        b.link(f"CA{i % 4}", "SE5")
        b.run_wait()
        x = y
    return b.program()


def main():
    prog = build()
    for opts in (npusim.RunOptions(timing_only=True, trace=False), npusim.RunOptions(timing_only=True),
                 npusim.RunOptions()):
        t = time.perf_counter()
        res = npusim.run(prog, random_inputs=True, options=opts)
        dt = time.perf_counter() - t
        print(f"timing_only={opts.timing_only!s:5} trace={opts.trace!s:5}: {dt:.3f} s wall, "
              f"{len(res.stats.epochs)} epochs, {res.stats.cycles:,.0f} cycles, {res.stats.macs / 1e9:.2f} GMAC, "
              f"status {res.status} ({res.faults[0].cls if res.faults else '-'})")


if __name__ == "__main__":
    main()


def fresh_process_seconds() -> float:
    """Wall time of a fresh interpreter that loads and runs a small blob (warm numba cache)."""
    import subprocess
    import tempfile

    from npusim.program.blob import encode_blob
    from test_engine_build import PROFILE, copy_program

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "small.npu"
        path.write_bytes(encode_blob(copy_program().program(), PROFILE))
        code = f"import npusim; assert npusim.run({str(path)!r}, random_inputs=True).status == 'ok'"
        subprocess.run([sys.executable, "-c", code], check=True)  # warm the cache
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t


if __name__ == "__main__" and "--fresh" in sys.argv:
    print(f"fresh process, small blob: {fresh_process_seconds():.2f} s wall")
