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
of a map: its elements start inside a bus word) is first copied into a dense tensor in ONNX order
(compiler/permute.py), the output copied back from one. The NPU takes it when its estimate beats the
host's MatMul (the profile's [host] model), else the CPU runs it with both figures in the reason.

int8: the CA has no weight zero point, so the kernel operand is quantized symmetrically (zero point 0,
`quantize.assign_qparams`); a pre-quantized model maps only where the model's own zero point of the
kernel operand is 0 (Y = A B is bilinear: a zero point of the kernel adds zp * sum_k of the other
operand, a term per output element that no CA bias holds). The multiplier is s_in * s_kernel / s_Y.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..program.layouts import block_size, required_layout
from ..program.spec import load_isa
from .ir import Gather, Graph, Layer, Node, Step, hwc
from .permute import NOMINAL_LINE, Side, _side, _vectors, host_cycles
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
    staged: tuple[tuple[str, CopyPlan | None], ...]  # (a, plan), (b, plan): None = read in place
    out_plan: CopyPlan | None  # Y written in place (None) or copied back from its ONNX-order tensor
    cycles: float


def _batch_offsets(sa, sb, sy) -> list[tuple[int, int, int]]:
    """(A, B, Y) flat element offsets of every slice of Y's broadcast batch (numpy broadcasting)."""
    ba, bb, by = sa[:-2], sb[:-2], sy[:-2]
    ra, rb = (1,) * (len(by) - len(ba)) + tuple(ba), (1,) * (len(by) - len(bb)) + tuple(bb)
    ma, mb, my = (int(np.prod(s[-2:], dtype=np.int64)) for s in (sa, sb, sy))
    out = []
    for j in np.ndindex(*by) if by else [()]:
        ja = tuple(i if d > 1 else 0 for i, d in zip(j, ra))
        jb = tuple(i if d > 1 else 0 for i, d in zip(j, rb))
        fa = int(np.ravel_multi_index(ja, ra)) if ja else 0
        fb = int(np.ravel_multi_index(jb, rb)) if jb else 0
        fy = int(np.ravel_multi_index(j, by)) if j else 0
        out.append((fa * ma, fb * mb, fy * my))
    return out


