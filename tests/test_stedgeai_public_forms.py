"""Forms of ST Edge AI Core output met in public compiles outside the repo, rebuilt from the shared
compiles (../shared/stedgeai, copied to a temporary folder and edited) or from synthetic records: each
test fails on the importer as it was before the form was handled."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from npusim.importers.stedgeai import load
from npusim.importers.stedgeai.board import board_map
from npusim.importers.stedgeai.model import Buffer, HwEpoch, Link, Streng, Unit
from npusim.importers.stedgeai.replay import _Buffers, replay
from npusim.importers.stedgeai.streng import demanded, epoch_walks
from npusim.memory.regions import RegionTable

from test_stedgeai_ecblob import SHARED as ST, needs_shared  # noqa: E402

pytestmark = needs_shared


def _copy(tmp_path: Path, name: str) -> Path:
    """A writable copy of a shared compile (its files copied without their read-only modes)."""
    return Path(shutil.copytree(ST / name, tmp_path / name, copy_function=shutil.copyfile))


def test_epoch_block_table_under_the_newer_runtime_type_name(tmp_path):
    """Runtime 1.1.3.262 (ST Edge AI 3.0.0-254) types the epoch-block table `LL_ATON_RT_EpochBlockItem_t`."""
    d = _copy(tmp_path, "st_ic_mnv1_nucleo")
    net = d / "network.c"
    net.write_text(net.read_text().replace("EpochBlock_ItemTypeDef", "LL_ATON_RT_EpochBlockItem_t"))
    old, new = load(ST / "st_ic_mnv1_nucleo"), load(d)
    assert [(b.index, b.flags, b.epoch_num, len(b.epochs)) for b in new.blocks] == \
           [(b.index, b.flags, b.epoch_num, len(b.epochs)) for b in old.blocks]
    assert replay(new).faults == []


def test_unnamed_operand_at_a_reused_address_is_the_blocks_output():
    """A hybrid block's call rows without names (`@address`): where the block's own output starts at
    an address an older buffer also used, the operand is that output, not a read of the older one."""
    regions = RegionTable(board_map(False)[0])
    base = 0x342E0000
    rows = [Buffer("older", base, 0x6000, 0x9000, 0x9040, "internal", epoch=33),
            Buffer("input", base, 0x4000, 0x5800, 0x5840, "internal", epoch=63),
            Buffer("output", base, 0x6000, 0x7800, 0x7840, "internal", epoch=64)]
    table = _Buffers(rows, regions, [])
    assert table.operand(f"@{base + 0x6000:#x}+6144", "?", 64)[0].name == "output"
    assert table.operand(f"@{base + 0x4000:#x}+6144", "?", 64)[0].name == "input"
    assert table.operand(f"@{base + 0x6000:#x}+6144", "?", 40)[0].name == "older"  # the latest before


def _broadcast_epoch(consumer: str) -> HwEpoch:
    """An element-wise multiply by a 192-value vector broadcast over 225 pixels: the vector's engine
    re-reads it (a repetition loop of 225 frames, frame offset 0) under a frame limit of 10800, as
    EfficientNet's squeeze-excite epochs of ST Edge AI 3.0 do; the output engine writes 43200 values."""
    vec = Streng(engine=3, dir=0, addr=0x342FFA40, limit=0x342FFB40, raw=True, frame_count=192,
                 loop_offset=192, frame_loop_cnt=225, frame_tot_cnt=10800)
    x = Streng(engine=6, dir=0, addr=0x342EA8C0, limit=0x342F5200, raw=True, frame_count=43200)
    y = Streng(engine=0, dir=1, addr=0x342E0000, limit=0x342EA900, raw=True, frame_count=43200)
    links = (Link(consumer, 1, 0, "STRENG", 6, 0), Link(consumer, 1, 1, "STRENG", 3, 0),
             Link("STRENG", 0, 0, consumer, 1, 0))
    return HwEpoch(22, strengs=(vec, x, y), units=(Unit(consumer, 1, ()),), links=links,
                   enabled=(("STRENG", 3), ("STRENG", 6), ("STRENG", 0), (consumer, 1)))


