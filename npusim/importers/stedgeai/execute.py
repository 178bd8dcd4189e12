"""Functional execution of an imported ST program: every hardware epoch runs unit by unit from its lifted
register configuration, on the bytes of a simulated memory; software epochs run their library operators.

The epoch is a dataflow of frames: a reading stream engine turns the bytes its walk visits into a stream
of bit patterns (its frames read lazily, when a consumer needs them, so a value written back by another
engine of the same epoch is seen, as on the chip); units take whole frames from their input ports and
emit frames to every destination the stream switch links them to (a destination with two switch
contexts takes the source's frames alternately, as the contexts' frame counts say; a disabled context
drops them); a writing engine stores each element as soon as it arrives. The epoch ends when every
writing engine has stored all its frames. Unit arithmetic: `units_exec`; software operators: `sw_exec`;
what the program alone decides (placed engines, walks and the shape of each frame in memory, unit fields
and their derived tables, gate plans, the kernels of the weight images), once per program: `exec_plan`.
`run(fast=False)` derives every epoch afresh and moves every byte by its address: the general path the
plan's shortcuts are tested against.

The compile's RAM pools start with a seeded pattern (`exec_memory.Memory.fill_uninitialised`), so a value read before it was written is
visible as such; memory outside the compile's pools and the weight images reads as 0.

Why one module of ~560 lines: an epoch's dataflow (reading engines, switch contexts, unit ports, writing
engines) is one scheduler over shared frame queues; the units' arithmetic, the software operators, the memory
(`exec_memory`) and the program's plan are apart.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np

from ...errors import StImportError
from . import collector, dss2
from . import streng as se
from . import units_exec as ux
from . import units_jit as jit
from . import unit_tables as ut
from .board import ReplayOptions, board_windows, place_user_io, resolved_buffers
from .exec_memory import Memory, distinct_bytes, word_type
from .exec_plan import EpochPlan, UnitFields, Walk, epoch_plan, program_plan, walk_bytes, walk_of
from .model import HwEpoch, StOutput, Streng, Unit
from .sw_exec import run_sw_operator
from .weights import param_extent

# --------------------------------------------------------------------------------------------- stream nodes


class Underrun(StImportError):
    """A unit needs more elements than its sources deliver: the configuration and npusim's reading of it
    disagree (the run stops rather than invent values)."""


@dataclass
class Port:
    """An input port: a FIFO of bit patterns of one width."""

    bits: int = 0
    chunks: deque = field(default_factory=deque)
    count: int = 0
    source: object = None

    def push(self, values: np.ndarray, bits: int, pixel: int) -> None:
        if self.bits and bits != self.bits:
            raise StImportError(f"stream of {bits}-bit elements into a port fed {self.bits}-bit ones")
        self.bits = bits
        if values.size:
            self.chunks.append(values)
            self.count += values.size

    def take(self, n: int, who: str) -> np.ndarray:
        while self.count < n:
            if self.source is None:
                raise Underrun(f"{who}: needs {n} elements, its input has {self.count} and no source")
            self.source.produce()
        out, got = [], 0
        while got < n:
            c = self.chunks.popleft()
            if got + c.size > n:
                k = n - got
                self.chunks.appendleft(c[k:])
                c = c[:k]
            out.append(c)
            got += c.size
        self.count -= n
        return np.concatenate(out) if len(out) > 1 else out[0]


class Gate:
    """A destination's switch contexts for one source: runs of frames pass or are dropped in turn."""

    def __init__(self, plan):
        self.plan = [(p, n) for p, n in plan if n > 0]  # [(passes, frames)], cycled; [] = always pass
        self.k, self.left = 0, self.plan[0][1] if self.plan else 0

    def passes(self) -> bool:
        if not self.plan:
            return True
        if self.left == 0:
            self.k = (self.k + 1) % len(self.plan)
            self.left = self.plan[self.k][1]
        self.left -= 1
        return self.plan[self.k][0]


class Node:
    """A stream source: emits frames to its consumers."""

    name = "?"

    def __init__(self):
        self.consumers: list[tuple[Port, Gate]] = []
        self.exhausted = False
        self.pixel = 0  # elements per pixel of a raster stream (0: raw)

    def emit(self, values: np.ndarray, bits: int) -> None:
        for port, gate in self.consumers:
            if gate.passes():
                port.push(values, bits, self.pixel)

    def produce(self) -> None:  # one frame
        raise NotImplementedError


def _element_bytes(bits: int, who: str) -> int:
    if bits not in (8, 16, 24):
        ux.refuse(f"{who}: {bits}-bit elements")
    return bits // 8


def _patterns(raw: np.ndarray, eb: int) -> np.ndarray:
    """Little-endian `eb`-byte elements of the bytes `raw` (in C order, of any shape; often a view of memory),
    as a new 1-D array of their stream's type (`units_jit.pattern_type`)."""
    if eb == 1:
        return _copy(raw).reshape(-1)  # a copy: memory may change before it is consumed
    if eb == 2 and raw.size % 2 == 0:
        return _copy(raw).reshape(-1).view("<u2")
    raw = raw.reshape(-1)
    if eb == 3 and raw.size % 3 == 0:
        return jit.unpack3(np.ascontiguousarray(raw))
    v = raw.reshape(-1, eb).astype(np.int64)
    return ux.patterns_of(sum(v[:, i] << (8 * i) for i in range(eb)), eb)


