"""Assertion helpers for compiler regression tests.

Each takes a `RunResult` or a `SimRun` (what `Sim.run` / the `npusim_sim` fixture returns)
and raises `NpusimCheckFailed` (an AssertionError) whose FIRST line names what broke --
fault class and layer, or the cycle drift and the slowest layer -- so CI summaries and
JUnit XML `message` attributes show it; the full report follows.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import NpusimError, UsageError


class NpusimCheckFailed(NpusimError, AssertionError):
    """A regression check failed; the message's first line says what and where."""


def _unwrap(result):
    """(RunResult, SimRun or None)."""
    inner = getattr(result, "__dict__", {}).get("result")
    if inner is not None and hasattr(result, "program"):
        return inner, result
    return result, None


def _faults(res) -> list:
    return list(getattr(res, "faults", None) or [])


def _fault_line(f) -> str:
    region = getattr(f, "region", None)
    rname = getattr(region, "name", None) if region is not None else None
    if isinstance(region, dict):
        rname = region.get("name")
    bits = [str(getattr(f, "unit", "") or "")]
    access = getattr(f, "access", "")
    if access:
        bits.append(str(access))
    addr = getattr(f, "address", None)
    if addr is not None:
        bits.append(f"at 0x{int(addr):08x}")
    where = " ".join(b for b in bits if b)
    return (f"{f.cls} in layer {getattr(f, 'layer', '') or '?'}"
            + (f" ({where}" + (f", region '{rname}')" if rname else ")") if where else
               (f" (region '{rname}')" if rname else "")))


def fault_headline(res) -> str:
    """One line: the first fault's class, layer, unit, address and region, plus a count."""
    faults = _faults(res)
    if not faults:
        return f"npusim run did not finish cleanly: status {getattr(res, 'status', '?')}, " \
               f"end reason {getattr(res, 'end_reason', '?')}"
    more = f" [+{len(faults) - 1} more fault(s)]" if len(faults) > 1 else ""
    return f"npusim fault: {_fault_line(faults[0])}{more}"


def _report_text(res) -> str:
    try:
        return res.report_text()
    except Exception as e:  # a broken report must not hide the fault itself
        return f"(report_text failed: {type(e).__name__}: {e})"


def assert_no_faults(result) -> None:
    """Fail unless the run ended cleanly (status ok, end reason done, no faults).

    The message's first line names the first fault's class and layer; the full ASan-style
    report (`RunResult.report_text()`) follows.
    """
    __tracebackhide__ = True
    res, _ = _unwrap(result)
    if getattr(res, "status", "ok") == "ok" and not _faults(res) \
            and getattr(res, "end_reason", "done") in ("done", "", None):
        return
    raise NpusimCheckFailed(fault_headline(res) + "\n\n" + _report_text(res))


def assert_matches_reference(result, onnx_model, inputs=None, rtol: float | None = None,
                             cosine: float | None = None, top1: bool | None = None,
                             max_abs: float | None = None) -> dict:
    """Fail unless every output matches ONNX Runtime fp32 on the same inputs.

    rtol bounds `max_rel` (max error relative to the reference's largest magnitude, see
    npusim.reference), cosine is a lower bound of cosine similarity, top1=True requires the
    argmax to agree, max_abs an upper bound of max abs error. Thresholds left None
    take npusim.reference's defaults for the program's precision. Returns the metrics.
    """
    __tracebackhide__ = True
    from .. import reference

    res, run = _unwrap(result)
    if inputs is None:
        if run is None:
            raise UsageError("assert_matches_reference needs inputs= for a plain RunResult")
        inputs = run.inputs
    assert_no_faults(res)
    ref = reference.ort_run(onnx_model, inputs)
    metrics = reference.compare(res.outputs, ref)
    limits = _default_limits(reference, run)
    given = {"max_rel": rtol, "cosine": cosine, "top1": top1, "max_abs": max_abs}
    limits.update({k: v for k, v in given.items() if v is not None})
    bad, rows = [], []
    for name in sorted(metrics):
        m = metrics[name]
        row = (f"{name}: max_abs {m.max_abs:.4g}, max_rel {m.max_rel:.4g}, "
               f"cosine {m.cosine:.6f}, top1 {'agrees' if m.top1 else 'differs'}")
        rows.append(row)
        for k, lim in sorted(limits.items()):
            if k == "top1":
                if lim and not m.top1:
                    bad.append(f"{name} top-1 disagrees")
                continue
            v = getattr(m, k)
            upper = k in ("max_abs", "max_rel")
            if (v > lim) if upper else (v < lim):
                bad.append(f"{name} {k} {v:.4g} {'>' if upper else '<'} {lim:g}")
    if bad:
        raise NpusimCheckFailed("npusim output mismatch vs ONNX Runtime: " + "; ".join(bad)
                                + "\n" + "\n".join(rows))
    return metrics


