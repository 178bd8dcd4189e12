"""The simulated memory of a functional run of an imported ST program: the board's memory windows as byte
arrays (created on first use), read and written by address arrays or as strided views of rows; the compile's
RAM pools start with a seeded pattern (kept per seed, so a repeated run does not draw it again); a write into
read-only memory after the weights were loaded is noted (`read_only_written`: what was decoded from the weight
images is then not reused)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import StImportError

MAX_SEGMENT = 1 << 28  # a memory window larger than this is not simulated
KEEP_PATTERNS = 16  # uninitialised-memory patterns kept (a run fills one per RAM pool)
_PATTERNS: dict = {}


@dataclass
class Segment:
    base: int
    size: int
    read_only: bool
    data: np.ndarray | None = None


def distinct_bytes(shape: tuple, strides: tuple) -> bool:
    """Whether a strided view of `shape` with (non-negative) byte `strides` reaches a distinct byte for each of
    its elements: taken by increasing stride, each stride clears all the smaller dimensions' span (a sufficient
    condition, exact for the interleaved frames and rows of the engines' walks)."""
    span = 0  # bytes covered by the dimensions taken so far, minus one
    for n, st in sorted(((n, st) for n, st in zip(shape, strides) if n > 1), key=lambda d: d[1]):
        if st <= span:
            return False
        span += (n - 1) * st
    return True


WORDS = ((8, np.uint64), (4, np.uint32), (2, np.uint16))  # the word types a run of bytes is moved in
WORDS_MIN = 4096  # fewer bytes are moved as they are (the choice of a word costs more than it saves)


def word_type(view: np.ndarray):
    """The widest word type (`WORDS`) that divides the runs (last axis, contiguous) and the other strides of a byte
    view of memory, or None (fewer than `WORDS_MIN` bytes, or rows that are not runs): numpy moves a short run
    byte by byte (3 ns per byte for 8-byte runs)."""
    if view.size >= WORDS_MIN and view.ndim > 1 and view.strides[-1] == 1 and view.shape[-1] > 1:
        for w, t in WORDS:
            if view.shape[-1] % w == 0 and all(st % w == 0 for st in view.strides[:-1]):
                return t
    return None


def store(view: np.ndarray, values: np.ndarray) -> None:
    """`view[...] = values` (bytes in C order) for a byte view of memory, in `word_type`'s words where it has one."""
    values = values.reshape(view.shape)
    t = word_type(view) if values.flags.c_contiguous else None
    if t is not None:
        view.view(t)[...] = values.view(t)
    else:
        view[...] = values


