"""The plain data an ST Edge AI Core output is read into, whatever file it came from.

Field names follow the runtime's documented structs (`LL_Streng_TensorInitTypeDef`,
`LL_Buffer_InfoTypeDef`, `EpochBlock_ItemTypeDef`, ...), so a reader of `network.c`, of a blob trace
file and the lifter of epoch-controller register writes all produce the same records. Addresses are
absolute (`addr_base + offset`), as the hardware sees them; the symbol a relocatable address was
given against is kept beside it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

# unit kinds as the stream switch and the enable lists name them
UNIT_KINDS = ("STRENG", "CONVACC", "DECUN", "ACTIV", "ARITH", "POOL", "RECBUF")


@dataclass(frozen=True)
class Pool:
    """A memory pool of the compile (one comment line per pool in `network.c`)."""

    index: int
    name: str  # npuRAM3, octoFlash, ...
    address: int
    size: int
    byte_width: int = 8
    freq_ratio: float = 1.0
    read_only: bool = False
    file_postfix: str = ""  # AXISRAM6, xSPI2, ... (the weight file's suffix)
    cacheable: bool = False

    @property
    def end(self) -> int:
        return self.address + self.size


# the numpy types of the buffer table's DataType_* names
NUMPY_TYPES = {"INT8": "int8", "UINT8": "uint8", "INT16": "int16", "UINT16": "uint16", "INT32": "int32",
               "UINT32": "uint32", "FLOAT": "float32"}


@dataclass(frozen=True)
class Buffer:
    """One row of a buffer table (`LL_Buffer_InfoTypeDef`)."""

    name: str
    addr_base: int
    offset_start: int
    offset_end: int
    offset_limit: int
    role: str  # "input" | "output" | "internal" (the table it came from)
    is_param: bool = False
    is_user_allocated: bool = False
    epoch: int | None = None  # the epoch that produces it (0: before the first)
    nbits: int = 8
    dtype: str = ""  # DataType_* without the prefix, e.g. "INT8", "UINT8", "FLOAT"
    shape: tuple[int, ...] = ()
    mem_shape: tuple[int, ...] = ()
    chpos: str = ""
    batch: int = 0  # channels per stored block (the row's own field; 0: not given)
    scale: tuple[float, ...] = ()
    zero_point: tuple[int, ...] = ()
    base_symbol: str = ""  # a relocation symbol the address was given against ("" = absolute)

    @property
    def numpy_type(self) -> str:
        """The numpy type name of its elements ("uint8", bytes, where the table names none)."""
        return NUMPY_TYPES.get(self.dtype, "uint8")

    @property
    def start(self) -> int:
        return self.addr_base + self.offset_start

    @property
    def end(self) -> int:
        return self.addr_base + self.offset_end

    @property
    def limit(self) -> int:
        return self.addr_base + self.offset_limit

    @property
    def size(self) -> int:
        return self.offset_end - self.offset_start


@dataclass(frozen=True)
class Streng:
    """A stream engine's configuration for one epoch (`LL_Streng_TensorInitTypeDef`, resolved).

    `addr` is the first byte (addr_base + offset_start); `limit` one past the last byte the address
    limiter lets the engine touch (addr_base + offset_limit; None when the limiter is off).
    `line_offset` is as programmed: 0 means fwidth * batch_offset (the runtime's rule), which
    `streng.walk` applies.
    """

    engine: int
    dir: int  # 0: bus -> stream (read), 1: stream -> bus (write)
    addr: int
    limit: int | None = None
    raw: bool = False
    frame_count: int = 0  # raw: elements per frame (0: (offset_end - offset_start) * 8 / nbits)
    fwidth: int = 0
    fheight: int = 0
    batch_depth: int = 0
    batch_offset: int = 0
    frame_offset: int = 0
    line_offset: int = 0
    loop_offset: int = 0
    frame_loop_cnt: int = 0
    frame_tot_cnt: int = 1
    nbits_in: int = 8
    nbits_out: int = 8
    continuous: bool = False
    noinc: bool = False
    noblk: bool = False
    align_right: bool = False
    nbits_unsigned: bool = False
    cacheable: bool = False
    cache_allocate: bool = False
    offset_end: int | None = None  # absolute end the compiler gave the engine (C structs only)
    base_symbol: str = ""
    name: str = ""  # the struct's name in the C file, "" when lifted from registers
    extra: tuple[tuple[str, int], ...] = ()  # fields read but not modelled, by name

    @property
    def direction(self) -> str:
        return "write" if self.dir else "read"

    @property
    def mem_bits(self) -> int:
        """Bits of one element in memory: the bus side of the engine."""
        return self.nbits_out if self.dir else self.nbits_in


@dataclass(frozen=True)
class Unit:
    """A processing unit's configuration for one epoch: CONVACC, ARITH, POOL, ACTIV, DECUN, RECBUF.
    `fields` holds the struct's fields by name (ints, or tuples of ints for arrays; an address
    field holds its absolute address)."""

    kind: str
    index: int
    fields: tuple[tuple[str, object], ...]
    name: str = ""  # the node the generated code names

    @functools.cached_property
    def _by_name(self) -> dict:
        return dict(reversed(self.fields))  # the first of a repeated name wins, as a scan would find it

    def get(self, key: str, default=None):
        return self._by_name.get(key, default)


@dataclass(frozen=True)
class Link:
    """A stream-switch connection: source unit's output port -> destination unit's input port.
    A destination has two switch contexts (`slot` 0 and 1), each with its own source, enable
    (`context`, as `LL_Switch_Init_Context(slot)`) and frame count."""

    dst_kind: str
    dst_index: int
    dst_port: int
    src_kind: str
    src_index: int
    src_port: int
    context: int = 1
    frames: int = 0
    slot: int = 0


@dataclass(frozen=True)
class SwOperator:
    """A software operator of a `pure_sw` / `hybrid` block: the runtime library call and its tensors,
    each a buffer name of ST's tables or `@0x...[+size]` (an address the table may hold several buffers
    at, over time: the replay picks the one live at the block; the size where the call gives it). `operands`: tensors whose direction the
    call does not say (the replay decides: the buffer the block's epoch produces is an output)."""

    kind: str  # the library operator, e.g. "DMA_Transpose", "softmax_integer", "Concat"
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    name: str = ""
    operands: tuple[str, ...] = ()
    params: tuple[tuple[str, object], ...] = ()  # the call's `*_sw_info` fields with plain values, by name

    def param(self, key: str, default=None):
        for k, v in self.params:
            if k == key:
                return v
        return default


@dataclass(frozen=True)
class HwEpoch:
    """One hardware epoch: what runs between two epoch-controller labels, or one explicit-struct
    start function."""

    number: int  # the epoch number the runtime and the board trace print
    strengs: tuple[Streng, ...] = ()
    units: tuple[Unit, ...] = ()
    links: tuple[Link, ...] = ()
    enabled: tuple[tuple[str, int], ...] = ()  # (kind, index) of the units switched on
    ec_instructions: int | None = None  # the epoch-controller instructions that program it (blobs only)
    ec_words: int | None = None  # their 32-bit program words, data words included (blobs only)
    ec_polls: int = 0  # of them, the polls (a poll waits for a unit; the end poll waits for the epoch's work)
    refused: tuple[str, ...] = ()  # register writes the hardware refuses (a field rule of ATON's map)

    def enabled_strengs(self) -> tuple[Streng, ...]:
        on = {i for k, i in self.enabled if k == "STRENG"}
        return tuple(s for s in self.strengs if not on or s.engine in on)


@dataclass(frozen=True)
class EpochBlock:
    """One entry of the epoch-block table (`EpochBlock_ItemTypeDef`); `index` is its array index."""

    index: int
    flags: frozenset[str]  # epoch_start, epoch_end, pure_hw, pure_sw, hybrid, blob, last_eb, ...
    epoch_num: int | None = None
    last_epoch_num: int | None = None
    in_streng_mask: int | None = None
    out_streng_mask: int | None = None
    wait_mask: int = 0
    estimated_npu_cycles: int | None = None  # None: absent (ST writes 0 for "no estimate")
    estimated_tot_cycles: int | None = None
    start_function: str = ""
    end_function: str = ""
    blob: str = ""  # the epoch-controller program's symbol
    epochs: tuple[HwEpoch, ...] = ()
    sw_ops: tuple[SwOperator, ...] = ()

    @property
    def kind(self) -> str:
        if "hybrid" in self.flags:
            return "hybrid"
        if "pure_sw" in self.flags:
            return "sw"
        return "hw"


MEMO_KEEP = 4  # option sets (placements, profiles) whose derived data an output keeps


@dataclass(frozen=True)
class StOutput:
    """A whole ST Edge AI Core output, as read."""

    name: str  # the network's name (`network`, `reid`, ...)
    pools: tuple[Pool, ...]
    buffers: tuple[Buffer, ...]
    blocks: tuple[EpochBlock, ...]
    toolchain: dict = field(default_factory=dict)  # atonn / runtime versions, options
    weights: dict = field(default_factory=dict)  # pool name -> bytes of its parameter image
    files: dict = field(default_factory=dict)  # role -> path of each file read
    all_buffers_info: bool = True  # the tables list every buffer (--all-buffers-info)
    weight_notes: tuple[str, ...] = ()  # weight images not attached: where each sits against the pools

    def pool_named(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)

    def pool_at(self, addr: int) -> Pool | None:
        for p in self.pools:
            if p.address <= addr < p.end:
                return p
        return None

    def memo(self, name: str, key, build, keep: int = MEMO_KEEP):
        """`build()` once per (`name`, `key`) for this output: what the replay and the timing derive
        from the program alone (its records are immutable) and from `key` (the options it depends on),
        reused by every run of the loaded output. The newest `keep` keys of each name are kept. Not
        a field: neither compared, nor serialised (`stblob`), nor pickled."""
        per = self.__dict__.setdefault("_memo", {}).setdefault(name, {})
        if key in per:
            return per[key]
        got = build()
        if len(per) >= keep:
            per.pop(next(iter(per)))
        per[key] = got
        return got

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_memo", None)
        return state