def test_a_reading_engine_stops_when_the_epochs_outputs_are_written():
    ep = _broadcast_epoch("ARITH")
    assert demanded(ep) == {3: 225}
    walks = dict((s.engine, w) for s, w in epoch_walks(ep, {}))
    lo = min(p.extent()[0] for p in walks[3])
    hi = max(p.extent()[1] for p in walks[3])
    assert (lo, hi) == (0x342FFA40, 0x342FFA40 + 192)


def test_a_reading_engine_keeps_its_frame_limit_where_the_consumer_is_not_one_to_one():
    assert demanded(_broadcast_epoch("CONVACC")) == {}
    assert demanded(_broadcast_epoch("POOL")) == {}


def test_a_reading_engine_keeps_its_frame_limit_behind_a_frame_counting_switch_context():
    """A destination whose two contexts take the same source in turn, one of them disabled (every other
    frame dropped), takes fewer frames than the source reads: the read is not cut to what flows on."""
    ep = _broadcast_epoch("ARITH")
    gated = (Link("ARITH", 1, 1, "STRENG", 3, 0, frames=1, slot=0),
             Link("ARITH", 1, 1, "STRENG", 3, 0, context=0, frames=1, slot=1))
    ep = dataclasses.replace(ep, links=(ep.links[0],) + gated + ep.links[2:])
    assert demanded(ep) == {}
    assert {s.engine: s.frame_tot_cnt for s, _ in epoch_walks(ep, {})}[3] == 10800


def test_frame_limit_past_what_the_multiply_takes_is_no_fault(tmp_path):
    """A read engine given more frames than its ARITH passes on (the epoch ends with its output
    engine, the controller clears the rest): not a read past the buffer's limit."""
    d = _copy(tmp_path, "ei_person_logo_od_nonec")
    net = d / "network.c"
    s = net.read_text()
    i = s.index("LL_Streng_TensorInitTypeDef Mul_23_dma_init_in_1_4")
    j = s.index(".frame_tot_cnt = 2,", i)
    net.write_text(s[:j] + ".frame_tot_cnt = 4," + s[j + len(".frame_tot_cnt = 2,"):])
    assert replay(load(d)).faults == []
    # the same frames demanded on the output side: the read past the limit is then real
    s = net.read_text()
    k = s.index(".frame_tot_cnt = 2,", s.index("LL_Streng_TensorInitTypeDef Mul_23_dma_init_out_0_4"))
    net.write_text(s[:k] + ".frame_tot_cnt = 4," + s[k + len(".frame_tot_cnt = 2,"):])
    faults = replay(load(d)).faults
    assert faults and (faults[0].cls, faults[0].access, faults[0].epoch) == ("buffer-overflow", "read", 4)


def test_a_part_written_in_place_may_cover_the_whole_it_belongs_to():
    """A convolution writing 3 channels of each pixel of an 18-channel concatenation in place (ST's
    ObjectDetection YOLO head): its row in the table is 3 x 3600 bytes, its walk strides over the whole
    the engine's limit covers. Within that whole it is no overflow; past the limit it still is."""
    regions = RegionTable(board_map(False)[0])
    base = 0x342C4600
    whole = Buffer("concat", base, 0, 64800, 64864, "internal", epoch=165)
    part = Buffer("conv_part", base, 12, 12 + 10800, 12 + 10864, "internal", epoch=159)
    sibling = Buffer("sibling_part", base, 0, 43200, 43264, "internal", epoch=162)
    table = _Buffers([whole, part, sibling], regions, [])
    region, chain = table.provenance(part.start, "write", 159, upto=part.start + 64800 + 64)
    assert (region.start, region.end, chain[0][0].name) == (part.start, whole.end, "conv_part")
    region, _ = table.provenance(part.start, "write", 159, upto=part.end + 64)  # limited to the part
    assert region.end == part.end
    done = _Buffers([Buffer("concat", base, 0, 64800, 64864, "internal", epoch=150), part], RegionTable(
        board_map(False)[0]), [])  # a whole produced before the part's epoch is not being assembled by it
    region, _ = done.provenance(part.start, "write", 159, upto=part.start + 64800 + 64)
    assert region.end == part.end