def _map_order(pix: np.ndarray, chan: np.ndarray) -> np.ndarray | None:
    """Flat indices pix[p] + chan[c] in the CA stream order of a 1 x len(pix) map of len(chan) channels
    (its layout by the layout rule), or None when the stream would carry padding lanes."""
    pixels, chans = pix.size, chan.size
    layout = required_layout(1, pixels, chans)
    if layout == "linear":
        return pix[0] + chan
    if layout == "image":
        return pix[:, None] + chan[None, :]
    blk = block_size()
    if chans % blk:
        return None
    c = chan.reshape(chans // blk, 1, blk)
    return c + pix[None, :, None]


def _stream_shape(pixels: int, chans: int) -> tuple[int, ...]:
    """The ONNX shape whose map is the CA's 1 x pixels x chans stream (ir.hwc: (1, pixels, chans))."""
    return (1, chans, 1, pixels)


def _walks(g: Graph, n: Node, kernel_b: bool, vec: dict, esize: int, per: int) -> tuple[Slice, ...] | None:
    """The epochs' walks, `per` consecutive batch slices to an epoch (a grouped CONV: slice j's channels
    are group j's), or None if a stream is no SE walk."""
    a, b = n.inputs[0], n.inputs[1]
    y = n.outputs[0]
    sa, sb, sy = (tuple(g.shapes[t]) for t in (a, b, y))
    m, k, nn = sa[-2], sa[-1], sb[-1]
    offs = _batch_offsets(sa, sb, sy)
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
            idx_in = _map_order(ar(m) * k, (fa[:, None] + ar(k)[None, :]).reshape(-1))
            idx_out = _map_order(ar(m) * nn, (fy[:, None] + ar(nn)[None, :]).reshape(-1))
            idx_k = fb[:, None, None] + ar(k)[None, None, :] * nn + ar(nn)[None, :, None]  # [j][n][k] = B[k, n]
            idx_k = np.broadcast_to(idx_k, (fy.size, nn, k))
            src_in, src_k = a, b
        else:  # input B[k, n]: pixel n, channel (j, k); output Y[m, n]: pixel n, channel (j, m)
            idx_in = _map_order(ar(nn), (fb[:, None] + ar(k)[None, :] * nn).reshape(-1))
            idx_out = _map_order(ar(nn), (fy[:, None] + ar(m)[None, :] * nn).reshape(-1))
            idx_k = fa[:, None, None] + ar(m)[None, :, None] * k + ar(k)[None, None, :]  # [j][m][k] = A[m, k]
            idx_k = np.broadcast_to(idx_k, (fy.size, m, k))
            src_in, src_k = b, a
        if idx_in is None or idx_out is None:
            return None
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


def _linear_vectors(shape) -> np.ndarray:
    return _vectors((int(np.prod(shape, dtype=np.int64)),), "linear")


def _addressed(g: Graph, t: str) -> bool:
    return t in g.windows or t in g.strided or t in g.gathers


def _plan(g: Graph, n: Node, kernel_b: bool, profile) -> tuple[SlicePlan | None, str]:
    """The cheapest per-slice plan with the given kernel operand: each operand (and Y) walked in place
    when every slice reaches it, else through a dense ONNX-order copy."""
    from .memplan import storage_layout

    a, b, y = n.inputs[0], n.inputs[1], n.outputs[0]
    esize = load_isa().dtype_bytes(g.compile_dtype)
    sa, sb, sy = (tuple(g.shapes[t]) for t in (a, b, y))
    m, k, nn = sa[-2], sa[-1], sb[-1]
    best, why = None, ""
    # each tensor: in place (its storage's vectors) or staged (dense ONNX order); try in place first
    choices = {}
    for t in (a, b, y):
        if t in g.consts:  # a constant kernel (B): the CONV's own weights, not walked
            choices[t] = [(False, None)]
            continue
        opts = []
        if not _addressed(g, t):
            lay = storage_layout(g, t)
            padded = lay == "blocked16" and hwc(g.shapes[t])[2] % block_size()
            if not (t == y and padded):  # a partial plane's padding lanes must be written by someone
                opts.append((False, _vectors(g.shapes[t], lay)))
        if storage_layout(g, t) != "linear":
            opts.append((True, _linear_vectors(g.shapes[t])))
        choices[t] = opts
    plans: dict[str, tuple] = {}

    def copy(t: str) -> tuple[CopyPlan | None, str]:
        """The permutation copying t into its dense ONNX-order tensor (Y: back from it), made once."""
        if t not in plans:
            mid = staged_name(n, t)
            g.shapes[mid], g.dtypes[mid] = (int(np.prod(g.shapes[t], dtype=np.int64)),), g.dtype(t)
            ends = (mid, t) if t == y else (t, mid)
            plans[t] = copy_plan(g, *ends, np.arange(g.shapes[mid][0], dtype=np.int64), profile)
        return plans[t]

    for sta, va in choices[a]:
        for stb, vb in choices[b]:
            for sty, vy in choices[y]:
                vecs = {t: v for t, v in ((a, va), (b, vb), (y, vy)) if v is not None}
                count = len(_batch_offsets(sa, sb, sy))
                slices = next((w for per in dict.fromkeys((count, 1)) if (w := _walks(g, n, kernel_b, vecs, esize, per))),
                              None)
                if slices is None:
                    why = why or "no stream-engine walk (run + three loops, first byte on the bus word) reaches its slices"
                    continue
                copies = [(t, copy(t) if st else (None, "")) for t, st in ((a, sta), (b, stb), (y, sty))]
                bad = next((f"copying {t!r} {'back from' if t == y else 'into'} ONNX order: {w}"
                            for t, (p, w) in copies if p is None and w), None)
                if bad:
                    why = bad
                    continue
                staged, out_plan = tuple((t, p) for t, (p, _) in copies[:2]), copies[2][1][0]
                cost = sum(p.cycles for _, (p, _) in copies if p is not None)
                cost += sum(_epoch_cycles(profile, s, (m, k, nn), esize, g.compile_dtype) for s in slices)
                cand = SlicePlan(kernel_b, (m, k, nn), slices, staged, out_plan, cost)
                if best is None or cand.cycles < best.cycles:
                    best = cand
    return best, why


def staged_name(n: Node, t: str) -> str:
    return f"{n.outputs[0]}::matmul_onnx_order::{t}"


def _epoch_cycles(profile, s: Slice, dims, esize: int, dtype: str) -> float:
    """One CONV epoch: setup (its registers) plus the slowest of the CA (at its 1 x 1 rate) and
    its three streams (memory.cost.pattern_cost on the fastest activation pool; they share its banks)."""
    from ..memory.cost import pattern_cost
    from ..memory.pattern import AccessPattern
    from .memplan import activation_pools

    isa, comp = load_isa(), profile.compute
    m, k, nn = dims
    pool = profile.pool_named(activation_pools(profile)[0])
    unit = np.array([esize, NOMINAL_LINE, NOMINAL_LINE * 128], np.int64)  # nominal line and plane strides

    def cycles(side: Side, access: str) -> float:
        loops = [(c, int(np.dot(v, unit))) for c, v in side.loops] + [(1, 0)] * (3 - len(side.loops))
        (n1, s1), (n2, s2), (n3, s3) = loops
        return pattern_cost(pool, AccessPattern(pool.base, side.run * esize, n1, s1, n2, s2, n3, s3), profile,
                            access=access).cycles

    regs = 3 * len(isa.command("SE").fields) + len(isa.command("CONV").fields) + 3 * len(isa.command("LINK").fields)
    lanes = comp.lanes
    lane_use = k / (-(-k // lanes) * lanes)
    tap_use = min(comp.kernel_taps, min(comp.tap_fill, -(-k // lanes))) / comp.kernel_taps
    ca = s.stack * m * k * nn / (comp.macs(dtype) * lane_use * tap_use)
    kernel = cycles(s.kernel, "read") if s.kernel is not None else 0.0  # constant weights: the CA's own read
    streams = cycles(s.inp, "read") + kernel + cycles(s.out, "write")
    return profile.epoch.setup_cycles + profile.epoch.register_cycles * regs + max(ca, streams)


def _slice_problem(g: Graph, n: Node) -> tuple[SlicePlan | None, str]:
    from ..hw import load_profile

    a, b, y = n.inputs[0], n.inputs[1], n.outputs[0]
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
            whys.append(why)
        else:
            plans.append(p)
    if not plans:
        return None, f"A {list(sa)} @ B {list(sb)}: " + "; ".join(dict.fromkeys(whys))
    # int8: prefer a kernel operand that is not one-signed (symmetric quantization halves its resolution)
    best = min(plans, key=lambda p: (p.cycles * (1.0 + 0.25 * _one_signed(g, b if p.kernel_b else a)), not p.kernel_b))
    host = host_cycles(g, [n], profile)
    if best.cycles >= host:
        return None, (f"its {len(best.slices)} CONV epoch(s) "
                      f"{'and ONNX-order copies ' if any(p for _, p in best.staged) or best.out_plan else ''}"
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
    from .legality import map_fits_units

    return map_fits_units(g, n) is None


def lower(g: Graph, n: Node, names: list[str], alias: dict) -> list[Layer]:
    """The layers of a MatMul the mapping table put on the NPU."""
    a, b = n.inputs[0], n.inputs[1]
    if _in_place_problem(g, n) is None and _fits(g, n):
        return [Layer(n.name, names, alias.get(b, b), [step(g, n, alias.get(a, a))])]
    best, why = choose(g, n)
    if best is None:  # legality checked it: an internal inconsistency
        from ..errors import ModelError

        raise ModelError(f"internal: MatMul {n.name!r} lowered although {why}")
    y = n.outputs[0]
    layers: list[Layer] = []
    whole = {}
    for t, p in best.staged:
        if t in g.consts:
            continue
        src = alias.get(t, t)
        if p is None:
            whole[t] = src
            continue
        mid = staged_name(n, t)
        layers += copy_layers(g, Node(n.name, "Transpose", [src], [mid]), names, src, p)
        whole[t] = mid
    whole[y] = staged_name(n, y) if best.out_plan is not None else y
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
            from .passes import model_quant

            w = np.asarray(g.consts[b], np.float32).T.reshape(oc, 1, 1, k)
            params.update(weights=np.ascontiguousarray(np.tile(w, (j, 1, 1, 1))),
                          **{key: np.tile(v, j) for key, v in model_quant(g, b, 1, "", oc).items()})
            layers.append(Layer(n.name, names, tin, [Step("CONV", tout, params)]))
        else:
            layers.append(Layer(n.name, names, tin, [Step("CONV", tout, params, operand=tk)]))
    if best.out_plan is not None:
        mid = whole[y]
        layers += copy_layers(g, Node(n.name, "Transpose", [mid], [y]), names, mid,
                              best.out_plan)
    return layers
