"""Compile cache: never compile the same (model, options, profile, calibration) twice.

    cache = CompileCache("/tmp/npusim-cache")          # or CompileCache(None): this process only
    prog = cache.compile("model.onnx", CompileOptions(mem_align=16), profile)

Key = sha256 over the model bytes, the options, the profile (every value), the calibration data, the
files of `--const-input`, the npusim version and the sources of the packages a blob depends on
(compiler, program, kernels, hw, cpu),
so a change in the compiler's code invalidates the cache by itself. Programs are kept in memory for
the process and, with a directory, as blob files `<key>.npu` written by atomic rename. Concurrent
processes (pytest-xdist, sweep workers) compile a key once: the first takes the key's lock file
(`fcntl.flock`), the others wait for it and load its blob.

`prepared(...)` memoizes the option-independent part (`driver.prepare`: front end, calibration) of
the last `prepared_slots` models, keyed by the model and the FRONT_END_FIELDS only, so the points of
a sweep share it; `compile` uses it on a miss.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import threading
from collections import OrderedDict
from importlib import resources
from pathlib import Path

import numpy as np

from .. import __version__
from ..errors import ModelError, NpusimError, UsageError
from ..hw import load_profile
from ..program.blob import encode_blob, load_blob
from .frontends.tflite_reader import is_tflite
from .options import FRONT_END_FIELDS, CompileOptions

try:  # POSIX; without it (Windows) concurrent processes may compile a key twice (still correct)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

_FINGERPRINT: str | None = None


def canon(obj) -> str:
    """Canonical JSON text of options/profile dicts (dataclasses as dicts)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    return json.dumps(obj, sort_keys=True, default=repr)


def source_fingerprint() -> str:
    """sha256 over the sources a compiled blob depends on (computed once per process)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        h = hashlib.sha256()
        root = resources.files("npusim")
        for pkg in ("compiler", "program", "kernels", "hw", "cpu"):
            d = Path(str(root / pkg))
            if d.is_dir():
                for p in sorted(d.rglob("*.py")):
                    h.update(p.relative_to(d).as_posix().encode())
                    h.update(p.read_bytes())
        _FINGERPRINT = h.hexdigest()
    return _FINGERPRINT


def model_bytes(model) -> bytes:
    """Serialized bytes of a model (ONNX or TFLite) given as a path, bytes or a ModelProto."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if isinstance(model, (str, Path)):
        try:
            return Path(model).read_bytes()
        except OSError as e:
            raise UsageError(f"cannot read model {model}: {e.strerror}") from None
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString()
    raise UsageError(f"expected an ONNX model (path or ModelProto), got {type(model).__name__}")


def calibration_bytes(cal) -> bytes:
    """Bytes identifying calibration data: a .npz file's bytes, or a digest of a dict of arrays."""
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


def const_input_bytes(options) -> bytes:
    """Bytes identifying the files of options.const_inputs (their contents, not just their paths)."""
    items = getattr(options, "const_inputs", None) or {}
    h = hashlib.sha256()
    for name in sorted(items):
        h.update(name.encode() + b"\0")
        try:
            h.update(Path(items[name]).read_bytes())
        except OSError:
            h.update(b"<unreadable>")  # compile reports the problem
    return h.digest()


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


