"""Values of the NPU units: unpack input streams, run the kernel, pack the output stream.

Each unit sees its input streams as dense tensors in its configured layout (DESIGN.md,
"Streams and layouts"); parameter tables and LUTs are bytes the unit read from memory.
Semantics and rounding live in npusim.kernels (see the ISA doc strings). Clamp bounds of
CONV/ARITH: int8 `relu` clamps below at out_zp (real 0), `clip` uses act_lo/act_hi as
sign-extended int8 values, `none` saturates to [-128, 127]; float bounds are fp16 bit patterns.
A float CONV sums each output in window order whatever the other outputs (`kernels.conv`), so
splitting a conv's output channels over CAs never changes a bit; the CAs of one epoch that read the
same input share its im2col (`patches`, one `kernels.conv.Patches` per epoch), and int8 CAs of one
split conv share one GEMM over all their output channels (`run_conv_split`, exact integer sums).
int8 CONVs, two-map ARITHs and max POOLs read blocked16 input streams in place (`layout.Planes`) and
write their output stream directly (no unpack or pack of those tensors); their kernels' set-ups
(`kernels.Int8Conv`, `kernels.eltwise.Int8PlanesEltwise`) are kept in the epoch plan's memo (`plans`)
while their weights and tables view the same constants' bytes (`constant_root`).
The output layout of a unit with one layout field (POOL, RESIZE, ARITH, ACT) is the layout
rule's choice for the output shape (`required_layout`).
"""

from __future__ import annotations

import numpy as np

from .. import kernels as K
from ..kernels.eltwise import TWO_MAPS, Int8PlanesEltwise
from ..kernels.layout import PlanesReader, planes_view
from ..kernels.quant import from_fp16_bits, np_dtype
from ..kernels.resample import resize as resize_kernel
from .config import UnitConfig


def table_spec(u: UnitConfig) -> tuple[str, int, int] | None:
    """(field, address, bytes) of the parameter table / LUT the unit reads, or None."""
    a = u.args
    if u.op == "CONV":
        return "qparams", a["qparams"], a["out_c"] * (12 if u.dtype == "int8" else 4)
    if u.op == "ARITH":
        if a["op"] in ("copy", "concat"):
            return None
        n = a["c"] if a["per_channel"] else 1
        return "params", a["params"], n * (16 if u.dtype == "int8" else 4)
    if u.op == "ACT" and (u.dtype == "int8" or a["func"] == "lut"):
        return "lut", a["lut"], 256
    return None


def table_problem(u: UnitConfig, table: np.ndarray | None) -> str | None:
    """Why unit `u` cannot execute with these parameter-table bytes, or None: an int8 CONV's or
    ARITH's requantization shift outside [0, 63]. The machine asks this before a unit runs, and a
    static check asks it of a table whose bytes are known before the run (a constant of the blob)."""
    if table is None or u.dtype != "int8" or table.size % 4:
        return None
    if u.op == "CONV":
        shifts = table.view("<i4").reshape(-1, 3)[:, 2]
    elif u.op == "ARITH" and u.args["op"] not in ("copy", "concat"):
        shifts = table.view("<i4").reshape(-1, 4)[:, 2]
    else:
        return None
    bad = np.flatnonzero((shifts < 0) | (shifts > 63))
    if bad.size:
        i = int(bad[0])
        return f"{table_spec(u)[0]} entry {i}: shift {int(shifts[i])} must be in [0, 63]"
    return None


def constant_root(st):
    """The bytes object a stream views (a constant's: `Memory.constant_view`, immutable), or None."""
    root = st
    while isinstance(root, np.ndarray) and root.base is not None:
        root = root.base
    return root if isinstance(root, bytes) else None


def cached_table_problem(u: UnitConfig, table: np.ndarray | None, cache: dict | None) -> str | None:
    """`table_problem`, kept in `cache` (an epoch plan's memo, `EpochPlan.values`: the unit reads its
    table at one address) for a table that views a constant's bytes (they never change): found again
    when the unit's table views the same constant."""
    root = None if cache is None or table is None else constant_root(table)
    if root is None:
        return table_problem(u, table)
    got = cache.get(("verdict", u.command))
    if got is None or got[0] is not root:
        got = cache[("verdict", u.command)] = (root, table_problem(u, table))  # the root keeps its id
    return got[1]


