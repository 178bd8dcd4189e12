"""Runtime API: load a program, check versions, place constants, bind I/O, run the machine.

    prog = npusim.load("model.npu")
    res = npusim.run(prog, inputs={"x": arr}, options=RunOptions(timing_only=False))

Inputs are float arrays in ONNX shape (NCHW); int8 input buffers are quantized with the
buffer's scale/zero point (round half to even), then packed with the buffer table's
line/plane strides (the compiler's view). Outputs are read the same way, dequantized to
float32 and returned in ONNX shape (`raw_outputs` keep the native dtype). In timing_only
mode no values are computed, so outputs are empty.

Why one module of ~630 lines: it is one path, load -> check -> place -> bind -> run -> read back, whose steps
share the program's buffer table and the run options; the machine, memory and engine it drives live below.
"""

from __future__ import annotations

import bisect
import pickle
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from .errors import DataError, InvalidInputError, NpusimError, UsageError
from .program.model import Program

MODES = ("fast", "burst")


@dataclass(frozen=True)
class RunOptions:
    timing_only: bool = False  # skip value kernels and data movement; same cycles
    keep_going: bool = False  # record faults, clip illegal accesses and continue
    trace: bool = True  # build the Perfetto trace
    mode: str = "fast"  # "fast" (analytic per-epoch timing) | "burst" (every burst timed; small programs)
    max_cycles: int | None = None  # stop with end_reason "cycle-limit"
    threads: int = 1  # BLAS threads of the value kernels (results are the same for any count)

    def __post_init__(self):
        if self.mode not in MODES:
            raise UsageError(f"RunOptions.mode={self.mode!r}: expected one of {', '.join(MODES)}")
        if self.max_cycles is not None and self.max_cycles <= 0:
            raise UsageError(f"RunOptions.max_cycles={self.max_cycles}: must be positive")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 1 <= self.threads <= 256:
            raise UsageError(f"RunOptions.threads={self.threads!r}: expected 1..256")


def load(src, profile=None, verify: bool | None = None) -> Program:
    """A Program from a blob path, blob bytes, or a Program, after every load-time check
    (`program.validate`: versions, target profile, pools, buffer fields, names).

    `verify` (ISA verifier) defaults to True for blobs and False for in-memory Programs: the
    epoch controller refuses what the verifier flags as hardware faults (data) at run time.
    """
    return _load(src, profile, verify)[0]


def _load(src, profile=None, verify: bool | None = None) -> tuple:
    """`load`, and the profile the program runs on (`profile`, else the one its header names)."""
    from .program.blob import load_blob
    from .program.validate import resolve_target_profile

    if isinstance(src, Program):
        from .program.spec import load_isa
        from .program.validate import check_versions, validate_program

        isa = load_isa()
        check_versions(src.header, isa, error=InvalidInputError)
        prof = resolve_target_profile(src.header, profile, error=InvalidInputError)
        validate_program(src, prof, isa, verify=bool(verify), error=InvalidInputError)
        return src, prof
    if isinstance(src, (bytes, bytearray, memoryview)):
        prog = load_blob(bytes(src), profile=profile, verify=verify is not False)
    elif isinstance(src, (str, Path)):
        prog = load_blob(str(src), profile=profile, verify=verify is not False)
    else:
        raise UsageError(f"load: expected a blob path, blob bytes or a Program, not {type(src).__name__}")
    return prog, resolve_target_profile(prog.header, profile, error=InvalidInputError)


def _check_profile(program: Program, profile) -> None:
    h = program.header
    if h.profile and h.profile != profile.name:
        raise InvalidInputError(f"program targets profile {h.profile!r}, the run uses {profile.name!r}")


def _is_float(buf) -> bool:
    """A buffer holding a float (possibly int8-quantized) tensor: the compile dtypes int8/fp16/fp32."""
    return buf.dtype in ("int8", "fp16", "fp32")


def own_quantization(program) -> bool:
    """Whether the program's int8 inputs carry the model's own scale and zero point (a TFLite program: the
    model is quantized), not ranges npusim calibrated on (standard normal) data."""
    return getattr(program.header, "source", "") == "tflite"


