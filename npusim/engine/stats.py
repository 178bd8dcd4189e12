"""Run statistics: totals, per epoch and per layer (ONNX node).

Stall cycles by cause (an epoch's cycles = setup + its slowest pipelined stage):
  setup          epoch.setup_cycles of every epoch
  memory         the critical stage is a stream engine: its own transfer time beyond the compute time
  bank_conflict  part of that excess that comes from bank conflicts with concurrent engines on a
                 banked RAM (requesters colliding on one bank)
  external_bandwidth  part that comes from concurrent engines sharing one external serial memory
                 (octoFlash, hyperRAM: `pool.external`): they take turns, no bank is involved
  port           part that comes from sharing a bus port with other engines
  compute        the critical stage is a unit: its compute time beyond the slowest stream engine
                 (a CA taking turns with its weight stream, `timing.kernel_serial`: all its compute
                 time; the stream's time goes to memory / port / the sharing cause, as above)
  host           HOST fallback time (the NPU idles)
Bank bytes: `bank_bytes[pool][b]` = payload bytes the epoch's (layer's, run's) accesses moved
through bank b of that pool (stream engines and parameter-table reads; `memory.pattern_cost`).
MAC utilisation, at the rate of the layer's dtype (an fp16 layer is measured at the fp16 rate):
  epoch   MACs / (body cycles x sum of mac_per_cycle[dtype] of the CONV units it uses)
  layer, run   MACs / sum over their epochs of cycles x `mac_rate`, where an epoch's mac_rate is
          conv_accelerators x mac_per_cycle[its CONV dtype] (int8 for epochs without a CONV).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

STALL_CAUSES = ("setup", "memory", "bank_conflict", "external_bandwidth", "port", "compute", "host")


def _zero_stalls() -> dict:
    return {c: 0 for c in STALL_CAUSES}


def _json_with_whole_cycles(record) -> dict:
    """A stats record as a JSON dict, its (fractional) cycle count rounded to a whole number."""
    d = asdict(record)
    d["cycles"] = int(round(record.cycles))
    return d


@dataclass
class EpochStats:
    id: int
    command: int
    layer: str
    start: float = 0.0  # cycle the epoch started
    cycles: float = 0.0
    setup_cycles: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    pools: dict = field(default_factory=dict)  # pool -> bytes moved
    bank_bytes: dict = field(default_factory=dict)  # pool -> [bytes per bank]
    bursts: int = 0
    bank_conflicts: int = 0
    cross_bank_splits: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    macs: int = 0
    mac_capacity: float = 0.0  # body cycles x sum of the used CONV units' mac_per_cycle[dtype]
    mac_rate: float = 0.0  # MACs/cycle of all CAs at this epoch's CONV dtype (int8 without CONV)
    mac_utilisation: float = 0.0
    stall_cycles: dict = field(default_factory=_zero_stalls)
    stages: dict = field(default_factory=dict)  # unit/SE name -> busy cycles
    critical: str = ""  # name of the slowest stage
    kind: str = "npu"  # npu | host
    status: str = "ok"  # ok | fault | hang

    def to_json(self) -> dict:
        return _json_with_whole_cycles(self)


@dataclass
class LayerStats:
    name: str
    kind: str = "npu"  # npu (NPU epochs) | host (software epochs on the CPU)
    cycles: float = 0.0
    epochs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    pools: dict = field(default_factory=dict)
    bank_bytes: dict = field(default_factory=dict)  # pool -> [bytes per bank]
    bursts: int = 0
    bank_conflicts: int = 0
    cross_bank_splits: int = 0
    macs: int = 0
    mac_utilisation: float = 0.0
    stall_cycles: dict = field(default_factory=_zero_stalls)

    def to_json(self) -> dict:
        return _json_with_whole_cycles(self)


def add_bank_bytes(into: dict, pool: str, per_bank) -> None:
    """Add a per-bank byte count (sequence) of `pool` into `into` ({pool: [bytes per bank]})."""
    vals = per_bank.tolist() if hasattr(per_bank, "tolist") else per_bank
    row = into.get(pool)
    if row is None:
        into[pool] = [int(v) for v in vals]
        return
    if len(row) == len(vals):
        row[:] = [a + int(v) for a, v in zip(row, vals)]
        return
    row.extend([0] * (len(vals) - len(row)))
    for b, v in enumerate(vals):
        row[b] += int(v)


@dataclass
class Stats:
    cycles: float = 0.0
    ms: float = 0.0
    bank_conflicts: int = 0
    cross_bank_splits: int = 0
    bursts: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    macs: int = 0
    mac_utilisation: float = 0.0
    native: bool = True  # False when an fp32 (simulation-only) epoch ran
    mode: str = "fast"
    stall_cycles: dict = field(default_factory=_zero_stalls)
    pools: dict = field(default_factory=dict)
    bank_bytes: dict = field(default_factory=dict)  # pool -> [bytes per bank]
    epochs: list = field(default_factory=list)  # [EpochStats]
    layers: list = field(default_factory=list)  # [LayerStats]
    notes: list = field(default_factory=list)

    def by_kind(self) -> dict:
        """{npu|host: (epochs, cycles)}: NPU epochs and software (CPU) epochs."""
        out = {"npu": [0, 0.0], "host": [0, 0.0]}
        for e in self.epochs:
            out.setdefault(e.kind, [0, 0.0])
            out[e.kind][0] += 1
            out[e.kind][1] += e.cycles
        return {k: (n, c) for k, (n, c) in out.items()}

    def to_json(self) -> dict:
        kinds = self.by_kind()
        return {"cycles": int(round(self.cycles)), "ms": self.ms, "bank_conflicts": self.bank_conflicts,
                "npu_epochs": kinds["npu"][0], "npu_cycles": int(round(kinds["npu"][1])),
                "cpu_epochs": kinds["host"][0], "cpu_cycles": int(round(kinds["host"][1])),
                "cross_bank_splits": self.cross_bank_splits, "bursts": self.bursts,
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written, "macs": self.macs,
                "mac_utilisation": self.mac_utilisation, "native": self.native, "mode": self.mode,
                "stall_cycles": {k: int(round(v)) for k, v in self.stall_cycles.items()},
                "pools": dict(sorted(self.pools.items())),
                "bank_bytes": {k: list(v) for k, v in sorted(self.bank_bytes.items())}, "notes": list(self.notes),
                "layers": [ly.to_json() for ly in self.layers], "epochs": [e.to_json() for e in self.epochs]}


TOTALS = ("bank_conflicts", "cross_bank_splits", "bursts", "bytes_read", "bytes_written", "macs", "mac_utilisation",
          "stall_cycles", "pools", "bank_bytes")  # the run's sums over its epochs, made when first read


def finalize(stats: Stats, profile) -> Stats:
    """Fill the run's cycles and time from the epochs; its totals (`TOTALS`, added to the values they hold)
    and the per-layer table (layers in first-seen order) are made from the epochs when first read."""
    epochs = stats.epochs
    stats.cycles = max((e.start + e.cycles for e in epochs), default=0.0)
    stats.ms = profile.cycles_to_ms(stats.cycles)
    snapshot = list(epochs)
    before = {k: getattr(stats, k) for k in TOTALS}
    made: list = []

    def totals() -> dict:
        if not made:
            made.append(_totals(snapshot, before))
        return made[0]

    for k in TOTALS:
        setattr(stats, k, Deferred(lambda k=k: totals()[k]))
    stats.layers = Deferred(lambda: _layer_table(snapshot, totals()["capacity"]))
    return stats


def _totals(epochs: list, before: dict) -> dict:
    """The run's totals over `epochs`, added to `before` (its fields' values as finalize found them), and the
    MAC capacity per layer (cycles x mac_rate)."""
    capacity: dict[str, float] = {}
    stall, pools, bank_bytes = before["stall_cycles"], before["pools"], before["bank_bytes"]
    banks: dict[str, list] = {}
    conflicts = splits = bursts = read = written = macs = 0
    for e in epochs:
        layer = e.layer
        capacity[layer] = capacity.get(layer, 0.0) + e.cycles * e.mac_rate
        conflicts += e.bank_conflicts
        splits += e.cross_bank_splits
        bursts += e.bursts
        read += e.bytes_read
        written += e.bytes_written
        macs += e.macs
        for k, v in e.stall_cycles.items():
            stall[k] += v
        for k, v in e.pools.items():
            pools[k] = pools.get(k, 0) + v
        for k, v in e.bank_bytes.items():
            rows = banks.get(k)
            if rows is None:
                banks[k] = [v]
            else:
                rows.append(v)
    for k, rows in banks.items():
        n = len(rows[0])
        if k not in bank_bytes and all(len(r) == n for r in rows):
            bank_bytes[k] = [sum(col) for col in zip(*rows)] if n else []
        else:
            for r in rows:
                add_bank_bytes(bank_bytes, k, r)
    out = {"bank_conflicts": before["bank_conflicts"] + conflicts,
           "cross_bank_splits": before["cross_bank_splits"] + splits, "bursts": before["bursts"] + bursts,
           "bytes_read": before["bytes_read"] + read, "bytes_written": before["bytes_written"] + written,
           "macs": before["macs"] + macs, "stall_cycles": stall, "pools": pools, "bank_bytes": bank_bytes,
           "capacity": capacity}
    total = sum(capacity.values())
    out["mac_utilisation"] = out["macs"] / total if total and out["macs"] else 0.0
    return out


def _layer_table(epochs: list, capacity: dict) -> list:
    """The per-layer table of the epochs (layers in first-seen order)."""
    layers: dict[str, LayerStats] = {}
    for e in epochs:
        layer = e.layer
        ly = layers.get(layer)
        if ly is None:
            ly = layers[layer] = LayerStats(layer, kind=e.kind)
        ly.cycles += e.cycles
        ly.epochs += 1
        ly.bytes_read += e.bytes_read
        ly.bytes_written += e.bytes_written
        ly.bursts += e.bursts
        ly.bank_conflicts += e.bank_conflicts
        ly.cross_bank_splits += e.cross_bank_splits
        ly.macs += e.macs
        lp = ly.pools
        for k, v in e.pools.items():
            lp[k] = lp.get(k, 0) + v
        for k, v in e.bank_bytes.items():
            add_bank_bytes(ly.bank_bytes, k, v)
        ls = ly.stall_cycles
        for k, v in e.stall_cycles.items():
            ls[k] += v
    for ly in layers.values():
        cap = capacity[ly.name]
        ly.mac_utilisation = ly.macs / cap if cap and ly.macs else 0.0
    return list(layers.values())


class Deferred:
    """A value made when first read: `make()` (called once). A field of a result behind
    `deferred_field` may hold one, so a run whose caller never reads it does not build it."""

    __slots__ = ("make",)

    def __init__(self, make):
        self.make = make


def deferred_field(cls, name: str, doc: str = "") -> None:
    """Put a property over dataclass field `name` of `cls` (its generated __init__, asdict, replace
    and == go through it): it holds a value, or a `Deferred` made into the value when first read.
    Pickles and copies hold the value."""
    key = "_" + name

    def get(self):
        v = self.__dict__[key]
        if isinstance(v, Deferred):
            v = self.__dict__[key] = v.make()
        return v

    def put(self, value) -> None:
        self.__dict__[key] = value

    setattr(cls, name, property(get, put, doc=doc))
    names = getattr(cls, "_deferred", ())
    cls._deferred = (*names, name)
    if "__getstate__" not in cls.__dict__:
        def __getstate__(self):
            d = dict(self.__dict__)
            for n in type(self)._deferred:
                d["_" + n] = getattr(self, n)
            return d

        cls.__getstate__ = __getstate__


deferred_field(Stats, "layers", "[LayerStats]: the per-layer table, in first-seen order")
for _name in TOTALS:
    deferred_field(Stats, _name, "the run's total over its epochs (`finalize`)")
