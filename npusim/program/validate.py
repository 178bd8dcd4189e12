"""Load-time checks of a Program, shared by the blob loader, the assembler and the runtime.

- `check_versions(header, isa)`: the ISA version matches and this npusim is at least
  `min_runtime` (both dotted versions parsed by one rule).
- `resolve_target_profile(header, profile=None)`: the profile a header targets: built-in
  profiles only, by name (never a file path named inside an input file).
- `validate_program(program, profile, verify=True)`: every command encodes, every buffer and
  constant lies in its pool (or a contiguous same-perms run of pools from it), buffer fields are
  sane (kind, dtype, layout, power-of-two alignment, positive finite scale, a shape whose dense
  tensor fits in the buffer; inputs/outputs non-empty with batch 1), names are unique,
  debug entries name existing commands, and (with `verify`) the ISA verifier passes.
Each raises `error` (BlobError by default) with one line naming the problem.
"""

from __future__ import annotations

import math
import re

from ..errors import BlobError, NpusimError
from .codec import EncodeError, encode
from .model import BUFFER_KINDS
from .spec import IsaSpec, load_isa

_PROFILE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_VERSION = re.compile(r"\d{1,6}(\.\d{1,6}){0,3}")


def parse_version(where: str, text, error=BlobError) -> tuple[int, ...]:
    """(1, 2, 3) from "1.2.3"; anything else is an `error` naming `where`."""
    if not isinstance(text, str) or not _VERSION.fullmatch(text):
        raise error(f"{where} {text!r} is not a version like 1.2.3")
    return tuple(int(x) for x in text.split("."))


def check_versions(header, isa: IsaSpec, error=BlobError) -> None:
    """The header's ISA version is this ISA's, and this npusim is new enough for it."""
    from .. import __version__

    if header.isa_version != isa.version:
        raise error(f"program targets ISA version {header.isa_version}, this npusim implements {isa.version}")
    need = parse_version("minimum runtime version", header.min_runtime, error)
    if need > parse_version("runtime version", __version__, error):
        raise error(f"program needs runtime >= {header.min_runtime}, this is npusim {__version__}")


def resolve_target_profile(header, profile=None, error=BlobError):
    """`profile` if given, else the built-in profile the header names ("" = the default one)."""
    if profile is not None:
        return profile
    from ..hw import default_profile_path, load_profile

    name = header.profile if header is not None else ""
    if not name:
        return load_profile()
    if not _PROFILE_NAME.match(name) or name.endswith(".toml") or ".." in name:
        raise error(f"program names an invalid target profile {name!r}")
    builtin = default_profile_path().parent / f"{name}.toml"  # built-in profiles only, never a cwd file
    if not builtin.is_file():
        raise error(f"program targets unknown profile {name!r} (pass --profile)")
    try:
        return load_profile(str(builtin))
    except NpusimError as e:
        raise error(f"target profile {name!r} is invalid: {e}") from None


