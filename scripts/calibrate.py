"""Calibrate npusim's N657 profile against ST's published STM32N6570-DK latencies.

Rebuilds the calibration models of `npusim.zoo.st.PUBLISHED` in code (exact topologies, seeded
random weights), compiles them int8 at default options, runs them timing-only, and fits the
profile's *fitted* parameters (FITTED below; everything else comes from datasheets or is ASSUMED)
by least squares on log-latency: minimise sum over models of log(npusim ms / ST ms)^2, one set
of values for all models (no per-model factor). ST's own compiles are cases too (ST_CASES: ST Edge
AI Core outputs in ../shared/stedgeai, timed on ST's epochs by `importers.stedgeai.timing`): the
"calibration" ones join the fit, the "held-out" ones are the check. Then prints, for the calibration
set and the held-out set (never used by the fit): model, ST ms, npusim ms, ratio, weight bytes vs ST's.

    python scripts/calibrate.py              # evaluate the current profile (no fit)
    python scripts/calibrate.py --fit        # fit, print the values and residuals
    python scripts/calibrate.py --fit --write   # ... and write them into npusim/hw/profiles/n657.toml
    python scripts/calibrate.py --st-check DIR=MS   # one more ST output with its board figure, checked
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np

# profile key -> (lower bound, upper bound, what it is); fitted in log space within the bounds
FITTED = {
    "compute.tap_fill": (1.0, 9.0, "how many times its taps a 1x1 kernel fills the 3x3 MAC window with"),
    "compute.depthwise_efficiency": (0.05, 1.0, "fraction of its one lane a depthwise conv keeps busy"),
}


# ST Edge AI Core outputs with published board figures (ST model zoo READMEs, STM32N6570-DK; from ST
# Edge AI 2.0 compiles of the same models, these files are 2.1 / 2.2): folder, board ms, role
ST_CASES = (("st_od_yolox480_dk", 32.4, "calibration"), ("st_audio_yamnet1024_v111", 9.88, "held-out"))
ST_ROOT = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"


class StCase:
    """An ST output read and replayed once; `ms(profile)` times its epochs under a profile."""

    def __init__(self, path: Path, ms: float, role: str):
        from npusim.importers.stedgeai import load
        from npusim.importers.stedgeai.replay import ReplayOptions, replay

        self.name, self.ms_board, self.role = path.name, ms, role
        self.out = load(path)
        self.rep = replay(self.out, ReplayOptions())

    def ms(self, profile) -> float:
        from npusim.importers.stedgeai.timing import program_timing

        return sum(t.cycles for t in program_timing(self.out, self.rep, profile).values()) * 1e3 / profile.clock


def st_cases(extra=()) -> list[StCase]:
    cases = [StCase(ST_ROOT / name, ms, role) for name, ms, role in ST_CASES if (ST_ROOT / name).is_dir()]
    for item in extra:
        path, _, ms = item.rpartition("=")
        if not path or not Path(path).exists():
            raise SystemExit(f"calibrate: --st-check {item!r}: expected an existing ST output folder=board ms")
        cases.append(StCase(Path(path), float(ms), "check"))
    return cases


def st_latencies(cases, overrides=()) -> np.ndarray:
    from npusim.hw.profile import load_profile

    prof = load_profile(None, list(overrides))
    return np.array([c.ms(prof) for c in cases])


def st_table(cases, ms: np.ndarray) -> str:
    rows = ["| ST output | role | board ms | npusim ms | ratio |", "|---|---|---|---|---|"]
    rows += [f"| {c.name} | {c.role} | {c.ms_board:.2f} | {m:.2f} | {m / c.ms_board:.2f} |" for c, m in zip(cases, ms)]
    return "\n".join(rows)


def compiled(figures):
    from npusim.compiler import compile as compile_model

    return {f.name: compile_model(f.model()) for f in figures}


def latencies(programs, figures, overrides=()) -> np.ndarray:
    """npusim ms of each figure's program under the default profile plus `overrides`."""
    from npusim.hw.profile import load_profile
    from npusim.runtime import RunOptions, run

    prof = load_profile(None, list(overrides))
    opts = RunOptions(timing_only=True, trace=False)
    return np.array([run(programs[f.name], random_inputs=True, seed=0, options=opts, profile=prof).stats.ms
                     for f in figures])


def _overrides(x: np.ndarray) -> list[str]:
    out = []
    for key, v in zip(FITTED, np.exp(x)):
        whole = key.endswith(("cycles", "buffer"))
        out.append(f"{key}={int(round(v)) if whole else round(float(v), 4)}")
    return out