def random_input(buf, rng, codes: bool = False) -> np.ndarray:
    """A seeded random input in the buffer's ONNX shape. `codes` (an int8 input quantized by the model itself,
    `own_quantization`): every int8 code equally likely, dequantized with the buffer's scale and zero point
    (float64, so binding it gives the codes back), i.e. uniform over the input's quantized range. Otherwise
    standard normal float32 (the distribution the compiler calibrates int8 on when no calibration file is
    given); integer inputs get 0 or 1, booleans False or True (valid indices and masks for any non-empty axis)."""
    from .kernels.quant import np_dtype

    shape = tuple(int(v) for v in buf.shape)
    if codes and buf.dtype == "int8":
        q = rng.integers(-128, 128, size=shape)
        return (q - int(buf.zero_point)) * float(buf.scale)
    if _is_float(buf):
        return rng.standard_normal(size=shape).astype(np.float32)
    return rng.integers(0, 2, size=shape).astype(np_dtype(buf.dtype))


def seeded_inputs(program, seed: int = 0) -> dict[str, np.ndarray]:
    """One seeded random input per input buffer (buffer-table order): what `run(random_inputs=True)` binds
    (`random_input`: uniform int8 codes for a model quantized by itself, else standard normal)."""
    rng = np.random.default_rng(seed)
    codes = own_quantization(program)
    return {b.name: random_input(b, rng, codes) for b in program.buffers_of("input")}


def _bind_input(memory, buf, x, profile, write: bool = True) -> None:
    """Check an input against its buffer; with `write`, quantize it and lay it out with the buffer
    table's strides (timing-only runs check but do not move values)."""
    from .kernels.layout import onnx_to_hwc, pack_strided_into
    from .kernels.quant import np_dtype
    from .program.layouts import block_size

    arr = np.asarray(x)
    want = tuple(int(v) for v in buf.shape)
    if arr.shape != want:
        raise DataError(f"input {buf.name!r}: shape {arr.shape}, expected {want}")
    if arr.dtype.kind not in "fiub":
        raise DataError(f"input {buf.name!r}: dtype {arr.dtype} is not numeric (expected {want})")
    if arr.dtype.kind == "f" and buf.dtype == "int8" and not np.isfinite(arr).all():
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise DataError(f"input {buf.name!r}: {bad} NaN or infinite values (an int8 input must be finite "
                        f"to be quantized)")
    if not write:
        return
    if buf.dtype == "int8":  # finite (checked above): one pass, the bits of `quant.quantize`
        from .kernels.int8_loops import quantize_finite

        q = quantize_finite(arr, buf.scale, buf.zero_point)
    else:
        q = arr.astype(np_dtype(buf.dtype))
    hwc = onnx_to_hwc(q.reshape(want), buf.layout, contiguous=False)  # laid out with one copy
    try:
        # straight into the buffer's bytes (one pool), else into bytes of its own written across pools
        out = memory.view_or_none(buf.address(profile), buf.size)
        data = np.zeros(buf.size, dtype=np.uint8) if out is None else out
        pack_strided_into(hwc, buf.layout, buf.line_stride, buf.plane_stride, data, block=block_size())
    except NpusimError as e:
        raise DataError(f"input {buf.name!r}: cannot lay out into its buffer ({e})") from None
    if out is None:
        memory.write(buf.address(profile), data)


def _read_output(memory, buf, profile):
    """(output as float32 for float tensors or in its own dtype, native array) in ONNX shape."""
    from .kernels import dequantize, fmap_hwc, hwc_to_onnx, unpack_strided
    from .program.layouts import block_size

    shape = tuple(int(v) for v in buf.shape)
    h, w, c = fmap_hwc(shape) if buf.layout != "linear" else (1, 1, int(np.prod(shape, dtype=np.int64)))
    raw = memory.read(buf.address(profile), buf.size)
    hwc = unpack_strided(raw, buf.layout, h, w, c, buf.dtype, buf.line_stride, buf.plane_stride, block=block_size())
    native = hwc_to_onnx(hwc, buf.layout, shape)
    if buf.dtype == "int8":
        return np.asarray(dequantize(native, buf.scale, buf.zero_point), dtype=np.float32), native
    if _is_float(buf):
        return native.astype(np.float32), native
    return native, native