def _i8(v: int) -> int:
    """Sign-extend a 32-bit raw field holding an int8 value."""
    v &= 0xFFFFFFFF
    v = v - 0x100000000 if v & 0x80000000 else v
    return max(-128, min(127, v))


def _fbits(v: int, dtype: str) -> float:
    """The float a raw field holds: fp32 bits for fp32 units, fp16 bits (low 16 bits) otherwise."""
    if dtype == "fp32":
        return float(np.uint32(int(v) & 0xFFFFFFFF).view(np.float32))
    return float(from_fp16_bits(int(v) & 0xFFFF))


def _clip_bounds(a: dict, dtype: str):
    act = a.get("act", "none")
    if dtype == "int8":
        if act == "clip":
            return _i8(a["act_lo"]), _i8(a["act_hi"])
        if act == "relu":
            return max(-128, min(127, a.get("out_zp", 0))), 127
        return -128, 127
    if act == "clip":
        return _fbits(a["act_lo"], dtype), _fbits(a["act_hi"], dtype)
    if act == "relu":
        return 0.0, None
    return None, None


def _conv_args(u: UnitConfig, ins: dict, table: np.ndarray):
    """(x, w, kernel keywords, clamp bounds) of a CONV unit."""
    a = u.args
    dt = u.dtype
    icg = a["in_c"] // a["groups"]
    n = a["out_c"] * a["kh"] * a["kw"] * icg
    raw = np.ascontiguousarray(ins[1]).reshape(-1)
    if raw.size == n * u.esize:  # the weights as they came: a read-only view, no copy
        w = raw.view(np.dtype(np_dtype(dt)).newbyteorder("<")).reshape(a["out_c"], a["kh"], a["kw"], icg)
    else:
        w = K.unpack(ins[1], "linear", 1, 1, n, dt).reshape(a["out_c"], a["kh"], a["kw"], icg)
    kw = dict(stride=(a["sh"], a["sw"]), dilation=(a["dh"], a["dw"]),
              pads=(a["pad_t"], a["pad_l"], a["pad_b"], a["pad_r"]), groups=a["groups"])
    return ins[0], w, kw, _clip_bounds(a, dt)


def _int8_part(u: UnitConfig, w, table, bounds) -> tuple:
    q = table.view("<i4").reshape(u.args["out_c"], 3)
    return (w, q[:, 0].copy(), q[:, 1].copy(), q[:, 2].copy(), u.args["out_zp"], *bounds)


WEIGHT_CACHE_BYTES = 1 << 29  # per Program: float32 copies of constant int8 conv weights


def _prepared(ws: list, streams: list, cache: dict | None):
    """`kernels.conv.prepare_weights` of the stacked weights `ws`, kept in `cache` (a Program's) when
    every weight stream is a view of a constant's bytes (immutable: `Memory.constant_view`), within
    WEIGHT_CACHE_BYTES; None when there is no cache or a stream is not such a view."""
    if cache is None:
        return None
    key, roots = [], []
    for w, st in zip(ws, streams):
        root = constant_root(st)
        if root is None:
            return None
        key.append((id(root), st.ctypes.data, st.nbytes, w.shape, w.dtype.str))  # the bytes and how they are read
        roots.append(root)
    key = tuple(key)
    got = cache.get(key)
    if got is not None:
        return got[1]
    from ..kernels.conv import prepare_weights

    prep = prepare_weights(np.concatenate([w.reshape(w.shape[0], -1) for w in ws]) if len(ws) > 1 else ws[0])
    size = prep[0].nbytes
    if cache.get("bytes", 0) + size <= WEIGHT_CACHE_BYTES:
        cache[key] = (roots, prep)  # the roots keep their ids from being reused
        cache["bytes"] = cache.get("bytes", 0) + size
    return prep


def _conv(u: UnitConfig, ins: dict, table: np.ndarray, patches=None, weights=None, plans=None) -> np.ndarray:
    """An int8 CONV's output stream bytes (requantized straight into its layout); a float CONV's
    [OH][OW][OC] array. `plans`: the epoch plan's memo of `Int8Conv`s (`_int8_conv`)."""
    if u.dtype == "int8":
        return _int8_conv([u], [ins], [table], weights, plans).run(ins[0], patches)[0]
    x, w, kw, (lo, hi) = _conv_args(u, ins, table)
    bias = table.view("<f4").copy()
    return K.conv2d_float(x, w, bias, act_lo=lo, act_hi=hi, patches=patches, **kw)