def in_pool(where: str, profile, pool_name: str, offset: int, size: int, error=BlobError):
    """The named pool, after checking [offset, offset+size) starts in it and lies in a run of
    contiguous pools from it with the same perms (a buffer may span npuRAM3..6)."""
    names = [p.name for p in profile.pools]
    if pool_name not in names:
        raise error(f"{where}: unknown pool {pool_name!r} (profile {profile.name!r} has {', '.join(names)})")
    for what, v in (("offset", offset), ("size", size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise error(f"{where}: {what} {v!r} must be a non-negative integer")
    pool = profile.pool_named(pool_name)
    rng = f"[{offset:#x}, {offset + size:#x})"
    if offset >= pool.size and not (offset == pool.size and size == 0):
        raise error(f"{where}: {rng} lies outside pool {pool_name} ({pool.size} bytes)")
    end, last = pool.base + offset + size, pool
    while end > last.end:
        nxt = next((p for p in profile.pools if p.base == last.end), None)
        if nxt is None:
            raise error(f"{where}: {rng} lies outside pool {pool_name}: it runs past {last.name}'s end "
                        f"{last.end:#x} into unmapped memory")
        if nxt.perms != pool.perms:
            raise error(f"{where}: {rng} of pool {pool_name} (perms {pool.perms!r}) runs into pool "
                        f"{nxt.name} (perms {nxt.perms!r}); a span must keep one permission")
        last = nxt
    return pool


def _check_buffer(b, profile, isa: IsaSpec, error) -> None:
    where = f"buffer {b.name!r}"
    if b.kind not in BUFFER_KINDS:
        raise error(f"{where}: kind {b.kind!r} is not one of {', '.join(BUFFER_KINDS)}")
    if b.dtype not in isa.enums["elem"] or b.layout not in isa.enums["layout"]:
        bad = ("dtype", b.dtype) if b.dtype not in isa.enums["elem"] else ("layout", b.layout)
        raise error(f"{where}: undefined {bad[0]} {bad[1]!r}")
    if isinstance(b.align, bool) or not isinstance(b.align, int) or b.align <= 0 or b.align & (b.align - 1):
        raise error(f"{where}: alignment {b.align} is not a power of two")
    if not isinstance(b.scale, (int, float)) or not math.isfinite(b.scale) or b.scale <= 0:
        raise error(f"{where}: scale {b.scale!r} must be a positive finite number")
    in_pool(where, profile, b.pool, b.offset, b.size, error)
    shape = tuple(b.shape)
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise error(f"{where}: shape {shape} must hold non-negative integers")
    dense = math.prod(shape) * isa.dtype_bytes(b.dtype) if shape else 0
    if dense > b.size:
        raise error(f"{where}: a {b.dtype} tensor of shape {shape} needs {dense} B, the buffer has {b.size} B")
    if b.layout != "linear" and (len(shape) not in (3, 4) or shape[0] != 1 or 0 in shape):
        raise error(f"{where}: a {b.layout} buffer holds a feature map [1, C, H, W] or [1, C, L], not {shape}")


def mark_hardware_view(program, isa: IsaSpec, profile) -> None:
    """Record that `program`'s commands are already the hardware's view for (isa, profile): they were
    decoded from a blob's words, so encoding them back cannot fail and decoding that gives them again
    (`codec.hardware_view` is the identity on them). Kept with the program's state (`Program.memo`)."""
    program.memo("hardware view", (isa, profile), lambda: True)


def is_hardware_view(program, isa: IsaSpec, profile) -> bool:
    """`mark_hardware_view` was called for this program state and (isa, profile)."""
    return hasattr(program, "memo") and program.memo("hardware view", (isa, profile), lambda: False)


def mark_encoded(program, isa: IsaSpec, profile, views) -> None:
    """Record that every command of `program` encodes for (isa, profile), and `views`: what the
    hardware decodes from those words, one Command per command (the compiler encoded and decoded
    the program once to verify it). Call it on a new Program, before anything asks `hardware_views`."""
    views = list(views)
    if len(views) != len(program.commands):
        raise ValueError(f"mark_encoded: {len(views)} views for {len(program.commands)} commands")
    program.memo("hardware views", (isa, profile), lambda: views)


def hardware_views(program, isa: IsaSpec, profile) -> list | None:
    """The commands as the hardware sees them (`codec.hardware_view` of each), when that is known
    without encoding them: the commands themselves (`mark_hardware_view`) or the compiler's decoded
    stream (`mark_encoded`); None otherwise. The Commands are not to be changed."""
    if not hasattr(program, "memo"):
        return None
    if is_hardware_view(program, isa, profile):
        return list(program.commands)
    return program.memo("hardware views", (isa, profile), lambda: None)


def validate_program(program, profile, isa: IsaSpec | None = None, verify: bool = True, error=BlobError) -> None:
    """Every load-time check of `program` on `profile` (module docstring); raises `error`."""
    isa = isa or load_isa()
    if hasattr(program, "memo"):  # a Program: what passed once passes again (its state unchanged)
        program.memo("valid", (profile, isa, error), lambda: _validate(program, profile, isa, error))
    else:
        _validate(program, profile, isa, error)
    if verify:
        _verify(program, profile, isa, error)


def _validate(program, profile, isa, error) -> bool:
    for i, c in enumerate([] if hardware_views(program, isa, profile) is not None else program.commands):
        try:
            encode(c, isa, profile)
        except EncodeError as e:
            raise error(f"command {i}: {e}") from None
    for b in program.buffers:
        _check_buffer(b, profile, isa, error)
    for c in program.constants:
        in_pool(f"constant {c.name!r}", profile, c.pool, c.offset, len(c.data), error)
    for kind, items in (("buffer", program.buffers), ("constant", program.constants)):
        names = [x.name for x in items]
        if len(set(names)) != len(names):
            dup = sorted(n for n in set(names) if names.count(n) > 1)[0]
            raise error(f"duplicate {kind} name {dup!r}")
    n = len(program.commands)
    for idx in sorted(program.debug):
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < n:
            raise error(f"debug entry for command {idx}, but the program has {n} commands")
    return True


def _verify(program, profile, isa, error) -> None:
    from .verify import verify as verify_commands

    problems = verify_commands(program.commands, profile, isa)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise error(f"program fails verification: {problems[0]}{more}")
