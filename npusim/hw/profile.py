"""Hardware profiles: TOML -> frozen, validated dataclasses.

A profile is one TOML file (the default `n657` ships in `profiles/`). Every key is
declared below with its type; unknown keys are rejected with `file:key`.
Single keys can be overridden (`--set bus.max_burst_beats=8`,
`--set pool.npuRAM3.banks=4`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, get_type_hints

from ..errors import EXIT_USAGE, ProfileError
from .limits import validate
from .units import parse_freq_hz, parse_size

# Marks a field whose value may be given with a unit string.
SIZE = {"unit": "size"}
FREQ = {"unit": "freq"}


@dataclass(frozen=True)
class Units:
    stream_engines: int
    conv_accelerators: int
    arith_units: int
    pool_units: int
    activation_units: int
    decompression_units: int


@dataclass(frozen=True)
class Compute:
    mac_per_cycle: dict  # dtype name -> MACs per cycle per conv accelerator (read-only mapping)
    lanes: int  # input channels per CA pass
    elems_per_cycle: dict  # unit kind -> output elements per cycle (read-only mapping)
    kernel_taps: int = 9  # kernel window taps the MAC array computes per pass (x lanes = MACs)
    tap_fill: float = 1.0  # how many times its own taps a smaller kernel (1x1) can fill the window with
    depthwise_efficiency: float = 1.0  # fraction of its one channel lane a depthwise conv keeps busy
    # bytes of a CA's double-buffered kernel store (0: unlimited); a kernel of one output channel larger
    # than half of it cannot be fetched while the CA computes (engine/timing.py kernel_serial)
    kernel_buffer: int = field(default=0, metadata=SIZE)

    def macs(self, dtype: str) -> float:
        return float(self.mac_per_cycle[dtype])

    def window_use(self, depth: int, taps: int, fill: float | None = None) -> float:
        """Fraction of a CA's MAC array (kernel_taps x lanes) busy on a kernel of `taps` taps over
        `depth` input channels: channel lanes (a partial last pass of `lanes` leaves lanes idle) x window
        taps (a kernel of kernel_taps or more fills ceil(taps / kernel_taps) passes; a smaller one fills
        the idle taps with up to `fill` (default `tap_fill`) times its own taps, capped by its passes)."""
        lane_use = depth / (-(-depth // self.lanes) * self.lanes)
        window = self.kernel_taps
        if taps >= window:
            return lane_use * (taps / (-(-taps // window) * window))
        passes = -(-depth // self.lanes)  # channel passes that could share the idle taps
        fill = self.tap_fill if fill is None else fill
        return lane_use * (min(window, taps * min(fill, passes)) / window)


@dataclass(frozen=True)
class Bus:
    ports: int
    beat_bytes: int
    max_burst_beats: int
    burst_boundary: int = field(metadata=SIZE)
    burst_overhead_cycles: int
    stream_engine_port: tuple
    epoch_controller_port: int


@dataclass(frozen=True)
class Alignment:
    granule: int  # bytes of the hardware's stride unit
    word: int  # bytes; the hardware ignores address bits below this
    io_align: int


@dataclass(frozen=True)
class StreamEngine:
    prefetch_window: int
    limit_granule: int
    limit_guard: int
    words_per_cycle: float = 0.0  # stream words (one element) an engine passes to the switch per cycle (0: unbounded)


@dataclass(frozen=True)
class Cache:
    line: int
    ways: int
    size: int = field(metadata=SIZE)
    hit_cycles: int

    @property
    def sets(self) -> int:
        return self.size // (self.line * self.ways)


@dataclass(frozen=True)
class Host:
    """The Cortex-M55 that runs software epochs (HOST commands)."""

    clock: int = field(metadata=FREQ)  # Hz
    call_cycles: float  # host cycles per software epoch (hand-over, operand setup)
    cycles: dict  # operator class (`limits.HOST_COST_CLASSES`) -> host cycles per unit of work


@dataclass(frozen=True)
class Epoch:
    setup_cycles: int  # fixed cost of starting an epoch
    timeout_cycles: int
    register_cycles: float = 0.0  # cost of programming one configuration register (per command field)
    ec_word_cycles: float = 0.0  # epoch controller: cycles per 32-bit program word it fetches and executes

    def setup(self, registers: int) -> float:
        """Cycles of starting an epoch that programs `registers` configuration registers."""
        return self.setup_cycles + self.register_cycles * registers


@dataclass(frozen=True)
class Timing:
    cross_bank_penalty_cycles: float
    bank_conflict_cycles: float


@dataclass(frozen=True)
class Pool:
    name: str
    base: int
    size: int = field(metadata=SIZE)
    width: int  # bytes per RAM cycle
    clock_ratio: float  # NPU cycles per RAM cycle
    perms: str  # "rw" or "r"
    cacheable: bool
    banks: int
    interleave: int  # bytes per bank before moving to the next bank
    xor_hash: bool = False  # bank index XOR-folded with the bank-line index
    external: bool = False  # an off-chip serial device: concurrent streams share its bandwidth

    @property
    def end(self) -> int:
        return self.base + self.size

    @property
    def bank_line(self) -> int:
        return self.banks * self.interleave

    @property
    def bytes_per_cycle(self) -> float:
        return self.width / self.clock_ratio

    @property
    def writable(self) -> bool:
        return "w" in self.perms


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    clock: int = field(metadata=FREQ)  # Hz
    units: Units
    compute: Compute
    bus: Bus
    alignment: Alignment
    stream_engine: StreamEngine
    cache: Cache
    epoch: Epoch
    timing: Timing
    host: Host
    pool: tuple  # of Pool

    @property
    def pools(self) -> tuple[Pool, ...]:
        return self.pool

    def pool_named(self, name: str) -> Pool:
        for p in self.pool:
            if p.name == name:
                return p
        raise ProfileError(f"profile {self.name!r} has no pool {name!r}")

    def pool_at(self, addr: int) -> Pool | None:
        for p in self.pool:
            if p.base <= addr < p.end:
                return p
        return None

    def host_to_npu_cycles(self, host_cycles: float) -> float:
        """NPU cycles that pass while the host CPU spends `host_cycles` of its own clock."""
        return host_cycles * self.clock / self.host.clock

    def cycles_to_ms(self, cycles: float) -> float:
        return cycles * 1e3 / self.clock

    def to_dict(self) -> dict:
        """Plain nested dicts/lists (JSON-ready), e.g. for cache keys; `profile_from_dict` rebuilds
        an equal profile from it (frequencies are written with their unit, "1000000000Hz")."""
        return _plain(self)

    def identity(self) -> str:
        """Every value of the profile as one canonical JSON text: equal for equal profiles (a memo key)."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str)

    def __reduce__(self):  # picklable as plain data (workers of npusim.tools.parallel rebuild it)
        return profile_from_dict, (self.to_dict(), (), self.name)


