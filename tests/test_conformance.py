"""ONNX's operator conformance cases through compile (fp32) and run: no wrong value, fault, crash or
hang; refusals only with a reason listed in compiler/refusals.py; docs/ops.md up to date."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest

from npusim.tools import conformance as C

DOC = Path(__file__).resolve().parents[1] / "docs" / "ops.md"


@pytest.fixture(scope="module")
def outcome(request, tmp_path_factory):
    cases, out = C.collect()
    # compiled blobs by key (safe across processes), kept between runs in pytest's cache when it is on
    cfg_cache = getattr(request.config, "cache", None)
    cache = cfg_cache.mkdir("npusim-conformance") if cfg_cache is not None else tmp_path_factory.mktemp("conf")
    return C.run_cases(cases, workers=C.default_workers(), cache_dir=str(cache)), out


@pytest.mark.slow
def test_every_in_scope_case_passes_or_is_refused_with_a_listed_reason(outcome):
    results, _ = outcome
    bad = [f"{r.name} ({r.op}): {r.verdict}: {r.detail}" for r in results if r.verdict not in ("pass", "refused")]
    assert not bad, f"{len(bad)} case(s) failed:\n" + "\n".join(bad[:40])
    for r in results:
        if r.verdict == "refused":
            assert C.listed_refusal(r.detail), r
    assert sum(r.verdict == "pass" for r in results) >= 0.95 * len(results)


@pytest.mark.slow
def test_docs_table_is_up_to_date(outcome):
    results, out = outcome
    doc = DOC.read_text()
    made = re.search(r"ONNX (\S+) node test cases", doc)
    if made is None or made.group(1) != onnx.__version__:
        pytest.skip(f"docs/ops.md was generated with another onnx ({made.group(1) if made else '?'}); "
                    f"this one is {onnx.__version__}")
    assert C.splice(doc, C.render(results, out)) == doc, "docs/ops.md is stale: run python scripts/gen_ops_doc.py"


@pytest.mark.slow
def test_verdicts_of_a_few_cases_in_process():
    """The runner itself: a pass, a listed refusal and an out-of-scope case, without a pool."""
    cases, out = C.collect(["test_abs", "test_bernoulli_seed", "test_cast_FLOAT_to_DOUBLE", "test_slice"])
    results = {r.name: r for r in C.run_cases(cases, workers=0)}
    assert results["test_abs"].verdict == "pass"
    assert results["test_bernoulli_seed"].verdict == "refused" and "random" in results["test_bernoulli_seed"].detail
    assert results["test_slice"].verdict == "pass"
    assert "test_cast_FLOAT_to_DOUBLE" in out
    from npusim.compiler.refusals import REFUSED

    assert not C.listed_refusal("unsupported op Foo") and C.listed_refusal(f"node 'b' (Bernoulli): {REFUSED['Bernoulli']}")
