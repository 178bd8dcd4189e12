"""ONNX's operator conformance cases (`onnx.backend.test.case.node`) through npusim.

Each case (a small model, its inputs and expected outputs, generated in-process: the onnx wheel
ships no data files) is compiled in fp32 mode, run, and every output compared with the case's
own rtol/atol (NaN equal to NaN, integer and boolean outputs exactly). Verdicts:

    pass      every output matches
    refused   the compiler refused it with a reason listed in `compiler.legality` (REFUSED,
              UNSUPPORTED_KINDS): the only refusals allowed
    wrong     an output differs (shape, dtype class or values)
    fault     the simulated program faulted or hung
    error     any other refusal or exception: a bug (a crash of npusim is never a verdict to accept)

In scope: cases of the default ONNX domain at opset >= 7 whose graph inputs and outputs are
tensors of float32, float16 or integer/boolean types of rank <= 5 (the issue's goal); the rest is
counted as out of scope. `run_cases` spreads cases over worker processes (each with a per-case
time limit) and caches compiled blobs by key (compiler/cache.py) in `cache_dir`.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import time
import warnings
from dataclasses import asdict, dataclass

import numpy as np

VERDICTS = ("pass", "refused", "wrong", "fault", "error")
CASE_SECONDS = 300  # a guard against a hang of npusim, not a speed limit: ~100x the slowest case, so load cannot trip it


@dataclass(frozen=True)
class CaseResult:
    name: str
    op: str
    verdict: str
    detail: str = ""
    seconds: float = 0.0


def _in_scope_types() -> set:
    from onnx import TensorProto as T

    return {T.FLOAT, T.FLOAT16, T.INT8, T.UINT8, T.INT16, T.UINT16, T.INT32, T.UINT32, T.INT64, T.UINT64, T.BOOL}


def scope(case) -> str | None:
    """Why a case is out of scope (None when it is in)."""
    m = case.model
    if any(imp.domain not in ("", "ai.onnx") for imp in m.opset_import):
        return "another opset domain"
    opset = next((imp.version for imp in m.opset_import if imp.domain in ("", "ai.onnx")), 0)
    if opset < 7:
        return f"opset {opset} < 7"
    ok = _in_scope_types()
    for vi in list(m.graph.input) + list(m.graph.output):
        t = vi.type
        if not t.HasField("tensor_type"):
            return "a sequence, map or optional operand"
        if t.tensor_type.elem_type not in ok:
            return "an element type other than float32/float16/int/bool"
        if t.tensor_type.HasField("shape") and len(t.tensor_type.shape.dim) > 5:
            return "rank > 5"
    return None


def _snake(op: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op).lower()


def case_op(case, ops: dict | None = None) -> str:
    """The operator a case tests: its single node, or the operator whose name starts the case name."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type
    name = case.name[len("test_"):] if case.name.startswith("test_") else case.name
    if ops is None:
        import onnx

        ops = {_snake(s.name): s.name for s in onnx.defs.get_all_schemas() if s.domain == ""}
    best = max((k for k in ops if name == k or name.startswith(k + "_")), key=len, default=None)
    return ops[best] if best else (nodes[-1].op_type if nodes else "?")


@functools.lru_cache(maxsize=1)
def _all_cases() -> tuple:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        return tuple(collect_testcases())


def collect(names: list[str] | None = None):
    """(in-scope cases, {case name: out-of-scope reason}) of ONNX's node test cases (generated once
    per process)."""
    cases = _all_cases()
    keep, out = [], {}
    for c in cases:
        if names is not None and c.name not in names:
            continue
        why = scope(c)
        if why:
            out[c.name] = why
        else:
            keep.append(c)
    return keep, out


def _listed_texts() -> list[str]:
    """Every refusal text the mapping table lists (legality.py: the one list)."""
    from ..compiler import refusals

    return list(refusals.REFUSED.values()) + list(refusals.UNSUPPORTED_KINDS.values()) + \
        list(refusals.REFUSED_BEFORE.values()) + [refusals.DYNAMIC_SHAPE, refusals.RANK_LIMIT, refusals.TRAINING_MODE,
                                                  refusals.ELEMENT_TYPES]


def listed_refusal(message: str) -> bool:
    """Whether a compile refusal is one the mapping table lists (the only refusals a case may get)."""
    return any(t in message for t in _listed_texts())


def _compare(name: str, want: np.ndarray, got, rtol: float, atol: float) -> str | None:
    want = np.asarray(want)
    if got is None:
        return f"output {name!r} missing"
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"output {name!r}: shape {list(got.shape)}, expected {list(want.shape)}"
    if want.dtype.kind in "fc":
        with np.errstate(all="ignore"):
            g = got.astype(want.dtype)
        try:
            np.testing.assert_allclose(g.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                       equal_nan=True)
        except AssertionError:
            with np.errstate(all="ignore"):
                err = np.nanmax(np.abs(g.astype(np.float64) - want.astype(np.float64))) if want.size else 0.0
            return f"output {name!r}: values differ (max abs error {err:.3g}, rtol {rtol}, atol {atol})"
        return None
    if not np.array_equal(got.astype(want.dtype), want):
        return f"output {name!r}: values differ ({int(np.sum(got.astype(want.dtype) != want))} elements)"
    return None