def _setup_memory(program: Program, profile, checks: bool = True):
    """(memory holding the program's constants, its region table, a Checker over them); without
    `checks` (a values-only replay), the table and the Checker are None."""
    from .memory import AddressMap, Memory

    amap = AddressMap(profile)
    memory = Memory(amap)
    _map_constants(program, amap, memory)
    return (memory, *(_checks(program, amap) if checks else (None, None)))


def _checks(program: Program, amap) -> tuple:
    """(a fresh copy of the program's region table, a Checker over it)."""
    from .memory import Checker, RegionTable

    def table():
        t = RegionTable(amap)
        _place_regions(program, amap, t)
        return t

    regions = program.memo("region table", (amap.profile,), table).clone()  # built once per program
    return regions, Checker(amap, regions)


def _place(program: Program, amap, memory, regions, owner: str | None = None) -> None:
    """Register the program's buffers (owned by `owner`), place its constants, add guard regions."""
    _map_constants(program, amap, memory)
    _place_regions(program, amap, regions, owner)


def _map_constants(program: Program, amap, memory) -> None:
    """Constants are mapped, not copied (`Memory.map_constant`): a timing-only run, which reads no
    values, never copies its weights. A fresh memory takes the state mapping them leaves, worked out
    once per program (`Memory.pending` / `adopt`)."""
    def mapped():
        from .memory import Memory

        scratch = Memory(amap)
        _map_each(program, amap, scratch)
        return scratch.pending()

    if not memory.adopt(program.memo("constants mapped", (amap.profile,), mapped)):
        _map_each(program, amap, memory)


def _map_each(program: Program, amap, memory) -> None:
    for c in program.constants:
        try:
            addr = amap.base_of(c.pool) + c.offset
        except NpusimError as e:
            raise InvalidInputError(f"constant {c.name!r}: {e}") from None
        if not amap.is_mapped(addr, max(len(c.data), 1)):
            raise InvalidInputError(f"constant {c.name!r} ({len(c.data)} B at {addr:#x}) does not fit in pool {c.pool}")
        memory.map_constant(addr, c.data)  # copied only where something reads it


def _place_regions(program: Program, amap, regions, owner: str | None = None) -> None:
    """The program's buffers (owned by `owner`), its constants (written) and guard regions."""
    from .memmap import live_ranges

    live = program.memo("buffer live ranges", (), lambda: live_ranges(program))
    regions.add_buffers(program.buffers, context=owner, live=live)
    for c in program.constants:
        addr = amap.base_of(c.pool) + c.offset
        if regions.find(addr, include_guard=False) is None:
            regions.add(c.name, "weight", addr, len(c.data), owner=owner, origin=f"constant '{c.name}'",
                        state="live")
        regions.mark_range_written(addr, len(c.data))
    _add_guard_regions(program, amap, regions, owner)


def _add_guard_regions(program: Program, amap, regions, owner: str | None = None) -> None:
    """A `guard` region per buffer an SE's limit register reaches past: [buffer end, limit),
    the zone the engine may prefetch (the compiler keeps it free). The buffer is the largest
    one holding the SE's base and ending at or before the limit; zones are clipped to mapped memory."""
    if amap.members:
        zones = _guard_zones(program, amap)
    else:
        zones = program.memo("guard zones", (amap.profile,), lambda: _guard_zones(program, amap))
    for name, end, limit in zones:
        regions.add(f"{name}.guard", "guard", end, limit - end, owner=owner,
                    origin=f"prefetch guard of buffer '{name}'")


def _guard_zones(program: Program, amap) -> list[tuple[str, int, int]]:
    spans = sorted((amap.base_of(b.pool) + b.offset, b.size, b.name) for b in program.buffers if b.size)
    starts = [s for s, _, _ in spans]
    zones: dict[str, tuple[int, int]] = {}
    for c in program.commands:
        if c.op != "SE" or not c.args.get("limit"):
            continue
        base, limit = int(c.args["base"]), int(c.args["limit"])
        upto = bisect.bisect_right(starts, base)  # buffers starting at or before the base
        hits = [(size, start, name) for start, size, name in spans[:upto] if base < start + size <= limit]
        if not hits:
            continue
        size, start, name = max(hits)
        end = start + size
        zones[name] = (end, max(limit, zones.get(name, (end, end))[1]))
    out = []
    for name in sorted(zones, key=lambda n: zones[n]):
        end, limit = zones[name]
        i = int(np.searchsorted(amap.seg_starts, end, side="right")) - 1
        if i < 0 or end >= amap.seg_ends[i]:
            continue
        out.append((name, end, min(limit, int(amap.seg_ends[i]))))
    return out


