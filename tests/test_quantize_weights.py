"""`quantize.quantize_weights` reads a transposed kernel as a view (the conv recipe no longer copies ResNet-50's
100 MB of float weights to OHWI first): the same int8 bytes and scales as from a contiguous copy."""

import numpy as np
import pytest

from npusim.compiler.quantize import quantize_weights


@pytest.mark.parametrize("shape", [(8, 3, 3, 3), (64, 256, 1, 1), (3, 5000, 3, 3), (1, 1, 1, 1)])  # (3, 5000, 3, 3): one row per block)
@pytest.mark.parametrize("own_scale", [False, True])
def test_a_view_quantises_as_its_contiguous_copy(shape, own_scale):
    w = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    w[0] = 0  # an all-zero channel keeps scale 1
    view = w.transpose(0, 2, 3, 1)
    scale = np.linspace(0.01, 0.02, shape[0]) if own_scale else None
    q, s = quantize_weights(view, scale)
    q0, s0 = quantize_weights(np.ascontiguousarray(view), scale)
    assert q.flags.c_contiguous and q.shape == view.shape and q.dtype == np.int8
    assert q.tobytes() == q0.tobytes() and np.array_equal(s, s0)
    # independent of the blocking: per channel, round half to even of w / scale
    want = np.clip(np.rint(view.astype(np.float64) / s[:, None, None, None]), -128 if own_scale else -127, 127)
    assert np.array_equal(q, want.astype(np.int8))
