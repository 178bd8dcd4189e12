"""The TFLite operators, each lowered to the ONNX operator of the same meaning (tflite_front has the story).

`OpLowering` adds one method per builtin to `Lowering`; `HANDLERS` maps the builtin names to them.
"""

from __future__ import annotations

import numpy as np

from ...errors import ModelError
from ...kernels import tflite_int as T
from ..ir import WeightQuant
from .tflite_lowering import BINARY, CLIPS, OPSET, QUANT_TYPES, REDUCERS, UNARY, Lowering, same_order, ir_perm
from .tflite_reader import TOp
from .tflite_resize import tflite_nearest_attrs


class OpLowering(Lowering):
    """`Lowering` with a method per supported builtin."""
    def conv(self, op: TOp, depthwise: bool) -> None:
        o = op.options
        name = self.node_name(op)
        x, w = op.inputs[0], op.inputs[1]
        xt, wt = self.t(x), self.t(w)
        self.const_values(w, "the filter", op)
        if len(wt.shape) != 4 or len(xt.shape) != 4:
            raise ModelError(f"{self.where}: {self.label(op)}: expected 4-D input and filter, got "
                             f"{list(xt.shape)} and {list(wt.shape)}")
        _, ih, iw, ic = xt.shape
        if depthwise:  # [1, KH, KW, C*M] -> [C*M, 1, KH, KW], group = C
            kh, kw, oc = wt.shape[1], wt.shape[2], wt.shape[3]
            wn = self.weight(w, (3, 0, 1, 2), name + "/filter")
            group = ic
        else:  # [OC, KH, KW, IC/g] -> [OC, IC/g, KH, KW]
            oc, kh, kw, icg = wt.shape
            wn = self.weight(w, (0, 3, 1, 2), name + "/filter")
            group = ic // icg if icg else 1
        sh, sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
        dh, dw = int(o.get("dilation_h_factor", 1)), int(o.get("dilation_w_factor", 1))
        pads = self.pads(op, ih, iw, kh, kw, sh, sw, dh, dw)
        ins = [self.name(x), wn]
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            self.const_values(op.inputs[2], "the bias", op)
            ins.append(self.weight(op.inputs[2], None, name + "/bias"))
        pre, out = self.result(op, name)
        self.emit(name, "Conv", ins, [pre], kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw],
                  pads=pads, group=group)
        self.activation(op, name, pre, out)

    def transpose_conv(self, op: TOp) -> None:
        """TRANSPOSE_CONV (inputs: output shape, filter [OC, KH, KW, IC], input, optional bias) as an ONNX
        ConvTranspose with explicit pads: TFLite places input pixel i at output i * stride - pad + k, with
        `pad` its conv padding of the output size (SAME: half the excess, the extra cell at the end;
        VALID: none), and crops to the declared output."""
        o = op.options
        name = self.node_name(op)
        shape_i, w, x = op.inputs[:3]
        xt, wt, out_t = self.t(x), self.t(w), self.t(op.outputs[0])
        self.const_values(w, "the filter", op)
        if len(wt.shape) != 4 or len(xt.shape) != 4 or len(out_t.shape) != 4:
            raise ModelError(f"{self.where}: {self.label(op)}: expected 4-D input, filter and output, got "
                             f"{list(xt.shape)}, {list(wt.shape)} and {list(out_t.shape)}")
        declared = np.asarray(self.const_values(shape_i, "the output shape", op)).reshape(-1)
        if declared.tolist() != list(out_t.shape):
            raise ModelError(f"{self.where}: {self.label(op)}: output shape {declared.tolist()} is not the declared "
                             f"output tensor's {list(out_t.shape)}")
        oc, kh, kw, ic = wt.shape
        if ic != xt.shape[3] or oc != out_t.shape[3]:
            raise ModelError(f"{self.where}: {self.label(op)}: filter {list(wt.shape)} does not map input "
                             f"{list(xt.shape)} to output {list(out_t.shape)}")
        sh, sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
        begin, end, extra = [], [], []
        for n_in, n_out, k, s in ((xt.shape[1], out_t.shape[1], kh, sh), (xt.shape[2], out_t.shape[2], kw, sw)):
            conv_out = -(-n_out // s) if int(o.get("padding", 1)) == 0 else (n_out - k + s) // s
            pad = max(((conv_out - 1) * s + k - n_out) // 2, 0)
            cut = s * (n_in - 1) + k - pad - n_out  # what the crop removes at the end (< 0: zeros appended)
            if cut < 0 and -cut >= s:
                raise ModelError(f"{self.where}: {self.label(op)}: output {n_out} exceeds what input {n_in} reaches "
                                 f"with kernel {k} and stride {s}")
            begin.append(pad)
            end.append(max(cut, 0))
            extra.append(max(-cut, 0))
        ins = [self.name(x), self.weight(w, (3, 0, 1, 2), name + "/filter")]  # -> [IC, OC, KH, KW]
        if len(op.inputs) > 3 and op.inputs[3] >= 0:
            self.const_values(op.inputs[3], "the bias", op)
            ins.append(self.weight(op.inputs[3], None, name + "/bias"))
        pre, out = self.result(op, name)
        attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=begin + end)
        if any(extra):
            attrs["output_padding"] = extra
        self.emit(name, "ConvTranspose", ins, [pre], **attrs)
        self.activation(op, name, pre, out)

    def fully_connected(self, op: TOp) -> None:
        name = self.node_name(op)
        x, w = self.fc_flat.get(op.inputs[0], op.inputs[0]), op.inputs[1]
        xt, wt = self.t(x), self.t(w)
        self.const_values(w, "the weights", op)
        if len(wt.shape) != 2:
            raise ModelError(f"{self.where}: {self.label(op)}: weights {list(wt.shape)} are not 2-D")
        n_out, k = wt.shape
        numel = int(np.prod(xt.shape))
        if numel != k:
            raise ModelError(f"{self.where}: {self.label(op)}: input {list(xt.shape)} is not one row of {k} "
                             f"(batched fully connected layers are not supported)")
        src = self.name(x)
        wperm = None
        if len(xt.shape) != 2:  # TFLite flattens NHWC; the IR's Flatten of the NCHW map orders c, h, w
            if not same_order(xt.shape):
                wperm = np.arange(k).reshape(xt.shape[1:]).transpose(
                    tuple(p - 1 for p in ir_perm(len(xt.shape))[1:])).reshape(-1)
            flat = self.tmp(name + "/flat", (1, k), self.qdq.get(src))
            self.emit(name + "/flatten", "Flatten", [src], [flat], axis=1)
            src = flat
        wn = self.weight(w, None, name + "/weights")
        if wperm is not None:
            self.consts[wn] = np.ascontiguousarray(self.consts[wn][:, wperm])
            if wn in self.wq:
                q = self.wq[wn]
                self.wq[wn] = WeightQuant(np.ascontiguousarray(q.values[:, wperm]), q.scale, q.zero_point, q.axis)
        ins = [src, wn]
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            self.const_values(op.inputs[2], "the bias", op)
            ins.append(self.weight(op.inputs[2], None, name + "/bias"))
        out_t = self.t(op.outputs[0])
        pre, out = self.result(op, name)
        if len(out_t.shape) != 2:  # keep_num_dims: compute [1, N], then reshape
            row = self.tmp(name + "/row", (1, n_out), self.qdq.get(out))
            self.emit(name, "Gemm", ins, [row], transB=1)
            mid = self.tmp(name + "/rows", self.shapes[out], self.qdq.get(out)) if pre != out else pre
            self.reshape(name + "/reshape", row, (1, n_out), mid, out_t.shape)
            if pre != out:
                self.activation(op, name, mid, out)
            return
        self.emit(name, "Gemm", ins, [pre], transB=1)
        self.activation(op, name, pre, out)

    def binary(self, op: TOp) -> None:
        if op.opcode in ("MAXIMUM", "MINIMUM"):  # TFLite compares the raw int8 values: one scale for all
            qs = {(float(self.t(i).scale[0]), int(self.t(i).zero_point.reshape(-1)[0]))
                  for i in list(op.inputs[:2]) + list(op.outputs) if self.t(i).quantized}
            if len(qs) > 1:
                raise ModelError(f"{self.where}: {self.label(op)} with inputs and output of different scales is "
                                 f"not supported (TFLite compares the stored int8 values)")
        name = self.node_name(op)
        rank = len(self.t(op.outputs[0]).shape)
        a, b = (self.operand(i, rank, name, op) for i in op.inputs[:2])
        pre, out = self.result(op, name)
        self.emit(name, BINARY[op.opcode], [a, b], [pre])
        self.activation(op, name, pre, out)

    def pool(self, op: TOp) -> None:
        o = op.options
        name = self.node_name(op)
        xt = self.t(op.inputs[0])
        kh, kw = int(o["filter_height"]), int(o["filter_width"])
        sh, sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
        pads = self.pads(op, xt.shape[1], xt.shape[2], kh, kw, sh, sw)
        pre, out = self.result(op, name)
        kind = "MaxPool" if op.opcode == "MAX_POOL_2D" else "AveragePool"
        attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=pads)
        if kind == "AveragePool":
            # the interpreter rounds the raw window sum (zero point included) half away from zero
            attrs.update(count_include_pad=0, _round="half_away")
        self.emit(name, kind, [self.name(op.inputs[0])], [pre], **attrs)
        self.activation(op, name, pre, out)

    def reduce(self, op: TOp) -> None:
        name = self.node_name(op)
        xt = self.t(op.inputs[0])
        rank = len(xt.shape)
        axes = sorted({self.ir_axis(a, rank) for a in np.asarray(self.const_values(op.inputs[1], "axes", op)).reshape(-1)})
        keep = int(bool(op.options.get("keep_dims", False)))
        out_t = self.t(op.outputs[0])
        out = self.name(op.outputs[0])
        if keep or rank not in (3, 4) or len(out_t.shape) <= 2:
            self.emit(name, REDUCERS[op.opcode], [self.name(op.inputs[0])], [out], axes=axes, keepdims=keep)
            return
        # a reduction that keeps a spatial axis of a map: reduce with keepdims, then drop the axes TFLite-style
        kept = tuple(1 if i in [ir_perm(rank)[a] for a in axes] else d for i, d in enumerate(xt.shape))
        mid = self.tmp(name + "/keep", self.ir_shape(kept), self.qdq.get(out))
        self.emit(name, REDUCERS[op.opcode], [self.name(op.inputs[0])], [mid], axes=axes, keepdims=1)
        self.reshape(name + "/squeeze", mid, kept, out, out_t.shape)

    def softmax(self, op: TOp) -> None:
        name = self.node_name(op)
        x = self.name(op.inputs[0])
        rank = len(self.t(op.inputs[0]).shape)
        beta = float(op.options.get("beta", 1.0))
        if beta != 1.0:
            s, z = self.qdq[x]
            y = self.tmp(name + "/beta", self.shapes[x], (s * beta, z))
            self.emit(name + "/beta", "Mul", [x, self.add_const(name + "/beta_c", np.float32(beta))], [y])
            x = y
        self.emit(name, "Softmax", [x], [self.name(op.outputs[0])], axis=self.ir_axis(-1, rank))

    def concat(self, op: TOp) -> None:
        name = self.node_name(op)
        rank = len(self.t(op.outputs[0]).shape)
        parts = []
        for i in op.inputs:
            parts.append(self.operand(i, rank, name, op) if self.t(i).data is not None else self.name(i))
        pre, out = self.result(op, name)
        self.emit(name, "Concat", parts, [pre], axis=self.ir_axis(int(op.options.get("axis", 0)), rank))
        self.activation(op, name, pre, out)

    def pad(self, op: TOp) -> None:
        name = self.node_name(op)
        xt = self.t(op.inputs[0])
        rank = len(xt.shape)
        p = np.asarray(self.const_values(op.inputs[1], "the paddings", op)).reshape(rank, 2)
        perm = ir_perm(rank)
        pads = [int(p[perm[i], 0]) for i in range(rank)] + [int(p[perm[i], 1]) for i in range(rank)]
        ins = [self.name(op.inputs[0]), self.add_const(name + "/pads", np.array(pads, np.int64))]
        if op.opcode == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
            ins.append(self.add_const(name + "/value", np.float32(self.dequantized(self.t(op.inputs[2])).reshape(-1)[0])))
        attrs = {}
        if op.opcode == "MIRROR_PAD":
            attrs["mode"] = "reflect" if int(op.options.get("mode", 0)) == 0 else "edge"
            if attrs["mode"] == "edge":
                raise ModelError(f"{self.where}: {self.label(op)}: SYMMETRIC mirror padding has no ONNX counterpart")
        self.emit(name, "Pad", ins, [self.name(op.outputs[0])], **attrs)

    def resize(self, op: TOp) -> None:
        name = self.node_name(op)
        o = op.options
        align, half = bool(o.get("align_corners", False)), bool(o.get("half_pixel_centers", False))
        out_t = self.t(op.outputs[0])
        sizes = self.add_const(name + "/sizes", np.array(self.ir_shape(out_t.shape), np.int64))
        if op.opcode == "RESIZE_BILINEAR":
            coord = "align_corners" if align else "half_pixel" if half else "asymmetric"
            attrs = dict(mode="linear", coordinate_transformation_mode=coord)
        else:  # the ONNX attributes whose reference picks TFLite's pixels for these sizes
            xt = self.t(op.inputs[0])
            attrs = tflite_nearest_attrs(xt.shape[1:3], out_t.shape[1:3], align, half, OPSET)
            if attrs is None:
                raise ModelError(f"{self.where}: {self.label(op)}: align_corners={align} with half_pixel_centers="
                                 f"{half} from {list(xt.shape[1:3])} to {list(out_t.shape[1:3])} has no ONNX Resize "
                                 f"that picks the same pixels")
        self.emit(name, "Resize", [self.name(op.inputs[0]), "", "", sizes], [self.name(op.outputs[0])], **attrs)

    def transpose(self, op: TOp) -> None:
        name = self.node_name(op)
        perm = [int(v) for v in np.asarray(self.const_values(op.inputs[1], "the permutation", op)).reshape(-1)]
        r = len(perm)
        p = ir_perm(r)
        self.emit(name, "Transpose", [self.name(op.inputs[0])], [self.name(op.outputs[0])],
                  perm=[p.index(perm[p[k]]) for k in range(r)])

    def strided_slice(self, op: TOp) -> None:
        o = op.options
        name = self.node_name(op)
        xt = self.t(op.inputs[0])
        if int(o.get("ellipsis_mask", 0)) or int(o.get("new_axis_mask", 0)) or bool(o.get("offset", False)):
            raise ModelError(f"{self.where}: {self.label(op)}: ellipsis, new-axis masks and offset are not supported")
        rank = len(xt.shape)
        begin, end, strides = (np.asarray(self.const_values(i, what, op)).reshape(-1).astype(np.int64)
                               for i, what in zip(op.inputs[1:4], ("begin", "end", "strides")))
        bm, em, sm = int(o.get("begin_mask", 0)), int(o.get("end_mask", 0)), int(o.get("shrink_axis_mask", 0))
        big = np.iinfo(np.int64).max
        starts, ends, steps, axes = [], [], [], []
        for a in range(rank):
            b, e, s = int(begin[a]), int(end[a]), int(strides[a])
            if bm >> a & 1:
                b = 0 if s > 0 else -1
            if em >> a & 1:
                e = big if s > 0 else -big
            if sm >> a & 1:
                e, s = (b + 1 if b != -1 else big), 1
            starts.append(b)
            ends.append(e)
            steps.append(s)
            axes.append(self.ir_axis(a, rank))
        sliced = []
        for a in range(rank):
            idx = range(xt.shape[a])[slice(starts[a], None if abs(ends[a]) == big else ends[a], steps[a])]
            sliced.append(len(idx))
        out_t = self.t(op.outputs[0])
        out = self.name(op.outputs[0])
        target = out if not sm and tuple(sliced) == tuple(out_t.shape) else \
            self.tmp(name + "/slice", self.ir_shape(sliced), self.qdq.get(out))
        consts = [self.add_const(name + f"/{k}", np.array(v, np.int64)) for k, v in
                  (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps))]
        self.emit(name, "Slice", [self.name(op.inputs[0])] + consts, [target])
        if target != out:
            self.reshape(name + "/shrink", target, tuple(sliced), out, out_t.shape)

    def split(self, op: TOp) -> None:
        name = self.node_name(op)
        if op.opcode == "SPLIT":
            axis_i, x = op.inputs[0], op.inputs[1]
            sizes = None
        else:
            x, sizes_i, axis_i = op.inputs[0], op.inputs[1], op.inputs[2]
            sizes = np.asarray(self.const_values(sizes_i, "size_splits", op)).reshape(-1).astype(np.int64)
        xt = self.t(x)
        rank = len(xt.shape)
        axis = int(np.asarray(self.const_values(axis_i, "the axis", op)).reshape(-1)[0])
        if sizes is None:
            sizes = np.array([self.t(o).shape[axis % rank] for o in op.outputs], np.int64)
        if np.any(sizes < 0):  # one -1: the rest of the axis
            sizes[sizes < 0] = xt.shape[axis % rank] - sizes[sizes >= 0].sum()
        self.emit(name, "Split", [self.name(x), self.add_const(name + "/split", sizes)],
                  [self.name(o) for o in op.outputs], axis=self.ir_axis(axis, rank))

    def reshape_op(self, op: TOp) -> None:
        xt, ot = self.t(op.inputs[0]), self.t(op.outputs[0])
        y = op.outputs[0]
        cons = self.consumers.get(y, [])
        if cons and y not in self.m.outputs and len(xt.shape) in (3, 4) and len(ot.shape) == 2 and \
                all(c.opcode == "FULLY_CONNECTED" and c.inputs[0] == y for c in cons):
            self.fc_flat[y] = op.inputs[0]  # the fully connected layers read the map and permute their weights
            return
        name = self.node_name(op)
        self.reshape(name, self.name(op.inputs[0]), xt.shape, self.name(op.outputs[0]), ot.shape)

    def unary(self, op: TOp) -> None:

        name = self.node_name(op)
        x, out = self.name(op.inputs[0]), self.name(op.outputs[0])
        if op.opcode in CLIPS or op.opcode == "RELU":
            lo, hi = CLIPS.get(op.opcode, (0.0, None))
            extra = {} if self.qdq[x] == self.qdq[out] else self.table(x, out, T.relu_table, lo, hi)
            bounds = [self.add_const(name + "/lo", np.float32(lo))]
            if hi is not None:
                bounds.append(self.add_const(name + "/hi", np.float32(hi)))
            self.emit(name, "Clip", [x] + bounds, [out], **extra)
        elif op.opcode == "LEAKY_RELU":
            alpha = float(np.float32(op.options.get("alpha", 0.2)))
            self.emit(name, "LeakyRelu", [x], [out], alpha=alpha, **self.table(x, out, T.leaky_relu_table, alpha))
        elif op.opcode == "HARD_SWISH":
            self.emit(name, "HardSwish", [x], [out], **self.table(x, out, T.hard_swish_table))
        elif op.opcode == "PRELU":
            slope = self.operand(op.inputs[1], len(self.t(op.inputs[0]).shape), name, op)
            self.emit(name, "PRelu", [x, slope], [out])
        else:
            self.emit(name, UNARY[op.opcode], [x], [out])

    def requantize(self, op: TOp) -> None:
        """QUANTIZE between two quantized tensors: the interpreter's requantization as an ACT LUT
        (a Clip without bounds carrying the table); none at all when the int8 scales are equal."""

        name = self.node_name(op)
        x_t, y_t = self.t(op.inputs[0]), self.t(op.outputs[0])
        if x_t.dtype not in QUANT_TYPES or y_t.dtype not in QUANT_TYPES:
            raise ModelError(f"{self.where}: {self.label(op)}: QUANTIZE from {x_t.dtype} to {y_t.dtype} inside the model "
                             f"(a float part of the model); npusim imports int8 models")
        if self.act_q(x_t) == self.act_q(y_t) and op.outputs[0] not in self.names and op.outputs[0] not in self.m.outputs:
            self.rename[op.outputs[0]] = self.rename.get(op.inputs[0], op.inputs[0])  # uint8 <-> int8: same values
            return
        x, out = self.name(op.inputs[0]), self.name(op.outputs[0])
        self.emit(name, "Clip", [x], [out], **self.table(x, out, T.requantize_table))

    def depth_space(self, op: TOp) -> None:
        name = self.node_name(op)
        kind = "DepthToSpace" if op.opcode == "DEPTH_TO_SPACE" else "SpaceToDepth"
        attrs = dict(blocksize=int(op.options.get("block_size", 2)))
        if kind == "DepthToSpace":
            attrs["mode"] = "DCR"  # NHWC depth_to_space reads channels as (block row, block col, channel)
        self.emit(name, kind, [self.name(op.inputs[0])], [self.name(op.outputs[0])], **attrs)


