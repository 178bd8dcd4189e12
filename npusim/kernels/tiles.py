"""Bands of rows: kernels work on a tensor a band of rows at a time, so their wide temporaries
(int64 sums, float32 products, im2col patches) never exceed a stated budget whatever the tensor."""

from __future__ import annotations

BAND_BYTES = 32 << 20  # temporaries of one band, at most (at least one row)


def row_bands(rows: int, bytes_per_row: int, budget: int = BAND_BYTES) -> list[tuple[int, int]]:
    """[(r0, r1)] covering rows [0, rows), each band's rows x bytes_per_row within `budget`."""
    step = max(1, budget // max(1, int(bytes_per_row)))
    return [(r, min(rows, r + step)) for r in range(0, rows, step)]
