"""Chain fusions (`--fuse`): conv -> pool and conv -> add run in one epoch, bit-identical to the
unfused program, and the tensor inside the chain no longer takes memory."""

import numpy as np
import pytest

import npusim
from npusim.compiler import CompileOptions, compile
from npusim.compiler.options import FUSIONS
from npusim.zoo import Builder, st

WITHOUT_POOL = ",".join(f for f in FUSIONS if f != "conv-pool")
TIMING = npusim.RunOptions(timing_only=True, trace=False)


def _epochs(prog):
    """[[unit ops of one epoch]] of a program."""
    out, cur = [], None
    for c in prog.commands:
        if c.op == "EPOCH":
            cur = []
        elif c.op == "RUN":
            out.append(cur)
            cur = None
        elif cur is not None and c.op not in ("SE", "LINK"):
            cur.append(c.op)
    return out


def _conv_pool(cin, cout, size, act, pool, **attrs):
    b = Builder(3)
    y = b.cbr("input", cin, cout, act=act)
    if pool == "GlobalAveragePool":
        y = b.node(pool, [y])
    else:
        y = b.node(pool, [y], **attrs)
    y = b.conv(y, cout, 8, k=1)  # a consumer after the pool, so the pooled map is not the graph output
    return b.model([1, cin, size, size], [y])


def _same_values(m, quantization="int8"):
    fused = compile(m, CompileOptions(quantization=quantization))
    plain = compile(m, CompileOptions(quantization=quantization, fuse=WITHOUT_POOL))
    a = npusim.run(fused, random_inputs=True, seed=5)
    b = npusim.run(plain, random_inputs=True, seed=5)
    assert a.status == b.status == "ok", (a.faults[:1], b.faults[:1])
    for k in b.raw_outputs:
        np.testing.assert_array_equal(a.raw_outputs[k], b.raw_outputs[k])
    return fused, plain


CASES = [  # (cin, cout, size, act, pool, attrs): one CA and split over CAs, every pool mode and window
    (16, 16, 20, "Relu", "MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
    (16, 64, 20, "LeakyRelu", "MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    (3, 48, 17, "Relu6", "MaxPool", dict(kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1])),
    (16, 36, 15, None, "AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    (16, 32, 12, "Relu", "AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                                             count_include_pad=1)),
    (3, 4, 16, "Relu", "MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),  # image-layout conv output
    (16, 80, 7, "Relu", "GlobalAveragePool", {}),  # 1 x 1 linear output, split over CAs
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[4]}")
def test_conv_pool_runs_in_one_epoch_with_the_unfused_values(case):
    cin, cout, size, act, pool, attrs = case
    fused, plain = _same_values(_conv_pool(cin, cout, size, act, pool, **attrs))
    first = _epochs(fused)[0]
    assert "CONV" in first and "POOL" in first
    assert len(_epochs(fused)) == len(_epochs(plain)) - 1
    assert first.count("POOL") == first.count("CONV")  # one pooling unit per CA slice
    conv_out = {b.name for b in plain.buffers} - {b.name for b in fused.buffers}
    assert conv_out  # the full-resolution conv output has no buffer any more


def test_conv_pool_fp16_values_match_too():
    _same_values(_conv_pool(16, 32, 12, "Relu", "MaxPool", kernel_shape=[2, 2], strides=[2, 2]), "fp16")


def test_conv_pool_is_not_fused_when_the_conv_output_has_another_reader():
    b = Builder(1)
    y = b.cbr("input", 16, 32)
    p = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    z = b.node("Relu", [y])  # a second consumer of the conv output
    m = b.model([1, 16, 12, 12], [p, z])
    assert all(not ("CONV" in e and "POOL" in e) for e in _epochs(compile(m)))
    b = Builder(1)
    y = b.cbr("input", 16, 32)
    m = b.model([1, 16, 12, 12], [y, b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])])
    assert all(not ("CONV" in e and "POOL" in e) for e in _epochs(compile(m)))  # conv output is a graph output


def test_conv_pool_is_a_fuse_name_of_its_own():
    b = Builder(4)
    y = b.node("Relu", [b.node("MaxPool", [b.conv("input", 16, 16)], kernel_shape=[2, 2], strides=[2, 2])])
    m = b.model([1, 16, 12, 12], [y])
    units = lambda prog: [sorted(set(e)) for e in _epochs(prog)]  # a conv alone may run on 4 CAs (row bands)
    assert units(compile(m, CompileOptions(fuse="conv-pool"))) == [["CONV", "POOL"], ["ACT"]]
    assert units(compile(m, CompileOptions(fuse="conv-act"))) == [["CONV"], ["POOL"], ["ACT"]]
    assert "conv-pool" in CompileOptions(fuse="all").fusions()


def test_conv_add_residual_runs_in_the_conv_epoch():
    b = Builder(2)
    x = b.cbr("input", 16, 32, k=1)
    y = b.bn(b.conv(b.cbr(x, 32, 32), 32, 32, bias=False), 32)
    out = b.node("Relu", [b.node("Add", [y, x])])
    m = b.model([1, 16, 10, 10], [out])
    fused = compile(m)
    assert any(e[:1] == ["CONV"] and "ARITH" in e and "ACT" not in e for e in _epochs(fused))  # ReLU: add's clamp
    plain = compile(m, CompileOptions(fuse=",".join(f for f in FUSIONS if f != "conv-add")))
    a = npusim.run(fused, random_inputs=True, seed=5)
    b2 = npusim.run(plain, random_inputs=True, seed=5)
    np.testing.assert_array_equal(a.raw_outputs[out], b2.raw_outputs[out])
    assert len(_epochs(plain)) == len(_epochs(fused)) + 1  # the add (and its ReLU) ran as an epoch of its own


@pytest.mark.slow
def test_tiny_yolo_v2_416_keeps_its_first_conv_output_out_of_hyperram():
    m = st.tiny_yolo_v2(size=416)
    fused = compile(m)
    plain = compile(m, CompileOptions(fuse=WITHOUT_POOL))

    def activations(p):
        return {b.pool for b in p.buffers if b.kind != "weight"}, sum(b.size for b in p.buffers if b.kind != "weight")

    pools_plain, bytes_plain = activations(plain)
    pools_fused, bytes_fused = activations(fused)
    assert "hyperRAM" in pools_plain  # 416 x 416 x 16 int8 = 2.77 MB does not fit the 1.75 MiB npuRAM
    assert "hyperRAM" not in pools_fused and bytes_fused < bytes_plain - 2_000_000
    r = npusim.run(fused, random_inputs=True, options=TIMING)
    assert r.status == "ok" and "hyperRAM" not in r.stats.pools
