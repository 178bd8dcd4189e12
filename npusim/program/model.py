"""The in-memory program: what the compiler produces and the runtime executes.

A blob file is an encoded `Program` (see `blob.py`); loading a blob gives one back.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .codec import Command


def _isa_version() -> int:
    from .spec import load_isa

    return load_isa().version

BUFFER_KINDS = ("input", "output", "activation", "weight", "scratch")


@dataclass(frozen=True)
class Buffer:
    """One entry of the buffer table: a byte range the program was compiled to use."""

    name: str
    kind: str  # one of BUFFER_KINDS
    pool: str  # pool name in the hardware profile
    offset: int  # bytes from the pool base
    size: int  # bytes the compiler reserved
    align: int  # alignment the compiler asked for
    shape: tuple[int, ...] = ()  # logical tensor shape (ONNX order, e.g. N,C,H,W)
    dtype: str = "int8"  # int8 | fp16 | fp32 (ISA dtype names)
    layout: str = "linear"  # ISA layout name: linear | image | blocked16
    producer: str = ""  # ONNX node that writes it ("" for inputs and constants)
    consumers: tuple[str, ...] = ()  # ONNX nodes that read it
    scale: float = 1.0  # quantization of the tensor it holds (int8 only)
    zero_point: int = 0
    line_stride: int = 0  # bytes between lines as the compiler laid them out (0 = n/a)
    plane_stride: int = 0  # bytes between channel blocks as the compiler laid them out

    def address(self, profile) -> int:
        return profile.pool_named(self.pool).base + self.offset


@dataclass(frozen=True)
class Constant:
    """Bytes the runtime places in memory before the first epoch (weights, tables, LUTs)."""

    name: str
    pool: str
    offset: int
    data: bytes


@dataclass(frozen=True)
class Header:
    profile: str = "n657"  # target profile name
    compiler: str = "npusim"  # compiler name
    compiler_version: str = ""
    isa_version: int = field(default_factory=lambda: _isa_version())  # the ISA this npusim implements
    min_runtime: str = "0.1.0"  # minimum runtime/firmware version that may run it
    format_version: int = 1
    source: str = ""  # the model format the front end read when not ONNX ("tflite"): what layer names name


@dataclass
class Program:
    commands: list[Command]
    buffers: list[Buffer] = field(default_factory=list)
    constants: list[Constant] = field(default_factory=list)
    debug: dict[int, str] = field(default_factory=dict)  # command index -> ONNX node name
    header: Header = field(default_factory=Header)

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def buffers_of(self, kind: str) -> list[Buffer]:
        return [b for b in self.buffers if b.kind == kind]

    @property
    def host_layers(self) -> list[str]:
        """Layers that run as CPU fallback (HOST commands), derived from the commands, so a loaded blob has them too."""
        return [self.layer_of(i) for i, c in enumerate(self.commands) if c.op == "HOST"]

    def layer_of(self, command_index: int) -> str:
        """The ONNX node a command belongs to: the nearest debug entry at or before it."""
        items = tuple(self.debug.items())
        got = self.__dict__.get("_layers")
        if got is None or got[0] != items:
            keys = sorted(k for k in self.debug if isinstance(k, int) and not isinstance(k, bool))
            got = self.__dict__["_layers"] = (items, keys, [self.debug[k] for k in keys])
        i = bisect.bisect_right(got[1], command_index) - 1
        return got[2][i] if i >= 0 else ""

    def memo(self, name: str, deps: tuple, build):
        """`build()` computed once per program state: a value derived from the program (its decoded
        commands, its validation, ...) for `deps` (objects, compared by identity: a profile, the
        ISA). The state is every Command, Buffer and Constant (all immutable; compared as list
        elements: the same objects, or equal ones, from which the same values derive) and the debug
        map and header, so replacing any of them by a different one recomputes. Checking the state
        costs a C-level list comparison (identical elements compare at once)."""
        m = self.__dict__.get("_memo")
        if m is None or not (m[0] == self.commands and m[1] == self.buffers and m[2] == self.constants
                             and m[3] == self.debug and m[4] == self.header):
            # the lists keep the objects alive while the memo holds
            m = self.__dict__["_memo"] = (list(self.commands), list(self.buffers), list(self.constants),
                                          dict(self.debug), self.header, {})
        key = (name, tuple(map(id, deps)))
        got = m[5].get(key)
        if got is None:
            got = m[5][key] = (deps, build())
        return got[1]

    def __getstate__(self):
        d = dict(self.__dict__)
        d.pop("_memo", None)
        d.pop("_layers", None)
        return d
