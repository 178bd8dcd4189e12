"""ST Edge AI Core (`stedgeai generate --target stm32n6`) output, read as the hardware sees it.

`model`: the plain data every reader produces (pools, buffers, epoch blocks, stream-engine and unit
configurations); `csource`: the generated C read with tree-sitter's C grammar; `cstructs`: the
records of a C file; `reader`: a whole output folder, files recognised by content; `weights`: weight
images; `streng`: the addresses a stream engine walks; `replay`: every walk checked against the
board's memory and ST's buffer table.
"""

from __future__ import annotations

from pathlib import Path


def is_st_output(path) -> bool:
    """Whether `path` names an ST output (a folder, or a C file) rather than an npusim blob or a model."""
    p = Path(path)
    return p.is_dir() or p.suffix.lower() in (".c", ".h")


def load(path):
    """The `StOutput` of a folder or `network.c` (companions beside it)."""
    from .reader import read
    return read(path)
