"""Stress, soak and multi-process runs: the board's stability tiers, off the board.

    targets = [load_target("detector.npu")]
    rep = stress(targets, StressOptions(runs=1000, processes=2, strategy="misconfigured", seed=3))
    print(rep.text()); rep.exit_code        # 139 fault, 4 leak / pool exhausted, 3 drift, 0 clean

Every run is one job of a process on `processes.NpuSystem` (one simulated NPU, a seeded scheduler,
the runtime library allocating per inference). Process i runs target i mod len(targets). Run r of a
process uses frame r mod F of its variant (r // F) mod V (a variant per input shape); frames are
seeded random (`frames`, seeded by `seed`) or the .npy/.npz files of `inputs_dir`, arrays in the model's
own layout and type (`model_inputs`: a TFLite model's NHWC; a file's shape picks its variant); process i
starts at frame i. Each run is checked for faults (Fault records);
every `check_every`-th run computes values and is compared bit for bit with the single-process
reference (a fresh `run` of the same program on the same frame, once per frame) and, with
`reference` (an ONNX or TFLite model), with the model's own runtime; the other runs are timing-only. The host's memory stays constant however long
it runs: counters, bounded decimated series (`trend.Series`), the first fault, and a CSV streamed
to disk. The leak trend per process is the Theil-Sen slope of the bytes it holds in its pools after
each inference (`trend.leak_trend`, after the warm-up runs).
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError, ModelError, UsageError
from .stress_options import MAX_FRAMES, PLOT_POINTS, StressOptions, parse_duration, parse_shapes
from .stress_report import EXIT_LEAK, StressReport
from .trend import Series, leak_trend

@dataclass
class Target:
    """A model to stress: its programs, one per input shape."""

    name: str
    variants: list  # [Program]


def with_spatial_shape(model, hw: tuple[int, int]):
    """A copy of an ONNX model whose 4-D inputs are H x W (stale inner/output shapes dropped), so the
    compiler and ONNX Runtime infer the rest: a model that cannot take the shape fails to compile."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {i.name for i in m.graph.initializer}
    for vi in m.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name not in inits and len(dims) == 4:
            dims[2].Clear()
            dims[2].dim_value = hw[0]
            dims[3].Clear()
            dims[3].dim_value = hw[1]
    del m.graph.value_info[:]
    for vi in m.graph.output:
        vi.type.tensor_type.ClearField("shape")
    return m


def load_target(src, shapes=None, compile_options=None, profile=None, name: str | None = None) -> Target:
    """A Target from a blob (path or bytes), a Program, or a model (an ONNX path or ModelProto, compiled once
    per shape of `shapes` ([(H, W)]; None: its own); a .tflite path, compiled at its own shapes)."""
    from .. import runtime
    from ..program.model import Program

    is_onnx = not isinstance(src, (bytes, Program)) and (
        hasattr(src, "graph") or str(src).lower().endswith(".onnx"))
    label = name or (Path(src).stem if isinstance(src, (str, Path)) else "model")
    if isinstance(src, (str, Path)) and str(src).lower().endswith(".tflite"):
        if shapes:
            raise UsageError(f"{label}: --shapes needs an ONNX model (a TFLite model has fixed shapes)")
        from ..compiler import CompileOptions, compile as compile_model

        return Target(label, [compile_model(str(src), compile_options or CompileOptions(), profile=profile)])
    if not is_onnx:
        if shapes:
            raise UsageError(f"{label}: --shapes needs an ONNX model (a blob has fixed shapes)")
        return Target(label, [runtime.load(src, profile)])
    from ..compiler import CompileOptions, compile as compile_model

    model = src if hasattr(src, "graph") else _read_onnx(src)
    models = [model] if not shapes else [with_spatial_shape(model, hw) for hw in shapes]
    variants = []
    for hw, m in zip(shapes or [None], models):
        try:
            variants.append(compile_model(m, compile_options or CompileOptions(), profile=profile))
        except ModelError as e:
            if hw is None:
                raise
            raise ModelError(f"{label}: the model does not take input {hw[0]}x{hw[1]}: {e}") from None
    return Target(label, variants)


def _read_model(src):
    """A reference model from a path or bytes: the ModelProto of an ONNX model, a TFLite model's bytes."""
    from ..compiler.frontends.sources import load_source

    s = load_source(src)
    return s.data if s.kind == "tflite" else s.proto


