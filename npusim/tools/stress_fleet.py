"""A fleet of stress runs: one simulated board per seed, run as tasks on the execution layer.

    rows = fleet(targets, StressOptions(processes=2, strategy="misconfigured", schedule="random"),
                 seeds=range(16), executor=parallel.executor(workers=4))
    [r["seed"], r["exit_code"], r["verdict"]] ...

Each task is plain data (`{"seed": s}`) and shares the blobs (bytes), the options and the profile
(dicts), so a seed gives the same report in this process and on any worker. A seed's stress is
independent of the others: one NPU, one allocation history, one scheduler per seed.
"""

from __future__ import annotations

import dataclasses

from .stress_options import StressOptions


def fleet(targets, options: StressOptions, seeds, profile=None, reference=None, executor=None) -> list[dict]:
    """One row per seed, in seed order: {seed, exit_code, verdict, runs, faults, first_fault, text}
    (or {seed, error, exit_code} for a seed whose task failed)."""
    from ..program.blob import encode_blob
    from ..program.validate import resolve_target_profile
    from ..errors import InvalidInputError
    from .parallel import Executor

    profile = resolve_target_profile(targets[0].variants[0].header, profile, error=InvalidInputError)
    ref = reference
    if ref is not None and hasattr(ref, "SerializeToString"):
        ref = ref.SerializeToString()
    elif ref is not None and not isinstance(ref, bytes):
        with open(ref, "rb") as fh:
            ref = fh.read()
    shared = {"targets": [(t.name, [encode_blob(p, profile) for p in t.variants]) for t in targets],
              "options": dataclasses.asdict(options), "profile": profile.to_dict(), "reference": ref}
    ex = executor if executor is not None else Executor(progress=False)
    seeds = list(seeds)
    results = ex.map(fleet_task, [{"seed": int(s)} for s in seeds], ex.share(shared), desc="stress seeds")
    rows = []
    for s, r in zip(seeds, results):
        rows.append(r.value if r.ok else {"seed": int(s), "error": r.error.text(), "exit_code": r.error.exit_code})
    return rows


def fleet_task(task: dict, shared: dict) -> dict:
    """One seed's stress on a worker (plain data in and out)."""
    from ..runtime import load
    from .points import profile_of
    from .stress import Target, stress

    profile = profile_of(shared["profile"])
    targets = [Target(name, [load(b, profile) for b in blobs]) for name, blobs in shared["targets"]]
    opts = dataclasses.replace(StressOptions(**shared["options"]), seed=task["seed"], monitor=None, csv=None,
                               plot=None)
    reference = shared["reference"]  # the model's bytes: ONNX or TFLite (stress reads either)
    rep = stress(targets, opts, profile=profile, reference=reference)
    doc = rep.to_json()
    first = doc["first_fault"]
    return {"seed": task["seed"], "exit_code": rep.exit_code, "verdict": rep.verdict(), "runs": rep.runs,
            "faults": dict(rep.faults), "first_fault": first and {"process": first["process"],
                                                                    "inference": first["inference"],
                                                                    "interleaving": first["interleaving"]},
            "text": rep.text()}


def table(rows: list[dict]) -> str:
    """The fleet as a table, one line per seed, and the seeds that faulted."""
    lines = [f"{'seed':>6}  {'verdict':<8} {'runs':>7}  faults / first fault"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['seed']:>6}  {'ERROR':<8} {'':>7}  {r['error']}")
            continue
        faults = ", ".join(f"{c} x{n}" for c, n in sorted(r["faults"].items())) or "-"
        first = r["first_fault"]
        where = f" (first: {first['process']} inference {first['inference']})" if first else ""
        lines.append(f"{r['seed']:>6}  {r['verdict']:<8} {r['runs']:>7,}  {faults}{where}")
    bad = [str(r["seed"]) for r in rows if r.get("exit_code")]
    lines.append(f"{len(bad)} of {len(rows)} seeds not clean" + (f": {', '.join(bad)}" if bad else ""))
    return "\n".join(lines) + "\n"
