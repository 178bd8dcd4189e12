"""The zoo's float ONNX models, quantized and written as int8 TFLite (a small PTQ exporter for tests).

`to_tflite(model)` is shaped like TFLite's converter with full-integer quantization and a
representative dataset of seeded standard-normal inputs: it calibrates every tensor with ONNX
Runtime (min/max), folds BatchNormalization into convolutions, fuses Relu/Relu6 into the op before
them, quantizes weights per output channel (symmetric int8, scale = max|w| / 127), biases to int32
(scale = input x weight scale) and activations per tensor (asymmetric int8), keeps the input's scale
where TFLite's kernels require it (pooling, reshapes, resize, data movement; CONCATENATION takes one
scale, a differing input gets a QUANTIZE) and TFLite's fixed output scales (LOGISTIC and SOFTMAX
1/256 with zero point -128, TANH 1/128), and writes NHWC (ONNX axes remapped; a flatten into a fully
connected layer keeps NHWC order and permutes the weight columns, as converters do). It is not a
general converter: another operator raises ValueError naming it.

`io` picks the model's inputs/outputs: "int8" (the default), "uint8" (QUANTIZE to/from int8 at the
boundary, as the converter does for uint8 I/O) or "float" (QUANTIZE/DEQUANTIZE at the boundary).
`quantize=False` writes the float32 model instead (which npusim refuses: it takes int8 models).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .tflite_writer import TFLiteWriter

__all__ = ["TFLiteModel", "to_tflite"]


class TFLiteModel(bytes):
    """The bytes of a .tflite flatbuffer (`npusim zoo NAME -o FILE.tflite` writes them)."""

    suffix = ".tflite"


def _perm(rank: int) -> tuple[int, ...]:
    """ONNX axis i of a rank-4 NCHW tensor is TFLite axis _perm(4)[i] of its NHWC form."""
    return (0, 3, 1, 2) if rank == 4 else (0, 2, 1) if rank == 3 else tuple(range(rank))


def _nhwc(shape) -> list[int]:
    p = _perm(len(shape))
    out = [0] * len(shape)
    for i, d in enumerate(shape):
        out[p[i]] = int(d)
    return out


def _calibrate(model: onnx.ModelProto, samples: int, seed: int) -> tuple[dict, dict]:
    """({tensor: (min, max)}, {tensor: shape}) over seeded standard-normal inputs (ONNX Runtime)."""
    m = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for vi in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        if vi.type.tensor_type.HasField("shape"):
            shapes[vi.name] = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
    have = {o.name for o in m.graph.output}
    for vi in m.graph.value_info:
        if vi.name not in have:
            m.graph.output.append(helper.make_tensor_value_info(vi.name, onnx.TensorProto.FLOAT, None))
    from ..ort_session import session

    sess = session(m, threads=2, optimize=False)
    rng = np.random.default_rng(seed)
    names = [o.name for o in sess.get_outputs()]
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    inits = {i.name for i in m.graph.initializer}
    ins = [i for i in m.graph.input if i.name not in inits]
    for _ in range(samples):
        feeds = {i.name: rng.standard_normal(shapes[i.name]).astype(np.float32) for i in ins}
        vals = dict(zip(names, sess.run(names, feeds)))
        vals.update(feeds)
        for k, v in vals.items():
            v = np.asarray(v)
            if v.dtype.kind == "f" and v.size:
                lo[k] = min(lo.get(k, np.inf), float(v.min()))
                hi[k] = max(hi.get(k, -np.inf), float(v.max()))
    return {k: (lo[k], hi[k]) for k in lo}, shapes


def _act_q(lo: float, hi: float) -> tuple[float, int]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = float(np.float32(max(hi - lo, 1e-6) / 255.0))
    zp = int(np.clip(np.round(-128 - lo / scale), -128, 127))
    return scale, zp


class _Exporter:
    def __init__(self, model: onnx.ModelProto, samples: int, seed: int, quantize: bool, io: str):
        if io not in ("int8", "uint8", "float"):
            raise ValueError(f"io={io!r}: expected int8, uint8 or float")
        self.m = onnx.shape_inference.infer_shapes(model)
        self.quant, self.io = quantize, io
        self.ranges, self.shapes = _calibrate(model, samples, seed) if quantize else ({}, None)
        if self.shapes is None:
            self.shapes = {}
            for vi in list(self.m.graph.input) + list(self.m.graph.value_info) + list(self.m.graph.output):
                self.shapes[vi.name] = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        self.consts = {i.name: numpy_helper.to_array(i) for i in self.m.graph.initializer}
        self.nodes = list(self.m.graph.node)
        self.w = TFLiteWriter("npusim.zoo.tflite")
        self.t: dict[str, int] = {}  # ONNX tensor -> TFLite tensor index
        self.q: dict[str, tuple[float, int]] = {}  # ONNX tensor -> (scale, zp) of its TFLite tensor
        self.skip: set[str] = set()
        self.alias: dict[str, str] = {}
        self.nhwc_flat: dict[str, tuple] = {}  # flattened tensor -> NCHW shape it came from (NHWC order)

    # ------------------------------------------------------------ helpers

    def consumers(self, t: str):
        return [n for n in self.nodes if t in n.input]

    def attrs(self, n) -> dict:
        return {a.name: helper.get_attribute_value(a) for a in n.attribute}

    def const(self, name: str):
        if name in self.consts:
            return self.consts[name]
        prod = next((n for n in self.nodes if name in n.output), None)
        if prod is not None and prod.op_type == "Constant":
            return numpy_helper.to_array(self.attrs(prod)["value"])
        return None

    def qparams(self, t: str) -> tuple[float, int]:
        if t not in self.q:
            self.q[t] = _act_q(*self.ranges[t])
        return self.q[t]

    def act(self, t: str, shape=None, q=None, name=None) -> int:
        """The TFLite tensor of ONNX activation t (created with qparams q or its calibrated ones)."""
        t = self.alias.get(t, t)
        if t in self.t:
            return self.t[t]
        shape = self.shapes[t] if shape is None else shape
        if self.quant:
            if q is not None:
                self.q[t] = q
            s, z = self.qparams(t)
            self.t[t] = self.w.tensor(name or t, _nhwc(shape), "int8", scale=s, zero_point=z)
        else:
            self.t[t] = self.w.tensor(name or t, _nhwc(shape), "float32")
        return self.t[t]

    def same_q(self, out: str, src: str) -> None:
        if self.quant:
            self.q[out] = self.qparams(self.alias.get(src, src))

    def fused(self, out: str) -> tuple[str, str]:
        """(final tensor, fused activation) when the only consumer of `out` is a Relu or Clip(0, 6)."""
        cons = self.consumers(out)
        outputs = {o.name for o in self.m.graph.output}
        if len(cons) == 1 and out not in outputs:
            c = cons[0]
            if c.op_type == "Relu":
                self.skip.add(c.name)
                return c.output[0], "RELU"
            if c.op_type == "Clip":
                lo = self.const(c.input[1]) if len(c.input) > 1 and c.input[1] else None
                hi = self.const(c.input[2]) if len(c.input) > 2 and c.input[2] else None
                if lo is not None and hi is not None and float(lo) == 0.0 and float(hi) == 6.0:
                    self.skip.add(c.name)
                    return c.output[0], "RELU6"
        return out, "NONE"

    def weights(self, w: np.ndarray, name: str, axis: int = 0) -> tuple[int, np.ndarray]:
        """(tensor, per-channel scales): symmetric int8 per slice of `axis`."""
        if not self.quant:
            return self.w.tensor(name, w.shape, "float32", data=w.astype(np.float32)), None
        red = tuple(i for i in range(w.ndim) if i != axis)
        amax = np.abs(w).max(axis=red)
        s = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.round(w / s.reshape(shape)), -127, 127).astype(np.int8)
        return self.w.tensor(name, w.shape, "int8", data=q, scale=s, zero_point=np.zeros(s.size, np.int64),
                             axis=axis), s

    def bias(self, b: np.ndarray, name: str, s_in: float, s_w: np.ndarray) -> int:
        if not self.quant:
            return self.w.tensor(name, b.shape, "float32", data=b.astype(np.float32))
        bs = (np.float32(s_in) * s_w.astype(np.float32)).astype(np.float32)
        bq = np.clip(np.round(b.astype(np.float64) / bs), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
        return self.w.tensor(name, b.shape, "int32", data=bq, scale=bs, zero_point=np.zeros(bs.size, np.int64))

    def const_act(self, v: np.ndarray, name: str, rank: int) -> int:
        """A constant operand of an elementwise op, broadcast to `rank` axes, NHWC, quantized per tensor."""
        v = np.asarray(v, np.float32).reshape((1,) * (rank - np.ndim(v)) + np.shape(v))
        v = v.transpose([_perm(rank).index(j) for j in range(rank)]) if rank in (3, 4) else v
        if not self.quant:
            return self.w.tensor(name, v.shape, "float32", data=v)
        s, z = _act_q(float(v.min()), float(v.max()))
        q = np.clip(np.round(v / s) + z, -128, 127).astype(np.int8)
        return self.w.tensor(name, v.shape, "int8", data=q, scale=s, zero_point=z)

    def i32(self, values, name: str) -> int:
        a = np.asarray(values, np.int32)
        return self.w.tensor(name, a.shape, "int32", data=a)

    # ------------------------------------------------------------ operators

    def conv(self, n, bn=None):
        a = self.attrs(n)
        x = n.input[0]
        w = self.consts[n.input[1]].astype(np.float64)
        b = self.consts[n.input[2]].astype(np.float64) if len(n.input) > 2 and n.input[2] else np.zeros(w.shape[0])
        out = n.output[0]
        cons = self.consumers(out)
        if len(cons) == 1 and cons[0].op_type == "BatchNormalization":
            g, beta, mean, var = (self.consts[i].astype(np.float64) for i in cons[0].input[1:5])
            k = g / np.sqrt(var + self.attrs(cons[0]).get("epsilon", 1e-5))
            w, b = w * k.reshape(-1, 1, 1, 1), b * k + beta - mean * k
            self.skip.add(cons[0].name)
            out = cons[0].output[0]
        out, act = self.fused(out)
        oc, icg, kh, kw = w.shape
        ic = self.shapes[x][1]
        group = int(a.get("group", 1))
        s, d = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
        xi = self.pad_for(n, x, a.get("pads", [0, 0, 0, 0]), kh, kw, s, d)
        padding = "VALID" if xi[1] else "SAME"
        xi = xi[0]
        s_in = self.qparams(x)[0] if self.quant else 1.0
        if group == 1:
            wt, sw = self.weights(w.transpose(0, 2, 3, 1), n.name + "/filter", 0)
            opname, opts = "CONV_2D", "Conv2DOptions"
            extra = {}
        elif group == ic and icg == 1:
            wt, sw = self.weights(w.reshape(oc, kh, kw).transpose(1, 2, 0)[None], n.name + "/filter", 3)
            opname, opts = "DEPTHWISE_CONV_2D", "DepthwiseConv2DOptions"
            extra = {"depth_multiplier": oc // ic}
        else:
            raise ValueError(f"to_tflite: Conv {n.name!r} with group={group} (TFLite has dense and depthwise convs)")
        bt = self.bias(b, n.name + "/bias", s_in, sw if sw is not None else np.ones(oc))
        y = self.act(out)
        self.w.op(opname, [xi, wt, bt], [y], opts, padding=padding, stride_w=int(s[1]), stride_h=int(s[0]),
                  dilation_w_factor=int(d[1]), dilation_h_factor=int(d[0]), fused_activation_function=act, **extra)

    def pad_for(self, n, x, pads, kh, kw, s, d):
        """(input tensor, valid?): TFLite pads SAME (extra cell at the end) or VALID; other ONNX pads get a PAD."""
        xi = self.act(x)
        if not any(pads):
            return xi, True
        h, w = self.shapes[x][2], self.shapes[x][3]
        same = []
        for size, k, st, dd in ((h, kh, s[0], d[0]), (w, kw, s[1], d[1])):
            o = -(-size // st)
            total = max((o - 1) * st + (k - 1) * dd + 1 - size, 0)
            same.append((total // 2, total - total // 2))
        if [same[0][0], same[1][0], same[0][1], same[1][1]] == list(pads):
            return xi, False
        shape = (1, self.shapes[x][1], h + pads[0] + pads[2], w + pads[1] + pads[3])
        padded = n.name + "/padded"
        self.shapes[padded] = shape
        self.same_q(padded, x)
        p = self.i32([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], n.name + "/paddings")
        yi = self.act(padded)
        self.w.op("PAD", [xi, p], [yi])
        return yi, True

    def gemm(self, n):
        a = self.attrs(n)
        x = n.input[0]
        B = self.consts[n.input[1]].astype(np.float64)
        wfc = (B if a.get("transB", 0) else B.T) * a.get("alpha", 1.0) if n.op_type == "Gemm" else B.T
        b = self.consts[n.input[2]].astype(np.float64) if len(n.input) > 2 and n.input[2] else np.zeros(wfc.shape[0])
        out, act = self.fused(n.output[0])
        if x in self.nhwc_flat:  # the flatten kept TFLite's NHWC order: the weight columns follow it
            _, c, h, w_ = self.nhwc_flat[x]
            wfc = wfc[:, np.arange(c * h * w_).reshape(c, h, w_).transpose(1, 2, 0).reshape(-1)]
        wt, sw = self.weights(wfc, n.name + "/weights", 0)
        bt = self.bias(b, n.name + "/bias", self.qparams(x)[0] if self.quant else 1.0,
                       sw if sw is not None else np.ones(wfc.shape[0]))
        self.w.op("FULLY_CONNECTED", [self.act(x), wt, bt], [self.act(out)], "FullyConnectedOptions",
                  fused_activation_function=act)

    def eltwise(self, n):
        kind = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL"}[n.op_type]
        out, act = self.fused(n.output[0])
        rank = len(self.shapes[out])
        ins = []
        for i, t in enumerate(n.input):
            c = self.const(t)
            ins.append(self.const_act(c, f"{n.name}/const{i}", rank) if c is not None else self.act(t))
        self.w.op(kind, ins, [self.act(out)], f"{kind.capitalize()}Options", fused_activation_function=act)

    def pool(self, n):
        a = self.attrs(n)
        x = n.input[0]
        if n.op_type == "GlobalAveragePool":
            return self.mean(n, [2, 3], keep=True)
        k, s = a["kernel_shape"], a.get("strides", [1, 1])
        xi, valid = self.pad_for(n, x, a.get("pads", [0, 0, 0, 0]), k[0], k[1], s, [1, 1])
        if n.op_type == "MaxPool" or n.op_type == "AveragePool":
            self.same_q(n.output[0], x)
        out, act = self.fused(n.output[0])
        self.same_q(out, x)
        kind = "MAX_POOL_2D" if n.op_type == "MaxPool" else "AVERAGE_POOL_2D"
        self.w.op(kind, [xi], [self.act(out)], "Pool2DOptions", padding="VALID" if valid else "SAME",
                  stride_w=int(s[1]), stride_h=int(s[0]), filter_width=int(k[1]), filter_height=int(k[0]),
                  fused_activation_function=act)

    def mean(self, n, axes, keep: bool):
        x = n.input[0]
        rank = len(self.shapes[x])
        tfl = sorted(_perm(rank)[int(a) % rank] for a in axes)
        self.w.op("MEAN", [self.act(x), self.i32(tfl, n.name + "/axes")], [self.act(n.output[0])], "ReducerOptions",
                  keep_dims=bool(keep))

    def reshape(self, n):
        x, out = n.input[0], n.output[0]
        self.same_q(out, x)
        xs, os_ = self.shapes[x], self.shapes[out]
        xi = self.act(x)
        cons = self.consumers(out)
        if len(xs) == 4 and xs[1] > 1 and xs[2] * xs[3] > 1 and cons and \
                all(c.op_type in ("Gemm", "MatMul") and c.input[0] == out for c in cons):
            self.nhwc_flat[out] = tuple(xs)  # a flatten into fully connected layers: NHWC order, weights permuted
        elif len(xs) == 4 and xs[1] > 1 and xs[2] * xs[3] > 1:  # keep ONNX's (c, h, w) order: NCHW first
            t = n.name + "/nchw"
            self.shapes[t] = (xs[0], xs[3], xs[1], xs[2])  # so that _nhwc gives the NCHW shape [N, C, H, W]
            self.same_q(t, x)
            ti = self.act(t)
            self.w.op("TRANSPOSE", [xi, self.i32([0, 3, 1, 2], n.name + "/perm")], [ti])
            xi = ti
        shape = list(os_) if len(os_) != 4 else _nhwc(os_)
        self.w.op("RESHAPE", [xi, self.i32(shape, n.name + "/shape")], [self.act(out)], "ReshapeOptions",
                  new_shape=shape)

    def unary(self, n):
        x, out = n.input[0], n.output[0]
        kind = {"Relu": "RELU", "Sigmoid": "LOGISTIC", "HardSwish": "HARD_SWISH", "Tanh": "TANH",
                "LeakyRelu": "LEAKY_RELU", "Clip": "RELU6"}[n.op_type]
        q = None
        if kind == "LOGISTIC":
            q = (1 / 256, -128)
        elif kind == "TANH":
            q = (1 / 128, 0)
        elif kind in ("RELU", "RELU6"):
            q = None
        if kind == "RELU6":
            lo, hi = self.const(n.input[1]), self.const(n.input[2])
            if float(lo) != 0.0 or float(hi) != 6.0:
                raise ValueError(f"to_tflite: Clip {n.name!r} is not Relu6")
        yi = self.act(out, q=q if self.quant else None)
        if kind == "LEAKY_RELU":
            self.w.op(kind, [self.act(x)], [yi], "LeakyReluOptions", alpha=float(self.attrs(n).get("alpha", 0.01)))
        else:
            self.w.op(kind, [self.act(x)], [yi])

    def softmax(self, n):
        yi = self.act(n.output[0], q=(1 / 256, -128) if self.quant else None)
        self.w.op("SOFTMAX", [self.act(n.input[0])], [yi], "SoftmaxOptions", beta=1.0)

    def concat(self, n):
        """TFLite's int8 CONCATENATION takes one scale for all inputs and the output: the common range of
        them all; an input already quantized otherwise is requantized first (QUANTIZE int8 -> int8)."""
        rank = len(self.shapes[n.output[0]])
        axis = _perm(rank)[int(self.attrs(n)["axis"]) % rank]
        out, act = self.fused(n.output[0])
        ins = [self.act(t) for t in n.input]
        if self.quant:
            spans = [self.ranges[t] for t in list(n.input) + [out] if t in self.ranges]
            common = _act_q(min(r[0] for r in spans), max(r[1] for r in spans))
            self.q[out] = common
            for k, t in enumerate(n.input):
                if self.qparams(self.alias.get(t, t)) != common:
                    r = f"{n.name}/requantized{k}"
                    self.shapes[r] = self.shapes[t]
                    self.q[r] = common
                    ri = self.act(r)
                    self.w.op("QUANTIZE", [ins[k]], [ri])
                    ins[k] = ri
        self.w.op("CONCATENATION", ins, [self.act(out)], "ConcatenationOptions",
                  axis=axis, fused_activation_function=act)

    def pad(self, n):
        x = n.input[0]
        self.same_q(n.output[0], x)
        p = self.const(n.input[1]).reshape(2, -1)
        rank = p.shape[1]
        tfl = [[0, 0] for _ in range(rank)]
        for i in range(rank):
            tfl[_perm(rank)[i]] = [int(p[0, i]), int(p[1, i])]
        self.w.op("PAD", [self.act(x), self.i32(tfl, n.name + "/paddings")], [self.act(n.output[0])])

    def resize(self, n):
        a = self.attrs(n)
        x, out = n.input[0], n.output[0]
        self.same_q(out, x)
        size = self.i32(list(self.shapes[out][2:]), n.name + "/size")
        coord = a.get("coordinate_transformation_mode", "half_pixel")
        if isinstance(coord, bytes):
            coord = coord.decode()
        mode = a.get("mode", "nearest")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        opts = dict(align_corners=coord == "align_corners", half_pixel_centers=coord in ("half_pixel",
                                                                                         "tf_half_pixel_for_nn"))
        if mode == "nearest":
            self.w.op("RESIZE_NEAREST_NEIGHBOR", [self.act(x), size], [self.act(out)], "ResizeNearestNeighborOptions",
                      **opts)
        else:
            self.w.op("RESIZE_BILINEAR", [self.act(x), size], [self.act(out)], "ResizeBilinearOptions", **opts)

    def transpose(self, n):
        x, out = n.input[0], n.output[0]
        self.same_q(out, x)
        p = list(self.attrs(n)["perm"])
        r = len(p)
        P = _perm(r)
        q = [P[p[P.index(j)]] for j in range(r)]
        self.w.op("TRANSPOSE", [self.act(x), self.i32(q, n.name + "/perm")], [self.act(out)])

    def slice(self, n):
        x, out = n.input[0], n.output[0]
        self.same_q(out, x)
        shape = self.shapes[x]
        r = len(shape)
        starts, ends = self.const(n.input[1]), self.const(n.input[2])
        axes = self.const(n.input[3]) if len(n.input) > 3 and n.input[3] else np.arange(len(starts))
        steps = self.const(n.input[4]) if len(n.input) > 4 and n.input[4] else np.ones(len(starts), np.int64)
        b, e, s = [0] * r, list(_nhwc(shape)), [1] * r
        for st, en, ax, sp in zip(starts, ends, axes, steps):
            j = _perm(r)[int(ax) % r]
            b[j], e[j], s[j] = int(st), int(min(en, 2 ** 31 - 1)), int(sp)
        self.w.op("STRIDED_SLICE", [self.act(x), self.i32(b, n.name + "/begin"), self.i32(e, n.name + "/end"),
                                    self.i32(s, n.name + "/strides")], [self.act(out)], "StridedSliceOptions")

    def split(self, n):
        x = n.input[0]
        r = len(self.shapes[x])
        axis = _perm(r)[int(self.attrs(n).get("axis", 0)) % r]
        for o in n.output:
            self.same_q(o, x)
        self.w.op("SPLIT", [self.i32([axis], n.name + "/axis"), self.act(x)], [self.act(o) for o in n.output],
                  "SplitOptions", num_splits=len(n.output))

    # ------------------------------------------------------------ model

    def run(self) -> bytes:
        g = self.m.graph
        inits = set(self.consts)
        ins = [i.name for i in g.input if i.name not in inits]
        outs = [o.name for o in g.output]
        boundary_in, boundary_out = [], []
        for name in ins:  # the model's input tensors (int8, or uint8/float with a QUANTIZE after them)
            if not self.quant or self.io == "int8":
                boundary_in.append(self.act(name))
                continue
            s, z = self.qparams(name)
            inner = self.act(name, name=name + "/int8")
            outer = (self.w.tensor(name, _nhwc(self.shapes[name]), "uint8", scale=s, zero_point=z + 128)
                     if self.io == "uint8" else self.w.tensor(name, _nhwc(self.shapes[name]), "float32"))
            self.w.op("QUANTIZE", [outer], [inner])
            boundary_in.append(outer)
        table = {"Conv": self.conv, "Gemm": self.gemm, "MatMul": self.gemm, "Add": self.eltwise, "Sub": self.eltwise,
                 "Mul": self.eltwise, "MaxPool": self.pool, "AveragePool": self.pool, "GlobalAveragePool": self.pool,
                 "Flatten": self.reshape, "Reshape": self.reshape, "Relu": self.unary, "Sigmoid": self.unary,
                 "HardSwish": self.unary, "Tanh": self.unary, "LeakyRelu": self.unary, "Clip": self.unary,
                 "Softmax": self.softmax, "Concat": self.concat, "Pad": self.pad, "Resize": self.resize,
                 "Transpose": self.transpose, "Slice": self.slice, "Split": self.split}
        for n in self.nodes:
            if n.name in self.skip or n.op_type == "Constant":
                continue
            if n.op_type == "ReduceMean":
                axes = self.attrs(n).get("axes")
                axes = list(axes) if axes is not None else list(self.const(n.input[1]))
                self.mean(n, axes, keep=bool(self.attrs(n).get("keepdims", 1)))
                continue
            if n.op_type == "BatchNormalization":
                raise ValueError(f"to_tflite: BatchNormalization {n.name!r} does not follow a Conv")
            fn = table.get(n.op_type)
            if fn is None:
                raise ValueError(f"to_tflite: no TFLite export for {n.op_type} (node {n.name!r})")
            fn(n)
        for name in outs:
            inner = self.act(name)
            if not self.quant or self.io == "int8":
                boundary_out.append(inner)
                continue
            s, z = self.qparams(name)
            self.w.tensors[inner]["name"] = name + "/int8"
            outer = (self.w.tensor(name, _nhwc(self.shapes[name]), "uint8", scale=s, zero_point=z + 128)
                     if self.io == "uint8" else self.w.tensor(name, _nhwc(self.shapes[name]), "float32"))
            self.w.op("QUANTIZE" if self.io == "uint8" else "DEQUANTIZE", [inner], [outer])
            boundary_out.append(outer)
        return self.w.finish(boundary_in, boundary_out)


def to_tflite(model: onnx.ModelProto, samples: int = 4, seed: int = 0, quantize: bool = True,
              io: str = "int8") -> TFLiteModel:
    """A float ONNX zoo model as an int8 (or, with quantize=False, float32) TFLite model (module doc)."""
    return TFLiteModel(_Exporter(model, samples, seed, quantize, io).run())
