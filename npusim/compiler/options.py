"""CompileOptions: the compiler's knobs, defined once (CLI flags are derived from the field metadata).

Hardware facts live in the HardwareProfile, never here; `None` means "the profile's value".
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..errors import UsageError

QUANTIZATIONS = ("int8", "fp16", "fp32")
FUSIONS = ("conv-bn", "conv-act", "conv-add", "add-act", "conv-pool")
MEM_PLANS = ("unified", "per-layer")
# the options the front end and calibration depend on (driver.prepare); the others only shape the back end
FRONT_END_FIELDS = ("input_shapes", "const_inputs", "quantization", "calibration", "calibration_samples", "seed")
# stated limits on options that size work or memory (checked before anything is compiled)
MAX_CALIBRATION_SAMPLES = 4096
MAX_OPTION_BYTES = 16 << 20  # --mem-align, --io-pad, --guard: no N657 pool is anywhere near this
MAX_SEED = 2**63 - 1


def _opt(default, flag: str, help: str, choices=None, metavar=None):
    return field(default=default, metadata={"flag": flag, "help": help, "choices": choices, "metavar": metavar})


@dataclass(frozen=True)
class CompileOptions:
    """How to compile one model. Frozen; build a new one with dataclasses.replace."""

    input_shapes: dict | tuple | None = _opt(
        None, "--input-shape", "fixed input shape: NAME=1,3,224,224 or 1,3,224,224 (repeatable; a dynamic batch "
        "alone defaults to 1)", metavar="[NAME=]DIMS")
    const_inputs: dict | None = _opt(
        None, "--const-input", "a model input known at compile time, as a constant: NAME=FILE.npy (repeatable), "
        "e.g. the axes, scales or shape inputs of an exported model, so shapes that depend on them are static",
        metavar="NAME=FILE.npy")
    quantization: str = _opt("int8", "--quantization", "precision of weights and activations", QUANTIZATIONS)
    calibration: str | None = _opt(
        None, "--calibration", "int8: .npz of sample inputs, one array (N, *input_shape) per input name; "
        "without it the compiler calibrates on seeded random normal inputs", metavar="FILE.npz")
    mem_align: int | None = _opt(
        None, "--mem-align", "alignment in bytes of buffer starts and strides (default: the profile's granule)",
        metavar="BYTES")
    fuse: str = _opt("all", "--fuse", "fusions: all | none | comma list of " + ",".join(FUSIONS), metavar="LIST")
    mem_plan: str = _opt("unified", "--mem-plan", "one arena with lifetime reuse, or one buffer per tensor", MEM_PLANS)
    io_pad: int = _opt(0, "--io-pad", "extra bytes reserved after each input/output buffer", metavar="BYTES")
    guard: int | None = _opt(
        None, "--guard", "SE limit register this many bytes past a buffer's end (default: profile limit_guard)",
        metavar="BYTES")
    calibration_samples: int = _opt(8, "--calibration-samples", "random calibration samples when no file is given",
                                    metavar="N")
    seed: int = _opt(0, "--calibration-seed", "seed of the random calibration inputs", metavar="N")
    weights_pool: str = _opt(
        "octoFlash", "--weights-pool", "memory pool holding weights, parameter tables and LUTs (placed after "
        "the activations of that pool): any pool of the target profile", metavar="POOL")
    conv_units: int | None = _opt(
        None, "--conv-units", "conv accelerators one conv epoch may split its output channels over "
        "(default: all of the profile's)", metavar="N")
    no_cpu_fallback: bool = _opt(
        False, "--no-cpu-fallback", "refuse a model with an operator the NPU cannot run (naming it and why), "
        "instead of running that operator as a software epoch on the host CPU")

    def __post_init__(self):
        if self.quantization not in QUANTIZATIONS:
            raise UsageError(f"quantization={self.quantization!r}: expected one of {', '.join(QUANTIZATIONS)}")
        if self.mem_plan not in MEM_PLANS:
            raise UsageError(f"mem_plan={self.mem_plan!r}: expected one of {', '.join(MEM_PLANS)}")
        if self.mem_align is not None and (not _is_int(self.mem_align) or not 1 <= self.mem_align <= MAX_OPTION_BYTES
                                           or self.mem_align & (self.mem_align - 1)):
            raise UsageError(f"mem_align={self.mem_align!r}: expected a power of two number of bytes "
                             f"<= {MAX_OPTION_BYTES}")
        if not _is_int(self.io_pad) or not 0 <= self.io_pad <= MAX_OPTION_BYTES:
            raise UsageError(f"io_pad={self.io_pad!r}: expected an integer in [0, {MAX_OPTION_BYTES}]")
        if not _is_int(self.calibration_samples) or not 1 <= self.calibration_samples <= MAX_CALIBRATION_SAMPLES:
            raise UsageError(f"calibration_samples={self.calibration_samples!r}: expected an integer in "
                             f"[1, {MAX_CALIBRATION_SAMPLES}] (for more samples give a --calibration file)")
        if not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"seed={self.seed!r}: expected an integer in [0, 2^63)")
        if self.guard is not None and (not _is_int(self.guard) or not 0 <= self.guard <= MAX_OPTION_BYTES):
            raise UsageError(f"guard={self.guard!r}: expected a number of bytes in [0, {MAX_OPTION_BYTES}]")
        if not isinstance(self.weights_pool, str) or not self.weights_pool:
            raise UsageError(f"weights_pool={self.weights_pool!r}: expected the name of a pool of the target profile")
        if self.const_inputs is not None and (not isinstance(self.const_inputs, dict) or not all(
                isinstance(k, str) and k and isinstance(v, str) and v for k, v in self.const_inputs.items())):
            raise UsageError(f"const_inputs={self.const_inputs!r}: expected {{input name: .npy file path}}")
        if not isinstance(self.no_cpu_fallback, bool):
            raise UsageError(f"no_cpu_fallback={self.no_cpu_fallback!r}: expected true or false")
        if self.conv_units is not None and (not _is_int(self.conv_units) or self.conv_units < 1):
            raise UsageError(f"conv_units={self.conv_units!r}: expected a positive number of conv accelerators")
        self.fusions()  # validates the list

    def fusions(self) -> frozenset[str]:
        """The set of enabled fusions."""
        text = (self.fuse or "none").strip()
        if text == "all":
            return frozenset(FUSIONS)
        if text == "none":
            return frozenset()
        items = {t.strip() for t in text.split(",") if t.strip()}
        bad = sorted(items - set(FUSIONS))
        if bad:
            raise UsageError(f"fuse={self.fuse!r}: unknown fusion {bad[0]!r} (known: all, none, {', '.join(FUSIONS)})")
        return frozenset(items)

    def align(self, profile) -> int:
        return self.mem_align if self.mem_align is not None else profile.alignment.granule

    def guard_bytes(self, profile) -> int:
        return self.guard if self.guard is not None else profile.stream_engine.limit_guard


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def option_fields():
    """The dataclass fields that carry CLI metadata, in declaration order."""
    return [f for f in fields(CompileOptions) if "flag" in f.metadata]


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(t) for t in text.replace("x", ",").split(",") if t.strip())
    except ValueError:
        raise UsageError(f"input shape {text!r}: expected comma-separated integers like 1,3,224,224") from None
    if not dims or any(d < 1 for d in dims):
        raise UsageError(f"input shape {text!r}: dimensions must be positive integers")
    return dims


def parse_input_shapes(items) -> dict | tuple | None:
    """['x=1,3,8,8', ...] or ['1,3,8,8'] -> {name: dims} or dims."""
    if not items:
        return None
    if isinstance(items, str):
        items = [items]
    named, bare = {}, None
    for it in items:
        if "=" in it:
            name, dims = it.split("=", 1)
            named[name.strip()] = parse_shape(dims)
        else:
            bare = parse_shape(it)
    if bare is not None and named:
        raise UsageError("--input-shape: give either one bare shape or NAME=DIMS entries, not both")
    return bare if bare is not None else named


def parse_const_inputs(items) -> dict | None:
    """['x=x.npy', ...] -> {name: path}; a name given twice is refused."""
    if not items:
        return None
    if isinstance(items, str):
        items = [items]
    out: dict[str, str] = {}
    for it in items:
        name, sep, path = it.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise UsageError(f"--const-input {it!r}: expected NAME=FILE.npy")
        if name.strip() in out:
            raise UsageError(f"--const-input {name.strip()}: given twice")
        out[name.strip()] = path.strip()
    return out
