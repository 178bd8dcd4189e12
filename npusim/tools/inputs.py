"""Input binding for the CLI and tools: `NAME=FILE.npy` arguments (seeded inputs: `runtime.seeded_inputs`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError, UsageError


_NPY_MAGIC = b"\x93NUMPY"


def load_inputs(items) -> dict[str, np.ndarray]:
    """['x=in.npy', ...] -> {name: array}; each file must be a plain (non-pickled) .npy array."""
    out = {}
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"--input {item!r}: expected NAME=FILE.npy")
        name, path = (s.strip() for s in item.split("=", 1))
        if name in out:
            raise UsageError(f"--input {name}: given twice (bind each input once)")
        p = Path(path)
        if p.is_dir():
            raise DataError(f"--input {name}: {path} is a folder, not a .npy file")
        if not p.is_file():
            raise DataError(f"--input {name}: {path}: no such file")
        try:
            with open(p, "rb") as fh:
                magic = fh.read(len(_NPY_MAGIC))
        except OSError as e:
            raise DataError(f"--input {name}: {path}: cannot read ({e.strerror or e})") from None
        if magic != _NPY_MAGIC:
            raise DataError(f"--input {name}: {path}: not a .npy file (no NPY header; save arrays with numpy.save)")
        try:
            out[name] = np.load(path, mmap_mode="r", allow_pickle=False)  # shape checked before reading
        except (ValueError, OSError, EOFError) as e:
            raise DataError(f"--input {name}: {path}: not a .npy array ({' '.join(str(e).split())})") from None
    return out
