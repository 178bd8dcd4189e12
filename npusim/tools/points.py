"""One point of a multi-point workflow: compile a model with some options on some profile, run it,
and summarise the result as plain data (what sweep, grid and bisect send back from a worker).

The model travels as `SharedModel` (serialized bytes, their digest, the calibration arrays and,
when the caller prepared it, the compiler's option-independent part `driver.Prepared`), shared
once per run. A point compiles with `driver.finish` from that Prepared when its front-end
options match; otherwise the process prepares the model once per front-end key and reuses it
(`parallel.memo`): the front end and calibration run once per process, not once per point.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from .parallel import memo


@dataclass(frozen=True)
class SharedModel:
    """A model as plain data: serialized ONNX bytes, their sha256, calibration arrays (or None)."""

    data: bytes
    digest: str
    name: str = ""
    calibration: dict | None = None  # {input name: (N, *shape) float32}
    prepared: tuple = ()  # ((front-end key, driver.Prepared), ...) computed by the caller
    calibration_digest: str = ""  # sha256 of the calibration arrays ("" without them)


def front_key(model: SharedModel, options) -> str:
    """What `driver.prepare` depends on: the model, the FRONT_END_FIELDS and the calibration set."""
    import json

    from ..compiler.options import FRONT_END_FIELDS

    front = {f: getattr(options, f) for f in FRONT_END_FIELDS if f != "calibration"}
    return f"{model.digest}:{model.calibration_digest}:{json.dumps(front, sort_keys=True, default=repr)}"


def with_prepared(model: SharedModel, options, profile) -> SharedModel:
    """`model` carrying `driver.prepare(model, options)` (computed here), for points that share it."""
    from ..compiler import prepare

    prep = prepare(parsed(model), options, profile, model.calibration)
    prep = dataclasses.replace(prep, clean=None)  # `finish` never reads the cleaned model: do not ship it
    return dataclasses.replace(model, prepared=((front_key(model, options), prep),))


def compile_point(model: SharedModel, options, profile):
    """The Program of one point: `finish` from the shared or this process's Prepared."""
    from ..compiler import finish, prepare

    key = front_key(model, options)
    prep = dict(model.prepared).get(key)
    if prep is None:
        prep = memo(("prepared", key), lambda: prepare(parsed(model), options, profile, model.calibration))
    return finish(prep, options, profile)


def share_model(model, calibration=None, name: str = "", source=None) -> SharedModel:
    """A SharedModel from a path or a ModelProto (ONNX) or TFLite bytes; `calibration` is a .npz path or
    {input: array}; `source`: `load_source(model)` if the caller has it (the model is not read again).
    The ONNX model parsed here from a path or bytes becomes this process's `parsed()` (and its forked
    workers'): a 100 MB model is not parsed a second time."""
    from ..compiler.frontends.sources import load_source

    if not name:
        name = Path(model).name if isinstance(model, (str, Path)) else ""
    src = source if source is not None else load_source(model)
    data = src.data if src.kind == "tflite" else (src.onnx_bytes or src.proto.SerializeToString())
    from ..compiler.cache import calibration_bytes

    cal = calibration_arrays(calibration)
    shared = SharedModel(data, hashlib.sha256(data).hexdigest(), name, cal, calibration_digest=calibration_bytes(cal).hex())
    if src.kind == "onnx" and isinstance(model, (str, Path, bytes, bytearray, memoryview)):
        memo(("onnx", shared.digest), lambda: src.proto)  # no caller holds this proto to mutate it
    return shared



def calibration_arrays(calibration) -> dict | None:
    """{input: array} from a .npz path (read here, so workers need no file), a dict, or None."""
    if calibration is None or isinstance(calibration, dict):
        return calibration
    import numpy as np

    p = Path(calibration)
    if not p.is_file():
        raise DataError(f"{p}: no such calibration file")
    try:
        with np.load(p, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as e:  # noqa: BLE001 - numpy raises many kinds for a bad file
        raise DataError(f"{p}: not a readable .npz file ({type(e).__name__})") from None


def parsed(model: SharedModel):
    """The ModelProto of a SharedModel, parsed once per process (the compiler never mutates it); a TFLite
    model stays bytes (the compiler reads them)."""
    import onnx

    from ..compiler.frontends.tflite_reader import is_tflite

    if is_tflite(model.data):
        return model.data
    return memo(("onnx", model.digest), lambda: onnx.load_model_from_string(model.data))


def profile_of(raw: dict):
    """A HardwareProfile from its `to_dict()` form, built once per process."""
    import json

    from ..hw import profile_from_dict

    key = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()
    return memo(("profile", key), lambda: profile_from_dict(raw, origin=raw.get("name", "<profile>")))


def options_dict(options) -> dict:
    """CompileOptions as plain data (a calibration file path is dropped: its arrays travel with the model)."""
    d = dataclasses.asdict(options)
    d["calibration"] = None
    return d


def run_program(program, profile, functional: bool = False, seed: int = 0):
    """Run with seeded random inputs, no trace; timing-only unless `functional`."""
    from ..runtime import RunOptions, run

    return run(program, options=RunOptions(timing_only=not functional, keep_going=False, trace=False),
               profile=profile, random_inputs=True, seed=seed)


def compile_and_run(model, options, profile, calibration=None, functional: bool = False, seed: int = 0):
    """Compile `model` (a ModelProto or a SharedModel) and run it with seeded random inputs; returns
    (program, result)."""
    from ..compiler import compile as compile_model

    if isinstance(model, SharedModel):
        program = compile_point(model, options, profile)
    else:
        program = compile_model(model, options, profile=profile, calibration=calibration)
    return program, run_program(program, profile, functional, seed)


def footprint_bytes(program) -> int:
    """Bytes of RAM the plan occupies: per pool, the end of its last non-weight buffer."""
    ends: dict[str, int] = {}
    for b in program.buffers:
        if b.kind != "weight":
            ends[b.pool] = max(ends.get(b.pool, 0), b.offset + b.size)
    return sum(ends.values())


def summary(program, result, profile) -> dict:
    """The cost and fault columns of one point (plain data)."""
    st = result.stats
    first = result.faults[0] if result.faults else None
    return {"status": result.status, "end_reason": result.end_reason, "cycles": int(st.cycles),
            "ms": round(profile.cycles_to_ms(st.cycles), 4), "bank_conflicts": int(st.bank_conflicts),
            "cross_bank_splits": int(st.cross_bank_splits), "stall_cycles": int(sum(st.stall_cycles.values())),
            "footprint_bytes": footprint_bytes(program), "faults": len(result.faults),
            "first_fault": first.cls if first else "", "fault_layer": (first.layer or "") if first else "",
            "layers": {ly.name: int(ly.cycles) for ly in st.layers}}
