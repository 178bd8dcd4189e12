"""CONVACC's depthwise stride-2 mode (CTRL.DSS2MODE): how the unit reads its feature stream in it.

In this mode ST's compiler feeds the unit stream elements wider than its 8-bit features (SIMD 8x8): 16-bit
elements over an 8-bit map (the buffer table's UINT8 / INT8), `inbytes_f` 1 or 2, and the runtime moves all
padding to the zero frame. The unit takes each `bits`-wide element as `bits / 8` byte features, the low ones
first: the bytes in memory order, so a channels-last map read as 16-bit elements gives the channels in order.
Measured, not documented (docs/stedgeai.md, "Values": every such layer of three public compiles with a
source model within 1 step of TFLite alone; high bytes first does not fit; one feature per element, or
`inbytes_f` bytes per feature, leaves the epoch's frames unclosed).
"""

from __future__ import annotations

import numpy as np

from ...errors import StImportError

FEATURE_BITS = 8  # the mode's features: bytes (SIMD 8x8), whatever `inbytes_f` says (1 and 2 seen)


def check(u) -> None:
    """Refuse the mode with what ST's runtime refuses it with (FSTAT, DEEPMODE) and on features other than
    bytes (SIMD 16x8: not seen, so not known)."""
    if not u.get("dss2mode"):
        return
    for field, name in (("fstat", "feature-stationary"), ("deepmode", "deep 1x1")):
        if u.get(field):
            raise StImportError(f"CONVACC{u.index}: depthwise stride-2 mode with {name} mode")
    if (u.get("simd") or 1) != 1:
        raise StImportError(f"CONVACC{u.index}: depthwise stride-2 mode with SIMD {u.get('simd')}: npusim knows "
                            "the mode on byte features (SIMD 8x8) only")


def features_per_element(u, bits: int) -> int:
    """Features one `bits`-wide feature-stream element carries to the unit (1 outside the mode, and while the
    stream's width is not known yet: `bits` 0)."""
    if not u.get("dss2mode") or not bits:
        return 1
    if bits % FEATURE_BITS:
        raise StImportError(f"CONVACC{u.index}: depthwise stride-2 mode on {bits}-bit stream elements")
    return bits // FEATURE_BITS


def unpack(patterns: np.ndarray, bits: int, u) -> tuple[np.ndarray, int]:
    """(the features' bit patterns, low ones first, and their width) of `bits`-wide stream elements."""
    per = features_per_element(u, bits)
    if per == 1:
        return patterns, bits
    width = FEATURE_BITS
    shifts = np.arange(per, dtype=np.int64) * width
    parts = (patterns.astype(np.int64)[:, None] >> shifts[None, :]) & ((1 << width) - 1)
    return parts.reshape(-1).astype(np.uint8), width  # byte features in the stream's own 8-bit pattern type


def take_features(port, n: int, u, who: str) -> tuple[np.ndarray, int]:
    """(`n` features' bit patterns, their width) from the unit's feature port (an `execute.Port`): in the
    mode, `n / per` stream elements unpacked; otherwise `n` elements as they are."""
    if not u.get("dss2mode"):
        patterns = port.take(n, who)
        return patterns, port.bits
    while not port.bits:  # the stream's width comes with its first frame
        if port.source is None:
            raise StImportError(f"{who}: no source")
        port.source.produce()
    per = features_per_element(u, port.bits)
    if n % per:
        raise StImportError(f"CONVACC{u.index}: a frame of {n} features is not whole {port.bits}-bit stream "
                            f"elements of {per} features")
    return unpack(port.take(n // per, who), port.bits, u)
