"""The functional run's fast path (the program's cached plan: strided memory access, decoded kernels,
the units' memoised fields) against its general frame path, byte for byte, on real compiles."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from npusim.importers.stedgeai import exec_plan as xp
from npusim.importers.stedgeai import execute as ex
from test_stedgeai_ecblob import SHARED, needs_shared

MNV1 = "st_ic_mnv1_nucleo"
YOLOX = "st_od_yolox480_dk"


def _digest(mem, out) -> str:
    """SHA-256 of the compile's writable pools (what an epoch may write)."""
    h = hashlib.sha256()
    for p in out.pools:
        if not p.read_only:
            h.update(mem.bytes_at(p.address, p.size))
    return h.hexdigest()


def _sums(feat, kern, g):
    """A frame's convolution sums (`units_exec.conv_sums`) as int64."""
    from npusim.importers.stedgeai import units_exec as ux

    return ux.conv_sums(feat, kern, g).astype(np.int64)


def _feed(out, folder, seed):
    from npusim.tools.st_validate import seeded_model_inputs, st_inputs

    (model,) = folder.glob("*.tflite")
    return st_inputs(out, seeded_model_inputs(str(model), seed))


def test_frame_span_finds_rows_at_a_stride_or_gives_up():
    a = (100 + 32 * np.arange(3)[:, None] + np.arange(8)[None, :]).reshape(-1)
    assert xp.frame_span(a) == (100, 3, 8, 32)
    assert xp.frame_span(np.arange(5, 12)) == (5, 1, 7, 7)
    assert xp.frame_span(np.array([0, 1, 4, 5, 6])) is None  # runs of unequal length
    assert xp.frame_span(np.array([0, 1, 1, 2])) is None  # a byte read twice
    assert xp.frame_span(np.array([8, 9, 0, 1])) is None  # rows going backwards


@pytest.mark.parametrize("shape, strides", [((4, 3600, 8), (8, 64, 1)), ((3, 5, 16), (16, 96, 1)), ((4, 2, 24), (0, 24, 1)),
                                            ((3, 500, 16), (16, 96, 1)), ((2, 1200, 4), (4, 40, 1)), ((4, 1, 9000), (0, 9000, 1)),
                                            ((2, 3, 6), (6, 40, 1)), ((5, 7, 3), (3, 21, 1)), ((3, 1, 40), (0, 40, 1)),
                                            ((2, 4, 4), (0, 0, 1)), ((9,), (1,)), ((3, 4), (8, 1))])
def test_strided_bytes_copy_in_stream_order(shape, strides):
    """A reading engine's view of memory (frames of rows of runs, frames at one address again, interleaved
    channel blocks) copies to its bytes in C order, as an element-by-element gather gives them."""
    mem = np.random.default_rng(1).integers(0, 256, 1 << 18).astype(np.uint8)
    view = np.lib.stride_tricks.as_strided(mem[8:], shape, strides)
    idx = 8 + sum(np.indices(shape)[d] * st for d, st in enumerate(strides))
    want = mem[idx].reshape(-1).tolist()
    got = ex._patterns(view, 1)
    assert got.flags.c_contiguous and got.tolist() == want
    mem[:] = 0  # a copy, not a view of memory
    assert got.tolist() == want


@pytest.mark.parametrize("shape, strides", [((4, 3600, 8), (8, 64, 1)), ((3, 5, 16), (16, 96, 1)), ((2, 3, 6), (6, 40, 1)),
                                            ((3, 500, 16), (16, 96, 1)), ((2, 1200, 4), (4, 40, 1)), ((2, 1500, 6), (6, 40, 1)),
                                            ((5, 7, 3), (3, 21, 1)), ((3, 4, 4), (4, 64, 1)), ((6, 2), (10, 1))])
def test_bytes_stored_through_a_strided_view_land_where_a_scatter_puts_them(shape, strides):
    """`exec_memory.store` (runs moved in the widest words that divide them) writes each byte where an
    element-by-element scatter writes it, and nothing else."""
    from npusim.importers.stedgeai.exec_memory import store

    rng = np.random.default_rng(2)
    mems = [np.zeros(1 << 18, np.uint8) for _ in range(2)]
    values = rng.integers(0, 256, int(np.prod(shape))).astype(np.uint8)
    store(np.lib.stride_tricks.as_strided(mems[0][8:], shape, strides), values)
    idx = 8 + sum(np.indices(shape)[d] * st for d, st in enumerate(strides))
    mems[1][idx.reshape(-1)] = values
    assert np.array_equal(mems[0], mems[1])


def test_strided_reads_and_writes_equal_the_byte_by_byte_ones():
    from npusim.importers.stedgeai.model import Streng

    base = 0x34200000
    s = Streng(engine=0, dir=0, addr=base + 3, raw=False, fwidth=3, fheight=2, batch_depth=2, batch_offset=4,
               line_offset=16, frame_offset=40, frame_tot_cnt=2, nbits_in=16, nbits_out=16)
    mem = ex.Memory([("RAM", base, 0x1000, False)])
    mem.load(base, bytes(range(256)))
    walk = xp.walk_of(s)
    assert walk.frame_spans[0] == (base + 3, 2, 12, 16) and not walk.contiguous
    got = []
    for w in (walk, None):
        r = ex.Reader(s, mem, w)
        sink = _Sink()
        r.consumers.append((sink, ex.Gate([])))
        r.produce()
        r.produce()
        got.append(sink.values)
    assert got[0] == got[1] and len(got[0]) == 24
    ws = dataclasses.replace(s, dir=1)
    mems = [ex.Memory([("RAM", base, 0x1000, False)]) for _ in range(2)]
    for m, w in zip(mems, (xp.walk_of(ws), None)):
        wr = ex.Writer(ws, m, w)
        for chunk in np.split(np.arange(24) * 1000 - 5000, [6, 12, 15]):  # whole frames, then a partial one
            wr.port.push(chunk, 16, 0)
        assert wr.complete
    assert mems[0].bytes_at(base, 0x100) == mems[1].bytes_at(base, 0x100)