def _precision(run) -> str:
    """The run's precision: its CompileOptions, else the dtype of the program's I/O buffers."""
    q = getattr(getattr(run, "options", None), "quantization", None)
    if q:
        return q
    prog = getattr(run, "program", None)
    if prog is None:
        return "int8"
    from ..reference import program_precision

    return program_precision(prog)


def _default_limits(reference, run) -> dict:
    """npusim.reference's default thresholds for the run's precision, as metric bounds."""
    th = reference.DEFAULT_THRESHOLDS.get(_precision(run))
    if th is None:
        return {}
    lim = {"max_rel": th.max_rel, "cosine": th.min_cosine}
    if th.require_top1:
        lim["top1"] = True
    return lim


def _layer_table(res, limit: int = 5) -> str:
    rows = []
    for row in (res.report_json().get("stats") or {}).get("layers") or []:
        rows.append((float(row.get("cycles") or 0), str(row.get("name"))))
    rows.sort(key=lambda t: (-t[0], t[1]))
    return ", ".join(f"{n} {int(c)}" for c, n in rows[:limit])


def _cycles(res) -> int:
    stats = getattr(res, "stats", None)
    c = getattr(stats, "cycles", None)
    if c is None:
        c = res.report_json()["cycles"]
    return int(round(float(c)))


def assert_cycles(result, budget: int | None = None, golden=None, tolerance: float = 0.02,
                  layer_tolerance: float | None = None) -> int:
    """Fail if total cycles exceed `budget`, or drift from `golden` by more than `tolerance`.

    golden: a golden file path, a snapshot dict, or a plain cycle count. The failure
    message lists which layers got slower and by how much. Returns the cycle count.
    """
    __tracebackhide__ = True
    from .. import golden as g

    if (budget is None) == (golden is None):
        raise UsageError("assert_cycles needs exactly one of budget= or golden=")
    res, run = _unwrap(result)
    cycles = _cycles(res)
    if budget is not None:
        if cycles > budget:
            over = (cycles - budget) / budget * 100.0 if budget else float("inf")
            raise NpusimCheckFailed(f"npusim cycles over budget: {cycles} > {budget} (+{over:.1f}%)"
                                    f"\n  slowest layers: {_layer_table(res)}")
        return cycles
    new = g.build(res, None)
    if isinstance(golden, (int, float)):
        old = {"cycles": int(golden), "layers": {}}
        new["layers"] = {}
        source = ""
    elif isinstance(golden, dict):
        old, source = golden, ""
    else:
        old, source = g.load(golden), Path(golden).name
    d = g.diff(old, new, tolerance=tolerance, layer_tolerance=layer_tolerance,
               checks=("cycles",), source=source)
    if not d.ok:
        raise NpusimCheckFailed(d.text())
    return cycles


def assert_golden(result, golden, tolerance: float = 0.02, layer_tolerance: float | None = None,
                  outputs: str = "hash", checks=None, program=None) -> None:
    """Fail unless the run matches a golden snapshot (file path or dict); message = readable diff.

    Compared: status, cycles (± tolerance, per-layer listing), faults (class, layer, region),
    the memory map (needs the Program: a SimRun carries it, else pass program=) and outputs.
    """
    __tracebackhide__ = True
    from .. import golden as g

    res, run = _unwrap(result)
    program = program if program is not None else getattr(run, "program", None)
    checks = tuple(checks or g.CHECKS)
    if program is None:
        checks = tuple(c for c in checks if c != "memory_map")
    new = g.build(res, program)
    if isinstance(golden, dict):
        old, source = golden, ""
    else:
        try:
            old, source = g.load(golden), Path(golden).name
        except g.GoldenError as e:  # a missing or broken golden is a failed check, not a crash
            raise NpusimCheckFailed(f"npusim golden: {e}") from None
    d = g.diff(old, new, tolerance=tolerance, layer_tolerance=layer_tolerance, outputs=outputs,
               checks=checks, source=source)
    if not d.ok:
        text = d.text()
        if _faults(res) and any(p.startswith("new fault") for p in d.problems):
            text += "\n\n" + _report_text(res)
        raise NpusimCheckFailed(text)


