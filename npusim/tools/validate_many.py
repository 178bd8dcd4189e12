"""Validate many blobs against one reference model, as tasks of the execution layer.

    rows = validate_blobs(["a.npu", "b.npu"], "model.onnx", executor=ex)   # one dict per blob, in order

Each blob is loaded here (a bad blob is refused before any work) with its inputs and thresholds;
a worker runs it (functional) and ONNX Runtime on the reference, and returns the metrics.
"""

from __future__ import annotations

from pathlib import Path

from .points import SharedModel, parsed, profile_of, share_model


def validate_point(task: dict, reference: SharedModel) -> dict:
    """One blob on a worker: its run and the comparison with the reference (plain data back)."""
    from ..program.blob import load_blob
    from ..reference import Thresholds, validate
    from ..runtime import RunOptions

    profile = profile_of(task["profile"]) if task["profile"] is not None else None
    program = load_blob(task["blob"], profile=profile)
    rep = validate(program, parsed(reference), task["inputs"], Thresholds(**task["thresholds"]),
                   run_options=RunOptions(trace=False), profile=profile)
    res = rep.run_result
    first = res.faults[0] if res.faults else None
    return {"passed": rep.passed, "status": res.status, "metrics": {k: m.to_dict() for k, m in rep.metrics.items()},
            "failures": rep.failures, "first_fault": first.cls if first else "",
            "fault_layer": (first.layer or "") if first else "", "report": res.report_text() if first else ""}


def validate_blobs(blobs, reference, inputs_for=None, thresholds_for=None, profile=None, executor=None,
                   progress: bool = True) -> list[dict]:
    """[{blob, passed, status, metrics, failures, first_fault, fault_layer, report} | {blob, error}]
    for every blob (a path), in order. `inputs_for(program)` and `thresholds_for(program)` give each
    blob's inputs (default: seeded random, seed 0) and Thresholds (default: by its precision)."""
    import dataclasses

    from ..program.blob import load_blob
    from ..reference import default_thresholds, program_precision
    from ..runtime import seeded_inputs
    from .parallel import Executor

    tasks = []
    for path in blobs:
        data = Path(path).read_bytes()
        program = load_blob(data, profile=profile)
        th = thresholds_for(program) if thresholds_for else default_thresholds(program_precision(program))
        tasks.append({"blob": data, "profile": profile.to_dict() if profile is not None else None,
                      "inputs": inputs_for(program) if inputs_for else seeded_inputs(program, 0),
                      "thresholds": dataclasses.asdict(th)})
    ref = share_model(reference)
    ex = executor if executor is not None else Executor(progress)
    results = ex.map(validate_point, tasks, ex.share(ref), desc="validate")
    out = []
    for path, r in zip(blobs, results):
        out.append({"blob": str(path), **r.value} if r.ok else {"blob": str(path), "error": r.error.text(),
                                                                "error_code": r.error.exit_code})
    return out
