"""The test-side simulator handle: cached compile, blob loading, runs, golden files.

`Sim` is what the `npusim_sim` fixture returns; it also works outside pytest:

    sim = Sim(cache=CompileCache("/tmp/npusim-cache"))
    run = sim.run(zoo.resnet_style(), CompileOptions(mem_align=16), seed=0)
    assert_no_faults(run)

Compiled programs are cached by `npusim.compiler.cache.CompileCache` (in memory for the session,
and as blob files on disk) under sha256(model bytes + options + profile + calibration + npusim
version + compiler sources), so a change in the compiler's code invalidates the cache by itself.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..compiler.cache import CompileCache, canon, model_bytes
from ..errors import UsageError

__all__ = ["BLOB_SUFFIXES", "CompileCache", "Sim", "SimRun", "model_bytes", "random_inputs"]

BLOB_SUFFIXES = (".npu", ".blob")


_canon = canon


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
        return self.cache.compile_keyed(model, options, self.profile, calibration)[0]

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
            prog, key = self.cache.compile_keyed(target, options, self.profile, calibration)
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