def _copy(raw: np.ndarray) -> np.ndarray:
    """A C-order copy of the bytes `raw` (a view of memory), in the widest words that divide its runs (numpy copies
    a short run element by element). A view that repeats bytes (a 0 stride: frames read again at one address) is
    copied by `ndarray.copy`, which numpy's `array` would copy byte by byte (~50x slower: it treats such a view
    as overlapping itself)."""
    t = word_type(raw)
    if t is not None:
        words = raw.view(t)
        return (words.copy() if 0 in raw.strides else np.array(words, order="C")).view(np.uint8)
    return raw.copy() if 0 in raw.strides else np.array(raw, dtype=np.uint8, order="C")



def _element_bytes_of(p: np.ndarray, eb: int) -> np.ndarray:
    """The low `eb` bytes of each element of `p` (integer patterns), little-endian, as one uint8 array (`p`
    itself, viewed, when it holds bytes or 2-byte patterns already)."""
    if eb == 1:
        return p.astype(np.uint8, copy=False)
    if eb == 2:
        return p.astype("<u2", copy=False).view(np.uint8)
    if eb == 3 and p.dtype in (np.int32, np.int64):
        return jit.pack3(np.ascontiguousarray(p))
    return np.stack([(p >> (8 * i)) & 0xFF for i in range(eb)], axis=1).reshape(-1).astype(np.uint8)


def _addresses(engine) -> np.ndarray:
    """Every byte address a Reader's or Writer's walk visits (a plan's walk may not keep them: made again)."""
    if engine.walk.addresses is None:
        engine.walk = replace(engine.walk, addresses=walk_of(engine.s, spans=False).addresses)
    return engine.walk.addresses


