"""Codegen: one epoch per layer following DESIGN.md "Epoch recipes".

Read SEs on the engines wired to engine 0's bus port (0-4 on the N657), write SEs on the others
(5-9); units chained through LINKs; weights, parameter tables and LUTs placed by the memory plan
in `options.weights_pool` (octoFlash by default).

Multi-CA conv (`ca_slices`): a conv layer's output channels are split over up to
`units.conv_accelerators` CAs in one epoch, on channel-block boundaries (the ISA's blocked16
block, 16), when
  - the first step is the layer's only CONV and its output is blocked16 with >= 2 blocks of channels
    (image/linear outputs: one CA), every slice staying blocked16 (a tail of <= 4 channels
    joins the slice before it);
  - every later step is channel-wise: ACT, POOL (max, avg, global average: a conv-pool fusion), or
    ARITH add/mul/add_const/mul_const/affine (these are replicated per slice: slice operand planes,
    slice of per-channel tables); RESIZE, concat or copy in the chain -> one CA; every step's output
    slice is blocked16 (whole planes) or a 1 x 1 linear map (a contiguous run of channels);
  - grouped convs split whole groups, and each slice's input channels start on a channel
    block (depthwise: the slice reads its own input planes); dense convs (groups = 1) read the
    input once and broadcast it over the stream switch to every CA;
  - units and engines suffice: CAs, ACT, POOL and ARITH units per slice times the slice count, read
    engines = shared input + per slice (weights + operands [+ input when grouped]), one write
    engine per slice. The largest count that fits is used; below 2, one CA.
Each CA gets its own weight slice [oc_lo:oc_hi] (a contiguous part of the one weight constant),
its own qparams slice, and its own write SE writing whole planes of the output buffer.

Row bands (`ca_rows`): where the channel rule gives fewer CAs than the output has rows to share
(a conv of fewer than 2 blocks of output channels, or a grouped/depthwise conv whose slices each
need their own input and weight reads), the output rows are split instead: every CA computes all
output channels of a band of output rows from the input rows its windows reach (halo rows read
twice, the band's own top/bottom padding), one weight SE broadcast to every CA, one read and one
write SE per band, taken when the CA time saved pays for the extra registers (`_bands_pay`).
The steps after the CONV must be ACT or ARITH with constant tables (a
residual add keeps the channel rule: tried with an operand SE per band, it left the calibration
set outside +/-10 %, see README "How close is it to the board?").

Sibling chains (Layer.siblings): more chains of one unit each in the same epoch, each with its own read
and write SE (ARITH copies: permutation pieces) or, for a CONV reading the layer's input, that input's one
read SE broadcast to it and its own weight and write SE (moveconv's channel-gather phases); a layer with
siblings is neither sliced nor banded.

Over 500 lines: one `Codegen` and the `_Epoch` allocator its unit emitters share (engines, units,
links, the constants memo, multi-CA slices); split, each emitter would take that state as arguments.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from ..program.codec import Command
from ..program.layouts import block_size, geometry
from ..program.spec import load_isa
from ..engine.config import out_hw
from ..engine.timing import ca_utilisation
from ..kernels.layout import onnx_to_hwc, pack
from ..kernels.quant import quantize
from . import quantize as Q
from .estimates import engine_sets
from .hostgen import host_commands
from .ir import Graph, Layer, Step, hwc
from .memplan import MemoryPlan, Placement
from .recipes.broadcast import stream_args as broadcast_stream
from .recipes.matmul import weight_stream

def fp16_bits(v: float) -> int:
    return int(np.array(np.clip(v, -65504.0, 65504.0), np.float16).view(np.uint16))


def float_weights(w: np.ndarray, dtype: str) -> np.ndarray:
    """Weights in the float dtype of the CA: fp16 saturates at +-65504 (the largest fp16), as a
    converter stores an out-of-range weight, instead of overflowing to infinity."""
    if dtype == "fp16":
        return np.clip(w, -65504.0, 65504.0).astype(np.float16)
    return np.asarray(w, np.float32)


def fp32_bits(v: float) -> int:
    return int(np.array(v, np.float32).view(np.uint32))


def _dims(g: Graph, t: str):
    return hwc(g.shapes[t])


def _channelwise_tail(L: Layer, units: tuple[str, ...]) -> bool:
    """Every step after the first is one of `units` and works channel by channel (a CA slice can take it)."""
    return all(st.unit in units and (st.unit != "ARITH" or st.params["op"] in SPLIT_ARITH) for st in L.steps[1:])

class _Epoch:
    """Collects one epoch's commands, allocating engines and units."""
    def __init__(self, cg: "Codegen", layer: Layer):
        self.cg, self.layer = cg, layer
        self.reads, self.units, self.writes, self.links = [], [], [], []
        self.count = {}
        self.read_engines, self.write_engines = engine_sets(cg.profile)

    def unit(self, kind: str) -> int:
        i = self.count.get(kind, 0)
        self.count[kind] = i + 1
        return i

    def se(self, engine: int, direction: str, base: int, limit: int, layout: str, dtype: str,
           run: int, n1=1, s1=0, n2=1, s2=0, n3=1, s3=0) -> Command:
        port = self.cg.profile.bus.stream_engine_port[engine]
        return Command("SE", dict(engine=engine, dir=direction, port=port, layout=layout, dtype=dtype, base=base,
                                  limit=limit, run=run, n1=n1, s1=s1, n2=n2, s2=s2, n3=n3, s3=s3))

    def _engine(self, direction: str) -> int:
        pool, used = (self.read_engines, self.reads) if direction == "read" else (self.write_engines, self.writes)
        if len(used) >= len(pool):
            raise ModelError(f"layer {self.layer.name!r}: needs more than the {len(pool)} {direction} stream engines")
        return pool[len(used)]

    def stream(self, tensor: str, direction: str, ch: tuple[int, int] | None = None, like: str | None = None,
               rows: tuple[int, int] | None = None) -> int:
        """An SE moving `tensor` (or its channels ch = [lo, hi), lo on a channel block, as whole
        planes of a blocked16 buffer; or its rows = [lo, hi) of an image/blocked16 map) in its
        layout; returns the engine index. `like`: read `tensor` as a map of that tensor's shape,
        broadcast by zero strides (compiler/recipes/broadcast.py)."""
        cg = self.cg
        p: Placement = cg.plan.place[tensor]
        base = cg.plan.address(tensor)
        if rows is not None:
            if p.se or p.pixel or p.layout == "linear" or ch is not None or like is not None:
                raise ModelError(f"internal: row band of {tensor!r} stored {p.layout} (addressed: {bool(p.se or p.pixel)})")
            base += rows[0] * p.line
        if like is not None and tuple(cg.g.shapes[like]) != tuple(cg.g.shapes[tensor]):
            oh, ow, _ = _dims(cg.g, like)
            layout, args = broadcast_stream(p, oh, ow, cg.block)
            eng = self._engine(direction)
            self.reads.append(self.se(eng, direction, base, cg.limit(p.buffer), layout, cg.dtype, **args))
            return eng
        c = p.c
        if ch is not None:  # whole planes of a blocked16 map, or channels of a 1 x 1 linear map
            c = ch[1] - ch[0]
            base += ch[0] * p.esize if p.layout == "linear" else p.plane_offset(ch[0])
        geo = geometry(p.h, p.w, c, p.esize, p.layout)
        limit = cg.limit(p.buffer)
        if p.se or p.pixel:  # a box or a strided phase: strides in bytes (a linear-unit descriptor)
            if p.se:  # a box read by addressing (compiler/recipes/addressing.py)
                if ch is not None:
                    raise ModelError(f"internal: channel slice of the addressed box {tensor!r}")
                args = dict(zip(("run", "n1", "s1", "n2", "s2", "n3", "s3"), p.se))
            elif p.pixel == geo.pixel_bytes:  # every pixel of its lines: whole runs
                args = dict(run=geo.run_bytes, n1=p.h, s1=p.line, n2=geo.planes, s2=p.plane)
            else:  # pixel by pixel
                px = geo.pixel_bytes
                args = dict(run=px, n1=p.w, s1=p.pixel, n2=p.h, s2=p.line, n3=geo.planes, s3=p.plane)
            eng = self._engine(direction)
            (self.reads if direction == "read" else self.writes).append(
                self.se(eng, direction, base, limit, "linear", cg.dtype, **args))
            return eng
        if p.layout == "linear":
            args = dict(run=geo.run_bytes)
        else:
            h = p.h if rows is None else rows[1] - rows[0]
            args = dict(run=geo.run_bytes, n1=h, s1=p.line)
            if p.layout != "image":
                args.update(n2=geo.planes, s2=p.plane)
        eng = self._engine(direction)
        (self.reads if direction == "read" else self.writes).append(
            self.se(eng, direction, base, limit, p.layout, cg.dtype, **args))
        return eng

    def kernel_stream(self, tensor: str) -> int:
        """A linear read SE of map `tensor` ([1, M, K]) as a dense [M][K] CONV kernel (compiler/recipes/matmul.py)."""

        cg = self.cg
        eng = self._engine("read")
        self.reads.append(self.se(eng, "read", cg.plan.address(tensor), cg.limit(cg.plan.place[tensor].buffer),
                                  "linear", cg.dtype, **weight_stream(cg.plan.place[tensor])))
        return eng

    def const_stream(self, buf: str, dtype: str, skip: int = 0, size: int | None = None, row: int | None = None) -> int:
        """A linear read SE of `size` bytes of constant `buf` from byte `skip` (default: all of it). A stream
        longer than one SE run can be (the `run` field) is read as consecutive rows of `row` bytes."""
        b = self.cg.plan.buffer(buf)
        eng = self._engine("read")
        size = b.size - skip if size is None else size
        rows = 1
        top = self.cg.isa_run_max
        if size > top and row and size % row == 0 and row <= top:
            rows, size = size // row, row
        self.reads.append(self.se(eng, "read", b.address(self.cg.profile) + skip, self.cg.limit(buf), "linear", dtype,
                                  run=size, n1=rows, s1=size if rows > 1 else 0))
        return eng

    def link(self, sk, s, dk, d, port=0):
        self.links.append(Command("LINK", dict(src_kind=sk, src=s, dst_kind=dk, dst=d, dst_port=port)))

    def commands(self, epoch_id: int) -> list[Command]:
        return ([Command("EPOCH", dict(id=epoch_id))] + self.reads + self.units + self.writes + self.links
                + [Command("RUN"), Command("WAIT")])


