"""Hand-assembly helpers for the engine tests (Programs built from Command lists), plus
tests of the basic controller path. Other test_engine_* files import the helpers."""

from __future__ import annotations

import numpy as np

from conftest import HANG_GUARD_S
from npusim.hw import load_profile
from npusim.program.codec import Command
from npusim.program.layouts import required_layout
from npusim.program.model import Buffer, Constant, Program

PROFILE = load_profile()
ESIZE = {"int8": 1, "fp16": 2, "fp32": 4}


def round_up(v: int, a: int) -> int:
    return -(-v // a) * a


def endpoint(name: str) -> tuple[str, int]:
    kind = name.rstrip("0123456789")
    return kind, int(name[len(kind):])


class Builder:
    """Accumulates buffers, constants and commands of a hand-assembled Program."""

    def __init__(self, profile=PROFILE):
        self.profile = profile
        self.buffers: list[Buffer] = []
        self.constants: list[Constant] = []
        self.commands: list[Command] = []
        self.debug: dict[int, str] = {}
        self.next_off: dict[str, int] = {}

    # ---------------------------------------------------------- memory
    def alloc(self, pool: str, size: int, align: int = 128) -> int:
        off = round_up(self.next_off.get(pool, 0), align)
        self.next_off[pool] = off + size
        return off

    def fm(self, name, kind, h, w, c, dtype="int8", pool="npuRAM3", align=128, scale=1.0, zp=0,
           line_align=None, offset=None, pad=0):
        """A feature-map buffer laid out with `line_align`-aligned line/plane strides."""
        es = ESIZE[dtype]
        layout = required_layout(h, w, c)
        la = line_align or (self.profile.alignment.granule if layout == "blocked16" else 8)
        if layout == "linear":
            line, plane, size = 0, 0, h * w * c * es
        elif layout == "image":
            line = round_up(w * c * es, la)
            plane, size = 0, line * h
        else:
            line = round_up(w * 16 * es, la)
            plane = line * h
            size = plane * -(-c // 16)
        size += pad
        off = self.alloc(pool, size, align) if offset is None else offset
        b = Buffer(name, kind, pool, off, size, align, shape=(1, c, h, w), dtype=dtype, layout=layout,
                   scale=scale, zero_point=zp, line_stride=line, plane_stride=plane)
        self.buffers.append(b)
        return b

    def const(self, name, data: bytes, pool="octoFlash", align=8):
        off = self.alloc(pool, len(data), align)
        self.constants.append(Constant(name, pool, off, bytes(data)))
        self.buffers.append(Buffer(name, "weight", pool, off, len(data), align, shape=(len(data),)))
        return self.addr_of(pool, off)

    def addr_of(self, pool: str, off: int) -> int:
        return self.profile.pool_named(pool).base + off

    def addr(self, buf: Buffer) -> int:
        return buf.address(self.profile)

    # ---------------------------------------------------------- commands
    def cmd(self, _op, **args) -> int:
        self.commands.append(Command(_op, args))
        return len(self.commands) - 1

    def se(self, engine, direction, base, run, n1=1, s1=0, n2=1, s2=0, n3=1, s3=0, layout="linear",
           dtype="int8", limit=None, port=None):
        port = self.profile.bus.stream_engine_port[engine] if port is None else port
        if limit is None:
            limit = base + (n3 - 1) * s3 + (n2 - 1) * s2 + (n1 - 1) * s1 + run + 64
        return self.cmd("SE", engine=engine, dir=direction, port=port, layout=layout, dtype=dtype, base=base,
                        limit=limit, run=run, n1=n1, s1=s1, n2=n2, s2=s2, n3=n3, s3=s3)

    def se_buf(self, engine, direction, buf: Buffer, **kw):
        """SE program streaming a feature-map buffer with the buffer table's strides."""
        _, c, h, w = buf.shape
        es = ESIZE[buf.dtype]
        if buf.layout == "linear":
            return self.se(engine, direction, self.addr(buf), h * w * c * es, dtype=buf.dtype, **kw)
        if buf.layout == "image":
            return self.se(engine, direction, self.addr(buf), w * c * es, n1=h, s1=buf.line_stride,
                           layout="image", dtype=buf.dtype, **kw)
        return self.se(engine, direction, self.addr(buf), w * 16 * es, n1=h, s1=buf.line_stride,
                       n2=-(-c // 16), s2=buf.plane_stride, layout="blocked16", dtype=buf.dtype, **kw)

    def se_const(self, engine, addr, size, dtype="int8"):
        return self.se(engine, "read", addr, size, dtype=dtype)

    def link(self, src, dst, port=0):
        sk, si = endpoint(src)
        dk, di = endpoint(dst)
        return self.cmd("LINK", src_kind=sk, src=si, dst_kind=dk, dst=di, dst_port=port)

    def htensor(self, slot, direction, buf: Buffer, elem=None):
        """HTENSOR operand for a buffer (its shape, layout, strides, quantization)."""
        dims = list(buf.shape)
        elem = elem or ("fp32" if buf.dtype in ESIZE else buf.dtype)
        args = dict(slot=slot, dir=direction, dtype=buf.dtype, elem=elem, layout=buf.layout, rank=len(dims),
                    zp=buf.zero_point, addr=self.addr(buf), line=buf.line_stride, plane=buf.plane_stride,
                    scale=int(np.array(buf.scale, np.float32).view(np.uint32)))
        args.update({f"d{k}": dims[k] if k < len(dims) else 0 for k in range(8)})
        return self.cmd("HTENSOR", **args)

    def host(self, op_type, ins, outs, layer="", opset=17, **attrs):
        """A software epoch: the ONNX operator's record as a constant, one HTENSOR per buffer, HOST."""
        from onnx import helper

        from npusim.program.hostop import encode_record

        node = helper.make_node(op_type, [f"i{k}" for k in range(len(ins))], [f"o{k}" for k in range(len(outs))],
                                **attrs)
        rec = encode_record(node, opset, "hand-assembled")
        addr = self.const(f"{layer or op_type}::host_op", rec)
        first = len(self.commands)
        for k, buf in enumerate(ins):
            self.htensor(k, "read", buf)
        for k, buf in enumerate(outs):
            self.htensor(k, "write", buf)
        i = self.cmd("HOST", n_in=len(ins), n_out=len(outs), node_bytes=len(rec), node=addr)
        if layer:
            self.debug[first] = layer
        return i

    def epoch(self, eid, layer=""):
        i = self.cmd("EPOCH", id=eid)
        if layer:
            self.debug[i] = layer
        return i

    def run_wait(self):
        self.cmd("RUN")
        self.cmd("WAIT")

    def program(self, end=True) -> Program:
        cmds = list(self.commands) + ([Command("END", {})] if end else [])
        return Program(commands=cmds, buffers=list(self.buffers), constants=list(self.constants),
                       debug=dict(self.debug))


def conv_cmd(b: Builder, unit, x: Buffer, out_c, kh, kw, *, stride=1, pad=0, groups=1, dtype="int8",
             qparams=0, in_zp=0, out_zp=0, act="none", act_lo=0, act_hi=0, dil=1):
    _, c, h, w = x.shape
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    return b.cmd("CONV", unit=unit, dtype=dtype, in_h=h, in_w=w, in_c=c, out_c=out_c, kh=kh, kw=kw, sh=stride,
                 sw=stride, dh=dil, dw=dil, pad_t=pad, pad_l=pad, pad_b=pad, pad_r=pad, groups=groups,
                 in_layout=required_layout(h, w, c), out_layout=required_layout(oh, ow, out_c), act=act,
                 act_lo=act_lo, act_hi=act_hi, in_zp=in_zp, out_zp=out_zp, qparams=qparams), (oh, ow)


def arith_cmd(b: Builder, unit, op, h, w, c, *, dtype="int8", c2=0, params=0, per_channel=0, a_zp=0, b_zp=0,
              out_zp=0, act="none", act_lo=0, act_hi=0):
    return b.cmd("ARITH", unit=unit, dtype=dtype, layout=required_layout(h, w, c), op=op, per_channel=per_channel,
                 h=h, w=w, c=c, c2=c2, a_zp=a_zp, b_zp=b_zp, out_zp=out_zp, act=act, act_lo=act_lo,
                 act_hi=act_hi, params=params)


def copy_program(h=8, w=8, c=16, in_pool="npuRAM3", out_pool="npuRAM4", in_offset=None, line_align=None,
                 dtype="int8", builder=None):
    """x -> SE0 -> ARITH0 copy -> SE5 -> y: the smallest full epoch."""
    b = builder or Builder()
    x = b.fm("x", "input", h, w, c, dtype, pool=in_pool, offset=in_offset, line_align=line_align)
    y = b.fm("y", "output", h, w, c, dtype, pool=out_pool, line_align=line_align)
    b.epoch(0, "copy")
    b.se_buf(0, "read", x)
    arith_cmd(b, 0, "copy", h, w, c, dtype=dtype)
    b.se_buf(5, "write", y)
    b.link("SE0", "ARITH0")
    b.link("ARITH0", "SE5")
    b.run_wait()
    return b


# ------------------------------------------------------------------------- tests

def test_copy_epoch_moves_values_and_counts_bytes():
    import npusim

    b = copy_program()
    x = np.random.default_rng(1).uniform(-3, 3, (1, 16, 8, 8)).astype(np.float32)
    res = npusim.run(b.program(), {"x": x})
    assert res.status == "ok" and res.end_reason == "done"
    np.testing.assert_array_equal(res.outputs["y"], np.clip(np.rint(x), -128, 127))
    assert res.stats.bytes_read == 8 * 8 * 16 and res.stats.bytes_written == 8 * 8 * 16
    assert res.stats.cycles > PROFILE.epoch.setup_cycles
    assert res.stats.layers[0].name == "copy"
    assert res.stats.pools == {"npuRAM3": 1024, "npuRAM4": 1024}


def test_lazy_top_level_api():
    import subprocess
    import sys

    code = "import sys, npusim; assert 'npusim.runtime' not in sys.modules; npusim.run; npusim.RunOptions; " \
           "assert 'npusim.runtime' in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.stdout.strip() == "ok", out.stderr
