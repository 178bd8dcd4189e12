"""Single-operator models of a TFLite model: what `bisect` compiles alone for a .tflite input.

`single_op_models(data)` cuts every compute operator (`ALONE`, the TFLite builtins of
`variants.ALONE_OPS`) out of the flatbuffer with its real tensors: its computed inputs become the
sub-model's inputs and its constant inputs (filters, biases, operands) keep their data, every tensor
keeping its type, shape and quantization; the operator keeps its builtin options (read from the
flatbuffer by reflection, written back with the zoo's `TFLiteWriter`). Each is named after its first
output tensor, as the TFLite front end names the layer, so a finding matches the whole model's layer.
TFLite variants are not generated: a faulting operator is not shrunk.
"""

from __future__ import annotations

from dataclasses import dataclass

ALONE = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "AVERAGE_POOL_2D",
                   "MAX_POOL_2D", "MEAN", "ADD", "SUB", "MUL", "CONCATENATION", "RESIZE_BILINEAR",
                   "RESIZE_NEAREST_NEIGHBOR", "RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU", "LOGISTIC", "TANH",
                   "HARD_SWISH", "SOFTMAX"})
_DTYPES = {"fp32": "float32", "int32": "int32", "uint8": "uint8", "int64": "int64", "int16": "int16", "int8": "int8"}


@dataclass(frozen=True)
class TFLiteOp:
    """An operator of a TFLite model, as bisect names it."""

    name: str  # its first output tensor's name (the layer's name in the compiled program)
    op_type: str  # the builtin's name, e.g. CONV_2D
    index: int  # its index in the subgraph
    shape: str  # its first computed input's shape (NHWC), e.g. "1x52x52x16"


def _options_types(data: bytes) -> list[str]:
    """The builtin options table name of every operator of the (one) subgraph ("" for none)."""
    from tflite.BuiltinOptions import BuiltinOptions
    from tflite.Model import Model

    names = {v: k for k, v in vars(BuiltinOptions).items() if not k.startswith("_") and isinstance(v, int)}
    graph = Model.GetRootAs(data, 0).Subgraphs(0)
    return [names.get(int(graph.Operators(i).BuiltinOptionsType()), "") if graph.Operators(i).BuiltinOptionsType()
            else "" for i in range(graph.OperatorsLength())]


def _writable_fields(table: str, options: dict) -> dict:
    """The options the schema lets a writer set (`<Table>Add<Field>`), by their snake_case names."""
    import importlib

    from ..zoo.tflite_writer import _camel

    mod = importlib.import_module(f"tflite.{table}")
    return {k: v for k, v in options.items() if hasattr(mod, f"{table}Add{_camel(k)}")}


def single_op_models(data: bytes, where: str = "model") -> list[tuple[TFLiteOp, bytes]]:
    """[(TFLiteOp, .tflite bytes)] for every compute operator of `data` (module doc)."""
    from ..compiler.frontends.tflite_lowering import _unique
    from ..compiler.frontends.tflite_reader import read_tflite
    from ..zoo.tflite_writer import TFLiteWriter

    m = read_tflite(data, where)
    tables = _options_types(bytes(data))
    taken: set[str] = set()
    out = []
    for op in m.ops:
        base = m.tensors[op.outputs[0]].name if op.outputs else f"{op.opcode.lower()}_{op.index}"
        name = _unique(base, taken)  # as the front end names the layer (tflite_lowering.Lowering.node_name)
        if op.opcode not in ALONE or not op.outputs:
            continue
        tensors = [m.tensors[i] for i in op.inputs if i >= 0] + [m.tensors[i] for i in op.outputs]
        if any(t.dtype not in _DTYPES for t in tensors):
            continue
        w = TFLiteWriter(f"npusim bisect: operator {op.index} of {where}")
        index: dict[int, int] = {}

        def add(i: int) -> int:
            if i not in index:
                t = m.tensors[i]
                index[i] = w.tensor(t.name, t.shape, _DTYPES[t.dtype], data=t.data,
                                    scale=t.scale if t.quantized else None,
                                    zero_point=t.zero_point if t.quantized else None, axis=t.axis)
            return index[i]

        ins = [add(i) if i >= 0 else -1 for i in op.inputs]
        outs = [add(i) for i in op.outputs]
        computed = [index[i] for i in op.inputs if i >= 0 and m.tensors[i].data is None]
        table = tables[op.index]
        w.op(op.opcode, ins, outs, table or None, op.custom, **(_writable_fields(table, op.options) if table else {}))
        first = next((m.tensors[i] for i in op.inputs if i >= 0 and m.tensors[i].data is None), m.tensors[op.outputs[0]])
        out.append((TFLiteOp(name, op.opcode, op.index, "x".join(map(str, first.shape))),
                    w.finish(list(dict.fromkeys(computed)), outs)))
    return out
