"""Input binding for the CLI and tools: `NAME=FILE.npy` arguments (seeded inputs: `runtime.seeded_inputs`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError, UsageError


def load_inputs(items) -> dict[str, np.ndarray]:
    """['x=in.npy', ...] -> {name: array}; each file must be a plain (non-pickled) .npy array."""
    out = {}
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"--input {item!r}: expected NAME=FILE.npy")
        name, path = (s.strip() for s in item.split("=", 1))
        if not Path(path).is_file():
            raise DataError(f"--input {name}: {path}: no such file")
        try:
            out[name] = np.load(path, mmap_mode="r", allow_pickle=False)  # shape checked before reading
        except (ValueError, OSError, EOFError) as e:
            raise DataError(f"--input {name}: {path}: not a .npy array ({' '.join(str(e).split())})") from None
    return out