def test_interleaved_frames_are_stored_through_one_strided_view():
    """A writing engine whose frames interleave in memory (two 4-byte-wide frames side by side in 8-byte rows)
    stores a chunk of whole frames through one strided view, not a scatter, and writes what the byte-by-byte
    path writes; `distinct_bytes` admits such views and refuses overlapping ones."""
    from npusim.importers.stedgeai.exec_memory import distinct_bytes
    from npusim.importers.stedgeai.model import Streng

    assert distinct_bytes((2, 3, 4), (4, 8, 1)) and distinct_bytes((2, 3, 4), (40, 16, 1))
    assert not distinct_bytes((3, 3, 4), (4, 8, 1)) and not distinct_bytes((2, 3, 4), (2, 8, 1))
    base = 0x34200000
    s = Streng(engine=0, dir=1, addr=base + 8, raw=False, fwidth=4, fheight=3, batch_depth=1, batch_offset=1,
               line_offset=8, frame_offset=4, frame_tot_cnt=2, nbits_in=8, nbits_out=8)
    walk = xp.walk_of(s)
    assert walk.frame_step == 4 and walk.frame_spans[0] == (base + 8, 3, 4, 8)
    mems = [ex.Memory([("RAM", base, 0x100, False)]) for _ in range(2)]
    scattered = []
    for m, w in zip(mems, (walk, None)):
        m.write = lambda *a, _w=m.write, **k: (scattered.append(1), _w(*a, **k))[1]
        wr = ex.Writer(s, m, w)
        wr.port.push(np.arange(24, dtype=np.uint8) + 1, 8, 0)
        assert wr.complete
        if w is walk:
            assert not scattered
    assert scattered and mems[0].bytes_at(base, 0x100) == mems[1].bytes_at(base, 0x100)
    assert mems[0].bytes_at(base + 8, 8) == bytes([1, 2, 3, 4, 13, 14, 15, 16])


def test_frames_laid_out_alike_are_read_and_written_at_once_as_byte_by_byte():
    """Many frames of one layout: one strided view at a fixed step, one gather otherwise (a table of starts);
    both equal the bytes moved one by one."""
    from npusim.importers.stedgeai.model import Streng

    base = 0x34200000
    s = Streng(engine=0, dir=0, addr=base + 3, raw=False, fwidth=3, fheight=2, batch_depth=2, batch_offset=4,
               line_offset=16, frame_offset=40, frame_tot_cnt=4, nbits_in=16, nbits_out=16)
    walk, every = xp.walk_of(s), xp.walk_of(s, spans=False)
    assert walk.addresses is None and walk.frame_step == 40 and walk.offsets.size == walk.frame == 24
    for lo, hi in ((0, walk.nbytes), (24, 72), (5, 31)):
        assert np.array_equal(xp.walk_bytes(walk, lo, hi), every.addresses[lo:hi])
    gathered = dataclasses.replace(walk, frame_step=None)  # starts at no fixed step: the gather
    mem = ex.Memory([("RAM", base, 0x1000, False)])
    mem.load(base, bytes(range(256)))
    got = []
    for w in (walk, gathered, None):
        r = ex.Reader(s, mem, w)
        r.whole = True
        sink = _Sink()
        r.consumers.append((sink, ex.Gate([])))
        while r.k < s.frame_tot_cnt:
            r.produce()
        got.append(sink.values)
    assert got[0] == got[2] and got[1] == got[2] and len(got[2]) == 48
    ws = dataclasses.replace(s, dir=1)
    mems = [ex.Memory([("RAM", base, 0x1000, False)]) for _ in range(3)]
    for m, w in zip(mems, (xp.walk_of(ws), dataclasses.replace(xp.walk_of(ws), frame_step=None), None)):
        wr = ex.Writer(ws, m, w)
        for chunk in np.split(np.arange(48) * 1000 - 20000, [24, 29, 36]):  # two frames, then parts
            wr.port.push(chunk, 16, 0)
        assert wr.complete
    assert mems[0].bytes_at(base, 0x100) == mems[2].bytes_at(base, 0x100) == mems[1].bytes_at(base, 0x100)


