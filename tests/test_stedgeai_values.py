"""Values of ST's own programs: the units' arithmetic as modelled, the stream engines on simulated memory,
the switch contexts, a whole compile against the TFLite interpreter, and refusals (exit 65)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from npusim.errors import EXIT_INVALID_INPUT, DataError, StImportError
from npusim.importers.stedgeai import exec_plan as xp
from npusim.importers.stedgeai import execute as ex
from npusim.importers.stedgeai import units_exec as ux
from npusim.importers.stedgeai.model import Link, Streng, Unit
from test_stedgeai_ecblob import SHARED, needs_shared


MNV1 = "st_ic_mnv1_nucleo"
ADDR = 0x34200000


def unit(kind, index=0, **fields):
    return xp.UnitFields(Unit(kind, index, tuple(fields.items())))


# ------------------------------------------------------------------------------------------- arithmetic

def test_shift_round_half_up_and_floor():
    v = np.array([-6, -5, -4, -3, 3, 4, 5, 6], dtype=np.int64)
    assert ux.shift_round(v, 1, True, 1).tolist() == [-3, -2, -2, -1, 2, 2, 3, 3]
    assert ux.shift_round(v, 1, False, 1).tolist() == [-3, -3, -2, -2, 1, 2, 2, 3]
    assert ux.shift_round(v, 0, True, 1).tolist() == v.tolist()


def test_fit_saturates_or_wraps():
    v = np.array([-200, -128, 127, 200, 40000])
    assert ux.fit(v, 1, True).tolist() == [-128, -128, 127, 127, 127]
    assert ux.fit(v, 1, False).tolist() == [56, -128, 127, -56, 64]
    assert ux.fit(v, 2, True).tolist() == [-200, -128, 127, 200, 32767]


def test_lane_values_zero_extend_narrow_patterns():
    p = np.array([0x00, 0x7F, 0x80, 0xFF])
    assert ux.lane_values(p, 8, 1).tolist() == [0, 127, -128, -1]
    assert ux.lane_values(p, 8, 1, unsigned=True).tolist() == [0, 127, 128, 255]
    assert ux.lane_values(p, 8, 2).tolist() == [0, 127, 128, 255]  # an 8-bit pattern in a 16-bit lane
    assert ux.lane_values(np.array([0xFF80]), 16, 2).tolist() == [-128]


def test_arith_scalar_combined_bc_is_b_high_c_low():
    # A = 2^14, B:C = (-32 << 16) | 0, >> 14: x - 128 (the uint8 -> int8 shift ST's compiler emits)
    u = unit("ARITH", operation="ARITH_AFFINE", scalar=1, combinebc=1, A_scalar=16384, B_scalar=-32,
             C_scalar=0, shift_o=14, rounding_o=1, round_mode_o=1, saturation_o=1, outbytes_o=1)
    x = np.array([0, 127, 128, 255])
    assert ux.arith_apply(u, x, None, 0).tolist() == [-128, -1, 0, 127]


def test_arith_vector_coefficients_by_channel_across_frames():
    # 2 frames of 3 pixels x 2 channels: channels 0-1, then 2-3 (fChannels 4, batchDepth 2)
    u = unit("ARITH", operation="ARITH_AFFINE", scalar=0, bcast="ARITH_BCAST_CHAN", combinebc=0, fWidth=3,
             fHeight=1, fChannels=4, batchDepth=2, mem_A=(1, 2, 3, 4), mem_B=(0,) * 4, mem_C=(0,) * 4,
             shift_o=0, outbytes_o=2, saturation_o=1)
    out = ux.arith_apply(u, np.ones(12, np.int64), None, 0)
    assert out.tolist() == [1, 2] * 3 + [3, 4] * 3


def test_arith_refuses_an_unmodelled_operation():
    with pytest.raises(ux.Refused) as e:
        ux.arith_check(unit("ARITH", operation="ARITH_X_XOR_Y"))
    assert e.value.exit_code == EXIT_INVALID_INPUT and "ARITH0" in str(e.value)


def test_conv_sums_equal_a_direct_convolution():
    rng = np.random.default_rng(1)
    u = unit("CONVACC", fWidth=7, fHeight=6, kernelWidth=3, kernelHeight=3, hstride=2, vstride=1,
             left_padding=1, right_padding=1, top_padding=0, bot_padding=1, nKernels=4, batchDepth=5)
    g = ux.conv_geometry(u)
    f = rng.integers(-128, 128, (6, 7, 5))
    k = rng.integers(-128, 128, (4, 3, 3, 5))
    got = ux.conv_sums(f, k, g).astype(np.int64)
    pad = np.pad(f, ((0, 1), (1, 1), (0, 0)))
    want = np.zeros((g["oh"], g["ow"], 4), np.int64)
    for y in range(g["oh"]):
        for x in range(g["ow"]):
            win = pad[y:y + 3, 2 * x:2 * x + 3, :]
            want[y, x] = np.tensordot(k, win, axes=([1, 2, 3], [0, 1, 2]))
    assert got.shape == (5, 4, 4) and np.array_equal(got, want)


def test_conv_output_adds_the_shifted_accumulator_input():
    u = unit("CONVACC", shift_a=3, shift_o=3, rounding_o=1, round_mode_o=1, saturation_o=1, outbytes_o=2)
    acc = np.array([[[100]]])
    assert ux.conv_output(acc, np.array([10]), u).tolist() == [[[23]]]  # (100 + 80 + 4) >> 3
    assert ux.conv_output(acc, None, u).tolist() == [[[13]]]


def test_deep_kernels_are_interleaved_by_groups_of_eight():
    nk, depth = 10, 3
    want = np.arange(nk * depth).reshape(nk, depth)
    stream = np.concatenate([want[:8].T.reshape(-1), want[8:].T.reshape(-1)])
    assert np.array_equal(ux.deep_kernels(stream, nk, depth), want)


def test_pool_global_average_uses_mulval_and_shift():
    u = unit("POOL", operation="POOL_GAVG", inputX=3, inputY=3, batchSize=2, mulval=29127, shift_o=10,
             rounding_o=1, round_mode_o=1, saturation_o=1, outbytes_o=2)
    x = np.stack([np.full(9, 9), np.arange(9)], axis=1).reshape(-1)
    got = ux.pool_frame(u, x)
    assert got.tolist() == [(81 * 29127 + 512) >> 10, (36 * 29127 + 512) >> 10]


def test_pool_max_window():
    u = unit("POOL", operation="POOL_MAX", inputX=4, inputY=4, batchSize=1, poolWinX=2, poolWinY=2, strideX=2,
             strideY=2)
    x = np.arange(16)
    assert ux.pool_frame(u, x).tolist() == [5, 7, 13, 15]


# -------------------------------------------------------------------------------------- stream engines

def _memory(data: bytes) -> ex.Memory:
    mem = ex.Memory([("RAM", ADDR, 0x10000, False)])
    mem.load(ADDR, data)
    return mem


def _streng(engine=0, dir=0, **kw):
    base = dict(engine=engine, dir=dir, addr=ADDR, raw=True, frame_count=4, frame_tot_cnt=1)
    base.update(kw)
    return Streng(**base)


class _Sink:
    def __init__(self):
        self.got = []

    def push(self, values, bits, pixel):
        self.got.append((values.tolist(), bits))


def _read(s, mem):
    r = ex.Reader(s, mem)
    sink = _Sink()
    r.consumers.append((sink, ex.Gate([])))
    r.produce()
    return sink.got[0]


def test_reader_widens_lsb_aligned_with_sign_extension_or_msb_aligned():
    mem = _memory(bytes([0x01, 0x7F, 0x80, 0xFF]))
    assert _read(_streng(nbits_in=8, nbits_out=16, align_right=True), mem) == ([1, 127, 0xFF80, 0xFFFF], 16)
    assert _read(_streng(nbits_in=8, nbits_out=16, align_right=True, nbits_unsigned=True), mem) == \
        ([1, 127, 0x80, 0xFF], 16)
    assert _read(_streng(nbits_in=8, nbits_out=16), mem) == ([0x100, 0x7F00, 0x8000, 0xFF00], 16)


def test_reader_tensor_mode_walks_pixels_and_lines():
    mem = _memory(bytes(range(64)))
    s = _streng(raw=False, fwidth=2, fheight=2, batch_depth=2, batch_offset=4, line_offset=16, nbits_in=8,
                nbits_out=8)
    assert _read(s, mem)[0] == [0, 1, 4, 5, 16, 17, 20, 21]


def test_writer_stores_sixteen_bit_elements_little_endian():
    mem = _memory(bytes(16))
    w = ex.Writer(_streng(dir=1, frame_count=2, nbits_in=16, nbits_out=16), mem)
    w.port.push(np.array([0x1234, -2]), 16, 0)
    assert w.complete and mem.bytes_at(ADDR, 4) == bytes([0x34, 0x12, 0xFE, 0xFF])


def test_gate_alternates_switch_contexts():
    g = ex.Gate([(False, 1), (True, 1)])
    assert [g.passes() for _ in range(6)] == [False, True] * 3
    plans = xp.gate_plans([Link("ARITH", 0, 0, "CONVACC", 1, 0, context=0, frames=1, slot=0),
                            Link("ARITH", 0, 0, "CONVACC", 1, 0, context=1, frames=1, slot=1)])
    assert plans[("ARITH", 0, 0, "CONVACC", 1)] == [(False, 1), (True, 1)]


def test_an_unmodelled_unit_refuses_the_epoch():
    from npusim.importers.stedgeai.model import HwEpoch

    ep = HwEpoch(number=7, units=(Unit("DECUN", 0, ()),), enabled=(("DECUN", 0),))
    with pytest.raises(StImportError) as e:
        ex.run_epoch(ep, _memory(b""), {})
    assert e.value.exit_code == EXIT_INVALID_INPUT and "DECUN0" in str(e.value) and "epoch 7" in str(e.value)


def test_activ_function_table_evaluates_rom_rows_on_the_input_value():
    # bwidth 1: negatives -> ROM0[0] (one row: constant -3), non-negatives -> ROM0[1] = 1 inner bit, rows 1-2
    rows = (0, 0, (-3) & 0xFFFF,  # row 0: C = -3
            0, 1, 0,  # row 1: x in [0, 63]: B*x
            1, 0, 5)  # row 2: x in [64, 127]: A*x^2 + C
    u = unit("ACTIV", operation="ACTIV_FUNC", inbytes_f=1, shift_norm=8, signedop=1, bwidth=1,
             mem_rom0=(0 << 6 | 0, 1 << 6 | 1), mem_rom1=rows, shift_b=0, shift_c=0, shift_o=0, outbytes_o=2,
             saturation_o=1)
    ux.activ_check(u)
    t = ux.activ_table(u)
    x = np.arange(256)
    x = np.where(x >= 128, x - 256, x)
    want = np.where(x < 0, -3, np.where(x < 64, x, x * x + 5))
    assert np.array_equal(t, want)
    with pytest.raises(ux.Refused, match="ACTIV0 operation ACTIV_PRELU"):
        ux.activ_check(unit("ACTIV", operation="ACTIV_PRELU"))
    trelu = unit("ACTIV", operation="ACTIV_TRELU", inbytes_f=1, signedop=1, parameter=(-100) & 0xFFFF,
                 parameter_2=(-128) & 0xFFFF, outbytes_o=1, saturation_o=1)
    ux.activ_check(trelu)
    t = ux.activ_table(trelu)
    assert t[156] == -128 and t[157] == -99 and t[5] == 5  # bytes 156, 157: -100, -99


# ------------------------------------------------------------------------------------------ a whole compile

@needs_shared
def test_mnv1_outputs_match_the_tflite_interpreter():
    from npusim.tools.st_validate import validate_st

    (model,) = (SHARED / MNV1).glob("*.tflite")
    rep = validate_st(SHARED / MNV1, str(model), seed=0)
    (m,) = rep.outputs
    assert rep.passed and m.cosine >= 0.999 and m.max_steps <= 8
    assert m.shape == (1, 5) and m.reference.startswith("StatefulPartitionedCall")


@needs_shared
def test_mnv1_without_weights_is_refused_and_zero_weights_give_constant_outputs():
    from npusim.importers.stedgeai import load
    from npusim.tools.st_validate import seeded_model_inputs, st_inputs

    out = load(SHARED / MNV1)
    (model,) = (SHARED / MNV1).glob("*.tflite")
    with pytest.raises(StImportError) as e:
        ex.run(dataclasses.replace(out, weights={}), st_inputs(out, seeded_model_inputs(str(model), 0)))
    assert e.value.exit_code == EXIT_INVALID_INPUT and "weight image" in str(e.value)
    zero = dataclasses.replace(out, weights={k: bytes(len(v)) for k, v in out.weights.items()})
    got = [ex.run(zero, st_inputs(out, seeded_model_inputs(str(model), s))).outputs for s in (0, 1)]
    name = next(iter(got[0]))
    assert np.array_equal(got[0][name], got[1][name])  # the field's "constant outputs" symptom


@needs_shared
def test_mnv1_run_is_deterministic():
    from npusim.importers.stedgeai import load

    out = load(SHARED / MNV1)
    x = {"Input_0_out_0": np.random.default_rng(3).integers(0, 256, (1, 96, 96, 3), dtype=np.uint8)}
    a, b = ex.run(out, x).outputs, ex.run(out, x).outputs
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_st_inputs_quantise_floats_and_refuse_wrong_dtypes():
    from npusim.importers.stedgeai.model import Buffer
    from npusim.tools.st_validate import st_inputs

    b = Buffer("in", ADDR, 0, 12, 76, "input", dtype="UINT8", shape=(1, 2, 2, 3), mem_shape=(1, 2, 2, 3),
               scale=(0.5,), zero_point=(10,))
    out = type("Out", (), {"buffers": (b,)})()
    got = st_inputs(out, [np.full((1, 2, 2, 3), 2.0, np.float32)])["in"]
    assert got.dtype == np.uint8 and got.reshape(-1).tolist() == [14] * 12
    nchw = np.arange(12, dtype=np.uint8).reshape(1, 3, 2, 2)
    assert st_inputs(out, [nchw], "NCHW")["in"].shape == (1, 2, 2, 3)  # an ONNX model's own layout
    with pytest.raises(DataError, match="NHWC model input expected"):
        st_inputs(out, [nchw])  # NCHW data for an NHWC model: refused, not reordered
    with pytest.raises(DataError) as e:
        st_inputs(out, [np.zeros((1, 2, 2, 3), np.int8)])
    assert e.value.exit_code == EXIT_INVALID_INPUT


@needs_shared
def test_cli_validate_an_st_output(tmp_path):
    (model,) = (SHARED / MNV1).glob("*.tflite")
    r = subprocess.run([sys.executable, "-m", "npusim", "validate", str(SHARED / MNV1), "--reference", str(model),
                        "--json", str(tmp_path / "v.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "PASS" in r.stdout and "cosine" in r.stdout and (tmp_path / "v.json").is_file()
    bad = tmp_path / "x.npy"
    np.save(bad, np.zeros((1, 3, 3, 3), np.uint8))
    r = subprocess.run([sys.executable, "-m", "npusim", "validate", str(SHARED / MNV1), "--reference", str(model),
                        "--input", f"serving_default_input_1:0={bad}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == EXIT_INVALID_INPUT and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


# ------------------------------------------------------------------ chained CONVACCs, software operators

def _reader_node(values, bits=8):
    """A stream source holding one frame of `values`."""
    class Src(ex.Node):
        def __init__(self):
            super().__init__()
            self.left = [np.asarray(values, np.int64)]

        def produce(self):
            if not self.left:
                raise ex.Underrun("test source exhausted")
            self.emit(self.left.pop(), bits)
    return Src()


def _conv_node(**fields):
    base = dict(fWidth=2, fHeight=1, kernelWidth=1, kernelHeight=1, hstride=1, vstride=1, batchDepth=2,
                simd=1, inbytes_f=1, outbytes_o=2, saturation_o=1, rounding_o=1, round_mode_o=1)
    base.update(fields)
    return ex.ConvNode(unit("CONVACC", **base))


def _link(src, node, port):
    node.ports[port].source = src
    src.consumers.append((node.ports[port], ex.Gate([])))


def test_kernel_filter_keeps_this_units_kernels_and_raw_partials_chain():
    # features: 2 pixels x 2 channels; the shared kernel stream carries 4 kernels, each unit keeps 2
    feats = [1, 2, 3, 4]
    kernels = [1, 0, 0, 1, 2, 0, 0, 2]  # k0=(1,0) k1=(0,1) k2=(2,0) k3=(0,2)
    first = _conv_node(nKernels=2, kfilt_tot=4, kfilt_first=0, kfilt_last=1, raw_o=1, outbytes_o=3)
    second = _conv_node(nKernels=2, kfilt_tot=4, kfilt_first=2, kfilt_last=3, accumulate=1, accumulate_first=1,
                        shift_o=1)
    _link(_reader_node(feats), first, 0)
    _link(_reader_node(kernels), first, 1)
    _link(_reader_node(feats), second, 0)
    _link(_reader_node(kernels), second, 1)
    _link(first, second, 2)
    sink = _Sink()
    second.consumers.append((sink, ex.Gate([])))
    second.produce()
    (got, bits), = sink.got
    # first: (1, 2), (3, 4); second adds (2x, 2y): (3, 6), (9, 12) >> 1 rounded half up
    assert bits == 16 and got == [2, 3, 5, 6]


def test_zfbias_pads_with_its_value():
    u = unit("CONVACC", fWidth=1, fHeight=1, kernelWidth=1, kernelHeight=1, left_padding=1, right_padding=1,
             top_padding=0, bot_padding=0, nKernels=1, batchDepth=1, zfbias=-128)
    g = ux.conv_geometry(u)
    out = ux.conv_sums(np.array([[[5]]]), np.array([[[[1]]]]), g).astype(np.int64)
    assert out.reshape(-1).tolist() == [-128, 5, -128]


def _op(kind, **params):
    from npusim.importers.stedgeai.model import SwOperator

    return SwOperator(kind=kind, params=tuple(params.items()))


def _buf(name, offset, shape, chpos="CHPos_Last", mem_shape=None, nbits=8, dtype="INT8"):
    from npusim.importers.stedgeai.model import Buffer

    size = int(np.prod(shape)) * nbits // 8
    return Buffer(name, ADDR, offset, offset + size, offset + size, "internal", nbits=nbits, dtype=dtype,
                  shape=shape, mem_shape=mem_shape or shape, chpos=chpos)


def test_concat_and_depth_to_space_in_blocked_layouts():
    from npusim.importers.stedgeai import sw_exec

    mem = _memory(bytes(4096))
    a = _buf("a", 0, (1, 2, 2, 4), "CHPos_Mixed", (1, 2, 2, 2, 2))
    b = _buf("b", 64, (1, 2, 2, 2), "CHPos_First", (1, 2, 2, 2))
    o = _buf("o", 128, (1, 2, 2, 6))
    ta = np.arange(16, dtype=np.int8).reshape(1, 2, 2, 4)
    tb = (100 + np.arange(8, dtype=np.int8)).reshape(1, 2, 2, 2)
    sw_exec.write_logical(mem, a, ta)
    sw_exec.write_logical(mem, b, tb)
    assert mem.bytes_at(ADDR, 4) == bytes([0, 1, 4, 5])  # first channel block of a, pixel by pixel
    sw_exec.run_sw_operator(_op("Concat", tensors=(a, b, o), args=(2, 1, 0, 0)), mem, (), None)
    assert np.array_equal(sw_exec.read_logical(mem, o), np.concatenate([ta, tb], axis=3))
    d = _buf("d", 256, (1, 4, 4, 1))
    sw_exec.run_sw_operator(_op("DMA_DepthToSpace", tensors=(a, d), args=(1, 2, 2, 0, 0)), mem, (), None)
    want = ta.reshape(1, 2, 2, 2, 2, 1).transpose(0, 1, 3, 2, 4, 5).reshape(1, 4, 4, 1)
    assert np.array_equal(sw_exec.read_logical(mem, d), want)


def test_an_unknown_software_operator_is_refused():
    from npusim.importers.stedgeai import sw_exec
    from npusim.importers.stedgeai.model import EpochBlock

    with pytest.raises(ux.Refused, match="DMA_SpaceToDepth"):
        sw_exec.run_sw_operator(_op("DMA_SpaceToDepth"), _memory(b""), (), EpochBlock(4, frozenset()))


@needs_shared
def test_per_layer_matches_mnv1_buffers_to_reference_tensors():
    from npusim.tools.st_validate import per_layer

    (model,) = (SHARED / MNV1).glob("*.tflite")
    rep = per_layer(SHARED / MNV1, str(model), seed=0)
    assert len(rep.rows) >= 25 and rep.first_outside() is None
    first = next(r for r in rep.rows if r.buffer == "Conv2D_12_zero_off_out_16")
    assert first.buffer == "Conv2D_12_zero_off_out_16" and "conv2d/Conv2D" in first.reference
    assert first.exact > 0.99 and first.max_steps <= 1  # the first convolution: its input is exact
    copy = next(r for r in rep.rows if r.buffer.endswith("_cp_in_2"))  # a layout copy maps to its source's tensor
    assert copy.reference == next(r.reference for r in rep.rows if r.buffer == "Conv2D_120_zero_off_out_232")
    # a wrong weight in one layer is found there: the per-layer report names it
    from npusim.importers.stedgeai import load

    out = load(SHARED / MNV1)
    w = next(b for b in out.buffers if b.name == "Conv2D_48_weights_inflated_267")
    pool = out.pool_named("octoFlash")
    img = bytearray(out.weights["octoFlash"])
    img[w.start - pool.address:w.end - pool.address] = bytes(w.size)  # that layer's weights zeroed
    broken = dataclasses.replace(out, weights={"octoFlash": bytes(img)})
    # alone (each epoch fed the reference's tensors), every layer of the intact compile is within one step
    # but one: epoch 5 finishes a depthwise + pointwise pair whose 16-bit intermediate (epoch 4's
    # buffer) has no reference tensor, so its own error spans two of TFLite's layers
    assert all(r.alone is not None for r in rep.rows)
    assert [r.buffer for r in rep.rows if r.alone.max_steps > 1] == ["Conv2D_21_zero_off_out_34"]
    assert all(r.alone.max_steps <= 5 for r in rep.rows)
    broken_rep = per_layer(broken, str(model), seed=0)
    bad = broken_rep.first_outside()
    assert bad is not None and bad.buffer == "Conv2D_52_zero_off_out_97"
    # fed the reference's inputs, the layers after the broken one are right again: only it is far off
    assert [r.buffer for r in broken_rep.rows if r.alone.max_steps > 5] == ["Conv2D_52_zero_off_out_97"]
    assert "alone" in broken_rep.text() and "Conv2D_52_zero_off_out_97" in broken_rep.to_dict()["wrong_alone"]


def test_live_epochs_end_where_a_later_buffer_overlaps():
    from npusim.importers.stedgeai.model import Buffer
    from npusim.tools.st_validate import _live_epochs

    a = Buffer("a", ADDR, 0, 100, 164, "internal", epoch=2)
    b = Buffer("b", ADDR, 200, 300, 364, "internal", epoch=3)
    c = Buffer("c", ADDR, 50, 150, 214, "internal", epoch=5)  # overwrites a's upper half at epoch 5
    assert _live_epochs([a, b, c], {"a": 0, "b": 0}) == {"a": (3, 5), "b": (4, 1 << 30)}


def test_layer_pairing_takes_close_pairs_in_any_order_and_the_rest_in_order():
    from npusim.tools.st_pairing import confident_then_ordered

    # two parallel branches run in the other order than the reference's: the close pairs win
    assert sorted(confident_then_ordered(np.array([[0.53, 1.0], [1.0, 0.53]]))) == [(0, 1), (1, 0)]
    # a layer gone wrong and one after it: no close partner, paired in order (not by their noise)
    score = np.array([[1.0, 0.2, 0.1], [0.1, 0.3, 0.5], [0.1, 0.4, 0.2]])
    assert sorted(confident_then_ordered(score)) == [(0, 0), (1, 1), (2, 2)]
    # more reference tensors than buffers: each buffer still gets one, in order
    assert sorted(confident_then_ordered(np.array([[0.2, 0.1, 0.3]]))) == [(0, 2)]


def test_a_mixed_buffer_is_blocked_by_its_own_batch_field():
    from npusim.importers.stedgeai.model import Buffer
    from npusim.importers.stedgeai.sw_exec import channel_block, read_logical

    # the row's mem_shape array is shared by name with another row's (blocks of 4); its batch says 16
    b = Buffer("m", ADDR, 0, 2 * 2 * 32, 2 * 2 * 32 + 64, "internal", shape=(1, 2, 2, 32),
               mem_shape=(1, 8, 2, 2, 4), chpos="CHPos_Mixed", batch=16, dtype="UINT8")
    assert channel_block(b) == 16
    t = np.arange(128, dtype=np.uint8).reshape(1, 2, 2, 32)
    mem = _memory(np.ascontiguousarray(t.reshape(1, 2, 2, 2, 16).transpose(0, 3, 1, 2, 4)).tobytes())
    assert np.array_equal(read_logical(mem, b), t)
    assert channel_block(dataclasses.replace(b, batch=0)) == 4  # no batch field: the mem_shape's


@needs_shared
def test_the_buffer_tables_batch_field_is_read():
    from npusim.importers.stedgeai import load

    b = next(b for b in load(SHARED / MNV1).buffers if b.name == "Conv2D_124_out_0")
    assert b.chpos == "CHPos_Mixed" and b.batch == 16 and b.mem_shape[-1] == 8


def test_negative_literals_are_integers():
    from npusim.importers.stedgeai import csource

    assert csource._int_literal("-2") == -2 and isinstance(csource._int_literal("-2"), int)
    assert csource._int_literal("-0x10") == -16 and csource._int_literal("010") == 8
    assert csource._int_literal("-0.5") == -0.5


@needs_shared
def test_a_negative_zero_point_in_the_buffer_table_is_read():
    from npusim.importers.stedgeai import load

    out = load(SHARED / "st_pose_movenet192_dk")
    assert next(b for b in out.buffers if b.name == "Conv2D_16_off_bias_out_25").zero_point == (-2,)


def test_slice_split_like_and_dma_transpose():
    from npusim.importers.stedgeai import sw_exec

    mem = _memory(bytes(range(64)) + bytes(192))
    src = _buf("@src", 0, (1, 4, 1, 3))
    dst = _buf("@dst", 64, (1, 4, 1, 2))
    # two bytes of every three-byte row (a channel slice of a channels-last tensor)
    sw_exec.run_sw_operator(_op("DMA_Outputs_Slice_SplitLike", tensors=(src, dst), args=(8, 2, 4, 3, 8, 0, 0)),
                            mem, (), None)
    assert mem.bytes_at(ADDR + 64, 8) == bytes([0, 1, 3, 4, 6, 7, 9, 10])
    t_in = _buf("@t", 0, (1, 2, 3, 4))
    t_out = _buf("@u", 128, (1, 4, 3, 2))
    # (1, 2, 3, 4) -> (1, 4, 3, 2): input axis k goes to output axis target[k]
    sw_exec.run_sw_operator(_op("DMA_Transpose", tensors=(t_in, t_out),
                                arrays=((24, 12, 4, 1), (24, 6, 2, 1), (0, 3, 2, 1), (0, 3, 2, 1))), mem, (), None)
    got = np.frombuffer(mem.bytes_at(ADDR + 128, 24), np.uint8).reshape(1, 4, 3, 2)
    assert np.array_equal(got, np.arange(24, dtype=np.uint8).reshape(1, 2, 3, 4).transpose(0, 3, 2, 1))


MOVENET = "st_pose_movenet192_dk"


@needs_shared
@pytest.mark.slow
def test_movenet_layers_alone_are_within_the_programs_own_staging():
    """Each MoveNet layer fed the reference's inputs: within 2 steps but for three epochs whose 16-bit
    intermediates the program saturates (epoch 4) or rounds in stages (6: two 16-bit shifts; 57: partial
    sums stored as 16-bit values between passes); the heatmap output still parts from TFLite as much as
    TFLite's own kernel sets part from each other on the seeded noise input."""
    from npusim.tools.st_validate import per_layer, validate_st

    (model,) = (SHARED / MOVENET).glob("*.tflite")
    rep = per_layer(SHARED / MOVENET, str(model), seed=0)
    assert len(rep.rows) >= 70 and all(r.alone is not None for r in rep.rows)
    assert {r.epoch for r in rep.rows if r.alone.max_steps > 2} <= {4, 6, 57}
    assert max(r.alone.max_steps for r in rep.rows) <= 9
    assert all(r.alone.cosine > 0.998 for r in rep.rows)
    v = validate_st(SHARED / MOVENET, str(model), seed=0)
    (m,) = v.outputs
    assert m.reference_spread and set(m.reference_spread) == {"optimized", "reference"}
    assert min(m.reference_spread.values()) < 0.99 and any("ill-conditioned" in n for n in v.notes)