SPLIT_ARITH = ("add", "sub", "mul", "max", "min", "add_const", "mul_const", "affine")


class Codegen:
    def __init__(self, g: Graph, plan: MemoryPlan, qparams: dict, dtype: str, options, profile):
        self.g, self.plan, self.q, self.dtype, self.profile = g, plan, qparams, dtype, profile
        self.int8 = dtype == "int8"
        self.block = block_size()  # blocked16 channels per plane
        self.isa_run_max = load_isa().command("SE").field("run").mask
        self.weights_pool = options.weights_pool
        self.max_cas = options.conv_units or profile.units.conv_accelerators
        self._consts: dict[str, str] = {}
        self._convs: dict[str, tuple] = {}
        self.memo: dict = {}  # placement-independent results (see generate)

    def const(self, name: str, data: bytes, consumer: str, shape, dtype: str) -> str:
        """A constant buffer (added once per name: the slices of a multi-CA epoch share it)."""
        if name not in self._consts:
            self._consts[name] = self.plan.add_constant(name, data, consumer, shape, dtype, pool=self.weights_pool)
        return self._consts[name]

    def limit(self, buffer: str) -> int:
        """The SE limit register for `buffer`: the end of its prefetch guard zone (memory plan)."""
        return self.plan.zone_end(self.plan.buffer_end(buffer))

    def qp(self, t: str) -> tuple[float, int]:
        return self.q.get(t, (1.0, 0))

    def _act_fields(self, act: str, rng, out: str) -> dict:
        if act == "none":
            return dict(act="none", act_lo=0, act_hi=0)
        lo, hi = rng if rng and rng[0] is not None else (0.0, None)
        lo = 0.0 if act == "relu" else lo
        if self.int8:
            s, z = self.qp(out)
            qlo = int(np.clip(np.round(lo / s) + z, -128, 127))
            qhi = 127 if hi is None else int(np.clip(np.round(hi / s) + z, -128, 127))
            return dict(act="clip", act_lo=qlo & 0xFFFFFFFF, act_hi=qhi & 0xFFFFFFFF)
        if act == "relu":
            return dict(act="relu", act_lo=0, act_hi=0)
        return dict(act="clip", act_lo=self.fbits(lo), act_hi=self.fbits(np.inf if hi is None else hi))

    def fbits(self, v: float) -> int:
        """A float as the raw 32-bit field of a float unit holds it: fp32 bits in fp32, else fp16 bits."""
        return fp32_bits(v) if self.dtype == "fp32" else fp16_bits(v)

    # ---------------------------------------------------------------- units

    def _conv_consts(self, L: Layer, st: Step, src: str) -> tuple[str, str, int, int]:
        """(weights buffer, qparams buffer, weight bytes and table bytes per output channel), made once."""
        key = f"{L.name}::{st.out}"
        if key not in self._convs:
            p, oc = st.params, _dims(self.g, st.out)[2]
            made = (key, self.dtype, self.qp(src) if self.int8 else None, self.qp(st.out) if self.int8 else None)
            if made not in self.memo:  # placement-independent: once per sweep
                if self.int8:
                    wq, sw = Q.quantize_weights(p["weights"], p.get("w_scale"))
                    self.memo[made] = wq.tobytes(), Q.conv_table_int8(p["bias"], self.qp(src)[0], sw,
                                                                      self.qp(st.out)[0], p.get("bias_q"))
                else:
                    self.memo[made] = (float_weights(p["weights"], self.dtype).tobytes(), Q.float_table(p["bias"]))
            wbytes, table = self.memo[made]
            wbuf = self.const(key + "::weights", wbytes, L.name, p["weights"].shape, self.dtype)
            tbuf = self.const(key + "::qparams", table, L.name, (oc,), "int8" if self.int8 else "fp32")
            self._convs[key] = (wbuf, tbuf, len(wbytes) // oc, len(table) // oc)
        return self._convs[key]

    def _operand_table(self, L: Layer, st: Step, src: str) -> tuple[str, int]:
        """(buffer, entries per output channel) of the qparams table of a CONV whose kernel is the map
        `st.operand` (zero bias; int8: one multiplier s_in * s_kernel / s_out, the kernel's zero point 0)."""
        oc = _dims(self.g, st.out)[2]
        if self.int8:
            table = Q.conv_table_int8(np.zeros(oc), self.qp(src)[0], np.full(oc, self.qp(st.operand)[0]),
                                      self.qp(st.out)[0])
        else:
            table = Q.float_table(np.zeros(oc))
        buf = self.const(f"{L.name}::{st.out}::qparams", table, L.name, (oc,), "int8" if self.int8 else "fp32")
        return buf, len(table) // oc

    def conv(self, ep: _Epoch, L: Layer, st: Step, src: str, ch=None, band=None) -> tuple[str, int]:
        """CONV unit; with ch = [lo, hi) it computes output channels lo..hi-1 only (multi-CA); with
        band = (input rows, top pad, bottom pad, weight engine) a band of output rows (`ca_rows`)."""
        p = st.params
        ih, iw, ic = _dims(self.g, src)
        oh, ow, oc = _dims(self.g, st.out)
        groups, lo, hi = p["groups"], 0, oc
        pt, pl, pb, pr = p["pads"]
        u = ep.unit("CA")
        if st.operand:  # the kernel is a computed map, read in place (compiler/recipes/matmul.py)
            tbuf, per_row = self._operand_table(L, st, src)
            weng = ep.kernel_stream(st.operand)
        else:
            wbuf, tbuf, per_oc, per_row = self._conv_consts(L, st, src)
            if ch is not None:
                lo, hi = ch
                groups = max(groups * (hi - lo) // oc, 1)
                ic = groups * (ic // p["groups"]) if p["groups"] > 1 else ic
            if band is not None:
                ih, pt, pb, weng = band
            else:
                weng = ep.const_stream(wbuf, self.dtype, lo * per_oc, (hi - lo) * per_oc, row=per_oc)
        ep.link("SE", weng, "CA", u, 1)
        ep.units.append(Command("CONV", dict(
            unit=u, dtype=self.dtype, in_h=ih, in_w=iw, in_c=ic, out_c=hi - lo, kh=p["kh"], kw=p["kw"],
            sh=p["sh"], sw=p["sw"], dh=p["dh"], dw=p["dw"], pad_t=pt, pad_l=pl, pad_b=pb, pad_r=pr,
            groups=groups, in_layout=geometry(ih, iw, ic, 1).layout,
            out_layout=geometry(oh, ow, hi - lo, 1).layout,
            **self._act_fields(p["act"], p["act_range"], st.out),
            in_zp=self.qp(src)[1] if self.int8 else 0, out_zp=self.qp(st.out)[1] if self.int8 else 0,
            qparams=self.plan.buffer(tbuf).address(self.profile) + lo * per_row)))
        return "CA", u

    def pool(self, ep: _Epoch, L: Layer, st: Step, src: str, ch=None) -> tuple[str, int]:
        """POOL unit; with ch = [lo, hi) on channels lo..hi-1 (a slice of a multi-CA conv-pool epoch)."""
        p = st.params
        ih, iw, c = _dims(self.g, src)
        c = c if ch is None else ch[1] - ch[0]
        mult, shift = 0, 0
        if self.int8 and p["mode"] in ("avg", "global_avg"):
            mult, shift = Q.pool_avg_mult(self.qp(src), self.qp(st.out))
        u = ep.unit("POOL")
        pt, pl, pb, pr = p["pads"]
        ep.units.append(Command("POOL", dict(
            unit=u, dtype=self.dtype, layout=geometry(ih, iw, c, 1).layout, mode=p["mode"], in_h=ih, in_w=iw, c=c,
            kh=p["kh"], kw=p["kw"], sh=p["sh"], sw=p["sw"], pad_t=pt, pad_l=pl, pad_b=pb, pad_r=pr,
            include_pad=p["include_pad"], in_zp=self.qp(src)[1] if self.int8 else 0,
            out_zp=self.qp(st.out)[1] if self.int8 else 0, mult=mult, shift=shift,
            rounding=p.get("rounding", "half_up"))))
        return "POOL", u

    def resize(self, ep: _Epoch, L: Layer, st: Step, src: str) -> tuple[str, int]:
        ih, iw, c = _dims(self.g, src)
        oh, ow, _ = _dims(self.g, st.out)
        u = ep.unit("POOL")
        ep.units.append(Command("RESIZE", dict(
            unit=u, dtype=self.dtype, layout=geometry(ih, iw, c, 1).layout, mode=st.params["mode"],
            coord=st.params["coord"], in_h=ih, in_w=iw, c=c, out_h=oh, out_w=ow)))
        return "POOL", u

    def act(self, ep: _Epoch, L: Layer, st: Step, src: str, ch=None, rows=None) -> tuple[str, int]:
        p = st.params
        h, w, c = _dims(self.g, src)
        c = c if ch is None else ch[1] - ch[0]
        h = h if rows is None else rows[1] - rows[0]
        u = ep.unit("ACT")
        args = dict(unit=u, dtype=self.dtype, layout=geometry(h, w, c, 1).layout, h=h, w=w, c=c,
                    alpha=0, lo=0, hi=0, lut=0)
        if self.int8:
            table = p.get("table")
            if table is None and p.get("lut") is not None:  # a function as its table, once the scales are known
                table = p["lut"](self.qp(src), self.qp(st.out))
            lut = np.asarray(table, np.int8).tobytes() if table is not None else \
                Q.act_lut(p["func"], p, self.qp(src), self.qp(st.out))
            buf = self.const(f"{L.name}::{st.out}::lut", lut, L.name, (256,), "int8")
            args.update(func="lut", lut=self.plan.buffer(buf).address(self.profile))
        else:
            args.update(func=p["func"], alpha=self.fbits(p["alpha"]),
                        lo=self.fbits(p["lo"] if p["lo"] is not None else 0.0),
                        hi=self.fbits(p["hi"] if p["hi"] is not None else 0.0))
        ep.units.append(Command("ACT", args))
        return "ACT", u

    def arith(self, ep: _Epoch, L: Layer, st: Step, src: str, ch=None, rows=None) -> tuple[str, int]:
        """ARITH unit(s); with ch = [lo, hi) on channels lo..hi-1 (operand planes and table rows sliced);
        with rows = [lo, hi) on those rows of a map (a `ca_rows` band: constant tables only)."""
        p = st.params
        h, w, c = _dims(self.g, st.out if p.get("broadcast") else src)
        h = h if rows is None else rows[1] - rows[0]
        op = p["op"]
        lo = 0 if ch is None else ch[0]
        cs = c if ch is None else ch[1] - ch[0]
        layout = geometry(h, w, cs, 1).layout
        c2 = 0
        if op == "concat":  # layout is a's; b and the output follow the layout rule (engine contract)
            c2 = _dims(self.g, st.operand)[2]
        qa, qo = self.qp(src), self.qp(st.out)
        qb = self.qp(st.operand) if st.operand else (1.0, 0)
        if "reciprocal" in p and self.int8:  # port 1 carries 1 / operand, in its own int8 scale
            qb = Q.reciprocal_qparams(p["reciprocal"])
        cmap = p.get("const_map")
        if cmap is not None and self.int8:  # a constant map in its own int8 scale
            qb = Q.qparams_from_range(float(cmap.min()), float(cmap.max()))
        entry = 16 if self.int8 else 4
        first = None
        if op == "affine" and not self.int8:  # float BN: mul_const then add_const, chained
            t1 = self.const(f"{L.name}::{st.out}::scale", Q.float_table(p["scale"]), L.name, (c,), "fp32")
            u1 = ep.unit("ARITH")
            ep.units.append(self._arith_cmd(u1, "mul_const", layout, h, w, cs, 0, 1, (0, 0, 0),
                                            dict(act="none", act_lo=0, act_hi=0), t1, lo * entry))
            first = u1
            op, table, per = "add_const", Q.float_table(p["bias"]), 1
        elif self.int8:
            table, per = Q.arith_table_int8(op, c, qa, qb, qo, const=p.get("const"), scale=p.get("scale"),
                                            bias=p.get("bias"))
            op = "add_const" if op == "affine" else op
        else:
            vals = p.get("const", np.zeros(1, np.float32))
            table, per = Q.float_table(vals), int(np.size(vals) > 1)
        tbuf = self.const(f"{L.name}::{st.out}::params", table, L.name, (len(table) // 4,),
                          "int8" if self.int8 else "fp32")
        u = ep.unit("ARITH")
        zps = (qa[1], qb[1], qo[1]) if self.int8 else (0, 0, 0)
        acts = self._act_fields(p.get("act", "none"), p.get("act_range"), st.out)
        ep.units.append(self._arith_cmd(u, op, layout, h, w, cs, c2, per, zps, acts, tbuf, lo * entry * per))
        if first is not None:
            ep.link("ARITH", first, "ARITH", u, 0)
            return ("ARITH", first), ("ARITH", u)
        if cmap is not None:
            ep.link("SE", self._const_map_stream(ep, L, st, cmap, layout, qb), "ARITH", u, 1)
        if st.operand:
            eng = ep.stream(st.operand, "read", ch, like=st.out if p.get("broadcast") else None)
            if "reciprocal" in p:  # x / y = x * (1 / y): y streams through the ACT unit first
                ua = self._reciprocal(ep, L, st, (h, w, cs, layout), qb)
                ep.link("SE", eng, "ACT", ua, 0)
                ep.link("ACT", ua, "ARITH", u, 1)
            else:
                ep.link("SE", eng, "ARITH", u, 1)
        return "ARITH", u

    def _const_map_stream(self, ep: _Epoch, L: Layer, st: Step, cmap: np.ndarray, layout: str, qb) -> int:
        """A linear read SE of a constant map stored as the dense stream of its layout (one run, or a
        run per line)."""

        hwc_k = onnx_to_hwc(cmap, layout)
        vals = quantize(hwc_k, *qb) if self.int8 else float_weights(hwc_k, self.dtype)
        data = pack(vals, layout).tobytes()
        h = hwc_k.shape[0]
        buf = self.const(f"{L.name}::{st.out}::map", data, L.name, (vals.size,), self.dtype)
        return ep.const_stream(buf, self.dtype, row=len(data) // h)

    def _reciprocal(self, ep: _Epoch, L: Layer, st: Step, dims, q_r) -> int:
        """An ACT unit computing 1 / operand over the output's [h][w][c] (int8: a LUT into scale q_r)."""
        h, w, c, layout = dims
        u = ep.unit("ACT")
        args = dict(unit=u, dtype=self.dtype, layout=layout, h=h, w=w, c=c, alpha=0, lo=0, hi=0, lut=0)
        if self.int8:
            lut = Q.act_lut("reciprocal", {}, self.qp(st.operand), q_r)
            buf = self.const(f"{L.name}::{st.out}::reciprocal", lut, L.name, (256,), "int8")
            args.update(func="lut", lut=self.plan.buffer(buf).address(self.profile))
        else:
            args.update(func="reciprocal")
        ep.units.append(Command("ACT", args))
        return u

    def _arith_cmd(self, u, op, layout, h, w, c, c2, per, zps, acts, tbuf, skip=0) -> Command:
        return Command("ARITH", dict(unit=u, dtype=self.dtype, layout=layout, op=op, per_channel=per, h=h, w=w, c=c,
                                     c2=c2, a_zp=zps[0], b_zp=zps[1], out_zp=zps[2], **acts,
                                     params=self.plan.buffer(tbuf).address(self.profile) + skip))

    # ---------------------------------------------------------------- layers

    def ca_slices(self, L: Layer) -> list[tuple[int, int]] | None:
        """Output-channel slices [lo, hi), one per CA, or None for one CA (rule: module doc)."""
        st0 = L.steps[0]
        if st0.unit != "CONV" or st0.operand or not _channelwise_tail(L, ("ACT", "ARITH", "POOL")) or \
                L.siblings or L.input in self.g.gathers or L.output in self.g.gathers:  # a walk: not sliced
            return None
        ih, iw, ic = _dims(self.g, L.input)
        oh, ow, oc = _dims(self.g, st0.out)
        blk = self.block
        if geometry(oh, ow, oc, 1).layout != "blocked16" or oc < 2 * blk:
            return None
        groups = st0.params["groups"]
        step = blk  # output channels per unit of work: whole groups, input slice on a channel block
        if groups > 1:
            ocg, icg = oc // groups, ic // groups
            while step % ocg or (step // ocg * icg) % blk:
                step += blk
                if step > oc:
                    return None
        n_act = sum(st.unit == "ACT" for st in L.steps)
        n_pool = sum(st.unit == "POOL" for st in L.steps)
        n_arith = sum((2 if st.params["op"] == "affine" and not self.int8 else 1)
                      for st in L.steps if st.unit == "ARITH")
        per_read = 1 + sum(1 for st in L.steps if st.operand) + (1 if groups > 1 else 0)
        reads, writes = engine_sets(self.profile)
        u = self.profile.units
        n = min(self.max_cas, u.conv_accelerators, (len(reads) - (groups == 1)) // per_read, len(writes),
                u.activation_units // n_act if n_act else 99, u.arith_units // n_arith if n_arith else 99,
                u.pool_units // n_pool if n_pool else 99,
                -(-oc // step))
        if n < 2:
            return None
        works = -(-oc // step)
        bounds, at = [], 0
        for k in range(n):
            take = works // n + (1 if k < works % n else 0)
            bounds.append((at * step, min((at + take) * step, oc)))
            at += take
        if groups > 1 and (geometry(ih, iw, ic, 1).layout != "blocked16" or L.input in self.g.windows):
            return None  # a grouped slice reads whole input planes (of a map, not of a box)
        later = [_dims(self.g, st.out)[:2] for st in L.steps[1:]]  # pooled maps; linear ones are 1 x 1
        slices = []
        for lo, hi in bounds:  # a slice must stay blocked16 (and so must a grouped slice's input)
            sic = (hi - lo) // (oc // groups) * (ic // groups)
            if slices and (any(geometry(h, w, hi - lo, 1).layout == "image" for h, w in [(oh, ow)] + later)
                           or groups > 1 and geometry(ih, iw, sic, 1).layout != "blocked16"):
                slices[-1] = (slices[-1][0], hi)
            else:
                slices.append((lo, hi))
        return slices if len(slices) > 1 else None

    def ca_rows(self, L: Layer) -> list[tuple[int, int]] | None:
        """Output-row bands [lo, hi), one per CA, or None (rule: module doc, "Row bands")."""
        st0 = L.steps[0] if L.steps else None
        if st0 is None or st0.unit != "CONV" or st0.operand or L.siblings or \
                L.input in self.g.gathers or L.output in self.g.gathers:  # a walk is not banded by rows
            return None
        for st in L.steps[1:]:  # ACT, or ARITH with constant tables: nothing else to read per band
            if st.unit == "ACT" and not st.operand:
                continue
            if st.unit != "ARITH" or st.operand or st.params["op"] not in SPLIT_ARITH or \
                    st.params.get("const_map") is not None or st.params.get("broadcast"):
                return None
        ih, iw, _ = _dims(self.g, L.input)
        oh, ow, _ = _dims(self.g, st0.out)
        if oh < 2 or iw < 2 or ow < 2:  # a band of one pixel would be a linear map
            return None
        for t in (L.input, L.output):
            p = self.plan.place[t]
            if p.se or p.pixel or p.layout == "linear":
                return None
        n_act = sum(st.unit == "ACT" for st in L.steps)
        n_arith = sum((2 if st.params["op"] == "affine" and not self.int8 else 1)
                      for st in L.steps if st.unit == "ARITH")
        reads, writes = engine_sets(self.profile)
        u = self.profile.units
        n = min(self.max_cas, u.conv_accelerators, len(reads) - 1, len(writes), oh,
                u.activation_units // n_act if n_act else 99, u.arith_units // n_arith if n_arith else 99)
        if n < 2:
            return None
        return [(k * oh // n, (k + 1) * oh // n) for k in range(n)]

    def _layer_rows(self, L: Layer, bands, epoch_id: int) -> list[Command]:
        """Row-band epoch: one chain read SE (the band's input rows) -> CONV -> steps -> write SE (its
        output rows) per band; the weights are read once and broadcast to every CA."""
        ep = _Epoch(self, L)
        conv = L.steps[0]
        p = conv.params
        ih = _dims(self.g, L.input)[0]
        oc = _dims(self.g, conv.out)[2]
        wbuf, _, per_oc, _ = self._conv_consts(L, conv, L.input)
        weng = ep.const_stream(wbuf, self.dtype, 0, oc * per_oc, row=per_oc)
        reach = (p["kh"] - 1) * p["dh"] + 1  # input rows one output row's window spans
        for lo, hi in bands:
            top = lo * p["sh"] - p["pads"][0]  # first input row of the band's windows (< 0: padding)
            end = (hi - 1) * p["sh"] - p["pads"][0] + reach  # one past its last
            in_lo, in_hi = max(top, 0), min(end, ih)
            prev = ("SE", ep.stream(L.input, "read", rows=(in_lo, in_hi)))
            src = L.input
            for st in L.steps:
                if st.unit == "CONV":
                    got = self.conv(ep, L, st, src, band=(in_hi - in_lo, in_lo - top, end - in_hi, weng))
                else:
                    got = getattr(self, st.unit.lower())(ep, L, st, src, rows=(lo, hi))
                head, tail = (got if isinstance(got[0], tuple) else (got, got))
                ep.link(prev[0], prev[1], head[0], head[1], 0)
                prev, src = tail, st.out
            ep.link(prev[0], prev[1], "SE", ep.stream(L.output, "write", rows=(lo, hi)), 0)
        return ep.commands(epoch_id)

    def epoch_tiles(self, L: Layer) -> list[tuple[int, int]] | None:
        """Output-channel tiles [lo, hi), one epoch each, for a conv whose weights would take more than a
        quarter of the watchdog (epoch.timeout_cycles) to stream from the weights pool; None: one epoch.
        Tiles hold whole channel blocks (the ISA's block); dense convs only, with channel-wise steps after."""
        st0 = L.steps[0] if L.steps else None
        if st0 is None or st0.unit != "CONV" or st0.operand or st0.params["groups"] != 1 or L.siblings or \
                L.input in self.g.gathers or L.output in self.g.gathers or \
                not _channelwise_tail(L, ("ACT", "ARITH")):
            return None
        w = st0.params["weights"]
        oc = int(w.shape[0])
        per_oc = int(np.prod(w.shape[1:])) * load_isa().dtype_bytes(self.dtype)
        pool = self.profile.pool_named(self.weights_pool)
        budget = self.profile.epoch.timeout_cycles * pool.bytes_per_cycle / 4
        if oc * per_oc <= budget:
            return None
        step = self.block * max(1, int(budget // (per_oc * self.block)))
        return [(lo, min(lo + step, oc)) for lo in range(0, oc, step)]

    def layer(self, L: Layer, epoch_id: int) -> list[Command]:
        tiles = self.epoch_tiles(L)
        if tiles is not None:  # one epoch per tile of output channels (each streams its slice of the weights)
            return [c for k, t in enumerate(tiles) for c in self._layer_split(L, [t], epoch_id + k)]
        slices = self.ca_slices(L)
        chosen = self._layer_split(L, slices, epoch_id) if slices is not None else self._layer_one(L, epoch_id)
        bands = self.ca_rows(L)
        if bands is not None and len(bands) > len(slices or [0]):
            banded = self._layer_rows(L, bands, epoch_id)
            if self._bands_pay(banded, chosen):
                return banded
        return chosen

    BAND_MARGIN = 2  # the compute bands share out must be this many times the registers they add

    def _bands_pay(self, banded: list[Command], chosen: list[Command]) -> bool:
        """Whether row bands are worth their configuration registers: the CA time they save (MACs at the
        profile's rate and the engine's CA utilisation, slowest CA of each) must exceed BAND_MARGIN
        times the added register cycles. The margin stands for what the estimate leaves out: bands
        share the compute, not the map's stream time (several read SEs on one RAM take turns on its
        banks), so a small or memory-bound conv would only pay the setup. A compromise, measured: an
        8-channel 64 x 64 conv still takes bands (38,004 cycles, 37,312 on one CA), a 16-channel 40 x 40
        one gains 2x (27,706 against 55,906), 8 x 8 and 12 x 12 maps keep one CA."""
        from types import SimpleNamespace


        c = self.profile.compute

        def regs(cmds):
            return sum(len(k.args) for k in cmds if k.op not in ("EPOCH", "RUN", "WAIT"))

        def ca_time(cmds):
            t = 0.0
            for k in cmds:
                if k.op == "CONV":
                    a = k.args
                    oh, ow = out_hw(a)
                    macs = oh * ow * a["out_c"] * a["kh"] * a["kw"] * (a["in_c"] // a["groups"])
                    t = max(t, macs / (c.macs(self.dtype) * ca_utilisation(SimpleNamespace(args=a), c)))
            return t

        added = self.profile.epoch.register_cycles * (regs(banded) - regs(chosen))
        return ca_time(chosen) - ca_time(banded) > self.BAND_MARGIN * added

    def _layer_one(self, L: Layer, epoch_id: int) -> list[Command]:
        """The layer's chain on one unit of each kind (plus parallel copy chains)."""
        ep = _Epoch(self, L)
        first = L.steps[0] if L.steps else None
        src_eng = ep.stream(L.input, "read", like=first.out if first and first.params.get("broadcast") else None)
        prev, src = ("SE", src_eng), L.input
        for st in L.steps:
            got = getattr(self, st.unit.lower())(ep, L, st, src)
            head, tail = (got if isinstance(got[0], tuple) else (got, got))
            port = 0
            ep.link(prev[0], prev[1], head[0], head[1], port)
            prev, src = tail, st.out
        eng = ep.stream(L.output, "write")
        ep.link(prev[0], prev[1], "SE", eng, 0)
        for src, st in L.siblings:  # parallel chains of the same epoch (permutation pieces, gather phases)
            if st.unit == "CONV":  # a CONV on its own CA; the layer's input is read once, broadcast to every CA
                got = self.conv(ep, L, st, src)
                ep.link("SE", src_eng if src == L.input else ep.stream(src, "read"), *got, 0)
            else:
                got = self.arith(ep, L, st, src)
                ep.link("SE", ep.stream(src, "read"), *got, 0)
            ep.link(*got, "SE", ep.stream(st.out, "write"), 0)
        return ep.commands(epoch_id)

    def _layer_split(self, L: Layer, slices, epoch_id: int) -> list[Command]:
        """Multi-CA epoch: one chain CONV[lo:hi] -> steps -> write SE per slice; a dense conv's input
        is read once and broadcast to every CA, a grouped conv's slices read their own input planes."""
        ep = _Epoch(self, L)
        conv = L.steps[0]
        _, _, ic = _dims(self.g, L.input)
        oc = _dims(self.g, conv.out)[2]
        groups = conv.params["groups"]
        shared = ep.stream(L.input, "read") if groups == 1 else None
        for lo, hi in slices:
            if shared is None:
                in_lo, in_hi = lo * ic // oc, hi * ic // oc
                src_eng = ep.stream(L.input, "read", (in_lo, in_hi))
            else:
                src_eng = shared
            prev = ("SE", src_eng)
            src = L.input
            for st in L.steps:
                got = getattr(self, st.unit.lower())(ep, L, st, src, (lo, hi))
                head, tail = (got if isinstance(got[0], tuple) else (got, got))
                ep.link(prev[0], prev[1], head[0], head[1], 0)
                prev, src = tail, st.out
            eng = ep.stream(L.output, "write", (lo, hi))
            ep.link(prev[0], prev[1], "SE", eng, 0)
        return ep.commands(epoch_id)


def generate(layers: list[Layer], g: Graph, plan: MemoryPlan, qparams: dict, dtype: str, options, profile,
             memo: dict | None = None):
    """(commands, debug map: command index -> ONNX node). `memo`: a dict kept across calls for the
    same layers and qparams (the points of a sweep), so weights are quantized once."""
    cg = Codegen(g, plan, qparams, dtype, options, profile)
    cg.memo = memo if memo is not None else {}
    cmds: list[Command] = []
    debug: dict[int, str] = {}
    epoch = 0
    for L in layers:
        debug[len(cmds)] = L.name
        if L.kind == "host":
            cmds.extend(host_commands(cg, L))
            continue
        made = cg.layer(L, epoch)
        cmds.extend(made)
        epoch += sum(1 for c in made if c.op == "EPOCH")
    cmds.append(Command("END"))
    return cmds, debug
