"""The compiler driver: one call per stage, in order, with invariant checks between stages."""

from __future__ import annotations

from .. import __version__
from ..errors import ModelError, UsageError
from ..hw import load_profile
from ..program.codec import EncodeError, decode, encode
from ..program.model import Header, Program
from ..program.spec import load_isa
from ..program.verify import verify
from . import codegen, frontend, memplan, passes, quantize
from .options import CompileOptions


def _check_layers(layers) -> None:
    for L in layers:
        if L.kind != "concat" and not L.steps:
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
    """Encode every command once (a field that does not fit names the layer), then run the ISA
    verifier (program/verify.py) on what the hardware would decode."""
    isa = load_isa()
    words: list[int] = []
    for i, c in enumerate(program.commands):
        try:
            words.extend(encode(c, isa, profile))
        except EncodeError as e:
            raise ModelError(f"layer {program.layer_of(i)!r}: {e} (exceeds what the hardware can encode)") from None
    problems = verify(decode(words, isa, profile), profile, isa)
    if problems:
        raise ModelError(f"generated program fails verification: {problems[0]}")


def compile(model, options: CompileOptions | None = None, profile=None, calibration=None) -> Program:
    """ONNX model (path or ModelProto) -> Program for the target profile.

    `calibration` (path to .npz or {input: (N, *shape) array}) overrides options.calibration.
    """
    options = options or CompileOptions()
    if profile is None or isinstance(profile, str):
        profile = load_profile(profile)
    _check_options(options, profile)
    dtype = options.quantization
    esize = load_isa().dtype_bytes(dtype)
    # a folded constant may be a float weight bound for a pool as int8/fp16: allow 4x the largest pool
    fold_limit = 4 * max(p.size for p in profile.pools)
    graph, clean = frontend.build_graph(model, options.input_shapes, max_bytes=fold_limit)
    memplan.check_fits(graph, esize, profile)
    layers, concats, alias = passes.run_passes(graph, options.fusions())
    layers, views = memplan.resolve_concats(layers, concats, graph, esize)
    _check_layers(layers)
    qparams = {}
    if dtype == "int8":
        cal = calibration if calibration is not None else options.calibration
        if cal is None:
            samples = quantize.random_calibration(graph, options.calibration_samples, options.seed)
        elif isinstance(cal, dict):
            samples = quantize.check_samples(cal, graph)
        else:
            samples = quantize.load_calibration(cal, graph)
        ranges = quantize.calibrate(clean, samples)
        qparams = quantize.assign_qparams(layers, concats, alias, graph, ranges)
        for v, (out, _) in views.items():
            qparams[v] = qparams[out]
    plan = memplan.plan_memory(layers, views, alias, graph, qparams, dtype, esize, options, profile)
    cmds, debug = codegen.generate(layers, graph, plan, qparams, dtype, options, profile)
    program = Program(commands=cmds, buffers=plan.buffers, constants=plan.constants, debug=debug,
                      header=Header(profile=profile.name, compiler="npusim", compiler_version=__version__))
    _encode_verify(program, profile)
    return program
