"""The compiler driver: one call per stage, in order, with invariant checks between stages.

`compile` = `finish(prepare(...))`. `prepare` runs what every placement of a model shares (front end,
calibration); `finish` runs the rest (passes and qparams memoized per fusion set, then memory plan,
codegen, encode, verify), so sweeps over alignment, memory plan or fusions pay the front end once.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

from .. import __version__
from ..errors import ModelError, UsageError
from ..hw import load_profile
from ..program.codec import EncodeError, hardware_view
from ..program.validate import mark_encoded
from ..program.model import Header, Program
from ..program.spec import load_isa
from ..program.verify import verify
from ..progress import ProgressFn, report
from ..program.hostop import host_records
from . import codegen, memplan, passes, quantize
from .frontends import sources
from .ir import Graph, Node
from .legality import summary
from .recipes import MAPPINGS, softmax
from .options import FRONT_END_FIELDS, CompileOptions


STAGES = ("front end", "calibration", "passes", "memory plan", "codegen", "encode + verify")


class _Clock:
    """Seconds per stage into `timings` (a dict the caller passes, or None: nothing recorded)."""

    def __init__(self, timings: dict | None):
        self.timings, self.at = timings, time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        if self.timings is not None:
            self.timings[stage] = self.timings.get(stage, 0.0) + now - self.at
        self.at = now


def _check_layers(layers) -> None:
    for L in layers:
        if L.kind == "npu" and not L.steps or L.kind == "host" and L.host is None:
            raise ModelError(f"internal: layer {L.name!r} has no units")


def _check_options(options: CompileOptions, profile) -> None:
    """Options that depend on the target profile: the constant pool and the conv accelerator count."""
    names = [p.name for p in profile.pools]
    if options.weights_pool not in names:
        raise UsageError(f"weights_pool={options.weights_pool!r}: profile {profile.name!r} has no such pool "
                         f"(pools: {', '.join(names)})")
    have = profile.units.conv_accelerators
    if options.conv_units is not None and options.conv_units > have:
        raise UsageError(f"conv_units={options.conv_units}: profile {profile.name!r} has only {have} conv accelerators")


def _encode_verify(program: Program, profile) -> None:
    """Encode every command once (a field that does not fit names the layer) into what the hardware
    decodes (`hardware_view`), then run the ISA verifier (program/verify.py) on that."""
    isa = load_isa()
    views = []
    for i, c in enumerate(program.commands):
        try:
            views.append(hardware_view(c, isa, profile))
        except EncodeError as e:
            raise ModelError(f"layer {program.layer_of(i)!r}: {e} (exceeds what the hardware can encode)") from None
    problems = verify(views, profile, isa)
    if problems:
        raise ModelError(f"generated program fails verification: {problems[0]}")
    mark_encoded(program, isa, profile, views)  # a run or a validation need not encode it again


@dataclass
class Prepared:
    """The part of a compile that does not depend on placement: the front end's graph and cleaned
    model, the calibration ranges (int8), and the passes' layers and qparams per fusion set.

    Built by `prepare`; `finish` turns it into a Program for any options that agree with it on
    `FRONT_END_FIELDS` (alignment, memory plan, padding, guard, weights pool, conv units and fusions
    may vary), so a sweep runs the front end, calibration and passes once."""
    graph: Graph
    clean: object  # onnx_front.Cleaned, the model the calibration ran on (None for a TFLite model)
    options: CompileOptions
    ranges: dict | None  # tensor -> (lo, hi); None unless int8
    _passes: dict = field(default_factory=dict, repr=False)  # fusions -> _Lowered


@dataclass
class _Lowered:
    graph: Graph
    layers: list
    views: dict
    alias: dict
    qparams: dict
    memo: dict = field(default_factory=dict)  # codegen's placement-independent work (quantized weights)


def _copy_graph(g: Graph) -> Graph:
    """A graph the passes may rewrite: nodes, shapes and the constant table copied, arrays shared
    (the passes replace arrays, they never write into them)."""
    nodes = [Node(n.name, n.op, list(n.inputs), list(n.outputs), copy.deepcopy(n.attrs), n.proto) for n in g.nodes]
    return Graph(nodes, dict(g.shapes), dict(g.consts), list(g.inputs), list(g.outputs), dict(g.qdq),
                 dtypes=dict(g.dtypes), opset=g.opset, wq=dict(g.wq), prequantized=g.prequantized, float_islands=set(g.float_islands),
                 source=g.source, compile_dtype=g.compile_dtype, strided=dict(g.strided), windows=dict(g.windows),
                 gathers=dict(g.gathers), profile=g.profile)


def _samples(graph: Graph, options: CompileOptions, calibration):
    cal = calibration if calibration is not None else options.calibration
    if cal is None:
        return quantize.random_calibration(graph, options.calibration_samples, options.seed)
    if isinstance(cal, dict):
        return quantize.check_samples(cal, graph)
    return quantize.load_calibration(cal, graph)


def prepare(model, options: CompileOptions | None = None, profile=None, calibration=None,
            progress: ProgressFn | None = None, timings: dict | None = None) -> Prepared:
    """Front end and (int8) calibration of `model`: the option-independent part of `compile`.
    `timings`: a dict that receives the seconds of "front end" and "calibration" (0 when none runs)."""
    clock = _Clock(timings)
    options = options or CompileOptions()
    profile = _profile(profile)
    _check_options(options, profile)
    esize = load_isa().dtype_bytes(options.quantization)
    # a folded constant may be a float weight bound for a pool as int8/fp16: allow 4x the largest pool
    fold_limit = 4 * max(p.size for p in profile.pools)
    report(progress, "front end", 0, len(STAGES))
    src = sources.load_source(model)
    if src.kind == "onnx":
        memplan.check_weights(src.proto, esize, profile, options.weights_pool)  # before folding or calibrating
    graph, clean = sources.front_end(src, options, fold_limit)
    graph.compile_dtype = options.quantization
    memplan.check_fits(graph, options.quantization, profile)
    clock.lap("front end")
    ranges = None
    if graph.prequantized:  # the model's own scales and zero points: nothing to calibrate
        sources.check_prequantized(options, graph, calibration)
        ranges = {}
    elif options.quantization == "int8":
        quantize.check_finite_constants(graph)
        report(progress, "calibration", 1, len(STAGES))
        probes = {softmax.probe_name(y): y for y in softmax.calibration_probes(graph)}
        ranges = quantize.calibrate(clean, _samples(graph, options, calibration), channel_max=probes)
    clock.lap("calibration")
    return Prepared(graph, clean, options, ranges)


def _lowered(prep: Prepared, options: CompileOptions, esize: int, profile) -> _Lowered:
    """Passes, concat resolution and qparams for the options' fusion set and CPU-fallback switch
    (memoized on `prep`; per profile too when a recipe's check weighs cycles, `Recipe.costed`)."""
    costed = any(MAPPINGS[n.op].costed for n in prep.graph.nodes if n.op in MAPPINGS)
    key = (options.fusions(), options.no_cpu_fallback,
           profile.identity() if costed else None)
    low = prep._passes.get(key)
    if low is None:
        g = _copy_graph(prep.graph)
        g.ranges = dict(prep.ranges or {})
        g.profile = profile
        layers, concats, alias = passes.run_passes(g, key[0], cpu_fallback=not options.no_cpu_fallback)
        layers, views = memplan.resolve_concats(layers, concats, g, esize)
        _check_layers(layers)
        qparams = {}
        if prep.ranges is not None:  # int8 (a pre-quantized model: {} and the model's own scales)
            qparams = quantize.assign_qparams(layers, concats, alias, g, g.ranges)  # + the passes' own tensors
            for v, (out, _) in views.items():
                qparams[v] = qparams[out]
        low = prep._passes[key] = _Lowered(g, layers, views, alias, qparams)
    return low


def finish(prepared: Prepared, options: CompileOptions | None = None, profile=None,
           progress: ProgressFn | None = None, timings: dict | None = None) -> Program:
    """The per-point back end: memory plan, codegen, encode and verify, for `options` (default: the
    prepared ones), which must agree with the prepared options on FRONT_END_FIELDS. `timings`: a dict
    that receives the seconds of each of these stages."""
    clock = _Clock(timings)
    options = options or prepared.options
    for name in FRONT_END_FIELDS:
        if getattr(options, name) != getattr(prepared.options, name):
            raise UsageError(f"finish: option {name}={getattr(options, name)!r} differs from the prepared "
                             f"{getattr(prepared.options, name)!r}; prepare the model again")
    profile = _profile(profile)
    _check_options(options, profile)
    dtype = options.quantization
    esize = load_isa().dtype_bytes(dtype)
    memplan.check_fits(prepared.graph, dtype, profile)
    report(progress, "passes", 2, len(STAGES))
    clock.lap("passes")  # (the checks above)
    low = _lowered(prepared, options, esize, profile)
    clock.lap("passes")
    report(progress, "memory plan", 3, len(STAGES))
    plan = memplan.plan_memory(low.layers, low.views, low.alias, low.graph, low.qparams, dtype, esize,
                               options, profile)
    clock.lap("memory plan")
    report(progress, "codegen", 4, len(STAGES))
    cmds, debug = codegen.generate(low.layers, low.graph, plan, low.qparams, dtype, options, profile, low.memo)
    program = Program(commands=cmds, buffers=plan.buffers, constants=plan.constants, debug=debug,
                      header=Header(profile=profile.name, compiler="npusim", compiler_version=__version__,
                                    source="tflite" if prepared.graph.source == "tflite" else ""))
    clock.lap("codegen")
    report(progress, "encode + verify", 5, len(STAGES))
    _encode_verify(program, profile)
    clock.lap("encode + verify")
    report(progress, "done", len(STAGES), len(STAGES))
    return program


def cpu_summary(program: Program, profile) -> list[str]:
    """One line per operator class the program runs on the host CPU, with the mapping table's
    reason: "LRN x2 -> CPU (no NPU unit)" (read back from the HOST commands' records)."""
    return summary([(r.op_type, r.reason) for _, r in host_records(program, profile) if r is not None])


def _profile(profile):
    return load_profile(profile) if profile is None or isinstance(profile, str) else profile


def compile(model, options: CompileOptions | None = None, profile=None, calibration=None,
            progress: ProgressFn | None = None, timings: dict | None = None) -> Program:
    """ONNX model (path or ModelProto) -> Program for the target profile: `finish(prepare(...))`.

    `calibration` (path to .npz or {input: (N, *shape) array}) overrides options.calibration;
    `progress(stage, done, total)` is called at each stage (npusim.progress); `timings`, a dict,
    receives the seconds of each stage (STAGES; "calibration" 0 when nothing is calibrated).
    """
    profile = _profile(profile)
    return finish(prepare(model, options, profile, calibration, progress, timings), options, profile, progress,
                  timings)