def fit(programs, figures, x0: np.ndarray, iterations: int = 12, st=()):
    """Levenberg-Marquardt on r(x) = log(npusim / ST), x = log(parameters), bounded by FITTED, over
    npusim's compiles of `figures` and the ST outputs `st` (their board figures) jointly."""
    target = np.log([f.ms for f in figures] + [c.ms_board for c in st])
    lo = np.log([b[0] for b in FITTED.values()])
    hi = np.log([b[1] for b in FITTED.values()])

    def residual(x):
        o = _overrides(x)
        got = latencies(programs, figures, o)
        if st:
            got = np.concatenate([got, st_latencies(st, o)])
        return np.log(got) - target

    x = np.clip(x0, lo, hi)
    r = residual(x)
    lam = 1e-2
    for _ in range(iterations):
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            step = np.zeros_like(x)
            step[j] = 0.05
            jac[:, j] = (residual(x + step) - r) / 0.05
        jtj, jtr = jac.T @ jac, jac.T @ r
        while True:
            dx = -np.linalg.solve(jtj + lam * np.diag(np.diag(jtj) + 1e-9), jtr)
            xn = np.clip(x + dx, lo, hi)
            rn = residual(xn)
            if rn @ rn < r @ r:
                x, r, lam = xn, rn, lam / 3
                break
            lam *= 4
            if lam > 1e6:
                return x, r
        if np.abs(dx).max() < 1e-3:
            break
    return x, r


def table(figures, ms: np.ndarray, programs) -> str:
    from npusim.zoo.st import weight_bytes

    rows = ["| model | ST ms | npusim ms | ratio | weights KiB (npusim / ST) |", "|---|---|---|---|---|"]
    for f, m in zip(figures, ms):
        kib = weight_bytes(programs[f.name]) / 1024
        rows.append(f"| {f.name} | {f.ms:.2f} | {m:.2f} | {m / f.ms:.2f} | {kib:.0f} / {f.weights_kib:.0f} |")
    return "\n".join(rows)


def write_profile(path: Path, values: dict, residuals: np.ndarray) -> None:
    """Replace each fitted key's value (and its comment) in the profile TOML."""
    text = path.read_text()
    rms = math.sqrt(float(np.mean(residuals ** 2)))
    worst = float(np.abs(np.expm1(residuals)).max())
    for key, value in values.items():
        name = key.split(".")[-1]
        pat = re.compile(rf"^({re.escape(name)}\s*=\s*)[^#\n]*(#.*)?$", re.M)
        comment = (f"# fitted by scripts/calibrate.py: {FITTED[key][2]} "
                   f"(log-rms {rms:.3f}, worst {worst:.1%} on the calibration set, ST compiles included)")
        text, n = pat.subn(lambda m: f"{m.group(1)}{value:<18}{comment}".rstrip(), text, count=1)
        if n != 1:
            raise SystemExit(f"calibrate: {path}: no line for {key}")
    path.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", action="store_true", help="fit the FITTED parameters on the calibration set")
    ap.add_argument("--write", action="store_true", help="with --fit: write the values into the default profile")
    ap.add_argument("--no-held-out", action="store_true", help="skip the held-out set")
    ap.add_argument("--st-check", metavar="DIR=MS", action="append", default=[],
                    help="an ST Edge AI output with its board milliseconds, checked (never fitted); repeatable")
    a = ap.parse_args(argv)
    from npusim.hw.profile import default_profile_path, load_profile
    from npusim.zoo.st import PUBLISHED

    cal = [f for f in PUBLISHED if f.role == "calibration"]
    held = [f for f in PUBLISHED if f.role == "held-out"]
    programs = compiled(cal)
    prof = load_profile()
    current = np.log([float(getattr(getattr(prof, k.split(".")[0]), k.split(".")[1])) for k in FITTED])
    overrides: list[str] = []
    st = st_cases(a.st_check)
    st_fit = [c for c in st if c.role == "calibration"]
    if a.fit:
        x, r = fit(programs, cal, current, st=st_fit)
        overrides = _overrides(x)
        print("fitted:", ", ".join(overrides))
        print(f"residuals (log npusim/ST): {', '.join(f'{v:+.3f}' for v in r)}; "
              f"log-rms {math.sqrt(float(np.mean(r ** 2))):.3f}")
        if a.write:
            values = dict(o.split("=", 1) for o in overrides)
            write_profile(default_profile_path(), values, r)
            print(f"wrote {default_profile_path()}")
    ms = latencies(programs, cal, overrides)
    print("\ncalibration set (fitted on):\n" + table(cal, ms, programs))
    if st:
        print("\nST's own programs (calibration: fitted on; held-out and check: not):\n" +
              st_table(st, st_latencies(st, overrides)))
    if not a.no_held_out:
        programs.update(compiled(held))
        ms_h = latencies(programs, held, overrides)
        err = np.abs(ms_h / np.array([f.ms for f in held]) - 1)
        print("\nheld-out set (not fitted on):\n" + table(held, ms_h, programs))
        print(f"held-out: mean |error| {err.mean():.1%}, worst {err.max():.1%}, within 15 %: "
              f"{int((err <= 0.15).sum())}/{len(held)}")
    print("\nsources:")
    for f in cal + ([] if a.no_held_out else held):
        print(f"  {f.name}: {f.source}")
    for c in st:
        print(f"  {c.name}: {'ST model zoo README, STM32N6570-DK' if c.role != 'check' else 'given with --st-check'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
