"""MatMul between two computed tensors on the CONV unit (contract: isa/README.md "MatMul between activations").

    Y[..., M, N] = A[..., M, K] @ B[..., K, N]   (batch dimensions broadcast as numpy does)

In place: a rank-3 map [1, C, L] is stored with C channels over L pixels (ir.hwc), so for [1, M, K] @
[1, K, N] B is a map of N pixels with K channels and Y one of N pixels with M channels: Y^T = B^T A^T is
a 1 x 1 convolution of B whose M x K kernel is A itself, read in its dense [out_c = M][in_c = K] order
from A's buffer by the weight SE (`weight_stream`). Nothing is copied.

Per slice (every other case: batched, per-head [1, H, T, d], rank 2, broadcast batch dimensions): 1 x 1
convolutions over the slices of the broadcast batch whose three streams walk the slices in the operands'
storage (Graph.gathers: a vector walk, run + three loops, first byte on the bus word): either (`kernel_b`)
the CA's input map is A's slice as M pixels of K channels, the kernel B's slice in [n][k] order, the output
Y's slice as M pixels of N channels; or the input is B's slice as N pixels of K channels, the kernel A's
slice, the output Y^T's slice. All slices go into one epoch when the walks reach them (a grouped CONV, one
group per slice; or, when the slices share their input, a dense CONV whose kernel stacks theirs), else one
epoch per slice. An operand or output whose slices no walk reaches in its own layout (a head is a channel
of a map: its elements start inside a bus word) is first copied into a tensor in ONNX order
(compiler/recipes/permute.py), the output copied back from one: dense, or with the CA's channel axis of its
slices (A's columns or B's rows, Y's columns or rows) padded to whole 16-channel planes, so that a stream
of K or N channels that are neither <= 4 nor a multiple of 16 has places for its last plane's padding
lanes (read: bytes the CA ignores, filled first so that every byte read was written; written: the CA's
zeros, never copied back), and with each slice starting on the bus word. Y's own padding lanes (H heads
not a multiple of 16) are zeroed by the copy back (permute.plan). The NPU takes it when its estimate
beats the host's MatMul (the profile's [host] model), else the CPU runs it with both figures in the reason.

int8: the CA has no weight zero point, so the kernel operand is quantized symmetrically (zero point 0,
`quantize.assign_qparams`); a pre-quantized model maps only where the model's own zero point of the
kernel operand is 0 (Y = A B is bilinear: a zero point of the kernel adds zp * sum_k of the other
operand, a term per output element that no CA bias holds). The multiplier is s_in * s_kernel / s_Y.

Over 500 lines: one recipe family, MatMul of two maps (slice plans, walks, the cost against the host)
and its mapping; the helpers are its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ModelError
from ...hw import load_profile
from ...memory.cost import pattern_cost
from ...memory.pattern import AccessPattern
from ...program.layouts import block_size, required_layout
from ...program.spec import load_isa
from ..checks import MAP, fc_operand, map_fits_units, model_weights
from ..ir import Gather, Graph, Layer, Node, Step, hwc
from ..recipe import Recipe
from ..storage import activation_pools, storage_layout
from .conv import fc_step, model_quant
from .permute import NOMINAL_LINE, WORD, Side, _side, _vectors, host_cycles
from .permute import Plan as CopyPlan
from .permute import lower as copy_layers
from .permute import plan as copy_plan


# ------------------------------------------------------------------ the in-place case

def _in_place_problem(g: Graph, n: Node) -> str | None:
    a, b = n.inputs[0], n.inputs[1]
    sa, sb = tuple(g.shapes[a]), tuple(g.shapes[b])
    if len(sa) != 3 or len(sb) != 3 or sa[0] != 1 or sb[0] != 1 or not (g.is_map(a) and g.is_map(b)):
        return "not [1, M, K] @ [1, K, N] maps"
    m, k = sa[1], sa[2]
    if required_layout(*hwc(sa)) == "blocked16" and m % block_size() and m > block_size():
        return (f"A's {m} rows are channels of a blocked16 map whose last 16-channel plane is partial (the "
                "weight SE's loops skip the padding lanes of a single plane only)")
    if a in g.windows or a in g.strided or a in g.gathers:
        return "A is read by addressing (a box of another map), not a map of its own"
    if _kernel_zp(g, a):
        return f"the model quantizes the kernel operand A with zero point {_kernel_zp(g, a)}"
    if k < 1 or m < 1:
        return f"empty operand A {list(sa)}"
    return None


def _kernel_zp(g: Graph, t: str) -> int:
    """The zero point a pre-quantized int8 model fixes on `t` (0 when none: calibrated symmetrically)."""
    if g.compile_dtype != "int8" or not g.prequantized:
        return 0
    return int(g.qdq.get(t, (1.0, 1))[1])


def step(g: Graph, n: Node, a: str) -> Step:
    """The in-place CONV step (its input map is B, the layer's input; `operand` is A, fed on the weight port)."""
    m = g.shapes[n.inputs[0]][1]
    return Step("CONV", n.outputs[0], _conv_params(m), operand=a)


def _conv_params(m: int) -> dict:
    return dict(weights=None, bias=np.zeros(m, np.float32), kh=1, kw=1, sh=1, sw=1, dh=1, dw=1,
                pads=(0, 0, 0, 0), groups=1, act="none", act_range=None)


def weight_stream(p) -> dict:
    """SE loops (bytes, i1 fastest) reading map placement `p` ([1, M, K]: K pixels of M channels) as the
    dense [M][K] kernel: element (m, k) is pixel k, channel m. A gather placement (a slice's walk) has its
    own descriptor."""
    if p.se:
        return dict(zip(("run", "n1", "s1", "n2", "s2", "n3", "s3"), p.se))
    es, k, m = p.esize, p.w, p.c
    if p.layout == "linear":  # K = 1: the M channels are dense
        return dict(run=m * es)
    if p.layout == "image":  # [K][M] packed pixels
        return dict(run=es, n1=k, s1=m * es, n2=m, s2=es)
    if m < p.block:  # one partial plane: its m lanes, the padding lanes skipped
        return dict(run=es, n1=k, s1=p.block * es, n2=m, s2=es)
    return dict(run=es, n1=k, s1=p.block * es, n2=p.block, s2=es, n3=m // p.block, s3=p.plane)


# ------------------------------------------------------------------ the per-slice plan

@dataclass(frozen=True)
class Slice:
    """The three walks of one CONV epoch (vectors in their whole tensor's storage)."""

    inp: Side
    kernel: Side | None  # None: a constant kernel (the CONV's weights)
    out: Side
    groups: int = 1  # CONV groups: one per slice (grouped), or 1 when the slices share their input
    stack: int = 1  # batch slices of this epoch (their outputs are its output channels, slice-major)


@dataclass(frozen=True)
class SlicePlan:
    kernel_b: bool  # B is the kernel (input: A's slice as M pixels of K channels); else A (input: B^T)
    dims: tuple[int, int, int]  # M, K, N
    slices: tuple[Slice, ...]
    staged: tuple[tuple[str, CopyPlan | None, str], ...]  # (a, plan, tensor), (b, ...): None = read in place
    out_plan: CopyPlan | None  # Y written in place (None) or copied back from its ONNX-order tensor
    out_name: str  # the tensor the CONVs write (Y, or its ONNX-order copy)
    cycles: float


def _batch_offsets(sa, sb, sy, sizes=None) -> list[tuple[int, int, int]]:
    """(A, B, Y) flat element offsets of every slice of Y's broadcast batch (numpy broadcasting); `sizes`:
    the elements of one stored slice of each (default: its M x K, K x N, M x N)."""
    ba, bb, by = sa[:-2], sb[:-2], sy[:-2]
    ra, rb = (1,) * (len(by) - len(ba)) + tuple(ba), (1,) * (len(by) - len(bb)) + tuple(bb)
    ma, mb, my = sizes or (int(np.prod(s[-2:], dtype=np.int64)) for s in (sa, sb, sy))
    out = []
    for j in np.ndindex(*by) if by else [()]:
        ja = tuple(i if d > 1 else 0 for i, d in zip(j, ra))
        jb = tuple(i if d > 1 else 0 for i, d in zip(j, rb))
        fa = int(np.ravel_multi_index(ja, ra)) if ja else 0
        fb = int(np.ravel_multi_index(jb, rb)) if jb else 0
        fy = int(np.ravel_multi_index(j, by)) if j else 0
        out.append((fa * ma, fb * mb, fy * my))
    return out


def _map_order(pix: np.ndarray, chan: np.ndarray, real: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(flat indices pix[p] + chan[c], padding-lane mask) in the CA stream order of a 1 x len(pix) map of
    `real` channels (its layout by the layout rule); `chan` holds the real channels and, for a blocked16
    map, the places its last plane's padding lanes are read from or written to. None: no such stream."""
    layout = required_layout(1, pix.size, real)
    if layout == "linear":
        return pix[0] + chan[:real], np.zeros(real, bool)
    if layout == "image":
        return pix[:, None] + chan[None, :real], np.zeros((pix.size, real), bool)
    blk = block_size()
    if chan.size % blk:
        return None
    c = chan.reshape(chan.size // blk, 1, blk)
    pad = np.broadcast_to((np.arange(chan.size) >= real).reshape(c.shape), (c.shape[0], pix.size, blk))
    return c + pix[None, :, None], pad


def _channels(f: np.ndarray, count: int, stride: int) -> np.ndarray:
    """The stream channels (j, c) of groups at offsets f, `count` channels of `stride` each, the last
    group's walk continued over the padding lanes of a partial last plane."""
    ch = (f[:, None] + np.arange(count)[None, :] * stride).reshape(-1)
    extra = -ch.size % block_size()
    return np.concatenate([ch, f[-1] + np.arange(count, count + extra) * stride]) if extra else ch


def _stream_shape(pixels: int, chans: int) -> tuple[int, ...]:
    """The ONNX shape whose map is the CA's 1 x pixels x chans stream (ir.hwc: (1, pixels, chans))."""
    return (1, chans, 1, pixels)


def _walks(g: Graph, n: Node, kernel_b: bool, vec: dict, real: dict, store: dict, esize: int,
           per: int) -> tuple[Slice, ...] | None:
    """The epochs' walks, `per` consecutive batch slices to an epoch (a grouped CONV: slice j's channels
    are group j's), or None if a stream is no SE walk. vec[t]: the vectors of t's storage (by index);
    real[t]: which indices hold an element of t (the others: padding of an ONNX-order copy); store[t]:
    (rows, columns, elements from one slice to the next) of t's stored slices. A stream's padding lanes read anything in t's storage;
    written, they must land on padding."""
    a, b = n.inputs[0], n.inputs[1]
    y = n.outputs[0]
    sa, sb, sy = (tuple(g.shapes[t]) for t in (a, b, y))
    m, k, nn = sa[-2], sa[-1], sb[-1]
    (ra, ca, za), (rb, cb, zb), (ry, cy, zy) = (store[t] for t in (a, b, y))
    offs = _batch_offsets(sa, sb, sy, (za, zb, zy))
    if len(offs) % per or max(m, nn) > _in_w_max():
        return None
    ar = np.arange
    out = []
    for e in range(0, len(offs), per):
        fa, fb, fy = (np.array([o[i] for o in offs[e:e + per]], np.int64) for i in range(3))
        # the input operand the same for every slice of the epoch (broadcast): read once, a dense CONV whose
        # kernel stacks the slices' kernels; else a grouped CONV, slice j's input channels its group's
        shared = bool(np.all((fa if kernel_b else fb) == (fa if kernel_b else fb)[0]))
        if shared:
            fa, fb = (fa[:1], fb) if kernel_b else (fa, fb[:1])
        if kernel_b:  # input A[m, k]: pixel m, channel (j, k); output Y[m, n]: pixel m, channel (j, n)
            got_in = _map_order(ar(m) * ca, _channels(fa, k, 1), fa.size * k)
            got_out = _map_order(ar(m) * cy, _channels(fy, nn, 1), fy.size * nn)
            idx_k = fb[:, None, None] + ar(k)[None, None, :] * cb + ar(nn)[None, :, None]  # [j][n][k] = B[k, n]
            idx_k = np.broadcast_to(idx_k, (fy.size, nn, k))
            src_in, src_k = a, b
        else:  # input B[k, n]: pixel n, channel (j, k); output Y[m, n]: pixel n, channel (j, m)
            got_in = _map_order(ar(nn), _channels(fb, k, cb), fb.size * k)
            got_out = _map_order(ar(nn), _channels(fy, m, cy), fy.size * m)
            idx_k = fa[:, None, None] + ar(m)[None, :, None] * ca + ar(k)[None, None, :]  # [j][m][k] = A[m, k]
            idx_k = np.broadcast_to(idx_k, (fy.size, m, k))
            src_in, src_k = b, a
        if got_in is None or got_out is None:
            return None
        (idx_in, _), (idx_out, pad_out) = got_in, got_out
        if idx_in.max() >= len(vec[src_in]) or idx_out.max() >= len(vec[y]) or real[y][idx_out[pad_out]].any():
            return None  # a padding lane beyond the operand, or one that would overwrite an element of Y
        walked = [(src_in, idx_in)] + ([(src_k, idx_k)] if src_k in vec else []) + [(y, idx_out)]
        sides = [_side(vec[t][idx], esize) for t, idx in walked]
        if any(s is None or any(not any(v) for _, v in s.loops) for s in sides):  # no SE walk, or a repeat
            return None
        if src_k not in vec:  # a constant kernel: the CONV's own weights
            sides.insert(1, None)
        out.append(Slice(*sides, groups=1 if shared else per, stack=per))
    return tuple(out)


def _in_w_max() -> int:
    return load_isa().command("CONV").field("in_w").mask


def _addressed(g: Graph, t: str) -> bool:
    return t in g.windows or t in g.strided or t in g.gathers


def _padded(count: int, pixels: int) -> int:
    """`count` stream channels over `pixels` pixels rounded up to whole 16-channel planes when the layout
    rule makes that map blocked16 (the stream's padding lanes then have places in an ONNX-order copy)."""
    blk = block_size()
    return -(-count // blk) * blk if required_layout(1, pixels, count) == "blocked16" else count


def _plan(g: Graph, n: Node, kernel_b: bool, profile) -> tuple[SlicePlan | None, list[str]]:
    """The cheapest per-slice plan with the given kernel operand: each operand (and Y) walked in place
    when every slice reaches it, else through an ONNX-order copy (dense, or with its slices' CA channel
    axis padded to whole 16-channel planes: the places of the streams' padding lanes)."""

    a, b, y = n.inputs[0], n.inputs[1], n.outputs[0]
    esize = load_isa().dtype_bytes(g.compile_dtype)
    sa, sb, sy = (tuple(g.shapes[t]) for t in (a, b, y))
    m, k, nn = sa[-2], sa[-1], sb[-1]
    best, whys = None, []
    # the stored slices (rows, columns, slice stride) of each tensor's ONNX-order copies: dense; the CA's
    # channel axis of the input and output streams padded to whole planes (A's columns or B's rows; Y's
    # columns or rows; the kernel dense); each with its slices starting on the bus word (a walk per slice)
    if kernel_b:
        pads = {a: (m, _padded(k, m)), b: (k, nn), y: (m, _padded(nn, m))}
    else:
        pads = {a: (m, k), b: (_padded(k, nn), nn), y: (_padded(m, nn), nn)}
    word = max(1, WORD // esize)
    choices = {}
    for t in (a, b, y):
        rows, cols = tuple(g.shapes[t])[-2:]
        numel = int(np.prod(g.shapes[t], dtype=np.int64))
        if t in g.consts:  # a constant kernel (B): the CONV's own weights, not walked
            choices[t] = [(None, None, (rows, cols, rows * cols))]
            continue
        opts = []
        if not _addressed(g, t):
            lay = storage_layout(g, t)
            padded = lay == "blocked16" and hwc(g.shapes[t])[2] % block_size()
            if not (t == y and padded):  # a partial plane's padding lanes must be written by someone
                opts.append((None, (_vectors(g.shapes[t], lay), np.ones(numel, bool)), (rows, cols, rows * cols)))
        for r, c in dict.fromkeys(((rows, cols), pads[t])):
            for dims in dict.fromkeys(((r, c, r * c), (r, c, -(-r * c // word) * word))):
                if storage_layout(g, t) != "linear" or dims != (rows, cols, rows * cols):
                    opts.append((dims, None, dims))
        choices[t] = opts
    plans: dict = {}

    def copy(t: str, dims) -> tuple[tuple, tuple[CopyPlan | None, str], str]:
        """(vectors, real mask), the permutation copying t into its ONNX-order copy with stored slices of
        `dims` (Y: back from it), and the copy's name; made once."""
        if (t, dims) not in plans:
            shape = tuple(g.shapes[t])
            rows, cols = shape[-2:]
            batch = int(np.prod(shape[:-2], dtype=np.int64))
            r, c, z = dims
            mid = staged_name(n, t) + ("" if dims == (rows, cols, rows * cols) else f"::{r}x{c}+{z - r * c}")
            g.shapes[mid], g.dtypes[mid] = (batch * z,), g.dtype(t)
            where = np.full((batch, z), -1, np.int64)  # the copy's element at each place (-1: padding)
            grid = np.full((batch, r, c), -1, np.int64)
            grid[:, :rows, :cols] = np.arange(batch * rows * cols, dtype=np.int64).reshape(batch, rows, cols)
            where[:, :r * c] = grid.reshape(batch, r * c)
            where = where.reshape(-1)
            if t == y:  # y[i] = mid[src[i]]
                src = np.flatnonzero(where >= 0)[np.argsort(where[where >= 0], kind="stable")]
                p = copy_plan(g, mid, t, src, profile, linear=True)
            else:  # mid[i] = t[where[i]] (-1: padding, not copied)
                p = copy_plan(g, t, mid, where, profile, linear=True)
            plans[(t, dims)] = ((_vectors((batch * z,), "linear"), where >= 0), p, mid)
        return plans[(t, dims)]

    count = len(_batch_offsets(sa, sb, sy))
    for ca in choices[a]:
        for cb in choices[b]:
            for cy in choices[y]:
                pick = {t: c for t, c in ((a, ca), (b, cb), (y, cy))}
                staged = {t: copy(t, c[0]) for t, c in pick.items() if c[0] is not None}
                vr = {t: (staged[t][0] if t in staged else c[1]) for t, c in pick.items()}
                vecs = {t: v[0] for t, v in vr.items() if v is not None}
                real = {t: v[1] for t, v in vr.items() if v is not None}
                store = {t: c[2] for t, c in pick.items()}
                slices = next((w for per in dict.fromkeys((count, 1))
                               if (w := _walks(g, n, kernel_b, vecs, real, store, esize, per))), None)
                if slices is None:
                    whys.append("no stream-engine walk (run + three loops, first byte on the bus word) reaches its slices")
                    continue
                bad = next((f"copying {t!r} {'back from' if t == y else 'into'} ONNX order: {staged[t][1][1]}"
                            for t in staged if staged[t][1][0] is None), None)
                if bad:
                    whys.append(bad)
                    continue
                cost = sum(staged[t][1][0].cycles for t in staged)
                cost += sum(_epoch_cycles(profile, s, (m, k, nn), esize, g.compile_dtype) for s in slices)
                ops = tuple((t, staged[t][1][0], staged[t][2]) if t in staged else (t, None, t) for t in (a, b))
                cand = SlicePlan(kernel_b, (m, k, nn), slices, ops, staged[y][1][0] if y in staged else None,
                                 staged[y][2] if y in staged else y, cost)
                if best is None or cand.cycles < best.cycles:
                    best = cand
    return best, whys


def staged_name(n: Node, t: str) -> str:
    return f"{n.outputs[0]}::matmul_onnx_order::{t}"


def _epoch_cycles(profile, s: Slice, dims, esize: int, dtype: str) -> float:
    """One CONV epoch: setup (its registers) plus the slowest of the CA (at its 1 x 1 rate) and
    its three streams (memory.cost.pattern_cost on the fastest activation pool; they share its banks)."""
    isa, comp = load_isa(), profile.compute
    m, k, nn = dims
    pool = profile.pool_named(activation_pools(profile)[0])
    unit = np.array([esize, NOMINAL_LINE, NOMINAL_LINE * 128], np.int64)  # nominal line and plane strides

    def cycles(side: Side, access: str) -> float:
        loops = [(c, int(np.dot(v, unit))) for c, v in side.loops] + [(1, 0)] * (3 - len(side.loops))
        (n1, s1), (n2, s2), (n3, s3) = loops
        return pattern_cost(pool, AccessPattern(pool.base, side.run * esize, n1, s1, n2, s2, n3, s3), profile,
                            access=access).cycles

    regs = isa.registers({"SE": 3, "CONV": 1, "LINK": 3})
    lanes = comp.lanes
    lane_use = k / (-(-k // lanes) * lanes)
    tap_use = min(comp.kernel_taps, min(comp.tap_fill, -(-k // lanes))) / comp.kernel_taps
    ca = s.stack * m * k * nn / (comp.macs(dtype) * lane_use * tap_use)
    kernel = cycles(s.kernel, "read") if s.kernel is not None else 0.0  # constant weights: the CA's own read
    streams = cycles(s.inp, "read") + kernel + cycles(s.out, "write")
    return profile.epoch.setup(regs) + max(ca, streams)


def _slice_problem(g: Graph, n: Node) -> tuple[SlicePlan | None, str]:

    a, b = n.inputs[0], n.inputs[1]
    sa, sb = tuple(g.shapes[a]), tuple(g.shapes[b])
    if len(sa) < 2 or len(sb) < 2:
        return None, f"A {list(sa)} @ B {list(sb)}: a rank-1 operand (a vector product) runs on the host"
    if min(sa[-2:] + sb[-1:]) < 1:
        return None, f"empty operand A {list(sa)} @ B {list(sb)}"
    profile = g.profile or load_profile()
    plans, whys = [], []
    for kernel_b in (True,) if b in g.consts else (True, False):
        zp = 0 if b in g.consts else _kernel_zp(g, b if kernel_b else a)
        if zp:
            whys.append(f"the model quantizes the kernel operand {'B' if kernel_b else 'A'} with zero point {zp} "
                        "(the CA's kernel takes none; the term zp * sum of the other operand is per output element)")
            continue
        p, why = _plan(g, n, kernel_b, profile)
        if p is None:
            whys += why
        else:
            plans.append(p)
    if not plans:
        return None, f"A {list(sa)} @ B {list(sb)}: " + "; ".join(dict.fromkeys(whys))
    # int8: prefer a kernel operand that is not one-signed (symmetric quantization halves its resolution)
    best = min(plans, key=lambda p: (p.cycles * (1.0 + 0.25 * _one_signed(g, b if p.kernel_b else a)), not p.kernel_b))
    host = host_cycles(g, [n], profile)
    if best.cycles >= host:
        return None, (f"its {len(best.slices)} CONV epoch(s) "
                      f"{'and ONNX-order copies ' if any(p for _, p, _ in best.staged) or best.out_plan else ''}"
                      f"(~{best.cycles:.0f} cycles) are slower than the host's MatMul (~{host:.0f} cycles)")
    return best, ""


def _one_signed(g: Graph, t: str) -> bool:
    r = g.ranges.get(t)
    return g.compile_dtype == "int8" and r is not None and (r[0] >= 0 or r[1] <= 0)


def choose(g: Graph, n: Node) -> tuple[SlicePlan | None, str]:
    """(plan, "") or (None, why), for a MatMul that is not the in-place case. Memoized on n."""
    if "_matmul" not in n.attrs:
        n.attrs["_matmul"] = _slice_problem(g, n)
    return n.attrs["_matmul"]


def problem(g: Graph, n: Node) -> str | None:
    """Why two computed tensors' MatMul cannot run on the CONV unit (None: it can); the rule is
    legality.matmul_operands's docstring."""
    for t in (n.inputs[0], n.inputs[1], n.outputs[0]):
        if not g.is_float(t):
            return f"operand {t!r} is {g.dtype(t)}, not float"
        if g.compile_dtype == "fp32" and g.dtype(t) == "fp16":
            return f"operand {t!r} is float16 in an fp32 compile (the host keeps its float16 rounding)"
        if 0 in g.shapes[t]:
            return f"operand {t!r} is empty {list(g.shapes[t])}"
    if _in_place_problem(g, n) is None and _fits(g, n):
        return None
    return choose(g, n)[1] or None


def const_problem(g: Graph, n: Node) -> str | None:
    """Why a MatMul of a computed A (rank >= 2) and a constant 2-D B [K, N] cannot run as 1 x 1 CONVs with
    B^T as weights over A's slices walked in place or through ONNX order (None: it can)."""
    a, b = n.inputs[0], n.inputs[1]
    if np.ndim(g.consts[b]) != 2:
        return f"B has rank {np.ndim(g.consts[b])} (a constant kernel is a 2-D matrix)"
    for t in (a, n.outputs[0]):
        if not g.is_float(t) or g.compile_dtype == "fp32" and g.dtype(t) == "fp16" or 0 in g.shapes[t]:
            return f"operand {t!r} {list(g.shapes[t])} is not a float tensor of this compile"
    return choose(g, n)[1] or None


def _fits(g: Graph, n: Node) -> bool:

    return map_fits_units(g, n) is None


def lower(g: Graph, n: Node, names: list[str], alias: dict) -> list[Layer]:
    """The layers of a MatMul the mapping table put on the NPU."""
    a, b = n.inputs[0], n.inputs[1]
    if _in_place_problem(g, n) is None and _fits(g, n):
        return [Layer(n.name, names, alias.get(b, b), [step(g, n, alias.get(a, a))])]
    best, why = choose(g, n)
    if best is None:  # legality checked it: an internal inconsistency

        raise ModelError(f"internal: MatMul {n.name!r} lowered although {why}")
    y = n.outputs[0]
    layers: list[Layer] = []
    whole = {}
    for t, p, mid in best.staged:
        if t in g.consts:
            continue
        src = alias.get(t, t)
        if p is None:
            whole[t] = src
            continue
        layers += copy_layers(g, Node(n.name, "Transpose", [src], [mid]), names, src, p)
        whole[t] = mid
    whole[y] = best.out_name
    m, k, nn = best.dims
    src_in, src_k = (a, b) if best.kernel_b else (b, a)
    pixels, oc = (m, nn) if best.kernel_b else (nn, m)
    for i, s in enumerate(best.slices):
        tin, tk, tout = (f"{y}::slice{i}::{r}" for r in ("in", "kernel", "out"))
        j = s.stack
        for t, w, side, shape in ((tin, whole[src_in], s.inp, _stream_shape(pixels, s.groups * k)),
                                  (tk, whole.get(src_k), s.kernel, (j * oc * k,)),
                                  (tout, whole[y], s.out, _stream_shape(pixels, j * oc))):
            if side is not None:
                g.shapes[t], g.dtypes[t] = shape, g.dtype(y)
                g.gathers[t] = Gather(w, side.start, side.run, side.loops)
        params = {**_conv_params(j * oc), "groups": s.groups}
        if s.kernel is None:  # B constant [K, N]: the weights [j][n][k] of every slice (stacked or grouped)
            w = np.asarray(g.consts[b], np.float32).T.reshape(oc, 1, 1, k)
            bias = n.attrs.get("_bias", "")  # a bias row folded in by compiler/rewrites/matmul_forms.py
            if bias:
                params["bias"] = np.tile(np.asarray(g.consts[bias], np.float32).reshape(-1), j)
            params.update(weights=np.ascontiguousarray(np.tile(w, (j, 1, 1, 1))),
                          **{key: np.tile(v, j) for key, v in model_quant(g, b, 1, bias, oc).items()})
            layers.append(Layer(n.name, names, tin, [Step("CONV", tout, params)]))
        else:
            layers.append(Layer(n.name, names, tin, [Step("CONV", tout, params, operand=tk)]))
    if best.out_plan is not None:
        mid = whole[y]
        layers += copy_layers(g, Node(n.name, "Transpose", [mid], [y]), names, mid,
                              best.out_plan)
    return layers


def matmul_operands(g: Graph, n: Node):
    """B a constant: the fully connected rule above on feature maps whose H, W and C fit the units' fields,
    or A of rank >= 2 and B 2-D as 1 x 1 CONVs with B^T as weights over A's rows, walked like the
    following; or two computed float tensors of rank >= 2 (batch dimensions broadcast): [1, M, K] @ [1, K, N] maps in
    place (A's M channels in an image map, one partial or whole 16-channel planes), any other shapes as
    grouped, stacked or per-slice CONVs walked by the stream engines in place or through ONNX-order copies
    (the CA streams' padding lanes read from and written to padding of those copies), when estimated faster
    than the host; int8: the kernel operand symmetric (a pre-quantized model's zero point of it 0)"""
    if len(n.inputs) == 2 and n.inputs[0] not in g.consts and n.inputs[1] not in g.consts:
        return problem(g, n)
    for check in (fc_operand,) + MAP:
        why = check(g, n)
        if why:
            if n.op == "MatMul" and n.inputs[0] not in g.consts and n.inputs[1] in g.consts and \
                    len(g.shapes[n.inputs[0]]) >= 2:
                rows = const_problem(g, n)  # A's rows as slices: 1 x 1 CONVs with B^T as weights
                return f"{why}; as 1 x 1 CONVs over A's rows: {rows}" if rows else None
            return why
    return None


def _lower(ctx, n: Node, x: str) -> list[Layer]:
    """Two activations (one is the CONV's kernel), or A's rows as slices with B^T the weights: the slice plan;
    a [1, K] vector by a constant matrix: the fully connected CONV."""
    g = ctx.g
    if n.inputs[1] not in g.consts or any(c(g, n) for c in (fc_operand,) + MAP):
        return lower(g, n, ctx.names, ctx.alias)
    return ctx.layer(n, x, [fc_step(g, n, x)])


RECIPES = [
    Recipe("MatMul", "CONV (fully connected); of two activations: CONV whose kernel is one operand, read from "
                     "its buffer, per batch slice (compiler/recipes/matmul.py)", (matmul_operands, model_weights), _lower),
]
