"""ST Edge AI Core (`stedgeai generate --target stm32n6`) output, read as the hardware sees it.

`model`: the plain data every reader produces (pools, buffers, epoch blocks, stream-engine and unit
configurations); `csource`: the generated C read with tree-sitter's C grammar; `cstructs`: the
records of a C file; `reader`: a whole output folder, files recognised by content; `weights`: weight
images; `streng`: the addresses a stream engine walks; `replay`: every walk checked against the
board's memory and ST's buffer table; `stblob`: an imported output as an npusim blob (`npusim import`).
"""

from __future__ import annotations

from pathlib import Path

from . import stblob


def is_st_output(path) -> bool:
    """Whether `path` names an ST output (a folder, a C file, or a blob `npusim import` wrote) rather
    than a blob of npusim's own program or a model."""
    p = Path(path)
    return p.is_dir() or p.suffix.lower() in (".c", ".h") or stblob.is_blob(p)


def label(path) -> str:
    """A short name of an output: its folder (a network.c's parent), or an imported blob's file stem."""
    p = Path(path)
    return p.name if p.is_dir() else p.stem if stblob.is_blob(p) else p.parent.name


_LOADED: dict = {}  # (path, the folder's files with sizes and times) -> StOutput: a repeat run reuses the parse
KEEP_LOADED = 4


def load(path):
    """The `StOutput` of a folder, `network.c` (companions beside it) or an imported blob. Read once per
    state of the folder: a repeat load of unchanged files returns the same (immutable) records."""
    from .reader import read as read_folder  # tree-sitter: kept off the dispatch path (`is_st_output`)

    p = Path(path).resolve()
    read = stblob.decode if stblob.is_blob(p) else read_folder
    folder = p if p.is_dir() else p.parent
    try:
        state = tuple(sorted((q.name, q.stat().st_size, q.stat().st_mtime_ns) for q in folder.iterdir() if q.is_file()))
    except OSError:
        return read(path)
    key = (str(p), state)
    got = _LOADED.get(key)
    if got is None:
        got = read(path)
        if len(_LOADED) >= KEEP_LOADED:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = got
    return got