def run_case(payload: tuple) -> CaseResult:
    """Compile (fp32) and run one case: payload (name, op, model bytes, [(inputs, outputs)], rtol, atol,
    cache directory or None). Input shapes are fixed from the data (as a user gives --input-shape);
    when the compiler refuses a shape that depends on input values, the shape-like inputs (integer
    tensors, float vectors) are given as constants (--const-input) and the case counts as passing
    that way (its detail says so)."""
    import onnx

    from .. import runtime
    from ..compiler import CompileOptions, refusals
    from ..errors import ModelError, NpusimError

    name, op, data, sets, rtol, atol, cache_dir = payload
    t0 = time.perf_counter()
    frozen: list[str] = []

    def done(verdict, detail=""):
        if frozen and verdict == "pass":
            detail = "with --const-input " + ",".join(frozen)
        return CaseResult(name, op, verdict, detail, round(time.perf_counter() - t0, 3))

    model = onnx.load_model_from_string(data)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("error", RuntimeWarning)  # npusim must not warn (issue F7)
            inits = {i.name for i in model.graph.initializer}
            ins = [vi.name for vi in model.graph.input if vi.name not in inits]
            given = dict(zip(ins, sets[0][0]))
            shapes = {n: tuple(np.shape(a)) for n, a in given.items()}
            try:
                prog = _cache(cache_dir).compile(model, CompileOptions(quantization="fp32", input_shapes=shapes))
            except ModelError as e:
                if refusals.DYNAMIC_SHAPE not in str(e) or len(sets) > 1:
                    raise
                frozen = [n for n, a in given.items() if a.dtype.kind in "iu" or a.dtype.kind == "f" and a.ndim <= 1]
                if not frozen:
                    raise
                consts = {n: _npy(given[n], cache_dir) for n in frozen}
                shapes = {n: sh for n, sh in shapes.items() if n not in consts}
                prog = _cache(cache_dir).compile(model, CompileOptions(quantization="fp32", input_shapes=shapes,
                                                                       const_inputs=consts))
            outs = [vi.name for vi in model.graph.output]
            for inputs, expected in sets:
                feeds = {n: a for n, a in zip(ins, inputs) if n not in frozen}
                res = runtime.run(prog, feeds, options=runtime.RunOptions(trace=False))
                if res.status != "ok":
                    f = res.faults[0]
                    return done("fault", f"{f.cls} at {f.unit} in {f.layer!r}: {f.message}"[:300])
                for o, want in zip(outs, expected):
                    why = _compare(o, want, res.outputs.get(o), rtol, atol)
                    if why:
                        return done("wrong", why)
    except ModelError as e:
        return done("refused" if listed_refusal(str(e)) else "error", str(e)[:300])
    except NpusimError as e:
        return done("error", f"{type(e).__name__}: {e}"[:300])
    except Exception as e:  # a crash of npusim: always a bug
        return done("error", f"{type(e).__name__}: {str(e).splitlines()[0][:240] if str(e) else ''}")
    return done("pass")


_CACHES: dict = {}


def _npy(a: np.ndarray, cache_dir) -> str:
    """A .npy file holding `a`, named by its content (so a compile cache keyed by paths stays right)."""
    import hashlib
    import tempfile
    from pathlib import Path

    a = np.ascontiguousarray(a)
    key = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()[:32]
    d = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "npusim-const-inputs"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"const-{key}.npy"
    if not p.exists():
        tmp = d / f"const-{key}.{os.getpid()}.tmp.npy"
        np.save(tmp, a)
        tmp.replace(p)
    return str(p)


def _cache(directory):
    from ..compiler.cache import CompileCache

    if directory not in _CACHES:
        _CACHES[directory] = CompileCache(directory, prepared_slots=0)
    return _CACHES[directory]


def _alarm(signum, frame):
    raise TimeoutError(f"case took more than {CASE_SECONDS} s")


def _worker_case(payload: tuple) -> CaseResult:
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        return run_case(payload)
    except TimeoutError as e:
        return CaseResult(payload[0], payload[1], "error", f"hang: {e}")
    finally:
        signal.alarm(0)


def _array(x) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(x) if hasattr(x, "SerializeToString") else np.asarray(x)


def payloads(cases, cache_dir=None) -> list[tuple]:
    import onnx

    ops = {_snake(s.name): s.name for s in onnx.defs.get_all_schemas() if s.domain == ""}
    out = []
    for c in cases:
        sets = [([_array(a) for a in i], [_array(a) for a in o]) for i, o in c.data_sets]
        out.append((c.name, case_op(c, ops), c.model.SerializeToString(), sets, float(c.rtol), float(c.atol),
                    None if cache_dir is None else str(cache_dir)))
    return out


