"""ST Edge AI Core (`stedgeai generate --target stm32n6`) output, read as the hardware sees it.

`model`: the plain data every reader produces (pools, buffers, epoch blocks, stream-engine and unit
configurations); `csource`: the generated C read with tree-sitter's C grammar; `cstructs`: the
records of a C file; `reader`: a whole output folder, files recognised by content; `weights`: weight
images; `streng`: the addresses a stream engine walks; `replay`: every walk checked against the
board's memory and ST's buffer table; `stblob`: an imported output as an npusim blob (`npusim import`).
"""

from __future__ import annotations

from pathlib import Path

from ...program.container import is_imported


def is_st_output(path) -> bool:
    """Whether `path` names an ST output (a folder, a C file, or a blob `npusim import` wrote) rather
    than a blob of npusim's own program or a model."""
    p = Path(path)
    return p.is_dir() or p.suffix.lower() in (".c", ".h") or is_blob(p)


def is_blob(path) -> bool:
    """Whether `path` is a file that starts like a blob `npusim import` wrote (checked whole when read)."""
    return Path(path).is_file() and is_imported(path)


def label(path) -> str:
    """A short name of an output: its folder (a network.c's parent), or an imported blob's file stem."""
    p = Path(path)
    return p.name if p.is_dir() else p.stem if is_blob(p) else p.parent.name


_LOADED: dict = {}  # (path, its files with sizes and times) -> StOutput: a repeat run reuses the parse
KEEP_LOADED = 4


def load(path):
    """The `StOutput` of a folder, `network.c` (companions beside it) or an imported blob. Read once per
    state of its files (the folder's, or the blob's alone): a repeat load of unchanged files returns the same
    (immutable) records, with what runs have memoised on them."""
    from .reader import read as read_folder  # tree-sitter: kept off the dispatch path (`is_st_output`)
    from .stblob import decode  # imports the C reader's modules too: off the dispatch path

    p = Path(path).resolve()
    blob = is_blob(p)
    read = decode if blob else read_folder
    # a blob is one file; a folder's (or network.c's) files are read by content, so all of them count
    files = [p] if blob else [q for q in (p if p.is_dir() else p.parent).iterdir() if q.is_file()]
    try:
        state = tuple(sorted((q.name, q.stat().st_size, q.stat().st_mtime_ns) for q in files))
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


def import_blob(path) -> tuple:
    """(the output, its blob bytes) of an ST output folder or `network.c`: what `npusim import` writes,
    the epoch-controller programs' words included."""
    from .ecblob import ecblob_words  # tree-sitter: off the dispatch path
    from .stblob import ec_programs, encode  # with the C reader's modules: off the dispatch path

    out = load(path)
    if is_blob(path):  # already imported: the same bytes, once they have been read whole
        ec_programs(path)
        return out, Path(path).read_bytes()
    header = out.files.get("ecblobs")
    return out, encode(out, ecblob_words(header) if header else None)
