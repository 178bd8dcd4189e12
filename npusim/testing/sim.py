"""The test-side simulator handle: cached compile, blob loading, runs, golden files.

`Sim` is what the `npusim_sim` fixture returns; it also works outside pytest:

    sim = Sim(cache=CompileCache("/tmp/npusim-cache"))
    run = sim.run(zoo.resnet_style(), CompileOptions(mem_align=16), seed=0)
    assert_no_faults(run)

Compiled programs are cached (in memory for the session, and as blob files on disk) under
sha256(model bytes + options + profile + calibration + npusim version + compiler sources),
so a change in the compiler's code invalidates the cache by itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from ..errors import UsageError

BLOB_SUFFIXES = (".npu", ".blob")


def _canon(obj) -> str:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    return json.dumps(obj, sort_keys=True, default=repr)


def _source_fingerprint() -> str:
    """sha256 over the sources of the compiler and program packages (cache invalidation)."""
    h = hashlib.sha256()
    root = resources.files("npusim")
    for pkg in ("compiler", "program", "kernels", "hw"):
        d = Path(str(root / pkg))
        if d.is_dir():
            for p in sorted(d.rglob("*.py")):
                h.update(p.relative_to(d).as_posix().encode())
                h.update(p.read_bytes())
    return h.hexdigest()


def model_bytes(model) -> bytes:
    """Serialized bytes of an ONNX model given as a path or a ModelProto."""
    if isinstance(model, (str, Path)):
        try:
            return Path(model).read_bytes()
        except OSError as e:
            raise UsageError(f"cannot read model {model}: {e.strerror}") from None
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString()
    raise UsageError(f"expected an ONNX model (path or ModelProto), got {type(model).__name__}")


def _calibration_bytes(cal) -> bytes:
    """Bytes identifying calibration data: a .npz file's bytes, or a dict of arrays."""
    if cal is None:
        return b""
    if isinstance(cal, dict):
        h = hashlib.sha256()
        for name in sorted(cal):
            a = np.ascontiguousarray(cal[name])
            h.update(f"{name}:{a.dtype}:{a.shape};".encode())
            h.update(a.tobytes())
        return h.digest()
    try:
        return Path(cal).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read calibration file {cal}: {e.strerror}") from None


class CompileCache:
    """Compiled programs by key: a dict for the session plus blob files in `directory`."""

    def __init__(self, directory: str | Path | None = None):
        self.directory = Path(directory) if directory is not None else None
        self.programs: dict[str, object] = {}
        self.hits = self.misses = 0
        self._fingerprint: str | None = None

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = _source_fingerprint()
        return self._fingerprint

    def key(self, model_data: bytes, options, profile, calibration=None) -> str:
        from .. import __version__

        if calibration is None:
            calibration = getattr(options, "calibration", None)
        h = hashlib.sha256()
        for part in (model_data, _canon(options).encode(), _canon(profile.to_dict()).encode(),
                     _calibration_bytes(calibration),
                     __version__.encode(), self.fingerprint().encode()):
            h.update(hashlib.sha256(part).digest())
        return h.hexdigest()

    def get(self, key: str, profile):
        if key in self.programs:
            self.hits += 1
            return self.programs[key]
        if self.directory is not None:
            path = self.directory / f"{key}.npu"
            if path.is_file():
                from ..program.blob import load_blob

                prog = load_blob(path.read_bytes(), profile=profile)
                self.programs[key] = prog
                self.hits += 1
                return prog
        return None

    def put(self, key: str, program, profile) -> None:
        self.misses += 1
        self.programs[key] = program
        if self.directory is not None:
            from ..program.blob import encode_blob

            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = self.directory / f"{key}.{os.getpid()}.tmp"  # atomic under pytest-xdist
            tmp.write_bytes(encode_blob(program, profile))
            tmp.replace(self.directory / f"{key}.npu")


@dataclass
class SimRun:
    """One run: the `RunResult` plus what produced it. Attribute access falls through to it."""

    result: object
    program: object
    inputs: dict
    source: str  # model/blob file name or graph name, for messages
    key: str  # compile-cache key, or sha256 of the blob bytes
    options: object = None  # CompileOptions, None for a foreign blob
    meta: dict = field(default_factory=dict)

    def __getattr__(self, name):
        if name == "result":
            raise AttributeError(name)
        return getattr(self.result, name)

    def snapshot(self) -> dict:
        from .. import golden

        return golden.build(self.result, self.program, meta=self.meta)


def random_inputs(program, seed: int = 0) -> dict:
    """The inputs `Sim.run` binds by default: `npusim.runtime.seeded_inputs` (lazy import)."""
    from ..runtime import seeded_inputs

    return seeded_inputs(program, seed)


