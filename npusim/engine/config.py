"""Epoch configurations as the hardware sees them: decoded commands grouped by epoch.

`decode_program` turns a Program's logical commands into what the hardware reads
(`codec.hardware_view`: encode, then decode), so rounding of strides/limits/addresses is honest;
a word with an undefined opcode (`codec.UNKNOWN_OP`) becomes a Decoded with `op` None.
`EpochConfig` collects the SE, unit and LINK commands between EPOCH and RUN.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import IsaSpecError
from ..kernels.eltwise import TWO_MAPS
from ..program.legality import UNIT_KIND, configured_once
from ..program.codec import UNKNOWN_OP, hardware_view
from ..program.layouts import required_layout
from ..program.validate import hardware_views

UNIT_OPS = ("CONV", "POOL", "RESIZE", "ARITH", "ACT")
ESIZE = {"int8": 1, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Decoded:
    """One command as the hardware decoded it; `op` is None for an unknown opcode."""

    index: int
    op: str | None
    args: dict
    opcode: int | None = None


def decode_program(program, isa, profile) -> list[Decoded]:
    """Every command as the hardware sees it (`hardware_view`); raises EncodeError for a command
    that has no encoding (validate_program refuses those before a run). Computed once per program
    state and profile (`Program.memo`); the Decoded records and their args are not to be changed."""
    return program.memo("decoded", (isa, profile), lambda: _decode(program, isa, profile))


def _decode(program, isa, profile) -> list[Decoded]:
    views = hardware_views(program, isa, profile)  # known for a blob's or a fresh compile's program
    out = []
    for i, cmd in enumerate(program.commands):
        dec = views[i] if views is not None else hardware_view(cmd, isa, profile)
        if dec.op == UNKNOWN_OP:
            out.append(Decoded(i, None, dec.args, int(dec.args["opcode"])))
        else:
            out.append(Decoded(i, dec.op, dec.args, isa.command(dec.op).opcode))
    return out


def out_hw(a: dict) -> tuple[int, int]:
    """Output height/width of a conv or pool configuration."""
    if a.get("mode") in ("global_avg", "global_max"):
        return 1, 1
    dh, dw = a.get("dh", 1), a.get("dw", 1)
    oh = (a["in_h"] + a["pad_t"] + a["pad_b"] - dh * (a["kh"] - 1) - 1) // max(a["sh"], 1) + 1
    ow = (a["in_w"] + a["pad_l"] + a["pad_r"] - dw * (a["kw"] - 1) - 1) // max(a["sw"], 1) + 1
    return oh, ow


@dataclass
class UnitConfig:
    """A configured unit (CA, POOL, ARITH, ACT) of one epoch."""

    kind: str  # endpoint kind: CA | POOL | ARITH | ACT
    index: int
    op: str  # command name: CONV | POOL | RESIZE | ARITH | ACT
    args: dict
    command: int  # command index
    block: int  # channels of one blocked16 block (the ISA's [layouts.blocked16] block)

    @property
    def name(self) -> str:
        return f"{self.kind}{self.index}"

    @property
    def dtype(self) -> str:
        return self.args["dtype"]

    @property
    def esize(self) -> int:
        return ESIZE[self.dtype]

    def in_shapes(self) -> dict[int, tuple[int, int, int, str]]:
        """Input port -> (h, w, c, layout) of the tensor expected there (port 1 of CA: weights)."""
        a = self.args
        if self.op == "CONV":
            wc = a["out_c"] * a["kh"] * a["kw"] * max(a["in_c"] // max(a["groups"], 1), 1)
            return {0: (a["in_h"], a["in_w"], a["in_c"], a["in_layout"]), 1: (1, 1, wc, "linear")}
        if self.op in ("POOL", "RESIZE"):
            return {0: (a["in_h"], a["in_w"], a["c"], a["layout"])}
        if self.op == "ARITH":
            shapes = {0: (a["h"], a["w"], a["c"], a["layout"])}
            if a["op"] in TWO_MAPS:
                shapes[1] = (a["h"], a["w"], a["c"], a["layout"])
            elif a["op"] == "mul_channel":  # a [1][1][c] vector broadcast over h x w
                shapes[1] = (1, 1, a["c"], "linear")
            elif a["op"] == "concat":
                shapes[1] = (a["h"], a["w"], a["c2"], required_layout(a["h"], a["w"], max(a["c2"], 1)))
            return shapes
        return {0: (a["h"], a["w"], a["c"], a["layout"])}

    def out_shape(self) -> tuple[int, int, int, str]:
        a = self.args
        if self.op == "CONV":
            oh, ow = out_hw(a)
            return oh, ow, a["out_c"], a["out_layout"]
        if self.op == "POOL":
            oh, ow = out_hw(a)
            return oh, ow, a["c"], required_layout(max(oh, 1), max(ow, 1), a["c"])
        if self.op == "RESIZE":
            return a["out_h"], a["out_w"], a["c"], required_layout(a["out_h"], a["out_w"], a["c"])
        if self.op == "ARITH":
            c = a["c"] + (a["c2"] if a["op"] == "concat" else 0)
            return a["h"], a["w"], c, required_layout(a["h"], a["w"], c)
        return a["h"], a["w"], a["c"], a["layout"]

    def stream_bytes(self, shape) -> int:
        h, w, c, layout = shape
        if h <= 0 or w <= 0 or c <= 0:
            return 0
        if layout == "blocked16":
            return -(-c // self.block) * h * w * self.block * self.esize
        return h * w * c * self.esize

    def work(self) -> int:
        """MACs (CA) or output elements (other units)."""
        a = self.args
        oh, ow, oc, _ = self.out_shape()
        if self.op == "CONV":
            return max(oh, 0) * max(ow, 0) * oc * a["kh"] * a["kw"] * max(a["in_c"] // max(a["groups"], 1), 1)
        return max(oh, 0) * max(ow, 0) * oc


@dataclass
class SEConfig:
    index: int
    args: dict
    command: int

    @property
    def name(self) -> str:
        return f"SE{self.index}"

    @property
    def read(self) -> bool:
        return self.args["dir"] == "read"

    @property
    def stream_bytes(self) -> int:
        a = self.args
        return a["run"] * a["n1"] * a["n2"] * a["n3"]


@dataclass
class Link:
    src: str  # endpoint name, e.g. "SE0", "CA1"
    dst: str
    port: int
    command: int


LINK_FIELDS = 5  # src_kind, src, dst_kind, dst, dst_port


@dataclass
class EpochConfig:
    """Everything configured between EPOCH and RUN."""

    id: int
    command: int  # index of the EPOCH command
    block: int  # blocked16 block size from the ISA (isa.layouts["blocked16"]["block"])
    ses: dict = field(default_factory=dict)  # name -> SEConfig
    units: dict = field(default_factory=dict)  # name -> UnitConfig
    links: list = field(default_factory=list)
    extra: list = field(default_factory=list)  # (command index, legality.Problem) refused at config time

    def registers(self) -> int:
        """Configuration registers programmed before RUN: one per field of every SE, unit and LINK."""
        return (sum(len(se.args) for se in self.ses.values()) + sum(len(u.args) for u in self.units.values())
                + LINK_FIELDS * len(self.links))

    def add(self, d: Decoded) -> None:
        a = d.args
        if d.op == "SE":
            se = SEConfig(a["engine"], a, d.index)
            self._put(self.ses, se, d)
        elif d.op in UNIT_OPS:
            u = UnitConfig(UNIT_KIND[d.op], a["unit"], d.op, a, d.index, self.block)
            self._put(self.units, u, d)
        elif d.op == "LINK":
            self.links.append(Link(f"{a['src_kind']}{a['src']}", f"{a['dst_kind']}{a['dst']}", a["dst_port"], d.index))
        else:  # pragma: no cover - the controller only passes config commands
            raise IsaSpecError(f"{d.op} is not an epoch configuration command")

    def _put(self, table: dict, item, d: Decoded) -> None:
        """Configure `item`; a second configuration of the same engine/unit in one epoch is refused
        (the registers would be silently overwritten): the first one is kept."""
        old = table.get(item.name)
        if old is not None:
            self.extra.append((d.index, configured_once(item.name, old.command, d.index)))
            return
        table[item.name] = item

    def node(self, name: str):
        return self.ses.get(name) or self.units.get(name)

    def sources_of(self, name: str) -> dict[int, list[Link]]:
        out: dict[int, list[Link]] = {}
        for ln in self.links:
            if ln.dst == name:
                out.setdefault(ln.port, []).append(ln)
        return out
