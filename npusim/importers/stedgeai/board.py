"""The board an imported ST program runs on: its memory windows (`hw/profiles/n657_board.toml`: the
flash read-only, the NPU RAMs present only while powered), the replay's options (`ReplayOptions`:
where the application's I/O buffers go, memory it reserves, power after reset), the placement of
the application's I/O buffers, and the faults of a placement itself (a pool outside the board's
memory, in unpowered RAM, or over reserved memory). The replay (`replay`) and the functional run
(`execute`) both start here.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from ...errors import UsageError
from ...faults import Fault, Relation
from ...hw.profile import Pool as HwPool
from ...hw.profile import load_profile
from ...memory.addrmap import AddressMap
from . import streng as se
from .model import StOutput

USER_IO_ALIGN = 32


@dataclass(frozen=True)
class Window:
    name: str
    base: int
    size: int
    perms: str
    powered_at_reset: bool

    @property
    def end(self) -> int:
        return self.base + self.size


@functools.lru_cache(maxsize=1)
def board_windows() -> tuple[Window, ...]:
    path = Path(str(resources.files("npusim.hw") / "profiles" / "n657_board.toml"))
    raw = tomllib.loads(path.read_text())
    return tuple(Window(w["name"], int(w["base"]), int(w["size"]), w["perms"], bool(w["powered_at_reset"]))
                 for w in raw["window"])


@dataclass(frozen=True)
class ReplayOptions:
    """`user_io`: (pool or window name, address or None) where the application's I/O buffers go
    (None: the default, see `place_user_io`); `reserve`: ((name, start, size), ...) memory the
    application keeps for itself (its linker sections); `npu_ram_off`: the NPU RAMs were left
    powered off after reset; `keep_going`: every fault, not only the first."""

    user_io: tuple[str, int | None] | None = None
    reserve: tuple[tuple[str, int, int], ...] = ()
    npu_ram_off: bool = False
    keep_going: bool = True


@functools.lru_cache(maxsize=2)
def board_map(npu_ram_off: bool) -> tuple[AddressMap, dict]:
    """The board's memory as an AddressMap (bank geometry of the NPU RAMs from the n657 profile), with
    the NPU RAMs left out when they are powered off; the windows left out by name."""
    prof = load_profile("n657")
    by_base = {p.base: p for p in prof.pools}
    pools, off = [], {}
    for w in board_windows():
        if npu_ram_off and not w.powered_at_reset:
            off[w.name] = w
            continue
        like = by_base.get(w.base)
        pools.append(HwPool(name=w.name, base=w.base, size=w.size, width=like.width if like else 8,
                            clock_ratio=like.clock_ratio if like else 2.5, perms=w.perms,
                            cacheable=w.name.startswith("xSPI"), banks=like.banks if like else 1,
                            interleave=like.interleave if like else 8, external=w.name.startswith("xSPI")))
    return AddressMap(replace(prof, pool=tuple(pools))), off


def place_user_io(out: StOutput, opts: ReplayOptions) -> dict[str, tuple[int, int, str]]:
    """{relocation symbol: (address, size, where)} for the buffers the application provides. Default:
    the AXISRAM2 window (the application's RAM), after every byte the compile uses there, each buffer
    32 B aligned; `--user-io NAME[=ADDRESS]` names a pool or window and optionally the first address.
    Worked out once per loaded output and `opts.user_io` (`StOutput.memo`)."""
    return dict(out.memo("user-io placement", opts.user_io, lambda: _place_user_io(out, opts.user_io)))


def _place_user_io(out: StOutput, user_io) -> dict[str, tuple[int, int, str]]:
    need = out.memo("user-io sizes", None, lambda: _user_io_sizes(out))
    if not need:
        return {}
    name, addr = user_io or ("AXISRAM2", None)
    area = next(((w.base, w.end) for w in board_windows() if w.name == name), None)
    if area is None:
        area = next(((p.address, p.end) for p in out.pools if p.name == name), None)
    if area is None:
        raise UsageError(f"--user-io {name}: no such pool or memory window "
                         f"(windows: {', '.join(w.name for w in board_windows())})")
    if addr is None:
        used = [b.limit for b in out.buffers if not b.base_symbol and area[0] <= b.start < area[1]]
        addr = max([area[0]] + used)
    place, where = {}, name
    for sym in sorted(need):
        addr = -(-addr // USER_IO_ALIGN) * USER_IO_ALIGN
        place[sym] = (addr, need[sym], where)
        addr += need[sym]
    return place


def resolved_buffers(out: StOutput, symbols: dict) -> list:
    """ST's buffers at their addresses: those given against a relocation symbol placed at `symbols`."""
    return [replace(b, addr_base=b.addr_base + symbols[b.base_symbol], base_symbol="")
            if b.base_symbol and b.base_symbol in symbols else b for b in out.buffers]


def _user_io_sizes(out: StOutput) -> dict[str, int]:
    """{relocation symbol: bytes from it that the table's buffers and the engines reach}."""
    need: dict[str, int] = {}
    for b in out.buffers:
        if b.base_symbol:
            need[b.base_symbol] = max(need.get(b.base_symbol, 0), b.offset_limit, b.offset_end)
    for blk in out.blocks:
        for ep in blk.epochs:
            for s in ep.strengs:
                if s.base_symbol:
                    end = max(s.limit or 0, s.offset_end or 0, s.addr + se.moved_bytes(s))
                    need[s.base_symbol] = max(need.get(s.base_symbol, 0), end)
    return need


def placement_faults(out: StOutput, opts: ReplayOptions, off: dict) -> list[Fault]:
    """Pools outside the board's memory or in unpowered RAM, and pools overlapping memory the
    application reserved for itself (`--reserve`). Worked out once per loaded output, reserved ranges and
    windows left out (`StOutput.memo`)."""
    return list(out.memo("placement faults", (opts.reserve, tuple(sorted(off))),
                         lambda: _placement_faults(out, opts.reserve, off)))


def _placement_faults(out: StOutput, reserve, off: dict) -> list[Fault]:
    faults = []
    wins = [w for w in board_windows() if w.name not in off]
    for p in out.pools:
        inside = any(w.base <= p.address and p.end <= w.end for w in wins)
        if not inside:
            dark = [w.name for w in off.values() if w.base < p.end and p.address < w.end]
            rule = (f"pool {p.name} [{p.address:#x}, {p.end:#x}) lies in {', '.join(dark)}, powered off after reset "
                    f"(the application must enable it)" if dark else
                    f"pool {p.name} [{p.address:#x}, {p.end:#x}) is not inside one memory window of the board")
            faults.append(Fault("out-of-pool", None, p.address, p.size, "", None, None, p.name, None,
                                Relation("unmapped", 0), rule, f"pool {p.name} is not in the board's memory"))
    for name, start, size in reserve:
        for p in out.pools:
            if p.name == name or start < p.end and p.address < start + size:
                lo, hi = max(start, p.address), min(start + size, p.end)
                if lo < hi:
                    faults.append(Fault("pool-overlap", None, lo, hi - lo, "", None, None, p.name, None,
                                        Relation("inside", lo - p.address),
                                        f"pool {p.name} [{p.address:#x}, {p.end:#x}) overlaps the application's "
                                        f"reserved {name} [{start:#x}, {start + size:#x})",
                                        f"pool {p.name} overlaps reserved memory"))
    return faults


def parse_reserve(text: str) -> tuple[str, int, int]:
    """`NAME=START+SIZE` (numbers in any base Python reads: 0x..)."""
    try:
        name, rng = text.split("=", 1)
        start, size = rng.split("+", 1)
        return name.strip(), int(start, 0), int(size, 0)
    except ValueError:
        raise UsageError(f"--reserve {text!r}: expected NAME=START+SIZE, e.g. AXISRAM2=0x34100000+0x20000") from None


def parse_user_io(text: str) -> tuple[str, int | None]:
    name, _, addr = text.partition("=")
    try:
        return name.strip(), (int(addr, 0) if addr else None)
    except ValueError:
        raise UsageError(f"--user-io {text!r}: expected POOL[=ADDRESS]") from None
