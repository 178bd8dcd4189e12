"""Faults that change the values of an imported ST program, caught by `validate`: a weight image of another
compile (the compile's own quantisation parameters contradict it; else the per-layer report names the first
layer reading the wrong parameters), an activation read before it was written (the report says which values
depend on it); and the per-layer pairing of ST's buffers with the reference's tensors across layouts."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from npusim.tools.st_pairing import confident_then_ordered, same_values_other_order, view
from test_stedgeai_ecblob import SHARED, needs_shared
from test_stedgeai_import import _copy, _edit

MNV1 = "st_ic_mnv1_nucleo"
FALLGUARD = "fallguard_pe_yolov8n_pose256"


def test_views_relate_layouts_only_where_the_dimensions_say_how():
    a = np.arange(2 * 3 * 4).reshape(1, 2, 3, 4)
    assert view((1, 1, 5, 1), (1, 5)).of(np.arange(5).reshape(1, 1, 5, 1)).shape == (1, 5)  # unit dims
    v = view((1, 6, 1, 4), (1, 2, 3, 4))  # a reshape: the element order kept
    assert np.array_equal(v.of(a.reshape(1, 6, 1, 4)), a)
    t = view((1, 4, 2, 3), (1, 2, 3, 4))  # NCHW against NHWC: one permutation makes it a reshape
    nchw = np.transpose(a, (0, 3, 1, 2))
    assert np.array_equal(t.of(nchw), a) and np.array_equal(t.back(a, nchw.shape), nchw)
    sq = view((1, 8, 8, 4), (1, 4, 8, 8))  # H and W of equal size: the channels move, H and W keep their order
    assert sq.perm == (2, 0, 1)
    assert view((1, 2, 3, 4), (1, 5, 5, 1)) is None  # another count


def test_pairs_never_take_a_forbidden_cell():
    # NaN: the buffer's values do not relate to that tensor; the rest still pairs in order only
    assert confident_then_ordered(np.array([[np.nan, 0.3], [0.2, np.nan]])) == [(0, 1)]
    assert confident_then_ordered(np.array([[np.nan, 0.5], [0.4, 0.6]])) == [(1, 1)]
    assert confident_then_ordered(np.array([[np.nan, np.nan]])) == []


def test_values_in_another_order_are_told_from_wrong_values():
    rng = np.random.default_rng(0)
    ref = rng.integers(-60, 60, (16, 16, 2)).astype(np.float64) * 0.5  # steps of 0.5
    moved = np.transpose(ref, (0, 2, 1)).reshape(ref.shape)  # ST's layout read as the reference's
    assert same_values_other_order(moved, ref, 0.5)
    assert not same_values_other_order(ref + 0.5 * rng.integers(-2, 3, ref.shape), ref, 0.5)  # right order, 2 steps
    assert not same_values_other_order(np.sort(ref.reshape(-1))[::-1].reshape(ref.shape) * 1.2, ref, 0.5)  # scaled


def test_a_layer_holding_its_tensors_values_in_another_order_is_not_blamed():
    from npusim.tools.st_validate import LayerReport, LayerRow, OutputMetrics

    def row(epoch, name, cosine, steps, reordered=False):
        own = OutputMetrics(name, "t", (4,), cosine, 0.5, steps, 0.5, steps * 0.5)
        return LayerRow(epoch, name, "t", (1, 2, 2, 1), cosine, 0.5, steps, own, reordered)

    rep = LayerReport(rows=[row(3, "moved", 0.96, 80, reordered=True), row(5, "wrong", 0.5, 40)])
    assert rep.first_off_alone().buffer == "wrong" and [r.buffer for r in rep.wrong_alone()] == ["wrong"]
    assert "another order alone" in rep.text() and rep.to_dict()["reordered_alone"] == ["moved"]


def _model(name: str) -> str:
    (model,) = (SHARED / name).glob("*.tflite")
    return str(model)


@needs_shared
def test_mnv1_head_buffers_pair_with_the_2d_tensors_and_the_rest_says_why():
    from npusim.tools.st_validate import per_layer

    rep = per_layer(SHARED / MNV1, _model(MNV1), seed=0)
    paired = {r.buffer: r for r in rep.rows}
    # 4-D buffers of ST's head against TFLite's 2-D dense/softmax tensors: same values once squeezed
    assert "dense/BiasAdd" in paired["Gemm_130_conv_4_off_bias_out_256"].reference
    assert paired["Softmax_131_out_0"].reference.startswith("StatefulPartitionedCall")
    assert rep.unmatched == [] and len(rep.rows) >= 33
    assert all(r.alone.cosine > 0.999 for r in rep.rows)  # no mis-pairing: each fed layer agrees
    assert rep.not_compared and all(any(k in why for k in ("FXP", "float")) for why in rep.not_compared)
    assert rep.first_off_alone() is None and "first layer off alone" in rep.text()


@needs_shared
def test_an_image_of_another_compile_contradicts_the_compiles_own_parameters():
    from npusim.importers.stedgeai import load
    from npusim.importers.stedgeai.weights import parameter_mismatches

    out = load(SHARED / MNV1)
    assert parameter_mismatches(out) == []
    size = len(out.weights["octoFlash"])
    for other in (FALLGUARD, "st_od_yolox480_dk"):  # another compile's image, cut to this one's size
        img = next(p for p in (SHARED / other).iterdir() if p.suffix in (".raw", ".bin")).read_bytes()[:size]
        found = parameter_mismatches(dataclasses.replace(out, weights={"octoFlash": img}))
        assert found and any("reads the scale of 'Softmax_131_out_0'" in f for f in found)


def _readers(out) -> dict:
    """{parameter buffer: epochs reading it} from the replay."""
    from npusim.importers.stedgeai.replay import replay

    got: dict = {}
    for t in replay(out).epochs:
        for name in t.reads:
            got.setdefault(name, set()).add(t.epoch)
    return got


@needs_shared
def test_a_same_size_image_with_other_weights_fails_and_names_the_layer_reading_them():
    from npusim.importers.stedgeai import load
    from npusim.importers.stedgeai.weights import parameter_mismatches
    from npusim.tools.st_validate import per_layer, validate_st

    out = load(SHARED / MNV1)
    intact = per_layer(out, _model(MNV1), seed=0, alone=False)
    rows = {r.epoch for r in intact.rows}
    readers = _readers(out)
    # a weight buffer read by one epoch only, in the middle of the network, whose output is compared
    w = next(b for b in out.buffers if b.is_param and b.dtype == "INT8" and b.size >= 1024
             and len(readers.get(b.name, ())) == 1 and next(iter(readers[b.name])) in rows
             and next(iter(readers[b.name])) > 8)
    (epoch,) = readers[w.name]
    pool = out.pool_named("octoFlash")
    img = bytearray(out.weights["octoFlash"])
    lo, hi = w.start - pool.address, w.end - pool.address
    img[lo:hi] = np.random.default_rng(1).permutation(np.frombuffer(bytes(img[lo:hi]), np.uint8)).tobytes()
    broken = dataclasses.replace(out, weights={"octoFlash": bytes(img)})
    assert parameter_mismatches(broken) == []  # the static check cannot see it: same size, same scales
    v = validate_st(broken, _model(MNV1), seed=0)
    assert not v.passed
    rep = per_layer(broken, _model(MNV1), seed=0)
    off = rep.first_off_alone()
    assert off is not None and off.epoch == epoch  # the layer reading the permuted weights, alone
    assert all(r.alone.cosine > 0.99 for r in rep.rows if r.epoch < epoch)
    line = next(x for x in rep.text().splitlines() if "first layer off alone" in x)
    assert off.buffer in line and "parameters" in line and "not the activations" in line
    assert rep.to_dict()["first_off_alone"] == off.buffer


def _read_never_written(tmp_path: Path) -> Path:
    """mnv1 with its softmax reading the dense layer's output where no epoch writes it: the table row and
    the call moved to bytes of the pool nothing else uses."""
    d = _copy(tmp_path, MNV1)
    _edit(d / "network.c", "softmax_integer1_sw_info = {", "0x342e0000UL + 1008", "0x342e0000UL + 200000")
    _edit(d / "network.c", '"Gemm_130_out_0"', ".offset_start = 1008,\n      .offset_end = 1013,\n      "
          ".offset_limit = 1080,", ".offset_start = 200000,\n      .offset_end = 200005,\n      .offset_limit = 200072,")
    return d


@needs_shared
def test_values_depending_on_a_read_before_write_say_so(tmp_path):
    from npusim.importers.stedgeai import load
    from npusim.tools.st_validate import per_layer, validate_st

    d = _read_never_written(tmp_path)
    out = load(d)
    v = validate_st(out, _model(MNV1), seed=3)
    (m,) = v.outputs
    assert not v.passed and m.uninitialised
    (u,) = m.uninitialised
    assert (u["epoch"], u["unit"], u["buffer"], u["size"], u["seed"]) == (33, "CPU", "Gemm_130_out_0", 5, 3)
    assert "seeded pattern (seed 3)" in v.text() and "not a rounding question" in v.text()
    rep = per_layer(out, _model(MNV1), seed=3)
    row = next(r for r in rep.rows if r.buffer == "Softmax_131_out_0")
    assert row.uninitialised and all(not r.uninitialised for r in rep.rows if r.epoch < 33)
    assert "read before they were written" in rep.text()
    # the intact compile: nothing depends on such a read
    clean = validate_st(SHARED / MNV1, _model(MNV1), seed=3)
    assert clean.passed and not clean.outputs[0].uninitialised


@needs_shared
def test_cli_json_carries_the_read_before_write_and_the_pairing(tmp_path):
    d = _read_never_written(tmp_path)
    path = tmp_path / "rep.json"
    r = subprocess.run([sys.executable, "-m", "npusim", "validate", str(d), "--reference", _model(MNV1),
                        "--per-layer", "--json", str(path)], capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    doc = json.loads(path.read_text())
    assert doc["outputs"][0]["uninitialised"][0]["buffer"] == "Gemm_130_out_0"
    rows = doc["per_layer"]["rows"]
    assert next(x for x in rows if x["buffer"] == "Softmax_131_out_0")["uninitialised"]
    assert doc["weight_image"] == [] and isinstance(doc["per_layer"]["not_compared"], dict)


@needs_shared
@pytest.mark.slow
def test_fallguard_pairs_its_head_across_layouts():
    """fallguard's pose head (reshapes and transposes between NHWC maps and [1, 51|65, N] rows): 209 of its
    buffers pair (175 at one shape only), two stay unmatched (ST's nearest-neighbour expansion buffers);
    no pair is a mis-pairing: each layer fed the reference's inputs agrees with it."""
    from npusim.tools.st_validate import per_layer

    rep = per_layer(SHARED / FALLGUARD, _model(FALLGUARD), seed=0)
    assert len(rep.rows) >= 209 and len(rep.unmatched) <= 2
    assert all("expansion" in name for name, _ in rep.unmatched)
    assert rep.first_off_alone() is None
    assert any(r.buffer == "Concat_660_out_0" and "PartitionedCall" in r.reference for r in rep.rows)


def test_an_unmatched_buffer_names_the_compared_buffer_its_reader_produces():
    from types import SimpleNamespace as NS

    from npusim.tools.st_pairing import consumers_note

    bufs = [NS(name=n, epoch=e, is_param=False) for n, e in (("x", 3), ("y", 5), ("z", 5))]
    traffic = [NS(epoch=4, reads={"w"}), NS(epoch=5, reads={"x"})]
    (got,) = consumers_note([("x", "no tensor")], traffic, bufs, {"z": "ref/z"})
    assert got == ("x", "no tensor; read by epoch 5, which produces 'z' (paired with ref/z), where its values "
                        "are compared")
    assert consumers_note([("y", "no tensor")], traffic, bufs, {"z": "ref/z"}) == [("y", "no tensor")]


@needs_shared
def test_a_reference_other_than_the_compiled_model_is_said(tmp_path):
    from types import SimpleNamespace as NS

    from npusim.tools.st_validate import reference_provenance

    c_info = SHARED / FALLGUARD / "c_info.json"
    assert reference_provenance(NS(files={"c_info": str(c_info)}), _model(FALLGUARD)) == []  # ST's own MD5
    (note,) = reference_provenance(NS(files={"c_info": str(c_info)}), _model(MNV1))
    assert "not the model this compile was made from" in note and "yolov8n" in note
    assert reference_provenance(NS(files={}), _model(MNV1)) == []  # no c_info.json: nothing to say
    bad = tmp_path / "c_info.json"
    bad.write_text("{not json")
    assert reference_provenance(NS(files={"c_info": str(bad)}), _model(MNV1)) == []


def test_a_read_before_write_taints_what_depends_on_it_until_rewritten():
    from types import SimpleNamespace as NS

    from npusim.faults import Fault, RegionRef
    from npusim.tools.st_uninit import UninitDependence

    def buf(name, lo, epoch):
        return NS(name=name, addr_base=0x1000, offset_start=lo, offset_end=lo + 16, base_symbol="", epoch=epoch)

    def ep(epoch, reads, writes):
        return NS(epoch=epoch, block=epoch, sw=False, reads=set(reads),
                  written=[(0x1000 + lo, 0x1010 + lo, "") for lo in writes])

    out = NS(buffers=[buf("a", 0, 1), buf("b", 32, 3), buf("c", 64, 0)], pools=[NS(address=0x1000, end=0x2000,
                                                                                 read_only=False)])
    f = Fault("uninitialized-read", "read", 0x1000, 16, "SE0", 2, 2, "L", RegionRef("a", "scratch", 0x1000, 16, "?"))
    traffic = [ep(2, ["a"], []), ep(3, ["a"], [32]), ep(4, ["c"], [0]), ep(5, ["c"], [32])]
    dep = UninitDependence(out, seed=7, rep=NS(faults=[f], epochs=traffic, placements={}))
    (r,) = dep.of("b", 3)  # b computed from a's unwritten bytes
    assert (r.epoch, r.unit, r.buffer, r.size, r.seed) == (2, "SE0", "a", 16, 7)
    assert "seeded pattern (seed 7)" in r.line()
    assert dep.of("a", 4) == [] and dep.of("b", 5) == [] and dep.of("b") == []  # rewritten from clean inputs
    assert dep.of("c", 3) == []


@needs_shared
def test_per_channel_weight_scales_of_a_software_convolution_are_checked():
    from npusim.importers.stedgeai import load
    from npusim.importers.stedgeai.weights import parameter_mismatches

    out = load(SHARED / "st_reid_osnet_dk_v113")
    assert parameter_mismatches(out) == []
    blk, op = next((b, op) for b in out.blocks for op in b.sw_ops if op.kind == "conv_integer")
    addr = op.param("ws.mem.start_offset")
    pool = out.pool_at(addr)
    img = bytearray(out.weights[pool.name])
    k = addr - pool.address + 4 * 3  # channel 3's scale, doubled
    img[k:k + 4] = (np.frombuffer(bytes(img[k:k + 4]), "<f4") * 2).astype("<f4").tobytes()
    (found,) = parameter_mismatches(dataclasses.replace(out, weights={pool.name: bytes(img)}))
    assert "scales of" in found and "(channel 3, 1 of" in found and f"epoch {blk.epoch_num}" in found


@needs_shared
def test_an_npu_epochs_read_before_write_reaches_the_output_through_the_epochs(tmp_path):
    """yamnet's write engine of epoch 2 never configured: epoch 3's SE1 reads the pattern; every later
    buffer computed from it, and the output, depend on it (the replay alone decides: no weights needed)."""
    from npusim.importers.stedgeai import load
    from npusim.tools.st_uninit import UninitDependence

    name = "st_audio_yamnet1024_v111"
    assert UninitDependence(load(SHARED / name)).reads == []
    d = _copy(tmp_path, name)
    _edit(d / "network.c", "static const LL_Streng_TensorInitTypeDef Conv2D_7_suboff_15_dma_init_out_0_2",
          "LL_Streng_TensorInit(6, &Conv2D_7_suboff_15_dma_init_out_0_2, 1);", ";")
    out = load(d)
    dep = UninitDependence(out, seed=5)
    (r,) = dep.reads
    assert (r.epoch, r.unit, r.buffer, r.seed) == (3, "SE1", "Conv2D_7_zero_off_out_16", 5)
    (output,) = [b.name for b in out.buffers if b.role == "output" and not b.is_param]
    assert dep.of(output) == [r]
    before = [b.name for b in out.buffers if not b.is_param and b.epoch is not None and 0 < b.epoch < 2]
    assert before and all(dep.of(n, out_epoch) == [] for n, out_epoch in
                          ((b.name, b.epoch) for b in out.buffers if b.name in before))
    assert dep.of("Conv2D_10_zero_off_out_25", 3) == [r]  # epoch 3's own result


def test_an_unmatched_buffer_is_followed_through_unpaired_steps():
    from types import SimpleNamespace as NS

    from npusim.tools.st_pairing import consumers_note

    bufs = [NS(name=n, epoch=e, is_param=False) for n, e in (("p1", 2), ("p3", 3), ("p5", 4))]
    traffic = [NS(epoch=3, reads={"p1"}), NS(epoch=4, reads={"p3"})]  # a max-pool in pieces: p1 -> p3 -> p5
    ((_, why),) = consumers_note([("p1", "no tensor")], traffic, bufs, {"p5": "maxpool"})
    assert "read by epoch 4 (through p3), which produces 'p5' (paired with maxpool)" in why