def _int8_conv(units: list, ins: list, tables: list, weights: dict | None, plans: dict | None):
    """The `kernels.conv.Int8Conv` of int8 CONV units that compute one GEMM (one unit, or the units of
    a split conv: `run_conv_split`), from their inputs (port -> stream; port 0 unpacked) and parameter
    tables. Kept in `plans` (an epoch plan's memo, reused by every run) when every weight stream and
    table views a constant's bytes (immutable) and its prepared weights come from `weights` (the
    Program's budgeted cache): found again for the same units reading the same constants."""
    roots = None
    if plans is not None:
        roots = tuple(constant_root(st) for i in ins for st in (i[1],)) + tuple(constant_root(t) for t in tables)
        got = plans.get(tuple(u.command for u in units))
        if got is not None and all(a is b for a, b in zip(got[0], roots)):
            return got[1]
    parts, ws, first = [], [], None
    for u, i, table in zip(units, ins, tables):
        x, w, kw, bounds = _conv_args(u, i, table)
        parts.append(_int8_part(u, w, table, bounds))
        ws.append(w)
        first = first or (x, kw)
    (x, kw), u0 = first, units[0]
    prep = _prepared(ws, [i[1] for i in ins], weights) if u0.args["groups"] == 1 else None
    conv = K.Int8Conv(x.shape, x.dtype, parts, in_zp=u0.args["in_zp"], prepared=prep,
                      out_layouts=[_facts(u)[4] for u in units], **kw)
    if roots is not None and conv.owned_bytes == 0 and all(r is not None for r in roots):
        plans[tuple(u.command for u in units)] = (roots, conv)  # the roots keep their ids from being reused
    return conv


def kept_int8_conv(units: list, plans: dict):
    """The `kernels.Int8Conv` that `_int8_conv` kept in `plans` for these units, or None."""
    got = plans.get(tuple(u.command for u in units))
    return None if got is None else got[1]


def run_kept_conv(u: UnitConfig, conv, streams: dict, scratch: dict) -> list:
    """Output streams of `conv` (`kept_int8_conv` of u, alone or first of its split conv's units) on
    u's input streams (port -> stream), as `run_unit` / `run_conv_split` give them."""
    return conv.run(_unpacked(u, streams, scratch)[0], _patches(scratch))


def kept_conv_input(u: UnitConfig) -> tuple:
    """(key, make) of a CONV unit's feature map (port 0) as `_unpacked` shares it through an epoch's
    scratch: the key's tail after the stream's id, and the function making its tensor from the stream
    (`layout.PlanesReader` of its geometry when read as planes): what a replay's bound conv keeps."""
    ports, view = _facts(u)[:2]
    h, w, c, layout = dict(ports)[0]
    key = (layout, h, w, c, u.dtype, view)
    return key, (PlanesReader(layout, h, w, c, u.dtype) if view else lambda st: _tensor(st, *key))


def run_kept_conv_stream(conv, stream, spec: tuple, scratch: dict, shared: bool, into=None) -> list:
    """`run_kept_conv` from the unit's feature-map stream alone and its `kept_conv_input` (`spec`): the
    input tensor shared through `scratch` as `_unpacked` shares it; the epoch's im2col cache (`_patches`)
    only when `shared` (another conv of the epoch reads the stream: the cache never changes a value).
    `into`: where parts' output planes go instead (`kernels.Int8Conv.run`)."""
    key, make = spec
    k = (id(stream), *key)
    got = scratch.get(k)
    if got is None or got[0] is not stream:
        got = scratch[k] = (stream, make(stream))
    return conv.run(got[1], _patches(scratch) if shared else None, into)


def _patches(scratch: dict):
    """The im2col buffers a run's convolutions share (made on first use)."""
    got = scratch.get("patches")
    if got is None:
        got = scratch["patches"] = K.Patches()
    return got


# CONV fields that may differ between the conv accelerators of one split conv (one GEMM serves them)
SPLIT_FIELDS = ("unit", "out_c", "qparams", "out_zp", "act", "act_lo", "act_hi")


def split_key(u: UnitConfig):
    """Units with the same key (and the same input stream) compute one GEMM (`run_conv_split`). Kept
    on the unit for its args dict (a Program's units are reused by every run; args are never edited)."""
    got = u.__dict__.get("_split_key")
    if got is not None and got[0] is u.args:
        return got[1]
    key = None
    if u.op == "CONV" and u.dtype == "int8":
        key = tuple(sorted((k, v) for k, v in u.args.items() if k not in SPLIT_FIELDS))
    u.__dict__["_split_key"] = (u.args, key)
    return key