@dataclass
class Setup:
    """Programs placed in one memory before anything runs: what `run` / `run_shared` execute, and
    what the static check (`npusim.analysis.check`) walks. `jobs`: [(Program as placed, relocated
    into its context's partitions; context name or None)]; `faults`: setup faults per context
    (pool-overlap of its partitions)."""

    profile: object
    isa: object
    memory: object
    regions: object
    checker: object
    jobs: list
    faults: dict = field(default_factory=dict)


def setup(program, profile=None, inputs=None, options: RunOptions | None = None, random_inputs: bool = False,
          seed: int = 0, checks: bool = True) -> Setup:
    """Load `program` (Program, blob bytes or path), place it in a fresh memory and bind its inputs
    (a timing-only `options` checks them but moves no values). Without `checks`, no region table
    and no Checker (`regions`, `checker` None: a values-only replay; `_with_checks` adds them)."""
    from .program.spec import load_isa

    options = options or RunOptions()
    prog, profile = _load(program, profile)
    _check_profile(prog, profile)
    memory, regions, checker = _setup_memory(prog, profile, checks)
    _bind_inputs(memory, prog, inputs, profile, options, random_inputs, seed)
    return Setup(profile, load_isa(), memory, regions, checker, [(prog, None)])


def _with_checks(st: Setup) -> Setup:
    """`st` of `setup(checks=False)` with the region table and the Checker of its program."""
    regions, checker = _checks(st.jobs[0][0], st.memory.map)
    return replace(st, regions=regions, checker=checker)


def run(program, inputs=None, options: RunOptions | None = None, profile=None, random_inputs: bool = False,
        seed: int = 0, progress=None, observe=None):
    """Run a program (Program, blob bytes or path) and return a RunResult; `progress(stage, done,
    total)` is called per epoch (npusim.progress). `observe(when, command, io)` is called before ("before")
    and after ("after") every epoch and software epoch (`command`: the index of its RUN or HOST) with
    `io.read(buffer) -> array`, the buffer's values in memory at that moment (its native dtype, ONNX shape),
    and `io.write(buffer, array)`, which lays such an array into the buffer (a values run only)."""
    options = options or RunOptions()
    st = setup(program, profile, inputs, options, random_inputs, seed, checks=False)  # a replay needs none
    prog = st.jobs[0][0]
    memo = _timing_memo(prog, st, options)
    key = (options.keep_going, options.trace, options.mode)
    if memo is not None and key in memo:
        res = _replay(prog, st, options, memo[key], progress, _observer(observe, st, options))
        if res is not None:
            return res
        st = setup(program, profile, inputs, options, random_inputs, seed)  # the full run decides
    else:
        st = _with_checks(st)
    hooks = _observer(observe, st, options)
    records: dict = {}
    res = _execute(prog, st.profile, st.isa, st.memory, st.regions, st.checker, options, progress=progress,
                   host_records=records, hooks=hooks)
    if memo is not None and res.status == "ok" and res.end_reason == "done":
        memo[key] = (pickle.dumps((res.stats, res.trace), pickle.HIGHEST_PROTOCOL), records,
                     pickle.dumps(res.memory_map, pickle.HIGHEST_PROTOCOL))
    return res


class _BufferIO:
    """Read and write buffers' values in the memory of a run (`run(observe=...)`)."""

    def __init__(self, st):
        self.st = st

    def read(self, buf):
        return _read_output(self.st.memory, buf, self.st.profile)[1]

    def write(self, buf, values) -> None:
        from .kernels import onnx_to_hwc, pack_strided
        from .kernels.quant import np_dtype
        from .program.layouts import block_size

        shape = tuple(int(v) for v in buf.shape)
        hwc = onnx_to_hwc(np.asarray(values).reshape(shape).astype(np_dtype(buf.dtype)), buf.layout)
        data = pack_strided(hwc, buf.layout, buf.line_stride, buf.plane_stride, size=buf.size, block=block_size())
        self.st.memory.write(buf.address(self.st.profile), data)