class Sim:
    """Compile (cached), load blobs, run, and check golden files for one test."""

    def __init__(self, cache: CompileCache | None = None, profile=None, overrides=(),
                 golden_dir: str | Path | None = None, golden_name: str = "golden",
                 update_golden: bool = False, updated: list | None = None):
        from ..hw.profile import HardwareProfile, load_profile

        self.profile = profile if isinstance(profile, HardwareProfile) else load_profile(profile, list(overrides))
        self.cache = cache if cache is not None else CompileCache(None)
        self.golden_dir = Path(golden_dir) if golden_dir is not None else Path.cwd() / "golden"
        self.golden_name = golden_name
        self.update_golden = update_golden
        self.updated: list[Path] = updated if updated is not None else []  # golden files written

    # -------------------------------------------------------------- programs
    def compile(self, model, options=None, calibration=None):
        """`npusim.compiler.compile` with caching; returns the Program."""
        return self._compile_keyed(model_bytes(model), options, calibration)[0]

    def _compile_keyed(self, data: bytes, options, calibration):
        """(Program, cache key) of serialized model bytes: one serialization and one hash per call."""
        from ..compiler import CompileOptions, compile as compile_model

        options = options if options is not None else CompileOptions()
        key = self.cache.key(data, options, self.profile, calibration)
        prog = self.cache.get(key, self.profile)
        if prog is None:
            import onnx

            proto = onnx.load_model_from_string(data)
            prog = compile_model(proto, options, profile=self.profile, calibration=calibration)
            self.cache.put(key, prog, self.profile)
        return prog, key

    def load(self, blob, verify: bool = True):
        """A Program from any blob file or bytes (any compiler's output)."""
        from ..program.blob import load_blob

        data = self._blob_bytes(blob)
        return load_blob(data, profile=self.profile, verify=verify)

    @staticmethod
    def _blob_bytes(blob) -> bytes:
        if isinstance(blob, (bytes, bytearray, memoryview)):
            return bytes(blob)
        try:
            return Path(blob).read_bytes()
        except OSError as e:
            raise UsageError(f"cannot read blob {blob}: {e.strerror}") from None

    @staticmethod
    def _is_blob(target) -> bool:
        if isinstance(target, (bytes, bytearray, memoryview)):
            return True
        return isinstance(target, (str, Path)) and Path(target).suffix.lower() in BLOB_SUFFIXES

    # -------------------------------------------------------------- runs
    def run(self, target, options=None, inputs=None, seed: int = 0, run_options=None,
            calibration=None, verify: bool = True) -> SimRun:
        """Run an ONNX model (compiled with `options`, cached), a blob file/bytes or a Program.

        Without `inputs`, seeded random inputs (`npusim.runtime.seeded_inputs(program, seed)`) are used.
        """
        from ..program.model import Program
        from ..runtime import RunOptions, run

        if options is not None and (isinstance(target, Program) or self._is_blob(target)):
            raise UsageError("compile options apply to ONNX models only, not to a blob or Program")
        if isinstance(target, Program):
            prog, source, key, opts = target, "<Program>", "", None
        elif self._is_blob(target):
            data = self._blob_bytes(target)
            prog = self.load(data, verify=verify)
            source = "<blob bytes>" if isinstance(target, (bytes, bytearray, memoryview)) else Path(target).name
            key, opts = hashlib.sha256(data).hexdigest(), None
        else:
            if options is None:
                from ..compiler import CompileOptions

                options = CompileOptions()
            prog, key = self._compile_keyed(model_bytes(target), options, calibration)
            source = Path(target).name if isinstance(target, (str, Path)) else (
                getattr(getattr(target, "graph", None), "name", "") or "<ModelProto>")
            opts = options
        if inputs is None:
            inputs = random_inputs(prog, seed)
        res = run(prog, inputs=inputs, options=run_options or RunOptions(), profile=self.profile)
        meta = {"source": source,
                "profile": self.profile.name, "seed": seed,
                "options": json.loads(_canon(opts)) if opts is not None else None}
        if opts is None and key:
            meta["blob_sha256"] = key
        return SimRun(res, prog, inputs, source, key, opts, meta)

    # -------------------------------------------------------------- golden
    def golden_path(self, name: str | None = None) -> Path:
        return self.golden_dir / f"{name or self.golden_name}.json"

    def assert_golden(self, run: SimRun, name: str | None = None, tolerance: float = 0.02,
                      layer_tolerance: float | None = None, outputs: str = "hash", checks=None):
        """Compare `run` to its golden file (or rewrite it under --npusim-update-golden)."""
        __tracebackhide__ = True
        from .. import golden
        from .assertions import assert_golden

        path = self.golden_path(name)
        if self.update_golden:
            before = path.read_text(encoding="utf-8") if path.is_file() else None
            golden.save(path, run.snapshot())
            if path.read_text(encoding="utf-8") != before:
                self.updated.append(path)
            return path
        assert_golden(run, path, tolerance=tolerance, layer_tolerance=layer_tolerance,
                      outputs=outputs, checks=checks or golden.CHECKS)
        return path