class Reader(Node):
    """A stream engine reading memory (bus -> stream). With `walk` (a plan's), a frame whose bytes are
    rows at a fixed stride is read as a strided view instead of byte by byte."""

    def __init__(self, s: Streng, mem: Memory, walk: Walk | None = None):
        super().__init__()
        self.s, self.mem, self.name = s, mem, f"STRENG{s.engine}"
        self.eb = _element_bytes(s.nbits_in, self.name)
        _element_bytes(s.nbits_out, self.name)
        if s.nbits_in > s.nbits_out:
            ux.refuse(f"{self.name}: memory elements wider than the stream ({s.nbits_in} -> {s.nbits_out} bits)")
        self.walk = walk or walk_of(s, spans=False)
        self.whole = False  # deliver all frames at once (the epoch's plan says when that computes the same)
        self.frame = se.frame_bytes(s)
        self.k = 0
        self.pixel = 0 if s.raw else max(s.batch_depth, 1)

    def produce(self) -> None:
        """The next frame (with `whole`: every frame left, as one chunk)."""
        s = self.s
        if self.k >= max(s.frame_tot_cnt, 0):
            raise Underrun(f"{self.name}: all {s.frame_tot_cnt} frames already read")
        w = self.walk
        span = w.frame_spans[self.k] if w.frame_spans and not self.whole else None
        if span is not None:  # one frame of rows at a stride (the common case frame by frame): a view
            self.k += 1
            return self._emit(self.mem.rows(*span))
        frames = range(self.k, max(s.frame_tot_cnt, 0) if self.whole else self.k + 1)
        if self.whole and w.contiguous:
            n = len(frames) * self.frame
            raw = self.mem.rows(w.extent[0] + self.k * self.frame, 1, n, n).reshape(-1)
        elif len(frames) > 1 and w.starts is not None:  # frames laid out alike: one strided view or one gather
            g = w.grid(self.k, frames[-1] + 1)
            raw = self.mem.grid(w.extent, *g) if g is not None else \
                self.mem.read(walk_bytes(w, self.k * self.frame, (frames[-1] + 1) * self.frame), w.extent)
        elif w.frame_spans and all(w.frame_spans[k] is not None for k in frames):
            parts = [self.mem.rows(*w.frame_spans[k]) for k in frames]  # (rows, run) views
            # one frame stays a view (`_patterns` copies it once)
            raw = parts[0] if len(parts) == 1 else np.concatenate([v.reshape(-1) for v in parts])
        elif w.starts is not None:  # frames laid out alike (a plan's walk keeps no addresses then): gathered
            raw = self.mem.read(walk_bytes(w, self.k * self.frame, (frames[-1] + 1) * self.frame), w.extent)
        else:
            raw = self.mem.read(_addresses(self)[self.k * self.frame:(frames[-1] + 1) * self.frame])
        self.k = frames[-1] + 1
        self._emit(raw)

    def _emit(self, raw: np.ndarray) -> None:
        """Emit the bytes `raw` (a view of memory, copied here) as the stream's patterns."""
        s = self.s
        p = _patterns(raw, self.eb)
        if s.nbits_out > s.nbits_in:
            p = p.astype(np.int64)
            if s.align_right:  # LSB aligned, sign-extended unless unsigned
                if not s.nbits_unsigned:
                    p = np.where(p >= 1 << (s.nbits_in - 1), p + ((1 << s.nbits_out) - (1 << s.nbits_in)), p)
            else:  # MSB aligned
                p = p << (s.nbits_out - s.nbits_in)
            p = ux.patterns_of(p, s.nbits_out // 8)
        self.emit(p, s.nbits_out)


class Writer:
    """A stream engine writing memory (stream -> bus): stores elements as they arrive. With `walk` (a
    plan's), a run of elements landing on whole rows of a frame is stored through a strided view."""

    def __init__(self, s: Streng, mem: Memory, walk: Walk | None = None):
        self.s, self.mem, self.name = s, mem, f"STRENG{s.engine}"
        self.eb = _element_bytes(s.nbits_out, self.name)
        _element_bytes(s.nbits_in, self.name)
        if s.nbits_in < s.nbits_out:
            ux.refuse(f"{self.name}: stream elements narrower than memory's ({s.nbits_in} -> {s.nbits_out} bits)")
        self.walk = walk or walk_of(s, spans=False)
        self.shortcuts = walk is not None  # a plan's walk: whole rows and spans stored as views
        self.total = self.walk.nbytes // self.eb
        self.done = 0
        self.port = Port()
        self.port.push = self._store  # elements are stored as they arrive

    def _store(self, values: np.ndarray, bits: int, pixel: int) -> None:
        s = self.s
        if bits != s.nbits_in:
            raise StImportError(f"{self.name}: fed {bits}-bit elements, configured for {s.nbits_in}")
        n = min(values.size, self.total - self.done)
        if n <= 0:
            return
        p = values[:n]  # patterns: their low `eb` bytes are stored (no mask needed for those)
        if bits > s.nbits_out and not s.align_right:  # MSB aligned: the top bits of the pattern
            p = (p.astype(np.int64) & ((1 << bits) - 1)) >> (bits - s.nbits_out)
        b = _element_bytes_of(p, self.eb)
        lo, hi = self.done * self.eb, (self.done + n) * self.eb
        if self._store_rows(lo, hi, b):
            pass
        elif self.shortcuts and self.walk.starts is not None:  # frames laid out alike: one scatter
            self.mem.write(walk_bytes(self.walk, lo, hi), b, self.walk.extent)
        else:
            self.mem.write(_addresses(self)[lo:hi], b)
        self.done += n

    def _store_rows(self, lo: int, hi: int, b: np.ndarray) -> bool:
        """Store bytes lo..hi of the walk as whole rows of one frame (or one span of a contiguous walk)."""
        w = self.walk
        if not self.shortcuts:
            return False
        if w.contiguous:
            self.mem.write_rows(w.extent[0] + lo, 1, hi - lo, hi - lo, b)
            return True
        if not w.frame or not w.frame_spans:
            return False
        k = lo // w.frame
        if (hi - 1) // w.frame > k and lo % w.frame == 0 and hi % w.frame == 0 and w.frame_step is not None:
            g = w.grid(k, hi // w.frame)
            if distinct_bytes(g[1], g[2]):  # whole frames at a fixed step, apart or interleaved: one strided view
                self.mem.write_grid(w.extent, *g, b)
                return True
        span = w.frame_spans[k] if (hi - 1) // w.frame == k else None
        if span is None:
            return False
        start, _, run, stride = span
        j0, j1 = lo - k * w.frame, hi - k * w.frame
        if j0 % run or j1 % run:
            return False
        self.mem.write_rows(start + j0 // run * stride, (j1 - j0) // run, run, stride, b)
        return True

    @property
    def complete(self) -> bool:
        return self.done >= self.total


REPEATED_SUMS = 1 << 18  # frames that repeat one feature frame are convolved at once up to this many sums
BATCH_ELEMENTS = 1 << 16  # a CONVACC convolves at most this many feature elements at once (larger batches
# leave the caches: YOLOX's 480x480 first layer ran 2.5x slower as one batch of two frames than frame by frame,
# its 60x60x16 layers 1.8x slower in batches of four)


def _sum_bound(acc: np.ndarray) -> int:
    """A bound on |sum| of a CONVACC's sums: float32 ones are below 2^24 (`units_exec.conv_kernels` picks float32
    only then); 0 (unknown) otherwise."""
    return ux.EXACT_FLOAT32 if acc.dtype == np.float32 else 0


class ConvNode(Node):
    """CONVACC: one output frame per input frame, with the next kernel set from the kernel stream."""

    def __init__(self, u: Unit):
        super().__init__()
        ux.checked(u, ux.convacc_check)
        self.u, self.name = u, f"CONVACC{u.index}"
        self.g = ux.conv_geometry(u)
        self.deep = bool(u.get("deepmode"))
        # the fields every frame reads
        self.depth, self.nk = max(u.get("batchDepth") or 1, 1), max(u.get("nKernels") or 1, 1)
        self.nf = self.g["w"] * self.g["h"] * self.depth  # feature elements per frame
        self.fsub, self.f_unsigned = int(u.get("fsub") or 0), bool(u.get("f_unsigned"))
        self.inbytes, self.outbits = max(u.get("inbytes_f") or 1, 1), 8 * max(u.get("outbytes_o") or 1, 1)
        self.fstat = u.get("fstat")
        # the largest |feature| the stream and the unit's lanes allow (decides the exact float type of the sums)
        self._bounds: dict = {}
        self.feature_bound = self._bound(8 * self.inbytes)
        self.ports = [Port(), Port(), Port()]
        self.k = 0
        self._feature = None  # the current feature frame (kept in feature-stationary mode)
        # the plan's decoded kernels by (unit, frame), when the kernel stream reads only read-only memory
        # (the weights: the same in every run of the program); `mem` tells whether the run wrote there
        self.kernels: dict | None = None
        self.mem = None
        self.batch = False  # many frames at once (the epoch's plan says when it may)
        self.repeats = False  # every feature frame the same bytes (`_repeated_features`): convolved once

    def _deep_bytes(self, port: Port, n: int, pixels: int, who: str) -> np.ndarray:
        """`n` bytes from a port of packed words (deep 1x1 mode): a raster source's pixels are whole
        words each (`pixels` of them, the padding bytes of each dropped), otherwise the bytes run on and
        the frame ends on a whole word."""
        while not port.bits:  # nothing arrived yet: the width comes with the first frame
            if port.source is None:
                raise Underrun(f"{who}: no source")
            port.source.produce()
        wb = max(port.bits // 8, 1)
        src_px = getattr(port.source, "pixel", 0)
        if pixels and src_px:
            words = port.take(pixels * src_px, who)
        else:
            words = port.take(-(-n // wb), who)
        b = _element_bytes_of(words, wb)  # each word's low `wb` bytes, little-endian
        if pixels and src_px:
            return b.reshape(pixels, src_px * wb)[:, :n // pixels].reshape(-1)
        return b[:n]

    def produce(self) -> None:
        """One frame (with `batch`: every whole feature frame at hand, when that is more than one)."""
        u, g, nf, depth = self.u, self.g, self.nf, self.depth
        if self.repeats and self.deep:
            frames = self._repeated_deep_frames()
            if frames >= 2:
                return self._produce_repeated_deep(frames)
        if self.batch and not self.deep and not self.fstat:
            p0 = self.ports[0]
            while p0.count * dss2.features_per_element(u, p0.bits) < nf and p0.source is not None:  # as `take`
                p0.source.produce()
            limit = REPEATED_SUMS // (g["oh"] * g["ow"] * self.nk) if self.repeats else BATCH_ELEMENTS // nf
            frames = min(p0.count * dss2.features_per_element(u, p0.bits) // nf, limit)
            if frames >= 2:
                return self._produce_frames(frames)
        cached = self.kernels.get((self.name, self.k)) if self.kernels is not None else None
        raw, bits, nbytes = None, 8, 1
        if self.deep:  # bytes of the packed words, read as 8-bit lanes
            raw = self._deep_bytes(self.ports[0], nf, g["w"] * g["h"], self.name + " features")
            self.feature_bound = self._bound(8)
        elif self.fstat and self.k % u.get("fstatcnt") and self._feature is not None:
            f = self._feature  # feature-stationary: the frame (minus FSUB) stays for `fstatcnt` kernel sets
        else:
            p0 = self.ports[0]
            raw, bits = dss2.take_features(p0, nf, u, self.name + " features")
            nbytes = self.inbytes
            self.feature_bound = self._bound(min(bits, 8 * nbytes))
        kern = cached if cached is not None else self._kernels(self.nk, depth)
        if cached is None and self.kernels is not None and not self.mem.read_only_written:
            self.kernels[(self.name, self.k)] = kern
        if raw is not None:  # the features minus FSUB, in the sums' type (read after the kernels' stream, as before)
            f = self._feature = ux.conv_features(raw, bits, nbytes, self.f_unsigned, self.fsub, kern[2].dtype)
        acc = ux.conv_sums(f.reshape(g["h"], g["w"], depth), kern, g)
        accin = self._accumulator(acc.size)
        self.k += 1
        out = ux.conv_output(acc, accin, u, self.ports[2].bits, _sum_bound(acc))
        self.emit(out.reshape(-1), self.outbits)

    def _deep_frame_words(self, port: Port) -> int:
        """Stream words one deep-mode feature frame takes (as `_deep_bytes` takes them)."""
        pixels, src_px = self.g["w"] * self.g["h"], getattr(port.source, "pixel", 0)
        return pixels * src_px if src_px else -(-self.nf // max(port.bits // 8, 1))

    def _repeated_deep_frames(self) -> int:
        """Deep-mode feature frames at hand (each the same bytes: `repeats`), at most what `REPEATED_SUMS` allows."""
        p0 = self.ports[0]
        while not p0.count and p0.source is not None:
            p0.source.produce()
        limit = REPEATED_SUMS // (self.g["oh"] * self.g["ow"] * self.nk)
        return min(p0.count // self._deep_frame_words(p0), limit) if p0.bits else 0

    def _produce_repeated_deep(self, frames: int) -> None:
        """`frames` deep-mode frames whose features are the same bytes (`repeats`): the features of the first (the
        others' words dropped), each frame's kernels, one product (`units_exec.conv_sums_repeated`), then as
        `_produce_frames`."""
        u, g = self.u, self.g
        p0 = self.ports[0]
        raw = self._deep_bytes(p0, self.nf, g["w"] * g["h"], self.name + " features")
        p0.take((frames - 1) * self._deep_frame_words(p0), self.name + " features")
        self.feature_bound = self._bound(8)
        kerns = [self._frame_kernels(self.k + j) for j in range(frames)]
        dtype = np.result_type(*(k[2].dtype for k in kerns))
        f = ux.conv_features(raw, 8, 1, self.f_unsigned, self.fsub, dtype).reshape(g["h"], g["w"], self.depth)
        if all(k[0] == "gemm" for k in kerns) and len({k[2].shape for k in kerns}) == 1:
            acc = ux.conv_sums_repeated(f, kerns, g)
        else:
            acc = ux.conv_sums_frames(np.broadcast_to(f, (frames,) + f.shape), kerns, g)
        accin = self._accumulators(frames, acc[0].size)
        self.k += frames
        out = ux.conv_output(acc, accin, u, self.ports[2].bits, _sum_bound(acc))
        self.emit(out.reshape(-1), self.outbits)

    def _frame_kernels(self, k: int) -> tuple:
        """Frame k's kernels: the plan's decoded ones, or taken from the kernel stream (and kept while nothing
        wrote read-only memory)."""
        key = (self.name, k)
        kern = self.kernels.get(key) if self.kernels is not None else None
        if kern is None:
            kern = self._kernels(self.nk, self.depth)
            if self.kernels is not None and not self.mem.read_only_written:
                self.kernels[key] = kern
        return kern

    def _bound(self, bits: int) -> int:
        """`units_exec.conv_feature_bound` of this unit for `bits`-bit features (kept per width)."""
        got = self._bounds.get(bits)
        if got is None:
            got = self._bounds[bits] = ux.conv_feature_bound(self.u, bits)
        return got

    def _produce_frames(self, frames: int) -> None:
        """`frames` frames at once (neither deep nor feature-stationary): the features of all, each frame's
        kernels as `produce` takes them, the sums in one batched product (`units_exec.conv_sums_frames`), the
        accumulator inputs in one take, the outputs in one pass and one chunk."""
        u, g = self.u, self.g
        depth, nk = max(u.get("batchDepth") or 1, 1), max(u.get("nKernels") or 1, 1)
        nf, ib = g["w"] * g["h"] * depth, max(u.get("inbytes_f") or 1, 1)
        p0 = self.ports[0]
        raw, bits = dss2.take_features(p0, frames * nf, u, self.name + " features")
        self.feature_bound = ux.conv_feature_bound(u, min(bits, 8 * ib))
        kerns = [self._frame_kernels(self.k + j) for j in range(frames)]
        dtype = np.result_type(*(k[2].dtype for k in kerns))
        if self.repeats and all(k[0] == "gemm" for k in kerns) and len({k[2].shape for k in kerns}) == 1:
            f = ux.conv_features(raw[:nf], bits, ib, bool(u.get("f_unsigned")), int(u.get("fsub") or 0), dtype)
            acc = ux.conv_sums_repeated(f.reshape(g["h"], g["w"], depth), kerns, g)
        else:
            f = ux.conv_features(raw, bits, ib, bool(u.get("f_unsigned")), int(u.get("fsub") or 0), dtype)
            acc = ux.conv_sums_frames(f.reshape(frames, g["h"], g["w"], depth), kerns, g)
        accin = self._accumulators(frames, acc[0].size)
        self.k += frames
        out = ux.conv_output(acc, accin, u, self.ports[2].bits, _sum_bound(acc))
        self.emit(out.reshape(-1), 8 * max(u.get("outbytes_o") or 1, 1))

    def _accumulators(self, frames: int, n: int):
        """The accumulator inputs of frames k .. k+frames-1 as one array of port 2's patterns, zero where a frame
        adds none (as `_accumulator` decides frame by frame), or None when no frame adds one."""
        u = self.u
        if not u.get("accumulate"):
            return None
        rules = [self._accumulator_rule(self.k + j) for j in range(frames)]
        taken = sum(t for t, _ in rules)
        if not taken:
            return None
        p2 = self.ports[2]
        a = p2.take(taken * n, self.name + " accumulator input").reshape(taken, n)
        if all(takes and keeps for takes, keeps in rules):
            return a.reshape(-1)
        out, i = np.zeros((frames, n), a.dtype), 0  # pattern 0: lane value 0
        for j, (takes, keeps) in enumerate(rules):
            if takes:
                if keeps:
                    out[j] = a[i]
                i += 1
        return out.reshape(-1)

    def _accumulator_rule(self, k: int) -> tuple[bool, bool]:
        """(whether frame k takes an accumulator input from port 2, whether it adds it) — see `_accumulator`."""
        u = self.u
        if k == 0 and (not u.get("accumulate_first") or u.get("accumulate_gen_first")):
            return False, False
        if u.get("afilt_mode") in ("AFILT_MODE_FRAMEZERO",):
            tot = max(u.get("afilt_tot") or 1, 1)
            return True, u.get("afilt_first", 0) <= k % tot <= u.get("afilt_last", tot - 1)
        return True, True

    def _kernels(self, nk: int, depth: int) -> tuple:
        """This frame's kernels from the kernel stream, as `units_exec.conv_kernels` gives them."""
        u, g = self.u, self.g
        # KFILT: the kernel stream carries `kfilt_tot` kernels per frame (shared by chained CONVACCs); this
        # unit keeps kernels kfilt_first..kfilt_last
        tot = u.get("kfilt_tot") or nk
        first = u.get("kfilt_first") or 0 if u.get("kfilt_tot") else 0
        per = g["kh"] * g["kw"] * depth
        p1 = self.ports[1]
        if self.deep:
            # the kernel stream holds `tot / nk` kernel sets per frame, each of whole words
            sets = [ux.deep_kernels(ux.lane_values(self._deep_bytes(p1, nk * per, 0, self.name + " kernels"),
                                                   8, 1, bool(u.get("k_unsigned"))), nk, depth)
                    for _ in range(tot // nk)]
            k = np.concatenate(sets)
        else:
            k = ux.lane_values(p1.take(tot * per, self.name + " kernels"), p1.bits, 1, bool(u.get("k_unsigned")))
        k = k.reshape(tot, per)[first:first + nk]
        return ux.conv_kernels(k.reshape(nk, g["kh"], g["kw"], depth), self.feature_bound)

    def _accumulator(self, n: int):
        """The accumulator input of frame k (port 2), or None. NOSUM: none; the first frame with NO1SUM
        or GEN1SUM takes none from the port (GEN1SUM: zeros); AFILT FRAMEZERO zeroes the frames whose
        index in the group of `afilt_tot` is outside [afilt_first, afilt_last]."""
        if not self.u.get("accumulate"):
            return None
        takes, keeps = self._accumulator_rule(self.k)
        if not takes:
            return None
        a = self.ports[2].take(n, self.name + " accumulator input")  # port 2's patterns
        return a if keeps else None


class ArithNode(Node):
    def __init__(self, u: Unit):
        super().__init__()
        ux.checked(u, ux.arith_check)
        self.u, self.name = u, f"ARITH{u.index}"
        self.ports = [Port(), Port()]
        self.n = 0
        self.chain: list | None = None  # [first, ..., self]: the ARITH nodes this one computes in turn (`_chain_arith`)

    def produce(self) -> None:
        """One incoming frame of X (and as many elements of Y) through the unit (with `chain`: through every unit
        of the chain, from the first one's input)."""
        u = self.u
        px = (self.chain[0] if self.chain else self).ports[0]
        while px.count == 0:
            if px.source is None:
                raise Underrun(f"{self.name}: its X input has no source")
            px.source.produce()
        n = px.count
        x = px.take(n, self.name + " X")
        if self.chain:
            out = ux.arith_chain_patterns([c.u for c in self.chain], x, px.bits, self.n)
        else:
            py = self.ports[1]
            y = py.take(n, self.name + " Y") if u.get("dualinput") else None
            out = ux.arith_patterns(u, x, px.bits, y, py.bits, self.n)
        self.n += n
        self.emit(out, 8 * max(u.get("outbytes_o") or 1, 1))


def _fed_alone(node: ArithNode) -> bool:
    """Whether a single-input ARITH takes its X from a single-input ARITH that feeds nothing else, through a link
    no switch context gates: then the two compute each element in turn, whatever the frames."""
    src = node.ports[0].source
    return (isinstance(src, ArithNode) and not node.u.get("dualinput") and not src.u.get("dualinput")
            and node.ports[1].source is None and len(src.consumers) == 1
            and src.consumers[0][0] is node.ports[0] and not src.consumers[0][1].plan)


def _chain_arith(nodes) -> None:
    """Give each last ARITH of a chain of single-input ARITHs (`_fed_alone`) the chain, first to last: it computes
    them all in one pass (`units_exec.arith_chain_patterns`); the others are never asked for a frame."""
    arith = [n for n in nodes if isinstance(n, ArithNode)]
    inner = {id(n.ports[0].source) for n in arith if _fed_alone(n)}
    for n in arith:
        if id(n) in inner or not _fed_alone(n):
            continue
        chain = [n]
        while _fed_alone(chain[0]):
            chain.insert(0, chain[0].ports[0].source)
        n.chain = chain


class PoolNode(Node):
    def __init__(self, u: Unit):
        super().__init__()
        ux.checked(u, ux.pool_check)
        self.u, self.name = u, f"POOL{u.index}"
        self.ports = [Port()]
        self.batch = False  # pool every whole frame at hand at once (the epoch's plan says when it may)

    def produce(self) -> None:
        """One frame (with `batch`: every whole frame its input holds, at least one)."""
        u = self.u
        p = self.ports[0]
        size = ux.pool_frame_size(u)
        frames = max(p.count // size, 1) if self.batch else 1
        x = ux.lane_values(p.take(frames * size, self.name), p.bits, max(u.get("inbytes_f") or 1, 1))
        nbytes = max(u.get("outbytes_o") or 1, 1)
        self.emit(ux.patterns_of(ux.pool_frame(u, x, frames), nbytes), 8 * nbytes)


class ActivNode(Node):
    """ACTIV: each 8-bit input through the unit's function table."""

    def __init__(self, u: Unit):
        super().__init__()
        ux.checked(u, ux.activ_check)
        self.u, self.name = u, f"ACTIV{u.index}"
        self.ports = [Port()]

    def produce(self) -> None:
        p = self.ports[0]
        while p.count == 0:
            if p.source is None:
                raise Underrun(f"{self.name}: its input has no source")
            p.source.produce()
        x = p.take(p.count, self.name).astype(np.uint8, copy=False)  # the input byte (the low 8 bits) indexes the table
        nbytes = max(self.u.get("outbytes_o") or 1, 1)
        self.emit(ux.patterns_of(ux.activ_table(self.u), nbytes)[x], 8 * nbytes)


UNIT_NODES = {"CONVACC": ConvNode, "ARITH": ArithNode, "POOL": PoolNode, "ACTIV": ActivNode}


# ------------------------------------------------------------------------------------------------- epochs

def run_epoch(ep: HwEpoch, mem: Memory, symbols: dict, plan: EpochPlan | None = None) -> None:
    """Run one hardware epoch on `mem`; `plan` is the program's plan of it (None: derived here, and
    every frame read and written byte by byte: the general path the plan's shortcuts must equal)."""
    fast = plan is not None
    if plan is None:
        plan = epoch_plan(ep, symbols, mem.read_only_test(), spans=False)
    nodes: dict = {}
    writers: list[Writer] = []
    for i, s in plan.strengs.items():
        walk = plan.walks[i] if fast else None
        if s.dir:
            w = Writer(s, mem, walk)
            writers.append(w)
            nodes[("STRENG", i)] = w
        else:
            r = nodes[("STRENG", i)] = Reader(s, mem, walk)
            r.whole = fast and plan.whole_reads
    for u, fields in plan.units:
        cls = UNIT_NODES.get(u.kind)
        if cls is None:
            ux.refuse(f"epoch {ep.number}: {u.kind}{u.index}")
        if ut.needs_tables(fields):
            fields = _with_tables(u, fields, mem)
        node = nodes[(u.kind, u.index)] = cls(fields)
        if isinstance(node, (PoolNode, ConvNode)):
            node.batch = fast and plan.whole_reads
    for ln in ep.links:
        dst, src = nodes.get((ln.dst_kind, ln.dst_index)), nodes.get((ln.src_kind, ln.src_index))
        if dst is None or src is None:
            continue  # a link to or from a unit the epoch does not enable
        port = dst.port if isinstance(dst, Writer) else dst.ports[ln.dst_port] if ln.dst_port < len(dst.ports) else None
        if port is None:
            raise StImportError(f"epoch {ep.number}: link into port {ln.dst_port} of {dst.name}, which has none")
        if any(p is port for p, _ in src.consumers):
            continue  # the second switch context of the same link: one gate covers both
        port.source = src
        src.consumers.append((port, Gate(plan.gate_plans[(ln.dst_kind, ln.dst_index, ln.dst_port, ln.src_kind,
                                                          ln.src_index)])))
        if fast and isinstance(dst, ConvNode) and ln.dst_port == 1 and isinstance(src, Reader) \
                and plan.walks[src.s.engine].read_only:
            dst.kernels, dst.mem = plan.kernels, mem
    if fast:
        _chain_arith(nodes.values())
        for n in nodes.values():
            if isinstance(n, ConvNode):
                n.repeats = n.batch and _repeated_features(n)
    try:
        for w in writers:
            if w.port.source is None:
                raise StImportError(f"epoch {ep.number}: {w.name} writes, but nothing streams into it")
            while not w.complete:
                w.port.source.produce()
    finally:
        _release(nodes.values())


def _repeated_features(node: ConvNode) -> bool:
    """Whether every feature frame of a CONVACC is the same bytes: its feature port's only source is a reading
    engine that walks one frame again and again (frames at one address, `Walk.frame_step` 0) in frames of the
    CONVACC's frame, through an ungated link, in an epoch whose frames are independent (nothing writes what it
    reads, `exec_plan.independent_frames`)."""
    r, u = node.ports[0].source, node.u
    if not isinstance(r, Reader) or not r.whole or r.walk.frame_step != 0:
        return False
    gates = [gate for port, gate in r.consumers if port is node.ports[0]]
    if len(gates) != 1 or gates[0].plan or r.frame % r.eb:
        return False
    if node.deep:  # frames of whole words (`ConvNode._deep_frame_words`)
        pixels, wb = node.g["w"] * node.g["h"], r.s.nbits_out // 8
        return r.frame // r.eb == (pixels * r.pixel if r.pixel else -(-node.nf // wb))
    return r.frame // r.eb * dss2.features_per_element(u, r.s.nbits_out) == node.nf


def _release(nodes) -> None:
    """Break an epoch's reference cycles (a port names its source, a source its consumers' ports, a writer's
    port its store), so that its nodes and the frames they hold are freed when the epoch ends, not by a later
    garbage collection (which cost ~50 ms per YOLOX run, freeing all its epochs at once)."""
    for n in nodes:
        if isinstance(n, Writer):
            n.port.source = None
            n.port.__dict__.pop("push", None)
            continue
        n.consumers = []
        for port in getattr(n, "ports", ()):  # a unit's input ports (a reading engine has none)
            port.source = None


def _with_tables(u: Unit, fields: UnitFields, mem: Memory) -> UnitFields:
    """`fields` with the tables the unit's struct points to, read from `mem` as the runtime reads them when it
    configures the unit: kept in the plan's fields when they lie in read-only memory nothing has written,
    else read for this run alone."""
    read_only = mem.read_only_test()
    extra = ut.read_tables(fields, mem.bytes_at)
    if not mem.read_only_written and all(read_only(a, a + n) for _, a, n, _ in ut.table_spans(fields)):
        fields.fields.update(extra)
        return fields
    return UnitFields(replace(u, fields=u.fields + tuple(extra.items())))


# -------------------------------------------------------------------------------------------------- program

@dataclass
class FunctionalRun:
    memory: Memory
    outputs: dict  # output buffer name -> np.ndarray (its dtype and shape)


def buffer_dtype(b) -> np.dtype:
    return np.dtype(b.numpy_type)


def read_buffer(mem: Memory, b, shape=None) -> np.ndarray:
    dt = buffer_dtype(b)
    data = np.frombuffer(mem.bytes_at(b.start, b.size), dtype=dt)
    shape = shape or b.mem_shape or b.shape
    if shape and int(np.prod(shape)) == data.size:
        return data.reshape(shape)
    return data


def write_buffer(mem: Memory, b, values: np.ndarray) -> None:
    data = np.ascontiguousarray(values).astype(buffer_dtype(b), copy=False).tobytes()
    if len(data) != b.size:
        raise StImportError(f"input '{b.name}': {len(data)} bytes given, the buffer holds {b.size}")
    mem.load(b.start, data)


def build_memory(out: StOutput, seed: int = 0) -> tuple[Memory, dict]:
    """The board's memory with the weight images at their pools' addresses (sizes checked when they
    were attached), the compile's RAM pools holding the uninitialised pattern; and the user-I/O
    placements {symbol: address}."""
    mem = Memory([(w.name, w.base, w.size, "w" not in w.perms) for w in board_windows()], seed)
    need = param_extent(out)
    missing = [p for p in need if p not in out.weights]
    if missing and out.weight_notes:  # an image was given, at addresses the program does not read
        raise StImportError(f"functional run: no weight image for pool(s) {', '.join(missing)}: "
                            f"{out.weight_notes[0]}: flashed as is, the program would read other bytes "
                            "(rebuild the image at its pool's address)")
    if missing:
        raise StImportError(f"functional run: no weight image for pool(s) {', '.join(missing)} "
                            f"(the parameters live there; give the .raw/.bin/.hex file)")
    for p in out.pools:
        if not p.read_only:
            mem.fill_uninitialised(p.address, p.end)
    for name, data in out.weights.items():
        mem.load(out.pool_named(name).address, data)
    mem.sealed = True
    place = place_user_io(out, ReplayOptions())
    return mem, {k: v[0] for k, v in place.items()}


def _blas_limit(threads: int | None):
    """BLAS limited to `threads` for the run (its GEMMs are small: extra threads only contend)."""
    if threads is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dependency; tolerate an old environment
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads, user_api="blas")


def run(out: StOutput, inputs: dict, seed: int = 0, after_epoch=None, threads: int | None = 1,
        before_epoch=None, fast: bool = True) -> FunctionalRun:
    """Run the whole program on `inputs` ({input buffer name: array of its dtype and size}, raw).
    `after_epoch(epoch number, memory, buffers)` is called after every epoch, `before_epoch` (same
    arguments) before it (per-layer comparisons: a layer fed the reference's tensors); a software block
    counts as one epoch, its `epoch_num`. `threads`: BLAS threads (None: as the process has them).
    `fast`: the program's cached plan and its shortcuts (False: every epoch derived afresh, every byte
    moved one by one: the reference the shortcuts are tested against). Values depend on neither."""
    with _blas_limit(threads), collector.paused():
        return _run(out, inputs, seed, after_epoch, before_epoch, fast)


def _run(out: StOutput, inputs: dict, seed: int, after_epoch, before_epoch=None, fast: bool = True) -> FunctionalRun:
    mem, symbols = build_memory(out, seed)
    plan = program_plan(out, symbols, mem.read_only_test()) if fast else None
    bufs = resolved_buffers(out, symbols)
    for b in bufs:
        if b.role == "input" and not b.is_param:
            if b.name not in inputs:
                raise StImportError(f"functional run: no value for input '{b.name}'")
            write_buffer(mem, b, inputs[b.name])
    for blk in out.blocks:
        if blk.kind == "hw" and not blk.epochs:
            raise StImportError(f"epoch block {blk.index}: its hardware epochs are not decoded; "
                                "no functional run")
        for ep in blk.epochs:
            if before_epoch is not None:
                before_epoch(ep.number, mem, bufs)
            run_epoch(ep, mem, symbols, plan.epoch(ep) if plan is not None else None)
            if after_epoch is not None:
                after_epoch(ep.number, mem, bufs)
        if blk.sw_ops and before_epoch is not None:
            before_epoch(blk.epoch_num, mem, bufs)
        for op in blk.sw_ops:
            run_sw_operator(op, mem, bufs, blk)
        if blk.sw_ops and after_epoch is not None:
            after_epoch(blk.epoch_num, mem, bufs)
    outs = {b.name: read_buffer(mem, b) for b in bufs if b.role == "output"}
    return FunctionalRun(mem, outs)