def _observer(observe, st, options):
    """The machine's (before_step, after_step) hooks calling `observe` on the memory of `st` (None: none)."""
    if observe is None or options.timing_only:
        return None
    io = _BufferIO(st)
    return (lambda command: observe("before", command, io)), (lambda command: observe("after", command, io))


def _timing_memo(prog, st, options) -> dict | None:
    """The timing memo of a functional run: {(keep_going, trace, mode): (pickled (stats, trace),
    {HOST command: operator record bytes}, pickled memory map)}
    of an earlier fault-free run of this Program (`Program.memo`: the same commands, buffers and
    constants) with this profile; None where a run cannot use one (timing-only, a cycle limit).

    Why it holds: without faults, everything but the values is a function of the commands -- the
    controller's walk, every descriptor's addresses, the region state the access checks see, the NPU
    cache's look-ups, every epoch's timing -- none reads a byte of simulated memory. What does read
    values is refused: a unit's verdict on its parameter table and a kernel's refusal (faults, which
    make `Machine.replay` give up, and the run is redone in full) and the operator records of
    software epochs, which decide their cycles (bytes in memory: the memo keeps those the run read,
    and `Machine.replay` gives up when one differs). At most 8 entries (2 x 2 x 2 option values) per Program, freed with it."""
    if options.timing_only or options.max_cycles is not None:
        return None
    return prog.memo("timing memo", (st.profile, st.isa), dict)


def _replay(prog, st, options, memo, progress, hooks=None):
    """A functional run's result from its values (`Machine.replay`) and the memo's stats, trace and
    memory map; None when the replay refuses (module `_timing_memo`)."""
    from .engine import Machine, MachineOptions, ReplayRefused, RunResult

    with _blas_threads(options.threads):
        try:
            Machine(st.profile, st.isa, st.memory, st.regions, st.checker,
                    MachineOptions(keep_going=options.keep_going, trace=False, mode=options.mode, replay=True),
                    progress=progress, before_step=hooks and hooks[0], after_step=hooks and hooks[1]
                    ).replay(prog, memo[1])
        except ReplayRefused:
            return None
    outputs, raw = {}, {}
    for b in prog.buffers_of("output"):
        outputs[b.name], raw[b.name] = _read_output(st.memory, b, st.profile)
    from .engine.result import Deferred

    copy: list = []  # (stats, trace) of the memo, a copy of its own for every result, made when first read

    def part(i: int):
        if not copy:
            copy.append(pickle.loads(memo[0]))
        return copy[0][i]

    mm = memo[2]
    return RunResult(status="ok", end_reason="done", outputs=outputs, raw_outputs=raw, faults=[],
                     stats=Deferred(lambda: part(0)), trace=Deferred(lambda: part(1)), profile_name=st.profile.name,
                     blob=asdict(prog.header), memory_map=Deferred(lambda: pickle.loads(mm)))


def _bind_inputs(memory, prog, inputs, profile, options, random_inputs: bool, seed: int) -> None:
    inputs = dict(inputs or {})
    in_bufs = prog.buffers_of("input")
    names = {b.name for b in in_bufs}
    unknown = sorted(set(inputs) - names)
    if unknown:
        raise DataError(f"unknown input {unknown[0]!r} (the program's inputs: {', '.join(sorted(names)) or 'none'})")
    if random_inputs and not options.timing_only:  # timing-only binds no values: none are drawn
        inputs = {**seeded_inputs(prog, seed), **inputs}
    for b in in_bufs:
        if b.name in inputs:
            x = inputs[b.name]
        elif options.timing_only:  # no values move: an unbound input is fine (its bytes count as written)
            continue
        else:
            raise DataError(f"missing input {b.name!r} (expected shape {tuple(b.shape)}): bind it, "
                            f"or use random inputs (--random-input / random_inputs=True)")
        _bind_input(memory, b, x, profile, write=not options.timing_only)