class CompileCache:
    """Compiled programs by key: a dict for the process plus blob files in `directory`."""
    def __init__(self, directory: str | Path | None = None, prepared_slots: int = 1):
        self.directory = Path(directory) if directory is not None else None
        self.programs: dict[str, object] = {}
        self.hits = self.misses = 0
        self.prepared_slots = prepared_slots
        self._prepared: OrderedDict[str, object] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}

    @staticmethod
    def fingerprint() -> str:
        return source_fingerprint()

    # ------------------------------------------------------------ keys
    def key(self, model_data: bytes, options, profile, calibration=None) -> str:

        if calibration is None:
            calibration = getattr(options, "calibration", None)
        return _digest(model_data, canon(options).encode(), canon(profile.to_dict()).encode(),
                       calibration_bytes(calibration), const_input_bytes(options), __version__.encode(),
                       source_fingerprint().encode())

    def prepared_key(self, model_data: bytes, options, calibration=None) -> str:
        """Key of `driver.prepare`'s result: the model and the front-end options only."""

        if calibration is None:
            calibration = getattr(options, "calibration", None)
        front = {f: getattr(options, f) for f in FRONT_END_FIELDS}
        return _digest(b"prepared", model_data, canon(front).encode(), calibration_bytes(calibration),
                       const_input_bytes(options), __version__.encode(), source_fingerprint().encode())

    # ------------------------------------------------------------ programs
    def get(self, key: str, profile):
        """The cached Program of `key`, or None (a blob file that no longer loads counts as a miss)."""
        if key in self.programs:
            self.hits += 1
            return self.programs[key]
        if self.directory is not None:
            path = self.directory / f"{key}.npu"
            if path.is_file():

                try:
                    prog = load_blob(path.read_bytes(), profile=profile)
                except (NpusimError, OSError):
                    return None
                self.programs[key] = prog
                self.hits += 1
                return prog
        return None

    def put(self, key: str, program, profile) -> None:
        self.misses += 1
        self.programs[key] = program
        if self.directory is not None:

            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = self.directory / f"{key}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_bytes(encode_blob(program, profile))
            tmp.replace(self.directory / f"{key}.npu")  # atomic: readers see all of it or nothing

    @contextlib.contextmanager
    def _locked(self, key: str):
        """Hold the key's lock: one thread of this process and one process per directory."""
        with self._lock:
            lk = self._key_locks.setdefault(key, threading.Lock())
        with lk:
            if self.directory is None or fcntl is None:
                yield
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.directory / f"{key}.lock", "a+b") as fh:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def prepared(self, model, options: CompileOptions | None = None, profile=None, calibration=None,
                 data: bytes | None = None):
        """`driver.prepare(model, ...)`, memoized for the last `prepared_slots` models."""
        from .driver import prepare  # the compile pipeline (onnx, the engine's timing): heavy, on a miss only

        options = options or CompileOptions()
        data = model_bytes(model) if data is None else data
        pk = self.prepared_key(data, options, calibration)
        with self._lock:
            prep = self._prepared.get(pk)
            if prep is not None:
                self._prepared.move_to_end(pk)
                return prep
        prep = prepare(_proto(model, data), options, profile, calibration)
        if self.prepared_slots > 0:
            with self._lock:
                self._prepared[pk] = prep
                while len(self._prepared) > self.prepared_slots:
                    self._prepared.popitem(last=False)
        return prep

    def compile_keyed(self, model, options: CompileOptions | None = None, profile=None, calibration=None,
                      data: bytes | None = None):
        """(Program, key) of `model` compiled with `options` for `profile`, compiled at most once per key."""
        from .driver import finish  # the compile pipeline: heavy, on a miss only

        options = options or CompileOptions()
        if profile is None or isinstance(profile, str):
            profile = load_profile(profile)
        data = model_bytes(model) if data is None else data
        key = self.key(data, options, profile, calibration)
        prog = self.get(key, profile)
        if prog is not None:
            return prog, key
        with self._locked(key):
            prog = self.get(key, profile)  # another process may have compiled it meanwhile
            if prog is None:
                prep = self.prepared(model, options, profile, calibration, data=data)
                prog = finish(prep, options, profile)
                self.put(key, prog, profile)
        return prog, key

    def compile(self, model, options: CompileOptions | None = None, profile=None, calibration=None):
        """`npusim.compiler.compile` through the cache; returns the Program."""
        return self.compile_keyed(model, options, profile, calibration)[0]


def _proto(model, data: bytes):
    """The model as `prepare` takes it: a path or ModelProto as given, bytes parsed once (TFLite bytes as they are)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        import onnx  # heavy: only when bytes are parsed

        if is_tflite(bytes(data)):
            return bytes(data)
        try:
            return onnx.load_model_from_string(data)
        except Exception as e:  # protobuf DecodeError and friends
            raise ModelError(f"not an ONNX model ({type(e).__name__})") from None
    return model