def test_the_relocatable_container_of_atonn_1_1_1_is_read(tmp_path):
    """atonn 1.1.1 stores a blob as `<blob>_binary` (0xECBF0030: five header entries and a pad, the
    relocation table at byte 24, the program at entry 4) and leaves `<blob>` as the runtime's copy."""
    from npusim.importers.stedgeai.ecblob import read_ecblobs

    label_3, write_ctrl = 3 << 5 | 0x1D, 5 << 26 | 31 << 10
    # relocation table: one relocation, its name at table byte 24, one patched word listed at table byte 16
    table = [1, 24, 1, 16, 2, 0, int.from_bytes(b"_sym", "little"), 0]
    u = [0xECBF0030, 24, 0, 0, 24 + 4 * len(table), 0] + table + [0xCA057A7A, 3, label_3, write_ctrl, 0x880100, 0]
    words = [u[k] | u[k + 1] << 32 for k in range(0, len(u), 2)]
    body = ", ".join(f"0x{w:016x}UL" for w in words)
    p = tmp_path / "net_ecblobs.h"
    p.write_text(f"static const uint64_t _ec_blob_net_1_binary[] =\n{{\n  {body},\n}};\n"
                 f"static uint64_t _ec_blob_net_1[{len(words)}];\n")
    programs = read_ecblobs(p)
    assert list(programs) == ["_ec_blob_net_1"]
    (reloc,) = programs["_ec_blob_net_1"].relocations
    assert (reloc.symbol, programs["_ec_blob_net_1"].epochs[0].number) == ("_sym", 3)


def test_a_software_operators_output_without_a_table_row_is_written_whole():
    """A compile without `--all-buffers-info` lists only its I/O buffers: a library operator's output
    (`*_sw_info`, e.g. QuantizeLinear) has no row, so its extent comes from the call's own strides
    (stride.b x tensor_b); without it the bytes stayed unwritten and the next epoch's read of them was
    a false uninitialized-read (BlazeFace of muazzamaqeel/BA-EmbeddedAI)."""
    from npusim.importers.stedgeai import csource
    from npusim.importers.stedgeai.cstructs import read_sw_operators

    src = """
static void LL_ATON_End_EpochBlock_2(const void *epoch_block)
{
  Quantizelinear_sw_info quantizelinear1_sw_info = {
    .general.input.dim.tensor_b = 1,
    .general.input.stride.b = 196608,
    .general.input.mem.start_offset = ((unsigned char *)(ATON_LIB_PHYSICAL_TO_VIRTUAL_ADDR(0x342e0000UL + 0))),
    .general.output.dim.tensor_b = 1,
    .general.output.stride.b = 49152,
    .general.output.mem.start_offset = ((unsigned char *)(ATON_LIB_PHYSICAL_TO_VIRTUAL_ADDR(0x342e0000UL + 196608))),
    .general.type = LL_SW_QUANTIZELINEAR,
  };
  ll_sw_forward_quantizelinear(&quantizelinear1_sw_info);
}
"""
    tree = csource.parse(src, "network.c")
    (op,) = read_sw_operators(tree, csource.declarations(tree))["LL_ATON_End_EpochBlock_2"]
    assert (op.kind, op.inputs, op.outputs) == ("quantizelinear", ("@0x342e0000+196608",), ("@0x34310000+49152",))


def test_two_networks_in_one_folder_each_takes_its_own_epoch_controller_header(tmp_path):
    """A folder holding two compiles (PeleAB/STM32N6-FaceRecognition: face_detection.c and
    face_recognition.c with their headers): the named network reads the header it includes, not the
    first one found."""
    d = _copy(tmp_path, "st_ic_mnv1_nucleo")
    shutil.copyfile(ST / "st_reid_osnet_dk_v113" / "reid_ecblobs.h", d / "a_reid_ecblobs.h")
    out = load(d / "network.c")
    assert Path(out.files["ecblobs"]).name == "network_ecblobs.h"
    assert replay(out).faults == []