class Memory:
    """The board's memory windows (adjacent ones joined), as byte arrays created on first use."""

    def __init__(self, windows, seed: int = 0):
        self.segments: list[Segment] = []
        for name, base, size, ro in sorted(windows, key=lambda w: w[1]):
            last = self.segments[-1] if self.segments else None
            if last is not None and last.base + last.size == base and last.read_only == ro:
                last.size += size
            else:
                self.segments.append(Segment(base, size, ro))
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.uninit: list[tuple[int, int]] = []  # the ranges filled with the seeded pattern
        self.sealed = False  # set once the weights are loaded: a later write to read-only memory is noted
        self.read_only_written = False

    def read_only_test(self):
        """Whether bytes [lo, hi) lie in one read-only window, as a function of the windows alone (it keeps no
        reference to this memory's bytes)."""
        ro = tuple((s.base, s.base + s.size) for s in self.segments if s.read_only)
        return lambda lo, hi: any(a <= lo and hi <= b for a, b in ro)

    def _written(self, s: Segment) -> None:
        if s.read_only and self.sealed:
            self.read_only_written = True

    def _segment(self, lo: int, hi: int) -> Segment:
        for s in self.segments:
            if s.base <= lo and hi <= s.base + s.size:
                if s.data is None:
                    if s.size > MAX_SEGMENT:
                        raise StImportError(f"memory window at {s.base:#x}: {s.size} bytes, more than the "
                                            f"functional run simulates ({MAX_SEGMENT})")
                    s.data = np.zeros(s.size, np.uint8)  # pages are only backed once touched
                return s
        raise StImportError(f"functional run: bytes [{lo:#x}, {hi:#x}) lie in no memory window of the board")

    def fill_uninitialised(self, lo: int, hi: int) -> None:
        """A seeded pattern over [lo, hi): what RAM holds before anything is written (the memory's seed and
        the ranges filled before decide it; the patterns of the last few fills are kept)."""
        s = self._segment(lo, hi)
        key = (self.seed, tuple(self.uninit), lo, hi)
        got = _PATTERNS.get(key)
        if got is None:
            got = _PATTERNS[key] = (self.rng.integers(0, 256, hi - lo, dtype=np.uint8), self.rng.bit_generator.state)
            while len(_PATTERNS) > KEEP_PATTERNS:
                _PATTERNS.pop(next(iter(_PATTERNS)))
        pattern, self.rng.bit_generator.state = got  # the generator where drawing the pattern leaves it
        s.data[lo - s.base:hi - s.base] = pattern
        self.uninit.append((lo, hi))

    def load(self, addr: int, data: bytes) -> None:
        s = self._segment(addr, addr + len(data))
        self._written(s)
        s.data[addr - s.base:addr - s.base + len(data)] = np.frombuffer(data, np.uint8)

    def read(self, addrs: np.ndarray, extent: tuple | None = None) -> np.ndarray:
        """The bytes at `addrs`; `extent` (lo, hi): bounds the addresses are known to lie in."""
        if addrs.size == 0:
            return np.zeros(0, np.uint8)
        lo, hi = extent or (int(addrs.min()), int(addrs.max()) + 1)
        s = self._segment(lo, hi)
        return s.data[addrs - s.base]

    def write(self, addrs: np.ndarray, values: np.ndarray, extent: tuple | None = None) -> None:
        if addrs.size == 0:
            return
        lo, hi = extent or (int(addrs.min()), int(addrs.max()) + 1)
        s = self._segment(lo, hi)
        self._written(s)
        s.data[addrs - s.base] = values

    def rows(self, lo: int, rows: int, run: int, stride: int) -> np.ndarray:
        """A view of `rows` runs of `run` bytes, `stride` apart from `lo` (the same bytes `read` gives of
        those addresses, as a (rows, run) array; writing into it writes memory)."""
        s = self._segment(lo, lo + (rows - 1) * stride + run)
        o = lo - s.base
        if rows == 1 or stride == run:
            return s.data[o:o + rows * run].reshape(rows, run)
        if run <= stride and o + rows * stride <= s.size:  # whole strides fit: a sliced view (cheaper than as_strided)
            return s.data[o:o + rows * stride].reshape(rows, stride)[:, :run]
        return np.lib.stride_tricks.as_strided(s.data[o:], (rows, run), (stride, 1))

    def grid(self, extent: tuple, lo: int, shape: tuple, strides: tuple) -> np.ndarray:
        """A strided view of the bytes from `lo` (`strides` in bytes), all of them within `extent` (lo, hi);
        writing into it writes memory."""
        s = self._segment(*extent)
        return np.lib.stride_tricks.as_strided(s.data[lo - s.base:], shape, strides)

    def write_grid(self, extent: tuple, lo: int, shape: tuple, strides: tuple, values: np.ndarray) -> None:
        """Store `values` through `grid`'s view (its elements must not overlap)."""
        self._written(self._segment(*extent))
        store(self.grid(extent, lo, shape, strides), values)

    def write_rows(self, lo: int, rows: int, run: int, stride: int, values: np.ndarray) -> None:
        s = self._segment(lo, lo + (rows - 1) * stride + run)
        self._written(s)
        store(self.rows(lo, rows, run, stride), values)

    def bytes_at(self, addr: int, n: int) -> bytes:
        s = self._segment(addr, addr + n)
        return s.data[addr - s.base:addr - s.base + n].tobytes()