HANDLERS = {
    "CONV_2D": lambda L, op: L.conv(op, depthwise=False),
    "DEPTHWISE_CONV_2D": lambda L, op: L.conv(op, depthwise=True),
    "FULLY_CONNECTED": OpLowering.fully_connected,
    "TRANSPOSE_CONV": OpLowering.transpose_conv,
    "AVERAGE_POOL_2D": OpLowering.pool, "MAX_POOL_2D": OpLowering.pool,
    "SOFTMAX": OpLowering.softmax,
    "CONCATENATION": OpLowering.concat,
    "PAD": OpLowering.pad, "PADV2": OpLowering.pad, "MIRROR_PAD": OpLowering.pad,
    "RESIZE_NEAREST_NEIGHBOR": OpLowering.resize, "RESIZE_BILINEAR": OpLowering.resize,
    "TRANSPOSE": OpLowering.transpose,
    "STRIDED_SLICE": OpLowering.strided_slice,
    "SPLIT": OpLowering.split, "SPLIT_V": OpLowering.split,
    "RESHAPE": OpLowering.reshape_op, "SQUEEZE": OpLowering.reshape_op, "EXPAND_DIMS": OpLowering.reshape_op,
    "QUANTIZE": OpLowering.requantize,
    "LEAKY_RELU": OpLowering.unary, "PRELU": OpLowering.unary, "HARD_SWISH": OpLowering.unary, "RELU": OpLowering.unary,
    "DEPTH_TO_SPACE": OpLowering.depth_space, "SPACE_TO_DEPTH": OpLowering.depth_space,
    **{k: OpLowering.binary for k in BINARY},
    **{k: OpLowering.reduce for k in REDUCERS},
    **{k: OpLowering.unary for k in list(UNARY) + list(CLIPS)},
}
SUPPORTED = tuple(sorted(HANDLERS))