def assert_valid_blob(blob, profile=None):
    """Fail unless a blob (path or bytes, from any compiler) loads and verifies against the ISA.

    Lists every verifier problem (SE port wiring, unit indices, EPOCH/RUN/WAIT structure, ...).
    Returns the Program, so the test can go on and run it.
    """
    __tracebackhide__ = True
    from ..errors import BlobError
    from ..program.blob import load_blob
    from ..program.verify import verify

    if not isinstance(blob, (bytes, bytearray, memoryview)):
        try:
            blob = Path(blob).read_bytes()
        except OSError as e:
            raise UsageError(f"cannot read blob {blob}: {e.strerror}") from None
    try:
        prog = load_blob(bytes(blob), profile=profile, verify=False)
    except BlobError as e:
        raise NpusimCheckFailed(f"npusim invalid blob: {e}") from None
    if profile is None:
        from ..hw.profile import load_profile

        profile = load_profile(prog.header.profile)
    problems = verify(prog.commands, profile)
    if problems:
        raise NpusimCheckFailed(f"npusim blob violates the ISA: {problems[0]}"
                                + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
                                + "\n" + "\n".join(f"  - {p}" for p in problems))
    return prog


def assert_check_clean(blob, profile=None):
    """Fail unless `npusim check` predicts no fault for `blob` (path, bytes, Program or a `SimRun`'s
    program): the static check, no simulation, milliseconds.

    The message's first line names the first predicted fault's class and layer; the predicted
    report (the run report's text, marked static) follows. Returns the `CheckReport`.
    """
    __tracebackhide__ = True
    from ..analysis import check
    from ..errors import InvalidInputError
    from ..importers.stedgeai import is_st_output

    if isinstance(blob, (str, Path)) and is_st_output(blob):
        return assert_st_clean(blob, profile=profile)
    if hasattr(blob, "program") and not isinstance(blob, (str, Path, bytes, bytearray, memoryview)):
        blob = blob.program
    if isinstance(blob, (str, Path)):
        try:
            blob = Path(blob).read_bytes()
        except OSError as e:
            raise UsageError(f"cannot read blob {blob}: {e.strerror}") from None
    try:
        report = check(bytes(blob) if isinstance(blob, (bytearray, memoryview)) else blob, profile)
    except InvalidInputError as e:
        raise NpusimCheckFailed(f"npusim invalid blob: {e}") from None
    if report.ok:
        return report
    more = f" [+{len(report.faults) - 1} more fault(s)]" if len(report.faults) > 1 else ""
    raise NpusimCheckFailed(f"npusim check predicts: {_fault_line(report.faults[0])}{more} (static)\n\n"
                            + report.text())


def assert_st_clean(output, profile=None, max_ms: float | None = None):
    """Fail unless the replay of an ST Edge AI Core output (its folder or `network.c`) meets no fault
    and, with `max_ms`, its timing stays within that budget: a regression test of ST's compiler output
    (a new toolchain version, other options) without a board. Returns the `StRunResult`."""
    __tracebackhide__ = True
    from ..errors import InvalidInputError
    from ..tools.st_run import check_text, run_st

    try:
        res = run_st(output, profile=profile)
    except InvalidInputError as e:
        raise NpusimCheckFailed(f"npusim cannot read the ST output: {e}") from None
    if res.faults:
        more = f" [+{len(res.faults) - 1} more fault(s)]" if len(res.faults) > 1 else ""
        raise NpusimCheckFailed(f"npusim replay of ST's program: {_fault_line(res.faults[0])}{more}\n\n"
                                + check_text(res))
    if max_ms is not None and res.ms > max_ms:
        raise NpusimCheckFailed(f"npusim replay of ST's program: {res.ms:.3f} ms, over the budget of {max_ms} ms")
    return res
