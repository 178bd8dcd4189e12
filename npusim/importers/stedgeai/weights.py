"""Weight images of an ST output: which pool each belongs to, and whether it holds the parameters.

A raw image (`*_atonbuf.<pool>.raw|.bin`, `*_data.<pool>.bin`) is the parameter region of one pool
from its first byte: it must hold at least up to the largest `offset_end` of the `is_param` buffers
in that pool. It is matched to the pool whose parameter region it fits exactly; failing that, to
the only pool holding parameters (the file name is never needed). Intel HEX carries its own
addresses (read with `intelhex`). The C-array form is a C file defining unsigned (or signed) integer
arrays of 8 to 64 bits with literal initializers (read with tree-sitter's C grammar): each array is an
image in the target's byte order (little-endian), matched to a pool as a raw image is, allowing the
padding of its last element.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...errors import StImportError
from .model import StOutput
from . import csource

MAX_IMAGE_BYTES = 512 << 20


def param_extent(out: StOutput) -> dict[str, int]:
    """{pool name: bytes from the pool's start to the end of its last parameter buffer}."""
    ext: dict[str, int] = {}
    for b in out.buffers:
        if not b.is_param or b.base_symbol:
            continue
        p = out.pool_at(b.start)
        if p is not None:
            ext[p.name] = max(ext.get(p.name, 0), b.end - p.address)
    return ext


def _read_hex(path: Path, out: StOutput) -> tuple[dict[str, bytes], str | None]:
    """({pool: image} of an Intel HEX file, None), or ({}, a note) when its data does not lie in one pool."""
    from intelhex import IntelHex, IntelHexError  # noqa: PLC0415
    try:
        ih = IntelHex(str(path))
    except (IntelHexError, ValueError, OSError) as e:
        raise StImportError(f"{path}: not a readable Intel HEX file ({e})") from None
    lo, hi = ih.minaddr(), ih.maxaddr()
    if lo is None:
        return {}, None
    pool = out.pool_at(lo)
    if pool is None or hi >= pool.end or hi - pool.address + 1 > MAX_IMAGE_BYTES:
        ext = param_extent(out)
        pools = ", ".join(f"{p.name} at {p.address:#x}" for p in out.pools if p.name in ext) or "none"
        where = "inside no pool of the compile" if pool is None else f"past the end of pool {pool.name}"
        return {}, (f"{path.name} sits at [{lo:#x}, {hi + 1:#x}), {where} (pools holding parameters: "
                    f"{pools})")
    return {pool.name: bytes(ih.tobinarray(start=pool.address, end=hi))}, None


# element types of the C-array form: (bytes per element, signed)
C_ARRAY_TYPES = {"uint8_t": (1, False), "unsigned char": (1, False), "int8_t": (1, True), "char": (1, True),
                 "uint16_t": (2, False), "int16_t": (2, True), "uint32_t": (4, False), "int32_t": (4, True),
                 "uint64_t": (8, False), "int64_t": (8, True)}


def c_array_images(path: Path) -> list[tuple[str, bytes, int]]:
    """(array name, bytes, element size) of every integer array a C file defines with literals."""
    import numpy as np  # noqa: PLC0415 (numpy packs the elements)


    src = path.read_bytes()
    arrays, _ = csource.integer_arrays(src, str(path), tuple(C_ARRAY_TYPES))
    out = []
    for name, (tname, values) in arrays.items():
        width, signed = C_ARRAY_TYPES[tname]
        lo, hi = (-(1 << (8 * width - 1)), (1 << (8 * width - 1)) - 1) if signed else (0, (1 << (8 * width)) - 1)
        if values and not (lo <= min(values) and max(values) <= hi):
            raise StImportError(f"{path}: {name}: a value outside {tname}")
        data = np.array(values, dtype=f"<{'i' if signed else 'u'}{width}").tobytes()
        out.append((name, data, width))
    return out


def _pool_of(out: StOutput, ext: dict, label: str, size: int, slack: int = 0) -> str | None:
    """The pool an image of `size` bytes belongs to: the one whose parameter region it fits exactly (up
    to `slack` bytes of padding), else the one whose file postfix its name carries."""
    exact = [p for p, n in ext.items() if 0 <= size - n <= slack]
    # ST names images `<network>_<kind>.<pool file postfix>.<ext>`: the postfix names the
    # pool of an image whose size no longer fits (a truncated or edited image)
    named = [p.name for p in out.pools if p.name in ext and p.file_postfix and
             (f".{p.file_postfix}." in f".{label}." or f"_{p.file_postfix}".lower() in label.lower())]
    return exact[0] if len(exact) == 1 else named[0] if len(named) == 1 else None


def attach_weights(out: StOutput, paths) -> StOutput:
    """`out` with `weights` {pool: image bytes} from the given files. An image shorter than the
    parameters of its pool is refused (`StImportError`, exit 65); an Intel HEX image whose addresses lie in
    no pool is left out, with a note (`weight_notes`): the functional run refuses then."""
    ext = param_extent(out)
    images: dict[str, bytes] = {}
    files = dict(out.files)
    notes: list[str] = []
    for path in paths:
        path = Path(path)
        size = path.stat().st_size
        if size > MAX_IMAGE_BYTES:
            raise StImportError(f"{path}: {size} bytes, larger than any pool image ({MAX_IMAGE_BYTES})")
        if path.read_bytes()[:1] == b":" and path.suffix.lower() in (".hex", ".ihex", ""):
            got, note = _read_hex(path, out)
            notes += [note] if note else []
        elif path.suffix.lower() in (".c", ".h", ".cc", ".cpp", ".inc"):
            got = {}
            for name, data, width in c_array_images(path):
                pool = _pool_of(out, ext, f"{path.name}.{name}", len(data), slack=width - 1)
                if pool is not None:
                    got[pool] = data
        else:
            pool = _pool_of(out, ext, path.name, size)
            if pool is None:
                continue  # a binary that is no parameter image of this compile (a model, ...)
            got = {pool: path.read_bytes()}
        for pool, data in got.items():
            need = ext.get(pool, 0)
            if len(data) < need:
                raise StImportError(f"{path}: the weight image holds {len(data)} bytes; the parameters of pool "
                                    f"{pool} end at byte {need} (a truncated file, or another compile's image?)")
            images[pool] = data
            files[f"weights:{pool}"] = str(path)
    return replace(out, weights=images, files=files, weight_notes=tuple(notes))


# (the call's scale operand, its zero-point operand, the tensor they quantise) of a software operator's call
QUANT_OPERANDS = (("is", "izp", "general.input"), ("os", "ozp", "general.output"), ("ws", "wzp", "weights"))


def _image_bytes(out: StOutput, addr: int, n: int) -> bytes | None:
    """`n` bytes of the attached images at `addr` (None: no image holds them)."""
    pool = out.pool_at(addr)
    data = out.weights.get(pool.name) if pool is not None else None
    off = addr - pool.address if pool is not None else 0
    return data[off:off + n] if data is not None and off + n <= len(data) else None


def _tensor_at(out: StOutput, addr, epoch, key: str):
    """The buffer-table row a call of `epoch` names at `addr` for operand `key`: the parameter buffer there
    (weights), the row it produces (output), or the last produced before it (input); None when the table
    names none, or several of other quantisation parameters."""
    if addr is None or epoch is None:
        return None
    if key == "weights":
        rows = [b for b in out.buffers if b.is_param and not b.base_symbol and b.start == addr]
    else:
        rows = [b for b in out.buffers if not b.is_param and not b.base_symbol and b.start == addr
                and b.epoch is not None and (b.epoch == epoch if key.endswith("output") else b.epoch < epoch)]
        rows = [b for b in rows if b.epoch == max(r.epoch for r in rows)]
    return rows[0] if rows and len({(b.scale, b.zero_point) for b in rows}) == 1 else None


def parameter_mismatches(out: StOutput) -> list[str]:
    """What the attached images contradict in the compile itself: a software operator's call reads its
    tensors' scales (float32) and zero points (8-bit), per tensor or per channel, from the image, and the
    buffer table gives the same tensor's; another compile's image (or a corrupted one) holds other values
    there. One line per contradiction."""
    import numpy as np  # noqa: PLC0415

    found = []
    for blk in out.blocks:
        for op in blk.sw_ops:
            for s_key, z_key, t_key in QUANT_OPERANDS:
                s_addr, z_addr = op.param(f"{s_key}.mem.start_offset"), op.param(f"{z_key}.mem.start_offset")
                b = _tensor_at(out, op.param(f"{t_key}.mem.start_offset"), blk.epoch_num, t_key)
                n = op.param(f"{s_key}.dim.num_elem", 1)
                if b is None or s_addr is None or not b.scale or len(b.scale) != n:
                    continue
                where = f"{op.kind} (epoch {blk.epoch_num}) reads the"
                raw = _image_bytes(out, s_addr, 4 * n)
                if raw is not None:
                    got, want = np.frombuffer(raw, "<f4").astype(np.float64), np.asarray(b.scale, np.float64)
                    bad = ~(np.isfinite(got) & (np.abs(got - want) <= 1e-6 * np.abs(want)))
                    if bad.any():
                        k = int(np.argmax(bad))
                        found.append(f"{where} scale{'s' if n > 1 else ''} of '{b.name}' at {s_addr:#x}: the image "
                                     f"holds {got[k]:.6g}{f' (channel {k}, {int(bad.sum())} of {n} differ)' if n > 1 else ''}"
                                     f", the buffer table says {want[k]:.6g}")
                raw = _image_bytes(out, z_addr, n) if z_addr is not None else None
                if raw is not None:
                    got = np.frombuffer(raw, "i1" if op.param(f"{z_key}.format.is_signed", 1) else "u1").astype(int)
                    want = np.resize(np.asarray(b.zero_point or (0,), int), n)
                    if (got != want).any():
                        k = int(np.argmax(got != want))
                        found.append(f"{where} zero point{'s' if n > 1 else ''} of '{b.name}' at {z_addr:#x}: the "
                                     f"image holds {got[k]}{f' (channel {k})' if n > 1 else ''}, the buffer table "
                                     f"says {want[k]}")
    return found
