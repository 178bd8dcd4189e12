"""CONVACC's depthwise stride-2 mode (CTRL.DSS2MODE): how the unit reads its feature stream in it.

In this mode ST's compiler feeds the unit stream elements wider than its features (16-bit elements with
`inbytes_f` 1) and the runtime moves all padding to the zero frame. The unit takes each element as
`bits / (8 * inbytes_f)` features of `inbytes_f` bytes, the low ones first: the bytes in memory order, so
a channels-last map read as 16-bit elements gives the channels in order. Measured, not documented
(docs/stedgeai.md, "Values": every such layer of four public compiles within 1 step of TFLite alone; high
bytes first, or one feature per element, do not fit).
"""

from __future__ import annotations

import numpy as np

from ...errors import StImportError


def features_per_element(u, bits: int) -> int:
    """Features one `bits`-wide feature-stream element carries to the unit (1 outside the mode)."""
    nbytes = max(u.get("inbytes_f") or 1, 1)
    if not u.get("dss2mode") or bits <= 8 * nbytes:
        return 1
    if bits % (8 * nbytes):
        raise StImportError(f"CONVACC{u.index}: depthwise stride-2 mode on {bits}-bit stream elements of "
                            f"{nbytes}-byte features")
    return bits // (8 * nbytes)


def unpack(patterns: np.ndarray, bits: int, u) -> tuple[np.ndarray, int]:
    """(the features' bit patterns, low ones first, and their width) of `bits`-wide stream elements."""
    per = features_per_element(u, bits)
    if per == 1:
        return patterns, bits
    width = bits // per
    shifts = np.arange(per, dtype=np.int64) * width
    parts = (patterns.astype(np.int64)[:, None] >> shifts[None, :]) & ((1 << width) - 1)
    return parts.reshape(-1), width


def take_features(port, n: int, u, who: str) -> tuple[np.ndarray, int]:
    """(`n` features' bit patterns, their width) from the unit's feature port (an `execute.Port`): in the
    mode, `n / per` stream elements unpacked; otherwise `n` elements as they are."""
    while not port.bits:  # the stream's width comes with its first frame
        if port.source is None:
            raise StImportError(f"{who}: no source")
        port.source.produce()
    per = features_per_element(u, port.bits)
    if n % per:
        raise StImportError(f"CONVACC{u.index}: a frame of {n} features is not whole {port.bits}-bit stream "
                            f"elements of {per} features")
    return unpack(port.take(n // per, who), port.bits, u)
