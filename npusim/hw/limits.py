"""The stated limits of a hardware profile and the relations between its values (`validate`).

Every numeric value of a profile lies in its stated range (`LIMITS`, powers of two where `POW2` says so),
which keeps every allocation and loop the simulator sizes from a profile bounded; then the relations
between values (one bus port per stream engine, cache geometry, non-overlapping pools, the host's cost
classes) hold. The first broken rule is a `ProfileError` naming its key.
"""

from __future__ import annotations

from types import MappingProxyType

from ..errors import ProfileError

# Operator classes of the host (CPU fallback) cost model: [host] cycles.<class> per unit of work
# (npusim.cpu.cost maps every ONNX operator to one and says what its work is).
HOST_COST_CLASSES = ("movement", "elementwise", "transcendental", "reduce", "normalize", "window", "mac",
                     "resize", "sort")


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


# Stated limits of every numeric profile value: (lo, hi) inclusive. They keep every allocation and
# loop the simulator sizes from a profile bounded (a bank histogram, a cache, a timeout) and catch
# typos; the real N657 sits far inside them.
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
LIMITS = {
    "clock": (1e6, 1e10),
    "compute.lanes": (1, 1024),
    "compute.kernel_buffer": (0, 1 * GiB),
    "compute.mac_per_cycle": (1e-6, 1e6),
    "compute.elems_per_cycle": (1e-6, 1e6),
    "bus.ports": (1, 16),
    "bus.beat_bytes": (1, 1 * KiB),
    "bus.max_burst_beats": (1, 4096),
    "bus.burst_boundary": (1, 1 * MiB),
    "bus.burst_overhead_cycles": (0, 1e6),
    "alignment.granule": (1, 64 * KiB),
    "alignment.word": (1, 64 * KiB),
    "alignment.io_align": (1, 64 * KiB),
    "stream_engine.prefetch_window": (0, 64 * KiB),
    "stream_engine.limit_granule": (1, 4 * KiB),
    "stream_engine.limit_guard": (0, 64 * KiB),
    "stream_engine.words_per_cycle": (0, 1024),
    "cache.line": (1, 4 * KiB),
    "cache.ways": (1, 64),
    "cache.size": (1, 64 * MiB),
    "cache.hit_cycles": (0, 1e6),
    "epoch.setup_cycles": (0, 1e9),
    "epoch.ec_word_cycles": (0, 1e6),
    "epoch.timeout_cycles": (1, 1e10),
    "timing.cross_bank_penalty_cycles": (0, 1e6),
    "timing.bank_conflict_cycles": (0, 1e6),
    "host.clock": (1e6, 1e10),
    "host.call_cycles": (0, 1e9),
    "host.cycles": (0, 1e6),
    "pool.size": (1, 4 * GiB),
    "pool.width": (1, 1 * KiB),
    "pool.clock_ratio": (1e-3, 1e3),
    "pool.banks": (1, 1024),
    "pool.interleave": (1, 1 * MiB),
}
POW2 = ("bus.beat_bytes", "bus.burst_boundary", "alignment.granule", "alignment.word", "alignment.io_align",
        "stream_engine.limit_granule", "cache.line", "pool.interleave", "pool.width")


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _check_value(key: str, limit: str, v) -> None:
    lo, hi = LIMITS[limit]
    if not lo <= v <= hi:
        raise ProfileError(f"{key}={v!r}: must lie in [{_num(lo)}, {_num(hi)}]")
    if limit in POW2 and not _pow2(int(v)):
        raise ProfileError(f"{key}={v!r}: must be a power of two")


def _check_limits(p) -> None:
    """Every numeric value inside its stated limit (LIMITS), before any relation between values."""
    for limit in LIMITS:
        section, _, name = limit.partition(".")
        if section == "pool":
            for pool in p.pool:
                _check_value(f"pool.{pool.name}.{name}", limit, getattr(pool, name))
            continue
        obj = p if not name else getattr(p, section)
        v = getattr(obj, name or section)
        if isinstance(v, MappingProxyType):
            for k, x in v.items():
                _check_value(f"{limit}.{k}", limit, x)
        else:
            _check_value(limit, limit, v)


def validate(p) -> None:
    """Raise ProfileError (`p`: a `HardwareProfile`, profile.py) naming the first inconsistent key: single values first (LIMITS), then
    the relations between them."""
    _check_limits(p)
    for name in ("stream_engines", "conv_accelerators", "arith_units", "pool_units", "activation_units"):
        n = getattr(p.units, name)
        if not 1 <= n <= 16:
            raise ProfileError(f"units.{name}={n}: must be between 1 and 16")
    for dt in ("int8", "fp16", "fp32"):
        if p.compute.mac_per_cycle.get(dt, 0) <= 0:
            raise ProfileError(f"compute.mac_per_cycle.{dt}: must be given and positive")
    for kind in ("pool", "arith", "activation"):
        if p.compute.elems_per_cycle.get(kind, 0) <= 0:
            raise ProfileError(f"compute.elems_per_cycle.{kind}: must be given and positive")
    b = p.bus
    if len(b.stream_engine_port) != p.units.stream_engines:
        raise ProfileError(f"bus.stream_engine_port: needs one port per stream engine ({p.units.stream_engines})")
    for i, port in enumerate(b.stream_engine_port + (b.epoch_controller_port,)):
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port < b.ports:
            raise ProfileError(f"bus.stream_engine_port[{i}]={port!r}: no such bus port")
    if p.alignment.word > p.alignment.granule:
        raise ProfileError("alignment.word: must not exceed alignment.granule")
    c = p.cache
    if not (c.size % (c.line * c.ways) == 0 and _pow2(c.sets)):
        raise ProfileError("cache: size must be line x ways x (a power of two) sets")
    for cls in HOST_COST_CLASSES:
        if cls not in p.host.cycles:
            raise ProfileError(f"host.cycles.{cls}: must be given (classes: {', '.join(HOST_COST_CLASSES)})")
    extra = sorted(set(p.host.cycles) - set(HOST_COST_CLASSES))
    if extra:
        raise ProfileError(f"host.cycles.{extra[0]}: unknown key (classes: {', '.join(HOST_COST_CLASSES)})")
    names = set()
    for pool in p.pool:
        key = f"pool.{pool.name}"
        if pool.name in names:
            raise ProfileError(f"{key}: duplicate pool name")
        names.add(pool.name)
        if pool.bank_line > pool.size:
            raise ProfileError(f"{key}: banks x interleave = {pool.bank_line} B exceeds the pool's size "
                               f"({pool.size} B)")
        if pool.perms not in ("r", "rw"):
            raise ProfileError(f"{key}.perms={pool.perms!r}: must be 'r' or 'rw'")
        if pool.end > 1 << 32:
            raise ProfileError(f"{key}: [{pool.base:#x}, {pool.end:#x}) must lie inside the 32-bit address space")
        if pool.base % p.alignment.granule:
            raise ProfileError(f"{key}.base={pool.base:#x}: must be aligned to alignment.granule "
                               f"({p.alignment.granule})")
    ordered = sorted(p.pool, key=lambda q: q.base)
    for a, b2 in zip(ordered, ordered[1:]):
        if b2.base < a.end:
            raise ProfileError(f"pool.{b2.name}: overlaps pool.{a.name} "
                               f"([{b2.base:#x}, {b2.end:#x}) vs [{a.base:#x}, {a.end:#x}))")
