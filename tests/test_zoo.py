"""Zoo builders give valid ONNX models of the promised shapes; the five architectures compile with
default options and pass validation in int8 and fp16; ResNet-50 compiles and runs (slow)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.hw import load_profile
from npusim.program.blob import encode_blob
from npusim.reference import ort_run, validate

PROFILE = load_profile()

ARCHS = {"resnet_style": {}, "mobilenet_style": {}, "squeezenet_style": {}, "unet_style": {},
         "yolo_style": {"size": 416}}


def _input(m, seed=0):
    shape = tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)
    return {"input": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _ops(m):
    return {n.op_type for n in m.graph.node}


def test_builders_are_valid_and_seeded():
    for name, kw in ARCHS.items():
        m = getattr(zoo, name)(**kw)
        onnx.checker.check_model(m)
        assert m.opset_import[0].version == 17
    a, b = zoo.resnet_style(seed=1), zoo.resnet_style(seed=1)
    assert a.SerializeToString() == b.SerializeToString()
    assert zoo.resnet_style(seed=2).SerializeToString() != a.SerializeToString()


def test_architecture_features():
    assert "Add" in _ops(zoo.resnet_style())
    mb = zoo.mobilenet_style()
    assert any(n.op_type == "Conv" and any(a.name == "group" and a.i > 1 for a in n.attribute) for n in mb.graph.node)
    assert "Concat" in _ops(zoo.squeezenet_style())
    y = zoo.yolo_style()
    assert {"Resize", "Concat", "Sigmoid"} <= _ops(y) and len(y.graph.output) == 2
    assert y.graph.input[0].type.tensor_type.shape.dim[2].dim_value == 416
    u = zoo.unet_style()
    widths = [i.dims[0] for i in u.graph.initializer if len(i.dims) == 4]
    assert max(widths) >= 512 and {"Resize", "Concat"} <= _ops(u)


def test_conv_model_shapes():
    m = zoo.conv_model(16, 32, 20, 24, k=3, stride=2)
    out = ort_run(m, {"input": np.zeros((1, 16, 20, 24), np.float32)})
    assert next(iter(out.values())).shape == (1, 32, 10, 12)


def test_resnet50_topology(zoo_file):
    m = onnx.load(zoo_file("resnet50"))  # zoo.resnet50(), built once per run
    params = sum(int(np.prod(i.dims)) for i in m.graph.initializer)
    assert 24e6 < params < 27e6
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    assert len(convs) == 53  # stem + 16 bottlenecks x 3 + 4 projections


@pytest.mark.parametrize("q", ["int8", "fp16"])
@pytest.mark.parametrize("name", list(ARCHS))
def test_architectures_validate(name, q):
    m = getattr(zoo, name)(**ARCHS[name])
    blob = encode_blob(compile(m, CompileOptions(quantization=q)), PROFILE)  # as the CLI does
    rep = validate(blob, m, _input(m))
    assert rep.run_result.status == "ok", rep.run_result.report_text()
    assert rep.passed, rep.text()


@pytest.mark.slow
def test_resnet50_compiles_and_runs(zoo_file):
    m = onnx.load(zoo_file("resnet50"))
    for q in ("int8", "fp16"):
        rep = validate(compile(m, CompileOptions(quantization=q)), m, _input(m))
        assert rep.run_result.status == "ok", rep.run_result.report_text()
        assert rep.passed, rep.text()