def _blas_threads(n: int):
    """Limit BLAS (threadpoolctl) to `n` threads for the run; a no-op when timing-only (results never
    depend on the thread count, only speed does; BLAS is left alone when threadpoolctl is missing)."""
    import contextlib

    global _BLAS
    if n is None:
        return contextlib.nullcontext()
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - a dependency; tolerate an old environment
            return contextlib.nullcontext()
        import numpy  # noqa: F401  (its BLAS is the one the kernels call: loaded before the scan)

        # one scan of the loaded libraries per process (1-7 ms each time `threadpool_limits` does it)
        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=n, user_api="blas")


_BLAS = None  # threadpoolctl.ThreadpoolController of the process, made at the first functional run


def _execute(prog, profile, isa, memory, regions, checker, options, context: str | None = None, progress=None,
             host_records: dict | None = None, hooks=None):
    """Run the machine on prepared memory; read the outputs; explain the faults. `host_records`:
    filled with the operator record bytes each software epoch read (`Machine.host_records`)."""
    from .diagnose import explain_all
    from .engine import Machine, MachineOptions, RunResult
    from .engine.result import Deferred
    from .memmap import deferred_memory_map

    with _blas_threads(None if options.timing_only else options.threads):
        m = Machine(profile, isa, memory, regions, checker,
                    MachineOptions(options.timing_only, options.keep_going, options.trace, options.mode,
                                   options.max_cycles, context), progress=progress,
                    before_step=hooks and hooks[0], after_step=hooks and hooks[1]).run(prog)
    if host_records is not None:
        host_records.update(m.host_records)
    outputs, raw = {}, {}
    if not options.timing_only:
        for b in prog.buffers_of("output"):
            outputs[b.name], raw[b.name] = _read_output(memory, b, profile)
    faults = explain_all(m.faults, prog, profile, isa)
    status = "fault" if faults else "ok"
    return RunResult(status=status, end_reason=m.end_reason, outputs=outputs, raw_outputs=raw, faults=faults,
                     stats=m.stats, trace=Deferred(m.trace.to_dict) if options.trace else None,
                     profile_name=profile.name, blob=asdict(prog.header),
                     memory_map=Deferred(deferred_memory_map(regions, profile, prog,
                                                             prog.memo("memory map", (profile,), dict))))


def _footprint(program: Program, profile, isa) -> dict[str, int]:
    """{pool: bytes from the pool base the program needs}: its buffers, constants and the
    prefetch zones its SE limits reserve past them."""
    from .program.codec import hardware_view

    need: dict[str, int] = {}
    for b in program.buffers:
        need[b.pool] = max(need.get(b.pool, 0), b.offset + b.size)
    for c in program.constants:
        need[c.pool] = max(need.get(c.pool, 0), c.offset + len(c.data))
    for cmd in program.commands:
        if cmd.op == "SE" and cmd.args.get("limit"):
            limit = int(hardware_view(cmd, isa, profile).args["limit"])
            pool = profile.pool_at(limit - 1)
            if pool is not None and pool.name in need:
                need[pool.name] = max(need[pool.name], limit - pool.base)
    return need


def _fit_context(program: Program, ctx, profile, isa) -> Program:
    """`program` relocated into the context's partitions (DataError if it does not fit)."""
    from .program.relocate import address_step, relocate

    step = address_step(isa, profile)
    for b in [*program.buffers, *program.constants]:
        size = b.size if hasattr(b, "size") else len(b.data)
        room = profile.pool_named(b.pool).size
        if b.offset + size > room:
            kind = "buffer" if hasattr(b, "size") else "constant"
            raise DataError(f"context {ctx.name!r}: {kind} {b.name!r} runs past the end of pool {b.pool} "
                            f"(ends {b.offset + size} B from its base, the pool has {room} B) into the next "
                            f"pool; programs in contexts need every buffer inside one pool")
    offsets = {}
    for pool, need in sorted(_footprint(program, profile, isa).items()):
        if pool not in ctx.partitions:
            raise DataError(f"context {ctx.name!r}: the program uses pool {pool} ({need} B), "
                            f"but the context has no partition in it")
        off, room = ctx.partitions[pool]
        if need > room:
            raise DataError(f"context {ctx.name!r}: the program needs {need} B of pool {pool}, "
                            f"its partition has room for {room} B")
        align = max([step] + [b.align for b in program.buffers if b.pool == pool and b.align > 0])
        if off % align:
            raise DataError(f"context {ctx.name!r}: partition offset {off:#x} in {pool} is not a multiple "
                            f"of {align} B (the program's buffer alignment)")
        offsets[pool] = off
    return load(relocate(program, offsets, profile, isa), profile)