def _pool_by_windows(u, x, frames):
    """POOL_MAX / MIN / AVG of `units_exec.pool_frame` with every window materialised (the formula its
    separable reduction replaces)."""
    from npusim.importers.stedgeai import units_exec as ux

    p = ux._pool_fields(u)
    f = x.reshape(frames, p["h"], p["w"], p["d"])[:, p["t0"]:p["b0"] + 1, p["l0"]:p["r0"] + 1]
    top, bottom, left, right = p["pads"]
    fill = {"POOL_MAX": np.iinfo(np.int64).min // 4, "POOL_MIN": np.iinfo(np.int64).max // 4}.get(p["op"], 0)
    padded = np.full((frames, f.shape[1] + top + bottom, f.shape[2] + left + right, p["d"]), fill, np.int64)
    padded[:, top:top + f.shape[1], left:left + f.shape[2]] = f
    ky, kx, sy, sx = p["ky"], p["kx"], p["sy"], p["sx"]
    oh, ow = (padded.shape[1] - ky) // sy + 1, (padded.shape[2] - kx) // sx + 1
    sv = np.lib.stride_tricks.sliding_window_view(padded, (ky, kx), axis=(1, 2))[:, ::sy, ::sx][:, :oh, :ow]
    win = sv.transpose(0, 1, 2, 4, 5, 3).reshape(frames, oh, ow, ky * kx, p["d"])
    if p["op"] == "POOL_MAX":
        return win.max(axis=3).reshape(-1)
    if p["op"] == "POOL_MIN":
        return win.min(axis=3).reshape(-1)
    v = ux.shift_round(win.sum(axis=3) * p["mulval"], p["shift_o"], p["rounding"], p["mode"])
    return ux.fit(v, p["nbytes"], p["sat"]).reshape(-1)


@pytest.mark.parametrize("op,win,stride,pad,crop", [
    ("POOL_MAX", (5, 5), (1, 1), (2, 2, 2, 2), (0, 0, 0, 0)), ("POOL_MIN", (3, 2), (2, 3), (1, 0, 0, 1), (1, 6, 2, 8)),
    ("POOL_AVG", (2, 3), (2, 1), (0, 0, 0, 0), (0, 7, 1, 8)), ("POOL_MAX", (1, 4), (1, 2), (0, 1, 3, 0), (0, 0, 0, 0))])
def test_pooling_reduced_row_then_column_equals_every_window(op, win, stride, pad, crop):
    from npusim.importers.stedgeai import units_exec as ux
    from npusim.importers.stedgeai.model import Unit

    fields = dict(operation=op, inputX=9, inputY=8, batchSize=3, poolWinY=win[0], poolWinX=win[1],
                  strideY=stride[0], strideX=stride[1], topPad=pad[0], bottomPad=pad[1], leftPad=pad[2],
                  rightPad=pad[3], topCrop=crop[0], bottomCrop=crop[1], leftCrop=crop[2], rightCrop=crop[3],
                  mulval=21, shift_o=7, rounding_o=1, outbytes_o=1, saturation_o=1)
    u = Unit("POOL", 0, tuple(fields.items()))
    x = np.random.default_rng(3).integers(-300, 300, 2 * 9 * 8 * 3)
    assert np.array_equal(ux.pool_frame(u, x, 2), _pool_by_windows(u, x, 2))


def _conv_outputs(fields: dict, streams: tuple, bits: tuple, frames: int, **modes) -> list:
    """The values a CONVACC of `fields` emits for `frames` frames of its three input streams (`bits` wide), with
    its node's `modes` (batch, repeats) set."""
    from npusim.importers.stedgeai.model import Unit

    node = ex.ConvNode(xp.UnitFields(Unit("CONVACC", 0, tuple(fields.items()))))
    for k, v in modes.items():
        setattr(node, k, v)
    for port, values, b in zip(node.ports, streams, bits):
        port.push(values, b, 0)
    sink = _Sink()
    node.consumers.append((sink, ex.Gate([])))
    while node.k < frames:
        node.produce()
    return sink.values


def test_frames_convolved_at_once_equal_frame_by_frame():
    """A CONVACC given many frames at once (batched sums, accumulator inputs in one take) emits what it emits
    frame by frame: accumulator chaining without a first input, FRAMEZERO dropping some, kernels per frame."""
    from npusim.importers.stedgeai import units_exec as ux
    from npusim.importers.stedgeai.model import Unit

    fields = dict(fWidth=5, fHeight=4, kernelWidth=3, kernelHeight=3, nKernels=2, batchDepth=3, left_padding=1,
                  right_padding=1, top_padding=1, bot_padding=1, simd=1, accumulate=1,
                  afilt_mode="AFILT_MODE_FRAMEZERO", afilt_tot=2, afilt_first=1, afilt_last=1, outbytes_o=2,
                  shift_o=2, rounding_o=1, saturation_o=1, shift_a=1, fsub=-3, zfbias=0)
    rng = np.random.default_rng(5)
    frames, nf, per = 4, 5 * 4 * 3, 2 * 9 * 3
    feats, kerns = rng.integers(0, 256, frames * nf), rng.integers(0, 256, frames * per)
    kerns[per:2 * per] = 0
    kerns[per:2 * per:3] = 7  # frame 1's kernels read one channel each: depthwise, the others a GEMM
    accs = rng.integers(0, 1 << 16, (frames - 1) * 40)
    got = [_conv_outputs(fields, (feats, kerns, accs), (8, 8, 16), frames, batch=batch) for batch in (False, True)]
    assert got[0] == got[1] and len(got[0]) == frames * 40
    g = ux.conv_geometry(xp.UnitFields(Unit("CONVACC", 0, tuple(fields.items()))))
    ks = [ux.conv_kernels(rng.integers(-9, 9, (2, 3, 3, 3)), 1 << b) for b in (8, 30)]  # float32 and float64
    f = rng.integers(-200, 200, (2, 4, 5, 3)).astype(np.float64)
    want = np.stack([ux.conv_sums(f[j], ks[j], g) for j in range(2)])
    assert np.array_equal(ux.conv_sums_frames(f, ks, g), want) and ks[0][2].dtype != ks[1][2].dtype


@pytest.mark.parametrize("deep", [False, True])
def test_a_repeated_feature_frame_convolved_once_equals_frame_by_frame(deep):
    """A CONVACC whose feature frames repeat one frame (`repeats`: convolved once with every frame's kernels, in
    deep 1x1 mode too, its words taken at once) emits what it emits frame by frame, accumulator inputs included;
    a frame whose kernels read one channel each (depthwise) among them takes the frame-by-frame sums."""
    deep = int(deep)
    fields = dict(fWidth=4, fHeight=3, kernelWidth=1 if deep else 3, kernelHeight=1 if deep else 3, nKernels=2,
                  batchDepth=3, left_padding=1 - deep, top_padding=1 - deep, right_padding=1 - deep, bot_padding=1 - deep, simd=1,
                  accumulate=1,
                  accumulate_first=1, outbytes_o=2, shift_o=2, rounding_o=1, saturation_o=1, shift_a=1, fsub=-3,
                  deepmode=deep)
    rng = np.random.default_rng(7)
    frames, nf = 5, 4 * 3 * 3
    per = 2 * 3 * (1 if deep else 9)
    for depthwise in (False, True):
        kerns = rng.integers(0, 256, frames * per)
        if depthwise and not deep:
            kerns[per:2 * per] = 0
            kerns[per:2 * per:3] = 7  # frame 1's kernels read one channel each
        accs = rng.integers(0, 1 << 16, frames * 12 * 2)
        one = rng.integers(0, 256, nf)
        if deep:  # 24-bit words of bytes, low byte first
            words = lambda b: (b[0::3] | (b[1::3] << 8) | (b[2::3] << 16)).astype(np.int64)  # noqa: E731
            streams, bits = (words(np.tile(one, frames)), words(kerns)), 24
        else:
            streams, bits = (np.tile(one, frames), kerns), 8
        got = [_conv_outputs(fields, streams + (accs,), (bits, bits, 16), frames, batch=r, repeats=r) for r in (False, True)]
        assert got[0] == got[1] and len(got[0]) == frames * 24, (deep, depthwise)


@pytest.mark.parametrize("geometry", [
    dict(fWidth=7, fHeight=6, kernelWidth=3, kernelHeight=3, left_padding=1, top_padding=1, hstride=2, vstride=2),
    dict(fWidth=9, fHeight=5, kernelWidth=2, kernelHeight=3, left_crop=1, right_crop=7, top_crop=1, bot_padding=2,
         right_padding=1, zfbias=-77),
    dict(fWidth=6, fHeight=6, kernelWidth=1, kernelHeight=1, hstride=2, vstride=3, top_padding=1)])
def test_small_im2col_gathered_through_a_kept_index_equals_the_strided_one(geometry):
    from npusim.importers.stedgeai import units_exec as ux
    from npusim.importers.stedgeai.model import Unit

    g = ux.conv_geometry(xp.UnitFields(Unit("CONVACC", 0, tuple(geometry.items()))))
    feat = np.random.default_rng(1).integers(-128, 128, (3, g["h"], g["w"], 5)).astype(np.float32)
    for frames in (feat, feat[0]):  # a batch of frames, one frame
        got = ux._columns(frames, g, np.float32)
        assert np.array_equal(got, ux._columns_strided(frames, g, np.float32, numba=False)) and got.dtype == np.float32


@pytest.mark.parametrize("seed", range(12))
def test_numba_im2col_equals_the_strided_views(seed):
    """`units_jit.im2col` (the windows of a float type) equals numpy's copy of the windows' strided view, on random
    crops, paddings, pad values, kernels, strides and batches of frames."""
    from npusim.importers.stedgeai import units_exec as ux
    from npusim.importers.stedgeai.model import Unit

    rng = np.random.default_rng(seed)
    r = lambda lo, hi: int(rng.integers(lo, hi))  # noqa: E731
    w, h = r(3, 12), r(3, 12)
    fields = dict(fWidth=w, fHeight=h, kernelWidth=r(1, 4), kernelHeight=r(2, 4), hstride=r(1, 3), vstride=r(1, 3),
                  left_crop=r(0, 2), top_crop=r(0, 2), left_padding=r(0, 3), right_padding=r(0, 3), top_padding=r(0, 3),
                  bot_padding=r(0, 3), zfbias=r(-50, 50))
    g = ux.conv_geometry(xp.UnitFields(Unit("CONVACC", 0, tuple(fields.items()))))
    dtype = (np.float32, np.float64)[seed % 2]
    feat = rng.integers(-128, 128, (r(1, 4), h, w, r(1, 7))).astype(dtype)
    for frames in (feat, feat[0]):
        got = ux._columns_strided(frames, g, dtype)
        want = ux._columns_strided(frames, g, dtype, numba=False)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("seed", range(6))
def test_large_im2col_multiplied_in_bands_equals_the_whole_product(seed, monkeypatch):
    """A frame whose im2col matrix exceeds `BAND_BYTES` is convolved band by band of output rows: the same sums as
    the whole matrix (numpy's windows) times the kernels."""
    from npusim.importers.stedgeai import units_exec as ux
    from npusim.importers.stedgeai.model import Unit

    rng = np.random.default_rng(seed)
    r = lambda lo, hi: int(rng.integers(lo, hi))  # noqa: E731
    w, h, c = r(5, 14), r(5, 14), r(1, 5)
    fields = dict(fWidth=w, fHeight=h, kernelWidth=r(1, 4), kernelHeight=r(2, 4), hstride=r(1, 3), vstride=r(1, 3),
                  left_crop=r(0, 2), top_crop=r(0, 2), left_padding=r(0, 2), right_padding=r(0, 2), top_padding=r(0, 2),
                  bot_padding=r(0, 2), zfbias=r(-5, 5))
    g = ux.conv_geometry(xp.UnitFields(Unit("CONVACC", 0, tuple(fields.items()))))
    kern = ux.conv_kernels(rng.integers(-128, 128, (r(1, 9), g["kh"], g["kw"], c)), (1 << 8, 1 << 30)[seed % 2])
    feat = rng.integers(-128, 128, (h, w, c)).astype(kern[2].dtype)
    want = ux._columns_strided(feat, g, kern[2].dtype, numba=False) @ kern[2]
    monkeypatch.setattr(ux, "BAND_BYTES", g["ow"] * g["kh"] * g["kw"] * c * kern[2].itemsize * r(1, 3))
    assert g["oh"] > 1 and ux.BAND_BYTES < g["oh"] * g["ow"] * g["kh"] * g["kw"] * c * kern[2].itemsize
    got = ux.conv_sums(feat, kern, g)
    assert got.dtype == kern[2].dtype and np.array_equal(got.reshape(want.shape), want)


@pytest.mark.parametrize("seed", range(6))
def test_repeated_frame_convolved_once_with_every_kernel_set_equals_frame_by_frame(seed):
    """Frames that repeat one feature frame (a reading engine walking the same bytes again) go through one product
    with every frame's kernels side by side (`conv_sums_repeated`): the sums of each frame with its kernels."""
    from npusim.importers.stedgeai import units_exec as ux
    from npusim.importers.stedgeai.model import Unit

    rng = np.random.default_rng(seed)
    r = lambda lo, hi: int(rng.integers(lo, hi))  # noqa: E731
    w, h, c, nk = r(3, 9), r(3, 9), r(1, 6), r(1, 5)
    fields = dict(fWidth=w, fHeight=h, kernelWidth=r(1, 4), kernelHeight=r(1, 3), hstride=r(1, 3), vstride=r(1, 3),
                  left_padding=r(0, 2), top_padding=r(0, 2), right_padding=r(0, 2), bot_padding=r(0, 2))
    g = ux.conv_geometry(xp.UnitFields(Unit("CONVACC", 0, tuple(fields.items()))))
    kerns = [ux.conv_kernels(rng.integers(-128, 128, (nk, g["kh"], g["kw"], c)), (1 << 8, 1 << 30)[j % 2 * (seed % 2)])
             for j in range(r(2, 6))]
    feat = rng.integers(-128, 128, (h, w, c)).astype(np.float64)
    want = np.stack([_sums(feat, k, g) for k in kerns])
    got = ux.conv_sums_repeated(feat, kerns, g)
    assert got.shape == want.shape and np.array_equal(got.astype(np.int64), want)


def test_frames_are_delivered_whole_only_where_the_epoch_cannot_tell():
    from npusim.importers.stedgeai.model import HwEpoch, Link, Streng

    base = 0x34200000

    def plan(read_at, write_at, gated=False, second_writer_at=None):
        def engine(i, d, at):
            return Streng(engine=i, dir=d, addr=base + at, raw=True, frame_count=64, frame_offset=64, frame_tot_cnt=4)

        ss = [engine(0, 0, read_at), engine(1, 1, write_at)]
        if second_writer_at is not None:
            ss.append(engine(2, 1, second_writer_at))
        links = (Link("STRENG", 1, 0, "STRENG", 0, 0, context=1, frames=2 if gated else 0),)
        ep = HwEpoch(number=1, strengs=tuple(ss), links=links)
        return xp.epoch_plan(ep, {}, lambda lo, hi: False).whole_reads

    assert plan(0, 256)  # the reader's 256 bytes end where the writer's begin
    assert not plan(0, 255)  # the writer stores into a byte the reader still reads
    assert not plan(0, 256, gated=True)  # a switch context counts frames
    assert not plan(0, 512, second_writer_at=700)  # two writers on the same bytes: their order counts


def test_sums_run_in_float32_only_where_every_partial_sum_is_exact():
    from npusim.importers.stedgeai import units_exec as ux
    from npusim.importers.stedgeai.model import Unit

    u = xp.UnitFields(Unit("CONVACC", 0, (("fWidth", 6), ("fHeight", 5), ("kernelWidth", 3), ("kernelHeight", 3),
                                         ("left_padding", 1), ("top_padding", 1), ("nKernels", 2),
                                         ("batchDepth", 64), ("zfbias", -128))))
    g = ux.conv_geometry(u)
    bound = ux.conv_feature_bound(u, 8)
    assert bound == 256
    f = np.full((5, 6, 64), 255, np.int64)  # every feature at the bound the lanes allow, but one sign
    f[0, 0, 0] = -256
    small = np.full((2, 3, 3, 64), 7, np.int64)  # 256 * 7 * 576 < 2^24
    big = np.full((2, 3, 3, 64), -128, np.int64)  # 256 * 128 * 576 >= 2^24: float64
    for kern, dtype in ((small, np.float32), (big, np.float64)):
        plan = ux.conv_kernels(kern, bound)
        assert plan[2].dtype == dtype
        assert np.array_equal(_sums(f, plan, g), _sums(f, kern, g))  # the float64 sums


class _Sink:
    def __init__(self):
        self.values = []

    def push(self, values, bits, pixel):
        self.values += values.tolist()


def _signed(patterns: np.ndarray, nbytes: int) -> np.ndarray:
    """The signed `nbytes`-byte values of a unit's output patterns, after checking their stream type."""
    from npusim.importers.stedgeai import units_exec as ux, units_jit as jit

    assert patterns.dtype == jit.pattern_type(nbytes), (patterns.dtype, nbytes)
    return ux.fit(patterns.astype(np.int64), nbytes, False)


def _arith(**fields):
    from npusim.importers.stedgeai.model import Unit

    return xp.UnitFields(Unit("ARITH", 0, tuple(fields.items())))


def _random_affine(seed: int):
    """A random ARITH_AFFINE unit (scalar / per-channel / per-element coefficients, COMBINEBC, Y or not, left and
    right shifts, rounding, clip, saturation or wrap, 1- or 2-byte lanes) and a run of X / Y patterns for it
    (8/16/24-bit streams, their extremes included): (unit, x, xbits, y, ybits, start)."""
    rng = np.random.default_rng(seed)
    r = lambda lo, hi: int(rng.integers(lo, hi))  # noqa: E731
    depth, w, h = r(1, 5), r(1, 4), r(1, 3)
    chans = depth * r(1, 3)
    bcast = ["ARITH_BCAST_SCALAR", "ARITH_BCAST_CHAN", "ARITH_BCAST_WIDTH"][seed % 3]
    u = _arith(operation="ARITH_AFFINE", scalar=int(bcast == "ARITH_BCAST_SCALAR"), bcast=bcast,
               combinebc=r(0, 2), dualinput=r(0, 2), fWidth=w, fHeight=h, fChannels=chans, batchDepth=depth,
               A_scalar=r(0, 1 << 16), B_scalar=r(0, 1 << 16), C_scalar=r(0, 1 << 16),
               mem_A=tuple(rng.integers(0, 1 << 16, chans * w).tolist()),
               mem_B=tuple(rng.integers(0, 1 << 16, chans * w).tolist()),
               mem_C=tuple(rng.integers(0, 1 << 16, chans * w).tolist()),
               Ax_shift=r(0, 4), By_shift=r(0, 4), C_shift=r(0, 4), shift_o=r(-3, 20), rounding_o=r(0, 2),
               round_mode_o=1, clipout=r(0, 2), clipmin=r(-300, 0), clipmax=r(0, 300), outbytes_o=r(1, 3),
               saturation_o=r(0, 2), inbytes_x=r(1, 3), inbytes_y=r(1, 3))
    xbits, ybits = (8, 16, 24)[r(0, 3)], (8, 16, 24)[r(0, 3)]
    n = depth * w * h * r(1, 4) + (seed % 2) * r(1, depth + 1)  # whole frames, or a ragged tail
    start = 0 if seed % 4 < 2 else depth * w * h * r(0, 3) + r(0, 3)

    def patterns(bits):
        p = rng.integers(0, 1 << bits, n).astype(np.int64)
        p[:4] = [0, (1 << bits) - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1][:n]  # the lanes' extremes
        return p
    x = patterns(xbits)
    y = patterns(ybits) if u.get("dualinput") else None
    return u, x, xbits, y, ybits, start


@pytest.mark.parametrize("seed", range(24))
def test_fused_affine_equals_the_numpy_formula(seed):
    """`arith_patterns` (one Numba pass, int32 or int64) against `lane_values` + `arith_apply` (numpy), on
    random fields (`_random_affine`)."""
    from npusim.importers.stedgeai import units_exec as ux

    u, x, xbits, y, ybits, start = _random_affine(seed)
    want = ux.arith_apply(u, ux.lane_values(x, xbits, u.get("inbytes_x")),
                          None if y is None else ux.lane_values(y, ybits, u.get("inbytes_y")), start)
    got = ux.arith_patterns(u, x, xbits, y, ybits, start)
    assert _signed(got, u.get("outbytes_o")).tolist() == want.tolist()
    # the same from the streams' own narrow types
    narrow = ux.arith_patterns(u, ux.patterns_of(x, xbits // 8), xbits, None if y is None else
                               ux.patterns_of(y, ybits // 8), ybits, start)
    assert narrow.tolist() == got.tolist()


def test_int32_affine_pass_equals_the_int64_one():
    """Where `_int32_exact` admits a run, `units_jit.arith_affine32` stores what `arith_affine` (int64) does with
    the unit's int64 arguments, the lanes' extreme patterns included; both kinds of run occur among the random
    units."""
    from npusim.importers.stedgeai import units_exec as ux, units_jit as jit

    chosen = {jit.arith_affine: 0, jit.arith_affine32: 0}
    for seed in range(200):
        u, x, xbits, y, ybits, start = _random_affine(seed)
        kernel, args = ux._affine_arguments(u, x.size, start, xbits, ybits, y is not None)
        chosen[kernel] += 1
        if kernel is jit.arith_affine32:
            wide = ux.affine_int64_arguments(u, x.size, start, xbits, ybits, y is not None)[0]
            out = jit.pattern_type(u.get("outbytes_o"))
            want = jit.arith_affine(x, x if y is None else y, *wide, np.empty(x.size, out))
            got = jit.arith_affine32(x, x if y is None else y, *args, np.empty(x.size, out))
            assert got.tolist() == want.tolist(), seed
    assert min(chosen.values()) >= 20, chosen


def test_chained_arith_units_equal_them_one_after_the_other():
    """`arith_chain_patterns` (ARITH units in turn, one Numba pass where each takes the int32 pass and their
    coefficients lie alike) stores what `arith_patterns` of each unit in turn does, on random chains of 2-4 units
    (scalar or per-channel coefficients, shifts, clip, saturation or wrap, 1- or 2-byte outputs); both the fused
    pass and the unit-by-unit one occur."""
    from npusim.importers.stedgeai import units_exec as ux

    fused = {True: 0, False: 0}
    for seed in range(120):
        rng = np.random.default_rng(seed)
        r = lambda lo, hi: int(rng.integers(lo, hi))  # noqa: E731
        depth, w, h = r(1, 9), r(4, 12), r(2, 8)
        chans = depth * r(1, 3)
        units = []
        for _ in range(r(2, 5)):
            per_channel = r(0, 2)
            units.append(_arith(
                operation="ARITH_AFFINE", scalar=1 - per_channel, bcast="ARITH_BCAST_CHAN" if per_channel else None,
                combinebc=r(0, 2), dualinput=0, fWidth=w, fHeight=h, fChannels=chans, batchDepth=depth,
                A_scalar=r(0, 1 << 15), B_scalar=r(0, 64), C_scalar=r(0, 1 << 16),
                mem_A=tuple(rng.integers(0, 1 << (15 if seed % 3 else 16), chans).tolist()),
                mem_B=tuple(rng.integers(0, 64, chans).tolist()), mem_C=tuple(rng.integers(0, 1 << 16, chans).tolist()),
                Ax_shift=r(0, 3), C_shift=r(0, 3), shift_o=r(-2, 22), rounding_o=r(0, 2), round_mode_o=1,
                clipout=r(0, 2), clipmin=r(-300, 0), clipmax=r(0, 300), outbytes_o=r(1, 3), saturation_o=r(0, 2),
                inbytes_x=r(1, 3)))
        xbits = (8, 16)[r(0, 2)]
        n = depth * w * h * r(1, 4)
        start = (0, depth * w * h)[seed % 2]
        x = rng.integers(0, 1 << xbits, n).astype(np.int64)
        x[:4] = [0, (1 << xbits) - 1, 1 << (xbits - 1), (1 << (xbits - 1)) - 1]
        x = ux.patterns_of(x, xbits // 8)
        want, bits = x, xbits
        for u in units:
            want = ux.arith_patterns(u, want, bits, None, 0, start)
            bits = 8 * u.get("outbytes_o")
        fused[bool(ux._chain_arguments(units, n, start, xbits))] += 1
        got = ux.arith_chain_patterns(units, x, xbits, start)
        assert got.dtype == want.dtype and got.tolist() == want.tolist(), seed
    assert min(fused.values()) >= 10, fused


def test_arith_units_are_chained_only_where_one_feeds_the_next_alone():
    """`execute._chain_arith`: the last ARITH of a run of single-input ARITHs, each linked only to the next and
    ungated, computes the run; a unit that also feeds another node, a gated link or a second input breaks it."""
    def unit(i, dual=0):
        return ex.ArithNode(_arith(operation="ARITH_AFFINE", scalar=1, dualinput=dual, outbytes_o=1))

    def link(src, dst, port=0, plan=()):
        dst.ports[port].source = src
        src.consumers.append((dst.ports[port], ex.Gate(list(plan))))

    a, b, c = unit(0), unit(1), unit(2)
    link(a, b)
    link(b, c)
    ex._chain_arith([a, b, c])
    assert c.chain == [a, b, c] and a.chain is None and b.chain is None
    a, b, c = unit(0), unit(1), unit(2)
    link(a, b)
    link(a, c)  # a feeds two units
    ex._chain_arith([a, b, c])
    assert b.chain is None and c.chain is None
    a, b = unit(0), unit(1)
    link(a, b, plan=[(True, 2), (False, 2)])  # a switch context counts frames
    ex._chain_arith([a, b])
    assert b.chain is None
    a, b, y = unit(0), unit(1, dual=1), unit(2)
    link(a, b)
    link(y, b, port=1)  # b adds a second stream
    ex._chain_arith([a, b, y])
    assert b.chain is None


@pytest.mark.parametrize("shift_o", [-63, -62, 0, 62, 63])
@pytest.mark.parametrize("nbytes", [1, 4, 7, 8])
def test_fused_passes_equal_numpy_at_the_edges(shift_o, nbytes):
    """The fused ARITH and CONVACC passes at the edges of what they take (shifts of 0 and 62-63, values near
    +-2^62, output widths up to 7 bytes; 8 bytes falls back to numpy): equal to the numpy formula."""
    from npusim.importers.stedgeai import units_exec as ux
    from npusim.importers.stedgeai.model import Unit

    rng = np.random.default_rng(nbytes * 200 + shift_o)
    n = 64
    for ax, by, cs in ((0, 0, 0), (63, 62, 40), (1, 63, 0)):
        u = _arith(operation="ARITH_AFFINE", scalar=1, bcast="ARITH_BCAST_SCALAR", combinebc=0, dualinput=1,
                   fWidth=n, fHeight=1, fChannels=1, batchDepth=1, A_scalar=int(rng.integers(0, 1 << 16)),
                   B_scalar=int(rng.integers(0, 1 << 16)), C_scalar=int(rng.integers(0, 1 << 16)), Ax_shift=ax,
                   By_shift=by, C_shift=cs, shift_o=shift_o, rounding_o=1, round_mode_o=1, clipout=0,
                   outbytes_o=nbytes, saturation_o=int(shift_o % 2 == 0), inbytes_x=2, inbytes_y=2)
        x, y = (rng.integers(0, 1 << 16, n).astype(np.int64) for _ in range(2))
        want = ux.arith_apply(u, ux.lane_values(x, 16, 2), ux.lane_values(y, 16, 2), 0)
        assert _signed(ux.arith_patterns(u, x, 16, y, 16, 0), nbytes).tolist() == want.tolist(), (ax, by, cs)
    for shift_a in (0, 1, 63):
        u = xp.UnitFields(Unit("CONVACC", 0, (("shift_a", shift_a), ("shift_o", shift_o), ("rounding_o", 1),
                                              ("round_mode_o", 1), ("outbytes_o", nbytes),
                                              ("saturation_o", int(shift_o % 2 == 0)))))
        acc = rng.integers(-(1 << 62), 1 << 62, 40).astype(np.int64)
        accin = rng.integers(-3, 4, 40).astype(np.int64)
        v = acc + (accin << shift_a)
        want = ux.fit(ux.shift_round(v, shift_o, True, 1), nbytes, shift_o % 2 == 0)
        assert _signed(ux.conv_output(acc, accin, u), nbytes).tolist() == want.tolist(), shift_a


@pytest.mark.parametrize("bits, nbytes, unsigned", [(8, 1, False), (8, 1, True), (8, 2, False), (16, 2, False),
                                                    (16, 2, True), (24, 3, False), (16, 1, False)])
def test_conv_features_equal_lane_values_minus_fsub(bits, nbytes, unsigned):
    from npusim.importers.stedgeai import units_exec as ux

    p = np.random.default_rng(bits + nbytes).integers(0, 1 << bits, 257).astype(np.int64)
    for dtype in (np.float32, np.float64):
        want = (ux.lane_values(p, bits, nbytes, unsigned, extend_narrow=True) - 37).astype(dtype)
        got = ux.conv_features(p, bits, nbytes, unsigned, 37, dtype)
        assert got.dtype == dtype and got.tolist() == want.tolist()
        narrow = ux.conv_features(ux.patterns_of(p, bits // 8), bits, nbytes, unsigned, 37, dtype)
        assert narrow.tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(12))
def test_fused_conv_output_equals_the_numpy_formula(seed):
    """`conv_output` (one Numba pass from float or integer sums) against shift_round + fit in numpy."""
    from npusim.importers.stedgeai import units_exec as ux
    from npusim.importers.stedgeai.model import Unit

    rng = np.random.default_rng(seed)
    u = xp.UnitFields(Unit("CONVACC", 0, (("shift_a", int(rng.integers(0, 4))), ("shift_o", int(rng.integers(-2, 20))),
                                          ("rounding_o", int(rng.integers(0, 2))), ("round_mode_o", 1),
                                          ("outbytes_o", int(rng.integers(1, 4))),
                                          ("saturation_o", int(rng.integers(0, 2))))))
    acc = rng.integers(-1 << 23, 1 << 23, (3, 4, 5)).astype([np.float32, np.float64, np.int64][seed % 3])
    accin = rng.integers(-1 << 23, 1 << 23, acc.size).astype(np.int64) if seed % 2 else None
    v = acc.astype(np.int64) + (0 if accin is None else accin.reshape(acc.shape) << u.get("shift_a"))
    want = ux.fit(ux.shift_round(v, u.get("shift_o"), bool(u.get("rounding_o")), 1), u.get("outbytes_o"),
                  bool(u.get("saturation_o")))
    got = ux.conv_output(acc, accin, u)
    assert got.shape == acc.shape and _signed(got, u.get("outbytes_o")).tolist() == want.tolist()
    if accin is not None:  # the accumulator port's patterns, read as its lanes in the same pass
        bits = (8, 16, 24)[seed % 3]
        patterns = ux.patterns_of(accin, bits // 8)
        lanes = ux.lane_values(patterns, bits, bits // 8)
        want = ux.fit(ux.shift_round(acc.astype(np.int64) + (lanes.reshape(acc.shape) << u.get("shift_a")),
                                     u.get("shift_o"), bool(u.get("rounding_o")), 1), u.get("outbytes_o"),
                      bool(u.get("saturation_o")))
        got = ux.conv_output(acc, patterns, u, bits)
        assert _signed(got, u.get("outbytes_o")).tolist() == want.tolist()


def test_int32_conv_output_equals_the_int64_one():
    """`conv_output` of float32 sums below 2^24 through `units_jit.conv_requantise32` (where `_output_int32`
    admits the unit) stores what the int64 pass does (no bound given), the extreme sums and accumulator lanes
    included; both passes occur among the random units."""
    from npusim.importers.stedgeai import units_exec as ux
    from npusim.importers.stedgeai.model import Unit

    chosen = {True: 0, False: 0}
    for seed in range(120):
        rng = np.random.default_rng(seed)
        nbytes = int(rng.integers(1, 4))
        u = xp.UnitFields(Unit("CONVACC", 0, (("shift_a", int(rng.integers(0, 10))), ("shift_o", int(rng.integers(-4, 24))),
                                              ("rounding_o", int(rng.integers(0, 2))), ("round_mode_o", 1),
                                              ("outbytes_o", nbytes), ("saturation_o", int(rng.integers(0, 2))))))
        acc = rng.integers(-(1 << 24) + 1, 1 << 24, 64).astype(np.float32)
        acc[:2] = [(1 << 24) - 1, -(1 << 24) + 1]
        bits = (0, 8, 16, 24)[seed % 4]
        accin = None
        if bits:
            accin = ux.patterns_of(rng.integers(0, 1 << bits, 64), bits // 8)
            accin[:3] = [0, (1 << bits) - 1, 1 << (bits - 1)]
        shift_a, lshift, rnd, rshift, sat_lo, sat_hi, lo, mask = ux._output_fields(u)[7]
        top, signed = ux.lane_form(bits, bits // 8) if bits else (0, True)
        int32 = ux._output_int32(ux._output_fields(u)[7], accin is not None and top, signed, 1 << 24, 8 * nbytes)
        chosen[int32] += 1
        got = ux.conv_output(acc, accin, u, bits, 1 << 24)
        want = ux.conv_output(acc, accin, u, bits)
        assert got.dtype == want.dtype and got.tolist() == want.tolist(), seed
    assert min(chosen.values()) >= 5, chosen


@pytest.mark.parametrize("seed", range(16))
def test_depthwise_kernel_equals_the_dense_product(seed):
    """A kernel set that reads one channel per kernel goes through `units_jit.depthwise`; the same kernels as
    a dense matrix through the GEMM path: equal on random crops, paddings, strides and pad values."""
    from npusim.importers.stedgeai import units_exec as ux

    rng = np.random.default_rng(seed)
    r = lambda lo, hi: int(rng.integers(lo, hi))  # noqa: E731
    h, w, c, kh, kw = r(2, 9), r(2, 9), r(2, 6), r(1, 4), r(1, 4)
    t0, l0 = r(0, 2), r(0, 2)
    g = dict(t0=t0, l0=l0, ch=r(1, h - t0 + 1), cw=r(1, w - l0 + 1), tp=r(0, 3), bp=r(0, 3), lp=r(0, 3), rp=r(0, 3),
             kh=kh, kw=kw, hs=r(1, 3), vs=r(1, 3), pad_value=r(-6, 6))
    g["oh"] = (g["ch"] + g["tp"] + g["bp"] - kh) // g["vs"] + 1
    g["ow"] = (g["cw"] + g["lp"] + g["rp"] - kw) // g["hs"] + 1
    if min(g["oh"], g["ow"]) <= 0:
        g["tp"] = g["bp"] = g["lp"] = g["rp"] = 2
        g["oh"] = (g["ch"] + 4 - kh) // g["vs"] + 1
        g["ow"] = (g["cw"] + 4 - kw) // g["hs"] + 1
    feat = rng.integers(-300, 300, (h, w, c)).astype(np.int64)
    nk = r(1, c + 1)
    dense = np.zeros((nk, kh, kw, c), np.int64)
    dense[np.arange(nk), :, :, rng.integers(0, c, nk)] = rng.integers(-128, 128, (nk, kh, kw))
    kern = ux.conv_kernels(dense, 1 << 10)
    assert kern[0] == "depthwise"
    want = _sums(feat, ("gemm", None, dense.reshape(nk, -1).T.astype(np.float64)), g)
    assert _sums(feat, kern, g).tolist() == want.tolist()


@needs_shared
def test_mnv1_fast_path_equals_the_frame_path_after_every_epoch():
    from npusim.importers.stedgeai import load

    out = load(SHARED / MNV1)
    feed = _feed(out, SHARED / MNV1, 0)
    runs = {}
    for fast in (False, True, True):  # the second fast run reuses the plan and its decoded kernels
        digests = []
        res = ex.run(out, feed, after_epoch=lambda n, mem, bufs: digests.append((n, _digest(mem, out))), fast=fast)
        whole = hashlib.sha256(b"".join(s.data.tobytes() for s in res.memory.segments if s.data is not None
                                        and s.size < 1 << 26)).hexdigest()  # the windows but the 256 MiB ones
        runs.setdefault(fast, []).append((digests, whole, {k: v.tobytes() for k, v in res.outputs.items()}))
    frame, (first, again) = runs[False][0], runs[True]
    assert len(frame[0]) == 34 and first == frame and again == frame
    mem, symbols = ex.build_memory(out)
    plan = xp.program_plan(out, symbols, mem.read_only_test())  # the one the fast runs built and kept
    assert any(ep.kernels for ep in plan.epochs.values())  # kernels were decoded once and kept
    walks = [w for ep in plan.epochs.values() for w in ep.walks.values()]
    kept = sum(w.addresses.nbytes for w in walks if w.addresses is not None)
    assert kept * 10 < 8 * sum(w.nbytes for w in walks)  # the plan keeps shapes, not one address per byte


@needs_shared
def test_warm_compiles_the_kernels_a_run_uses(monkeypatch):
    """`units_jit.warm` gives each kernel the argument types of a real run: every call of a run has the
    types of a signature `warm` compiles (`warm_calls`), so the run compiles nothing more. Checked on the
    types themselves, as the kernels' dispatcher sees them, without compiling the signatures (the slow
    `test_warmup_fills_numbas_cache` compiles them all)."""
    from npusim.importers.stedgeai import execute, units_jit as jit
    from npusim.importers.stedgeai.reader import read
    from npusim.tools.st_validate import seeded_model_inputs, st_inputs

    def types(kernel, args):
        return kernel.__name__, tuple(kernel.typeof_pyval(a) for a in args)

    warmed = {types(k, args) for k, args in jit.warm_calls()}
    called = set()
    for name in {name for name, _ in warmed}:
        kernel = getattr(jit, name)

        def recorded(*args, _kernel=kernel):
            called.add(types(_kernel, args))
            return _kernel(*args)

        monkeypatch.setattr(jit, name, recorded)
    folder = SHARED / MNV1
    out = read(folder)  # a fresh parse: no earlier run's memo holds a kernel it chose
    execute.run(out, st_inputs(out, seeded_model_inputs(str(next(folder.glob("*.tflite"))), 0)))
    assert {"arith_affine32", "depthwise", "conv_requantise32"} <= {name for name, _ in called}, called
    assert called <= warmed, sorted(map(str, called - warmed))


@needs_shared
def test_kernels_are_not_kept_once_read_only_memory_was_written():
    from npusim.importers.stedgeai import load

    out = load(SHARED / MNV1)
    mem, symbols = ex.build_memory(out)
    pool = out.pool_named("octoFlash")
    assert not mem.read_only_written
    mem.load(pool.address, bytes(16))  # a write into the weights after they were loaded
    assert mem.read_only_written
    ep = next(ep for blk in out.blocks for ep in blk.epochs if any(u.kind == "CONVACC" for u in ep.units))
    plan = xp.epoch_plan(ep, symbols, mem.read_only_test())
    ex.run_epoch(ep, mem, symbols, plan)
    assert plan.kernels == {}


@needs_shared
def test_yolox_first_epochs_fast_path_equals_the_frame_path():
    """Twelve YOLOX epochs (switch contexts alternating, chained CONVACCs, strided writers) both ways."""
    from npusim.importers.stedgeai import load

    out = load(SHARED / YOLOX)
    feed = _feed(out, SHARED / YOLOX, 1)
    mems = []
    for fast in (True, False):
        mem, symbols = ex.build_memory(out, seed=1)
        for b in ex.resolved_buffers(out, symbols):
            if b.role == "input" and not b.is_param:
                ex.write_buffer(mem, b, feed[b.name])
        plan = xp.program_plan(out, symbols, mem.read_only_test()) if fast else None
        digests = []
        epochs = [ep for blk in out.blocks for ep in blk.epochs][:12]
        assert any(ln.frames for ep in epochs for ln in ep.links)  # gated switch contexts among them
        for ep in epochs:
            ex.run_epoch(ep, mem, symbols, plan.epoch(ep) if fast else None)
            digests.append(_digest(mem, out))
        mems.append(digests)
    assert mems[0] == mems[1]


def test_plans_are_kept_with_the_output_and_bounded():
    from npusim.importers.stedgeai.model import StOutput

    out = StOutput("net", (), (), ())
    placements = [{"in": 0x1000 * k} for k in range(xp.KEEP_PLANS + 2)]
    plans = [xp.program_plan(out, p, lambda lo, hi: False) for p in placements]
    assert len({id(p) for p in plans}) == len(plans)  # one plan per placement
    newest = range(len(plans) - xp.KEEP_PLANS, len(plans))
    assert all(xp.program_plan(out, placements[k], None) is plans[k] for k in newest)  # kept
    assert xp.program_plan(out, placements[0], None) is not plans[0]  # dropped, built again
    assert xp.program_plan(out, placements[0], None) is xp.program_plan(out, placements[0], None)
    assert xp.program_plan(StOutput("net", (), (), ()), placements[0], None) is not plans[0]  # another output


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])


def test_kernels_are_float32_only_while_the_features_are_exact_too():
    """An all-zero kernel set adds nothing to a sum, but a later kernel set reuses its features: 24-bit features
    (above 2^24) must not be rounded into float32."""
    from npusim.importers.stedgeai import units_exec as ux

    zero, one = np.zeros((2, 1, 1, 3), np.int64), np.ones((2, 1, 1, 3), np.int64)
    assert ux.conv_kernels(zero, (1 << 24) - 1)[2].dtype == np.float32
    assert ux.conv_kernels(zero, 1 << 24)[2].dtype == np.float64
    assert ux.conv_kernels(one, (1 << 24) // 3)[2].dtype == np.float32  # sum |w| = 3: 3 * bound < 2^24
    assert ux.conv_kernels(one, (1 << 24) // 3 + 1)[2].dtype == np.float64