def _plain(obj):
    if dataclasses.is_dataclass(obj):
        return {f.name: (f"{getattr(obj, f.name)}Hz" if f.metadata.get("unit") == "freq"
                         else _plain(getattr(obj, f.name))) for f in dataclasses.fields(obj)}
    if isinstance(obj, (dict, MappingProxyType)):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return [_plain(v) for v in obj]
    return obj


# ---------------------------------------------------------------- building

_NESTED = {"units": Units, "compute": Compute, "bus": Bus, "alignment": Alignment,
           "stream_engine": StreamEngine, "cache": Cache, "epoch": Epoch, "timing": Timing, "host": Host}


def _convert(where: str, f: dataclasses.Field, hint, value):
    unit = f.metadata.get("unit")
    if unit == "size":
        return parse_size(where, value)
    if unit == "freq":
        return parse_freq_hz(where, value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ProfileError(f"{where}={value!r}: expected true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProfileError(f"{where}={value!r}: expected an integer")
        if value < 0:
            raise ProfileError(f"{where}={value!r}: must not be negative")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProfileError(f"{where}={value!r}: expected a number")
        if value < 0:
            raise ProfileError(f"{where}={value!r}: must not be negative")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ProfileError(f"{where}={value!r}: expected a string")
        return value
    if hint is tuple:
        if not isinstance(value, list):
            raise ProfileError(f"{where}={value!r}: expected a list")
        return tuple(value)
    if hint is dict:
        if not isinstance(value, dict):
            raise ProfileError(f"{where}={value!r}: expected a table")
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ProfileError(f"{where}.{k}={v!r}: expected a non-negative number")
        return MappingProxyType(dict(value))  # profiles are shared (cached): keep them immutable
    return value


def _pool_key(table, i: int) -> str:
    """How messages name a [[pool]] table: pool.NAME (pool[i] only while it has no usable name)."""
    name = table.get("name") if isinstance(table, dict) else None
    return f"pool.{name}" if isinstance(name, str) and name else f"pool[{i}]"


def _build(cls, table: Any, where: str):
    if not isinstance(table, dict):
        raise ProfileError(f"{where}: expected a table")
    hints = get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in table:
        if key not in known:
            raise ProfileError(f"{where}.{key}: unknown key" if where else f"{key}: unknown key")
    kwargs = {}
    for name, f in known.items():
        key = f"{where}.{name}" if where else name
        if name not in table:
            if f.default is not dataclasses.MISSING:
                continue
            raise ProfileError(f"{key}: missing key")
        value = table[name]
        if name in _NESTED and cls is HardwareProfile:
            kwargs[name] = _build(_NESTED[name], value, key)
        elif name == "pool" and cls is HardwareProfile:
            if not isinstance(value, list) or not value:
                raise ProfileError(f"{key}: expected at least one [[pool]] table")
            kwargs[name] = tuple(_build(Pool, p, _pool_key(p, i)) for i, p in enumerate(value))
        else:
            kwargs[name] = _convert(key, f, hints[name], value)
    return cls(**kwargs)


def _parse_value(text: str):
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _apply_override(raw: dict, assignment: str) -> None:
    if "=" not in assignment:
        raise ProfileError(f"--set {assignment!r}: expected KEY=VALUE")
    key, text = assignment.split("=", 1)
    parts = key.strip().split(".")
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        if part == "pool" and i == 0:
            pools = {p.get("name"): p for p in raw.get("pool", [])}
            if len(parts) < 3 or parts[1] not in pools:
                raise ProfileError(f"--set {key}: unknown pool (known: {', '.join(map(str, pools))})")
            node = pools[parts[1]]
            parts = ["pool", parts[1]] + parts[2:]
            break
        if not isinstance(node, dict) or part not in node:
            raise ProfileError(f"--set {key}: unknown key")
        node = node[part]
    last = parts[-1]
    if not isinstance(node, dict) or last not in node:
        raise ProfileError(f"--set {key}: unknown key")
    node[last] = _parse_value(text.strip())


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped with npusim (`--profile NAME`)."""
    return sorted(p.stem for p in default_profile_path().parent.glob("*.toml"))


@functools.cache
def default_profile_path() -> Path:
    """The built-in n657 profile's file (where the package is installed: fixed for the process)."""
    return Path(str(resources.files("npusim.hw") / "profiles" / "n657.toml"))


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such profile file (built-in profiles: {', '.join(builtin_profiles())})") from None
    except IsADirectoryError:
        raise ProfileError(f"{path}: is a folder, not a profile file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"{path}: cannot read profile ({e})") from None
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{path}: not valid TOML ({e})") from None


def load_profile(source: str | Path | None = None, overrides: list[str] | tuple = ()) -> HardwareProfile:
    """Load a profile by built-in name ("n657"), by file path, or the default; apply `KEY=VALUE` overrides."""
    if source is None or source == "n657":
        path = default_profile_path()
    else:
        path = Path(source)
        if not path.exists() and not str(source).endswith(".toml"):
            builtin = default_profile_path().parent / f"{source}.toml"
            if builtin.exists():
                path = builtin
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        stamp = None  # _read_toml reports the problem
    return _load_cached(str(path), stamp, tuple(overrides))


@functools.lru_cache(maxsize=32)
def _load_cached(path: str, stamp, overrides: tuple) -> HardwareProfile:
    """Profiles are immutable: one parse per (file, modification time, overrides)."""
    return profile_from_dict(_read_toml(Path(path)), overrides, origin=path)


def profile_from_dict(raw: dict, overrides=(), origin: str = "<profile>") -> HardwareProfile:
    raw = copy.deepcopy(raw)
    try:
        for a in overrides:
            _apply_override(raw, a)
    except ProfileError as e:
        raise ProfileOverrideError(str(e)) from None
    try:
        prof = _build(HardwareProfile, raw, "")
        validate(prof)
    except ProfileError as e:
        raise _blame(str(e), overrides, origin) from None
    return prof


class ProfileOverrideError(ProfileError):
    """A `--set KEY=VALUE` override is invalid: a usage error (the profile file itself is fine)."""

    exit_code = EXIT_USAGE


def _blame(message: str, overrides, origin: str) -> ProfileError:
    """A message about a key the user gave with --set names --set, not the (correct) profile file."""
    key = message.split("=", 1)[0].split(":", 1)[0].strip()
    for a in overrides:
        given = a.split("=", 1)[0].strip()
        if given and (key == given or key.startswith(given + ".") or given.startswith(key + ".")):
            if message.startswith(given + "="):
                return ProfileOverrideError(f"--set {message}")
            return ProfileOverrideError(f"--set {a}: {message}")
    return ProfileError(f"{origin}: {message}")