def run_conv_split(units, streams: list, tables: list, scratch: dict) -> list:
    """Output streams of int8 CONV units with equal `split_key` that read one input stream (port 0),
    from one GEMM over all their output channels (`kernels.Int8Conv`); each as `run_unit`."""
    ins = [_unpacked(u, st, scratch) for u, st in zip(units, streams)]
    conv = _int8_conv(units, ins, tables, scratch.get("weights"), scratch.get("plans"))
    return conv.run(ins[0][0], _patches(scratch))


def _pool(u: UnitConfig, x: np.ndarray) -> np.ndarray:
    a = u.args
    k, s = (a["kh"], a["kw"]), (a["sh"], a["sw"])
    pads = (a["pad_t"], a["pad_l"], a["pad_b"], a["pad_r"])
    mode = a["mode"]
    if u.dtype == "int8":
        if mode == "max":
            return K.maxpool(x, k, s, pads)
        if mode == "avg":
            return K.avgpool_int8(x, k, s, pads, bool(a["include_pad"]), a["in_zp"], a["out_zp"], a["mult"], a["shift"],
                                  a["rounding"])
        if mode == "global_max":
            return K.global_max(x)
        return K.global_avg_int8(x, a["in_zp"], a["out_zp"], a["mult"], a["shift"], a["rounding"])
    if mode == "global_max":
        return K.global_max(x)
    if mode == "max":
        return K.maxpool(x, k, s, pads)
    if mode == "avg":
        return K.avgpool_float(x, k, s, pads, bool(a["include_pad"]))
    return K.global_avg_float(x)


def _planes_eltwise(u: UnitConfig, ins: dict, table, plans: dict | None) -> np.ndarray:
    """A two-map int8 ARITH on its stream planes (`_on_planes`): its output stream bytes, from the
    `kernels.eltwise.Int8PlanesEltwise` of its table, kept in `plans` (an epoch plan's memo) when the
    table views a constant's bytes (as `_int8_conv` keeps its set-ups)."""
    root = constant_root(table) if plans is not None else None
    got = plans.get(("eltwise", u.command)) if root is not None else None
    if got is not None and got[0] is root:
        return got[1].run(ins[0], ins[1])
    a = u.args
    lo, hi = _clip_bounds(a, u.dtype)
    t = table.view("<i4").reshape(-1, 4)  # two maps: the table's 4th column (bconst) is unused
    elt = Int8PlanesEltwise(a["op"], ins[0].planes.shape, ins[0].c, t[:, 0].copy(), t[:, 1].copy(), t[:, 2].copy(),
                            a_zp=a["a_zp"], b_zp=a["b_zp"], out_zp=a["out_zp"], lo=lo, hi=hi)
    if root is not None:
        plans[("eltwise", u.command)] = (root, elt)  # the root keeps its id from being reused
    return elt.run(ins[0], ins[1])


def _arith(u: UnitConfig, ins: dict, table) -> np.ndarray:
    """The ARITH's [H][W][C] result."""
    a = u.args
    op = a["op"]
    x = ins[0]
    if op == "copy":
        y = x.copy()
    elif op == "concat":
        y = K.concat(x, ins[1])
    else:
        b = ins.get(1)
        lo, hi = _clip_bounds(a, u.dtype)
        if u.dtype == "int8":
            t = table.view("<i4").reshape(-1, 4)
            y = K.eltwise_int8(op, x, b, t[:, 0].copy(), t[:, 1].copy(), t[:, 2].copy(), t[:, 3].copy(),
                               a_zp=a["a_zp"], b_zp=a["b_zp"], out_zp=a["out_zp"], lo=lo, hi=hi)
        else:
            y = K.eltwise_float(op, x, b, table.view("<f4").copy(), lo=lo, hi=hi)
    return y


def _act(u: UnitConfig, x: np.ndarray, table) -> np.ndarray:
    a = u.args
    if u.dtype == "int8":
        return K.lut_int8(x, table.view(np.int8))
    dt = u.dtype
    return K.act_float(a["func"], x, _fbits(a["alpha"], dt), _fbits(a["lo"], dt), _fbits(a["hi"], dt))