def run_cases(cases, workers: int = 2, cache_dir=None) -> list[CaseResult]:
    """Every case's result (in case order), `workers` processes (0: in this process)."""
    items = payloads(cases, cache_dir)
    if workers <= 0:
        return [_worker_case(p) for p in items]
    import multiprocessing as mp

    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(workers, maxtasksperchild=200) as pool:
        results = pool.map(_worker_case, sorted(items, key=lambda p: -len(p[2])), chunksize=4)
    order = {p[0]: i for i, p in enumerate(items)}
    return sorted(results, key=lambda r: order[r.name])


def by_operator(results: list[CaseResult]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for r in results:
        row = table.setdefault(r.op, {v: 0 for v in VERDICTS})
        row[r.verdict] += 1
    return dict(sorted(table.items()))


def to_json(results: list[CaseResult]) -> list[dict]:
    return [asdict(r) for r in results]


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


# ------------------------------------------------------------------ the docs table (docs/ops.md)

BEGIN = "<!-- BEGIN GENERATED by scripts/gen_ops_doc.py: do not edit by hand -->"
END = "<!-- END GENERATED -->"


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render(results: list[CaseResult], out_of_scope: dict[str, str]) -> str:
    """The generated part of docs/ops.md: conformance by operator, the refusal list, the NPU mapping."""
    import onnx

    from ..compiler import legality, refusals

    n = len(results)
    count = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    const = sum(1 for r in results if r.verdict == "pass" and "const-input" in r.detail)
    lines = [BEGIN, "",
             f"ONNX {onnx.__version__} node test cases (`onnx.backend.test.case.node`), opset <= "
             f"{onnx.defs.onnx_opset_version()}: {n + len(out_of_scope)} cases, {n} in scope, compiled in fp32 "
             f"mode and run, every output compared with the case's rtol/atol.", "",
             f"**{count['pass']} pass** ({100.0 * count['pass'] / max(n, 1):.1f} %; {const} of them with their "
             f"shape inputs given as constants, `--const-input`), {count['refused']} refused with a listed reason, "
             f"{count['wrong']} wrong, {count['fault']} fault, {count['error']} error.", "",
             "### By operator", "",
             "| operator | cases | pass | of which --const-input | refused | wrong / fault / error | refusal reasons |",
             "|---|---|---|---|---|---|---|"]
    for op, row in by_operator(results).items():
        mine = [r for r in results if r.op == op]
        total = len(mine)
        cst = sum(1 for r in mine if r.verdict == "pass" and "const-input" in r.detail)
        reasons = sorted({_reason(r.detail) for r in mine if r.verdict == "refused"})
        bad = row["wrong"] + row["fault"] + row["error"]
        lines.append(f"| {op} | {total} | {row['pass']} | {cst or ''} | {row['refused'] or ''} | {bad or ''} | "
                     f"{_cell('; '.join(reasons))} |")
    lines += ["", "### Refusals (the one list: `npusim/compiler/legality.py`)", "",
              "| operator or kind | reason |", "|---|---|"]
    for op, why in sorted(refusals.REFUSED.items()):
        lines.append(f"| {op} | {_cell(why)} |")
    for (op, below), why in sorted(refusals.REFUSED_BEFORE.items()):
        lines.append(f"| {op} (opset < {below}) | {_cell(why)} |")
    for op in refusals.TRAINING_MODE_OPS:
        lines.append(f"| {op} with training_mode=1 | {_cell(refusals.TRAINING_MODE)} |")
    for kind, why in refusals.UNSUPPORTED_KINDS.items():
        lines.append(f"| {kind} | {_cell(why)} |")
    scope = {}
    for why in out_of_scope.values():
        scope[why] = scope.get(why, 0) + 1
    lines += ["", "Out of scope (not counted above): " + ", ".join(f"{k} ({v})" for k, v in sorted(scope.items())) + ".",
              "", "### What runs on the NPU (`legality.MAPPINGS`; every other operator is a software epoch)", "",
              "| operator | NPU recipe | when (else the host CPU runs it, with the failing rule as reason) |",
              "|---|---|---|"]
    for op, m in sorted(legality.MAPPINGS.items()):
        rules = "; ".join(_cell((c.__doc__ or c.__name__).strip()) for c in m.checks)
        lines.append(f"| {op} | {_cell(m.recipe)} | {rules} |")
    lines += ["", END]
    return "\n".join(lines)


def _reason(detail: str) -> str:
    """The listed reason in a refusal message (node and tensor names stripped)."""
    return next((t for t in sorted(_listed_texts(), key=len, reverse=True) if t in detail), detail)


def splice(document: str, generated: str) -> str:
    """`document` with its BEGIN..END block replaced by `generated`."""
    a, b = document.index(BEGIN), document.index(END) + len(END)
    return document[:a] + generated + document[b:]