def _with_context(f, name: str):
    return f if f.context == name else replace(f, context=name)


def job_faults(setup_faults: list, faults: list, context: str) -> list:
    """The faults of one context's result: its setup faults, then its run's, each carrying the context."""
    return list(setup_faults) + [_with_context(f, context) for f in faults]


def run_shared(jobs, profile=None, options: RunOptions | None = None) -> list:
    """Run several programs as processes sharing one NPU; one RunResult per job, in order.

    `jobs` = [(program, Context, inputs or None)]: program as for `run` (compiled for pool
    offset 0), `npusim.memory.Context(name, partitions={pool: (offset, size)})` naming a
    partition for every pool the program uses, inputs as for `run` (None: seeded random inputs,
    seed 0). One Memory, RegionTable and Checker serve all contexts. At setup, overlapping
    partitions become `pool-overlap` faults in every affected result (those jobs then do not
    run, unless `options.keep_going`); each program is relocated into its partitions
    (`program.relocate`; DataError naming pool, need and room if it does not fit), its regions
    are registered with `owner=context` and its inputs bound. Then the programs run one after
    another on that memory, every access checked with `context=` by a Checker that knows the
    partitions: a byte of another context's partition (region or free bytes) is
    `cross-context-access` of the running context naming the other; an overflow whose first bad
    byte is its own is `buffer-overflow`, naming another context's region it runs on into.
    Every buffer must lie inside one pool (DataError naming it otherwise). Outputs are read
    right after each program's run.
    """
    options = options or RunOptions()
    jobs = list(jobs)
    st = setup_shared(jobs, profile, options)
    results = []
    for moved, ctx in st.jobs:
        pre = st.faults[ctx]
        if pre and not options.keep_going:
            from .engine import RunResult

            results.append(RunResult(status="fault", end_reason="fault", faults=list(pre),
                                     profile_name=st.profile.name))
            continue
        res = _execute(moved, st.profile, st.isa, st.memory, st.regions, st.checker, options, context=ctx)
        res.faults = job_faults(pre, res.faults, ctx)
        res.status = "fault" if res.faults else "ok"
        results.append(res)
    return results


def setup_shared(jobs, profile=None, options: RunOptions | None = None) -> Setup:
    """The setup of `run_shared` (its docstring): contexts allocated, each program relocated into its
    partitions, placed and its inputs bound, one Checker knowing the partitions."""
    from .memory import AddressMap, Allocator, Checker, Memory, RegionTable
    from .program.spec import load_isa

    options = options or RunOptions()
    jobs = list(jobs)
    if not jobs:
        raise UsageError("run_shared: no jobs")
    isa = load_isa()
    progs = []
    for job in jobs:
        if len(job) != 3:
            raise UsageError("run_shared: each job is (program, Context, inputs or None)")
        prog, prof = _load(job[0], profile)
        if profile is None:
            profile = prof
        _check_profile(prog, profile)
        progs.append(prog)
    amap = AddressMap(profile)
    memory, regions = Memory(amap), RegionTable(amap)
    alloc = Allocator(amap, regions)
    for _, ctx, _ in jobs:
        alloc.add_context(ctx)
    pre: dict[str, list] = {ctx.name: [] for _, ctx, _ in jobs}
    for f in alloc.faults:
        other = f.details["other_context"]
        pre[f.context].append(f)
        pre[other].append(replace(f, context=other, details={**f.details, "other_context": f.context}))
    placed = []
    for prog, (_, ctx, inputs) in zip(progs, jobs):
        moved = _fit_context(prog, ctx, profile, isa)
        _place(moved, amap, memory, regions, owner=ctx.name)
        _bind_inputs(memory, moved, inputs, profile, options, random_inputs=inputs is None, seed=0)
        placed.append(moved)
    checker = Checker(amap, regions, partitions=alloc.partitions)
    return Setup(profile, isa, memory, regions, checker, [(m, ctx.name) for m, (_, ctx, _) in zip(placed, jobs)],
                 pre)