def _unpacked(u: UnitConfig, streams: dict, scratch: dict | None) -> dict:
    """The unit's input tensors (port -> array; a CONV's weights stay bytes; an int8 CONV's input is
    a `layout.Planes` view of its stream, read in place by the kernel: streams are never written
    once read), shared through `scratch`."""
    ins = {}
    ports, view, weights_port = _facts(u)[:3]
    for port, (h, w, c, layout) in ports:
        if port == weights_port:
            ins[port] = streams[port]
            continue
        if scratch is not None:
            key = (id(streams[port]), layout, h, w, c, u.dtype, view)
            got = scratch.get(key)
            if got is None or got[0] is not streams[port]:
                got = scratch[key] = (streams[port], _tensor(streams[port], layout, h, w, c, u.dtype, view))
            ins[port] = got[1]
        else:
            ins[port] = _tensor(streams[port], layout, h, w, c, u.dtype, view)
    return ins


def _facts(u: UnitConfig) -> tuple:
    """(input ports as (port, (h, w, c, layout)) pairs, whether its inputs are read as `layout.Planes`,
    the port of a CONV's weights (else None), what runs on the stream planes (`_on_planes(u)`), its output
    layout): kept on the unit for its args dict, as `split_key` is."""
    got = u.__dict__.get("_facts")
    if got is not None and got[0] is u.args:
        return got[1]
    planes = _on_planes(u)
    conv = u.op == "CONV"
    facts = (tuple(u.in_shapes().items()), (conv and u.dtype == "int8") or planes is not None, 1 if conv else None,
             planes, u.out_shape()[3])
    u.__dict__["_facts"] = (u.args, facts)
    return facts


def _on_planes(u: UnitConfig) -> str | None:
    """What of a unit other than a CONV runs on its blocked16 stream planes in place, its output stream
    blocked16 too: "arith" (an int8 ARITH of two maps of its output's shape:
    `kernels.eltwise.Int8PlanesEltwise`), "maxpool" (an int8 max POOL: `kernels.pool.maxpool_planes`),
    else None."""
    if u.dtype != "int8" or u.out_shape()[3] != "blocked16":
        return None
    if u.op == "ARITH" and u.args["op"] in TWO_MAPS:
        shapes = set(u.in_shapes().values())
        return "arith" if len(shapes) == 1 and shapes == {tuple(u.out_shape())} else None
    if u.op == "POOL" and u.args["mode"] == "max" and u.in_shapes()[0][3] == "blocked16":
        return "maxpool"
    return None


def _tensor(stream, layout, h, w, c, dtype, view):
    if view:
        return planes_view(stream, layout, h, w, c, dtype)
    t = K.unpack(stream, layout, h, w, c, dtype)
    t.setflags(write=False)  # shared: kernels never write their inputs
    return t


def run_unit(u: UnitConfig, streams: dict[int, np.ndarray], table: np.ndarray | None,
             scratch: dict | None = None) -> np.ndarray:
    """Output stream bytes of unit `u` from its input stream bytes (port -> uint8 array).
    `scratch`: one dict per epoch; units reading the same stream share its unpacked tensor and
    (CONV) its im2col."""
    planes, out_layout = _facts(u)[3:]
    ins = _unpacked(u, streams, scratch)
    if u.op == "CONV":
        patches = _patches(scratch) if scratch is not None else None
        y = _conv(u, ins, table, patches, *((scratch.get("weights"), scratch.get("plans")) if scratch is not None
                                            else (None, None)))
        if u.dtype == "int8":
            return y  # already the output stream
    elif planes == "maxpool":
        a = u.args
        return K.maxpool_planes(ins[0], (a["kh"], a["kw"]), (a["sh"], a["sw"]),
                              (a["pad_t"], a["pad_l"], a["pad_b"], a["pad_r"])).view(np.uint8).reshape(-1)
    elif u.op == "POOL":
        y = _pool(u, ins[0])
    elif u.op == "RESIZE":
        y = resize_kernel(ins[0], u.args["out_h"], u.args["out_w"], mode=u.args["mode"], coord=u.args["coord"])
    elif planes == "arith":
        return _planes_eltwise(u, ins, table, scratch.get("plans") if scratch is not None else None)
    elif u.op == "ARITH":
        y = _arith(u, ins, table)
    else:
        y = _act(u, ins[0], table)
    y = np.asarray(y).astype(np_dtype(u.dtype), copy=False)
    return K.pack(y, out_layout)