def _read_onnx(path):
    import onnx

    try:
        return onnx.load(str(path))
    except FileNotFoundError:
        raise ModelError(f"{path}: no such model file") from None
    except Exception as e:  # noqa: BLE001 - onnx raises DecodeError, OSError, ...
        raise ModelError(f"{path}: not a readable ONNX model ({' '.join(str(e).split())[:120]})") from None


def host_rss() -> int:
    """Resident set size of this process in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


# ---------------------------------------------------------------- the driver
def stress(targets, options: StressOptions | None = None, profile=None, reference=None, progress=None,
           monitor=None, clock=time.monotonic) -> StressReport:
    """Run the stress (see the module docstring) and return its report.

    `reference`: a model (ONNX path or ModelProto, or a .tflite path or bytes) to compare with its own
    runtime (`reference.reference_floats`: ONNX Runtime at the variant's input shape, or the TFLite
    interpreter); `progress(stage, done, total)` per run; `monitor(line)` every `options.monitor`
    seconds of `clock`."""
    from ..program.validate import resolve_target_profile
    from ..errors import InvalidInputError

    o = options or StressOptions()
    targets = list(targets)
    if not targets:
        raise UsageError("stress: no model")
    profile = resolve_target_profile(targets[0].variants[0].header, profile, error=InvalidInputError)
    if reference is not None and not hasattr(reference, "graph"):
        reference = _read_model(reference)
    return _Driver(targets, o, profile, reference, progress, monitor, clock).run()


class _Driver:
    def __init__(self, targets, o: StressOptions, profile, reference, progress, monitor, clock):
        from ..processes import NpuSystem

        self.targets, self.o, self.profile, self.reference = targets, o, profile, reference
        self.progress, self.monitor, self.clock = progress, monitor, clock
        self.system = NpuSystem(profile, o.runtime_config(timing_only=o.check_every == 0))
        n = o.processes or len(targets)
        names = [t.name for t in targets]
        unique = n == len(targets) and len(set(names)) == n
        self.proc_target: dict[str, int] = {}
        for i in range(n):
            t = i % len(targets)
            name = targets[t].name if unique else f"{targets[t].name}#{i}"
            self.system.add_process(name, targets[t].variants, priority=n - i)
            self.proc_target[name] = t
        self.index = {p: i for i, p in enumerate(self.proc_target)}
        self.files = _frame_files(o.inputs_dir, targets) if o.inputs_dir else None
        self.rng = np.random.default_rng([o.seed, 1])
        self.period = o.period_ms * 1e-3 * profile.clock
        self.warmup = o.warmup if o.warmup is not None else (100 if o.duration else max(1, min(100, o.runs // 10)))
        self.started = {p: 0 for p in self.proc_target}
        self.series = {p: Series() for p in self.proc_target}
        self.plot_pool, self.plot_high = Series(PLOT_POINTS), Series(PLOT_POINTS)
        self.plot_cycles, self.plot_rss = Series(PLOT_POINTS), Series(PLOT_POINTS)
        self.refs: dict = {}
        self.ort: dict = {}
        self._ort_models: dict = {}
        self.stop = False
        self.rep = StressReport(targets=[t.name for t in targets], options=o,
                                processes={p: targets[t].name for p, t in self.proc_target.items()},
                                clock_hz=float(profile.clock))
        if reference is not None:
            from ..reference import REFERENCE_LABELS, reference_kind

            self.ref_kind = reference_kind(reference)
            self.rep.reference = REFERENCE_LABELS[self.ref_kind]
        self._csv = self._writer = None

    # ------------------------------------------------------------ run
    def run(self) -> StressReport:
        o, rep = self.o, self.rep
        self.t0 = self.clock()
        self.next_mon = self.t0 + (o.monitor or 0)
        self._mon = (self.t0, 0, 0.0, 0.0)
        if o.csv:
            Path(o.csv).parent.mkdir(parents=True, exist_ok=True)
            self._csv = open(o.csv, "w", newline="")
            self._writer = csv.writer(self._csv)
            self._writer.writerow(CSV_COLUMNS)
        try:
            self.system.run(self.next_job, self.on_result, self.tick if o.monitor else None)
        finally:
            if self._csv is not None:
                self._csv.close()
        rep.seconds = self.clock() - self.t0
        rep.rss_end = host_rss()
        rep.rss_max = max(rep.rss_max, rep.rss_end)
        if not rep.rss_warm:
            rep.rss_warm = rep.rss_end
        rep.pools = self.system.pool_stats()
        rep.sim_cycles = float(self.system.env.now)
        rep.npu_busy = float(self.system.sched.busy_cycles)
        _, cyc = self.plot_cycles.arrays()
        if cyc.size:
            rep.cycles_median = float(np.median(cyc))
        granule = self.system.config.granule
        for p in self.system.processes:
            free = min((pool.free_bytes for pool in p.pools.values()), default=None)
            rep.trends[p.name] = leak_trend(self.series[p.name], warmup=self.warmup, min_growth=granule, free=free)
        if o.plot:
            from .plots import plot_stress

            plot_stress(self.plot_pool.arrays(), self.plot_high.arrays(), self.plot_cycles.arrays(),
                        self.plot_rss.arrays(), o.plot,
                        title=f"npusim stress: {', '.join(self.rep.processes)} ({o.strategy} pool)")
        return rep

    def next_job(self, proc):
        from ..processes import Job

        o, name = self.o, proc.name
        if self.stop or (o.duration is not None and self.clock() - self.t0 >= o.duration):
            return None
        r = self.started[name]
        if o.duration is None and r >= o.runs:
            return None
        self.started[name] = r + 1
        t = self.proc_target[name]
        variants = len(self.targets[t].variants)
        k = r + self.index[name]  # processes of one model start on different frames
        if self.files is not None:
            f = k % len(self.files[t])
            v = self.files[t][f][1]
        else:
            f, v = k % o.frames, (r // o.frames) % variants
        checked = bool(o.check_every) and r % o.check_every == 0
        delay = 0.0
        if self.period:
            lo = 0.0 if r == 0 else 1.0 - o.jitter
            delay = self.period * float(self.rng.uniform(lo, 1.0 + o.jitter if r else 1.0))
        return Job(v, self.frame(t, v, f) if checked else None, o.steps, delay, tag=(t, v, f, checked))

    def frame(self, t: int, v: int, f: int) -> dict:
        from ..runtime import own_quantization, random_input

        if self.files is not None:
            return _read_frame(self.files[t][f][0], self.targets[t].variants[v])
        rng = np.random.default_rng([self.o.seed, t, v, f])
        prog = self.targets[t].variants[v]
        return {b.name: random_input(b, rng, own_quantization(prog)) for b in prog.buffers_of("input")}

    def on_result(self, res) -> None:
        rep, o = self.rep, self.o
        t, v, f, checked = res.job.tag
        rep.inferences += 1
        rep.status[res.status] += 1
        for flt in res.faults:
            rep.faults[flt.cls] += max(1, int(flt.count or 1))
        if res.faults and rep.first_fault is None:
            rep.first_fault = res
            rep.first_fault_text = self._fault_text(res)
        if res.status == "pool-exhausted":
            rep.exhausted = rep.exhausted or res.message
            self.stop = True
        if res.status == "ok":
            c = res.busy_cycles
            rep.cycles_min = c if rep.cycles_min is None else min(rep.cycles_min, c)
            rep.cycles_max = c if rep.cycles_max is None else max(rep.cycles_max, c)
            self.plot_cycles.add(rep.inferences, c)
        if res.outputs and checked:
            self._compare(res, t, v, f)
        if res.status != "ok" or res.step == res.job.steps - 1:
            rep.runs += 1
        pools = self.system.pool_stats()
        in_use = sum(p.in_use for p in pools)
        rep.max_fragmentation = max([rep.max_fragmentation] + [p.fragmentation for p in pools])
        self.series[res.process].add(res.index / o.steps, res.held)  # x in runs: the slope is bytes per run
        high = max(p.high_water for p in pools)
        self.plot_pool.add(rep.inferences, in_use)
        self.plot_high.add(rep.inferences, high)
        rss = host_rss()
        self.plot_rss.add(rep.inferences, rss)
        if rep.rss_warm:
            rep.rss_max = max(rep.rss_max, rss)
        elif self._host_warm():
            rep.rss_warm = rss
        if self._writer is not None:
            self._writer.writerow([rep.runs, res.process, res.index, res.step, res.status, len(res.faults),
                                   f"{self.clock() - self.t0:.3f}", f"{res.end_time:.0f}", f"{res.busy_cycles:.0f}",
                                   f"{res.latency_cycles:.0f}", in_use, high,
                                   f"{max(p.fragmentation for p in pools):.4f}", res.held, rss])
        if self.progress is not None:
            if o.duration is not None:
                self.progress("soak", int(self.clock() - self.t0), int(o.duration))
            else:
                self.progress("run", rep.runs, o.runs * len(self.proc_target))
        if o.monitor:
            self.tick()

    def _host_warm(self) -> bool:
        """The host's warm-up is over: 10 % of the runs (or of the duration), and the leak fit's warm-up
        (the allocator's footprint settles over the first runs; a leak keeps growing after it)."""
        o = self.o
        done = min(self.started.values())
        if o.duration is not None:
            return done > self.warmup and self.clock() - self.t0 >= 0.1 * o.duration
        return done > max(self.warmup, o.runs // 10)

    def tick(self) -> None:
        now = self.clock()
        if now < self.next_mon or self.monitor is None:
            return
        t_prev, n_prev, busy_prev, sim_prev = self._mon
        sched, sim = self.system.sched, float(self.system.env.now)
        util = (sched.busy_cycles - busy_prev) / (sim - sim_prev) if sim > sim_prev else 0.0
        rate = (self.rep.inferences - n_prev) / (now - t_prev) if now > t_prev else 0.0
        pools = self.system.pool_stats()
        self.monitor(f"[{now - self.t0:8.1f} s] runs {self.rep.runs:,}  {rate:6.1f} inferences/s  npu {util:6.1%}  "
                     f"pool {sum(p.in_use for p in pools):,} B in use (high-water {max(p.high_water for p in pools):,} B,"
                     f" frag {max(p.fragmentation for p in pools):.1%})  faults {sum(self.rep.faults.values()):,}")
        self._mon = (now, self.rep.inferences, sched.busy_cycles, sim)
        self.next_mon += self.o.monitor
        if self.next_mon <= now:
            self.next_mon = now + self.o.monitor

    # ------------------------------------------------------------ references
    def _compare(self, res, t: int, v: int, f: int) -> None:
        rep = self.rep
        ref = self._reference(t, v, f)
        rep.checked += 1
        if ref is not None and res.step < len(ref):
            diff = max((float(np.max(np.abs(res.outputs[k] - ref[res.step][k]))) if res.outputs[k].size else 0.0)
                       for k in ref[res.step])
            if diff > 0 or any(not np.array_equal(res.outputs[k], ref[res.step][k]) for k in ref[res.step]):
                rep.drifted += 1
                rep.max_drift = max(rep.max_drift, diff)
        ort = self._ort(t, v, f)
        if ort is not None and res.step < len(ort):
            from ..reference import compare, default_thresholds, program_precision

            th = default_thresholds(program_precision(self.targets[t].variants[v]))
            metrics = list(compare(res.outputs, ort[res.step]).values())
            for m in metrics:
                rep.worst_cosine = m.cosine if rep.worst_cosine is None else min(rep.worst_cosine, m.cosine)
                rep.worst_rel = m.max_rel if rep.worst_rel is None else max(rep.worst_rel, m.max_rel)
            if any(th.check(m) for m in metrics):
                rep.ref_failed += 1

    def _chain(self, t: int, v: int, f: int, fn) -> list:
        from ..generative import feedback_pairs

        prog = self.targets[t].variants[v]
        x = self.frame(t, v, f)
        pairs = feedback_pairs(prog) if self.o.steps > 1 else {}
        out = []
        for _ in range(self.o.steps):
            y = fn(x)
            if y is None:
                break
            out.append(y)
            x = {i: y[o] for i, o in pairs.items()}
        return out

    def _reference(self, t: int, v: int, f: int):
        """The single-process outputs per step (None if the program faults alone)."""
        key = (t, v, f)
        if key not in self.refs:
            from ..runtime import RunOptions, run

            prog = self.targets[t].variants[v]

            def one(x):
                r = run(prog, x, RunOptions(trace=False), profile=self.profile)
                return r.outputs if r.ok else None

            self.refs[key] = self._chain(t, v, f, one) or None
        return self.refs[key]

    def _ort(self, t: int, v: int, f: int):
        """The reference model's outputs per step (an ONNX model at the variant's input shape)."""
        if self.reference is None:
            return None
        key = (t, v, f)
        if key not in self.ort:
            from ..reference import reference_floats

            mkey = (t, v)
            prog = self.targets[t].variants[v]
            if mkey not in self._ort_models:
                shape = tuple(prog.buffers_of("input")[0].shape)
                onnx_4d = hasattr(self.reference, "graph") and len(shape) == 4
                self._ort_models[mkey] = with_spatial_shape(self.reference, shape[2:]) if onnx_4d else self.reference
            m = self._ort_models[mkey]
            self.ort[key] = self._chain(t, v, f, lambda x: reference_floats(m, prog, x, self.ref_kind))
        return self.ort[key]

    def _fault_text(self, res) -> str:
        from ..faults import render_text

        o = self.o
        return (f"first fault: process '{res.process}', inference {res.index}"
                + (f" step {res.step}" if o.steps > 1 else "") + f", at cycle {res.end_time:,.0f} "
                f"(seed {o.seed}, schedule {o.schedule}, pool {o.strategy}); reproduce with the same seed\n"
                + (f"interleaving up to it (process:step, eN = epoch N): {res.interleaving}\n"
                   if len(self.proc_target) > 1 else "")
                + render_text(res.faults))


CSV_COLUMNS = ("run", "process", "inference", "step", "status", "faults", "time_s", "sim_cycle", "busy_cycles",
               "latency_cycles", "pool_in_use", "pool_high_water", "fragmentation", "held_bytes", "host_rss")


def _frame_files(folder, targets) -> list:
    """Per target: [(file, variant)] for the .npy / .npz files of `folder` (sorted), each matched to the
    variant whose input shape it has."""
    d = Path(folder)
    if not d.is_dir():
        raise DataError(f"--inputs {folder}: not a folder")
    files = sorted(p for p in d.iterdir() if p.suffix in (".npy", ".npz"))
    if not files:
        raise DataError(f"--inputs {folder}: no .npy or .npz files")
    if len(files) > MAX_FRAMES:
        raise DataError(f"--inputs {folder}: {len(files)} files, at most {MAX_FRAMES} frames are supported")
    from ..model_inputs import blob_specs

    out = []
    for t in targets:
        got = []
        for p in files:
            shapes = _frame_shapes(p, t.variants[0])
            for i, prog in enumerate(t.variants):  # shapes in the model's own layout (NHWC for TFLite)
                if all(s.shape == shapes.get(s.name) for s in blob_specs(prog)):
                    _read_frame(p, prog)  # its types too, before the first run
                    got.append((p, i))
                    break
            else:
                want = "; ".join(", ".join(f"{s.name} {s.describe()}" for s in blob_specs(prog))
                                 for prog in t.variants)
                raise DataError(f"--inputs {p.name}: shapes {dict(shapes)} match no program of {t.name} ({want})")
        out.append(got)
    return out


def _frame_shapes(path: Path, prog) -> dict:
    try:
        if path.suffix == ".npy":
            ins = prog.buffers_of("input")
            if len(ins) != 1:
                raise DataError(f"--inputs {path.name}: a .npy frame needs a single-input model (use .npz with "
                                f"one array per input name)")
            return {ins[0].name: tuple(np.load(path, mmap_mode="r", allow_pickle=False).shape)}
        with np.load(path, allow_pickle=False) as z:
            return {k: tuple(z[k].shape) for k in z.files}
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"--inputs {path.name}: not a readable array file ({' '.join(str(e).split())[:120]})") from None


def _read_frame(path: Path, prog) -> dict:
    """A frame's arrays (the model's own layout and type, `model_inputs`) as the program binds them."""
    from ..model_inputs import to_program

    if path.suffix == ".npy":
        arrays = {prog.buffers_of("input")[0].name: np.load(path, allow_pickle=False)}
    else:
        with np.load(path, allow_pickle=False) as z:
            arrays = {b.name: z[b.name] for b in prog.buffers_of("input")}
    return to_program(prog, arrays, what=f"--inputs {path.name}:")


__all__ = ["CSV_COLUMNS", "EXIT_LEAK", "StressOptions", "StressReport", "Target", "host_rss", "load_target",
           "parse_duration", "parse_shapes", "stress", "with_spatial_shape"]  # the parsers: stress_options
