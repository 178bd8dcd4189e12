"""The ST Edge AI Core importer on real compiles (../shared/stedgeai, read in place): every output
imports with the file's counts, replays without a fault (they ran on boards), and every fault class
planted by editing a copy of a real artifact is found with the right buffer and epoch."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from npusim.errors import StImportError
from npusim.importers.stedgeai import load
from npusim.importers.stedgeai.replay import ReplayOptions, replay
from npusim.tools.st_run import run_st

ST = Path(__file__).resolve().parents[2] / "shared" / "stedgeai"
COMPILES = sorted(p.name for p in ST.iterdir() if p.is_dir() and not p.name.startswith("_"))
EXPLICIT = ("st_audio_yamnet1024_v111", "ei_person_logo_od_nonec", "fallguard_pe_yolov8n_pose256")


@pytest.fixture(scope="module")
def shared():
    """`shared(name)`: the output of shared compile `name`, parsed once for this module's tests (the
    importer's own memo keeps only the last few parses; ei_person's alone takes ~1.2 s)."""
    parsed = {}

    def get(name: str):
        if name not in parsed:
            parsed[name] = load(ST / name)
        return parsed[name]

    return get


def test_the_shared_compiles_are_there():
    assert len(COMPILES) == 7, f"expected the seven shared compiles in {ST}"


def _network_text(folder: Path) -> str:
    c = [p for p in folder.iterdir() if p.suffix == ".c" and "EpochBlock_ItemTypeDef" in p.read_text(errors="replace")]
    return c[0].read_text(errors="replace")


def _file_counts(text: str) -> tuple[int, int]:
    """(epoch blocks, buffers) counted in the text itself, independently of the C parser."""
    table = text[text.index("EpochBlock_ItemTypeDef ll_atonn_rt_epoch_block_array"):]
    table = table[:table.index("};")]
    blocks = len(re.findall(r"\.flags = EpochBlock_Flags_epoch_start", table))
    names = set()
    for m in re.finditer(r"LL_ATON_(Input|Output|Internal)_Buffers_Info_\w+\(void\)\s*\{", text):
        body = text[m.end():text.index("\n}\n", m.end())]
        names.update((m.group(1), n) for n in re.findall(r'\.name = "([^"]+)"', body))
    return blocks, len(names)


@pytest.mark.parametrize("name", COMPILES)
def test_each_compile_imports_with_the_files_counts_and_replays_clean(shared, name):
    out = shared(name)
    blocks, buffers = _file_counts(_network_text(ST / name))
    assert len(out.blocks) == blocks
    assert len(out.buffers) == buffers
    rep = replay(out)
    assert rep.faults == [], [f.rule for f in rep.faults[:3]]


@pytest.mark.parametrize("name", EXPLICIT)
def test_explicit_struct_compiles_decode_every_hardware_epoch(shared, name):
    out = shared(name)
    folder = ST / name
    trace = [p for p in folder.iterdir() if p.suffix == ".c" and "ec_trace_start_blob" in p.read_text(errors="replace")]
    if trace:  # one epoch per ec_trace_start_epoch call of the trace file
        want = len(re.findall(r"^\s*ec_trace_start_epoch\(", trace[0].read_text(), re.M))
    else:  # one per epoch-block start function that programs units
        want = len(set(re.findall(r"static void (LL_ATON_Start_EpochBlock_\d+)\(", _network_text(folder))))
    assert sum(len(b.epochs) for b in out.blocks) == want
    res = run_st(folder)
    assert res.status == "ok" and res.cycles > 0 and not res.replay.undecided


def test_yamnet_timing_near_st_published_figure():
    # ST's model zoo gives 9.88 ms on the STM32N6570-DK for this compile; npusim times ST's own epochs
    res = run_st(ST / "st_audio_yamnet1024_v111")
    assert 0.7 * 9.88 < res.ms < 1.3 * 9.88


def test_weight_image_found_by_content_and_sized(shared):
    out = shared("fallguard_pe_yolov8n_pose256")
    assert set(out.weights) == {"octoFlash"}
    assert len(out.weights["octoFlash"]) == (ST / "fallguard_pe_yolov8n_pose256" / "atonbuf.xSPI2.raw").stat().st_size


def test_user_io_placed_and_reported(shared):
    out = shared("fallguard_pe_yolov8n_pose256")
    rep = replay(out)
    assert {k for k in rep.placements} == {"_mem_pool__user_io_input_0_Default", "_mem_pool__user_io_output_0_Default"}
    moved = replay(out, ReplayOptions(user_io=("hyperRAM", 0x90100000)))
    addrs = sorted(a for a, _, _ in moved.placements.values())
    assert addrs[0] == 0x90100000 and moved.faults == []


# ------------------------------------------------------------------ planted faults

def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(ST / name, dst)
    for p in dst.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    return dst


def _edit(path: Path, anchor: str, old: str, new: str) -> None:
    """Replace the first `old` after `anchor` in the file (an edit a user's tool chain could make)."""
    s = path.read_text()
    i = s.index(anchor)
    j = s.index(old, i)
    path.write_text(s[:j] + new + s[j + len(old):])


YAM = "st_audio_yamnet1024_v111"
WRITE_SE = "static const LL_Streng_TensorInitTypeDef Conv2D_7_suboff_15_dma_init_out_0_2"
READ_SE = "static const LL_Streng_TensorInitTypeDef Conv2D_3_dma_init_in_0_2"


def test_write_past_end_strides_of_another_alignment(tmp_path):
    d = _copy(tmp_path, YAM)
    _edit(d / "network.c", WRITE_SE, ".batch_offset = 32,", ".batch_offset = 40,")
    rep = replay(load(d))
    f = rep.faults[0]
    assert (f.cls, f.access, f.unit, f.epoch) == ("buffer-overflow", "write", "SE6", 2)
    assert f.region.name == "Conv2D_7_zero_off_out_16" and f.relation.where == "after"
    assert "Conv2D_7_zero_off_out_16" in f.why


def test_read_past_limit(tmp_path):
    d = _copy(tmp_path, YAM)
    _edit(d / "network.c", READ_SE, ".offset_end = 55296,", ".offset_end = 56296,")
    rep = replay(load(d))
    f = rep.faults[0]
    assert (f.cls, f.access, f.unit, f.epoch) == ("buffer-overflow", "read", "SE3", 2)
    assert f.region.name == "Transpose_1_out_0"


def test_read_inside_prefetch_guard_is_legal(tmp_path):
    d = _copy(tmp_path, YAM)  # 64 more bytes: up to offset_limit, the prefetch guard
    _edit(d / "network.c", READ_SE, ".offset_end = 55296,", ".offset_end = 55360,")
    assert replay(load(d)).faults == []


def test_activation_read_before_any_epoch_wrote_it(tmp_path):
    d = _copy(tmp_path, YAM)  # the producer's write engine is never configured
    _edit(d / "network.c", WRITE_SE, "LL_Streng_TensorInit(6, &Conv2D_7_suboff_15_dma_init_out_0_2, 1);", ";")
    f = replay(load(d)).faults[0]
    assert (f.cls, f.epoch, f.region.name) == ("uninitialized-read", 3, "Conv2D_7_zero_off_out_16")


def test_pool_outside_board_memory_and_unpowered_ram(tmp_path, shared):
    d = _copy(tmp_path, YAM)
    _edit(d / "network.c", "name=npuRAM6", "offset=0x34350000", "offset=0x38350000")
    faults = replay(load(d)).faults
    assert any(f.cls == "out-of-pool" and f.layer == "npuRAM6" for f in faults)
    off = replay(shared(YAM), ReplayOptions(npu_ram_off=True)).faults
    assert any(f.cls == "out-of-pool" and "powered off" in f.rule for f in off)


def test_pool_overlapping_the_application_memory(shared):
    faults = replay(shared(YAM), ReplayOptions(reserve=(("AXISRAM6", 0x34350000, 0x1000),))).faults
    assert [f.cls for f in faults] == ["pool-overlap"] and faults[0].layer == "npuRAM6"


def _row(text: str, name: str) -> tuple[int, int]:
    """[start, end) of a buffer-table row in the text (from its name to the row's closing brace)."""
    row = text.index(f'.name = "{name}"')
    return row, re.compile(r"\n\s*\},?\n").search(text, row).start()


def _plant_clash(out):
    """`out` edited as a compiler bug would leave it: an epoch between a buffer a's producer and its
    last reader (an engine given a's own bounds) writes a buffer b placed across a's end (engine and
    table alike). (edited output, a, b, writing epoch, reading epoch), or None when no such pair exists."""
    from dataclasses import replace as edit

    from npusim.importers.stedgeai import streng
    last = {}
    for t in replay(out).epochs:
        for n in t.reads:
            last[n] = t.epoch if not t.sw else -1
    exact = {(ep.number, s.addr, s.offset_end) for blk in out.blocks for ep in blk.epochs
             for s in ep.enabled_strengs() if s.dir == 0}
    for a in out.buffers:
        r = last.get(a.name, -1)
        if a.epoch is None or a.is_param or r <= a.epoch + 1 or (r, a.start, a.end) not in exact:
            continue
        for bi, blk in enumerate(out.blocks):
            for ei, ep in enumerate(blk.epochs):
                if not a.epoch < ep.number < r:
                    continue
                for s in ep.enabled_strengs():
                    b = next((x for x in out.buffers if s.dir == 1 and x.start == s.addr and x.epoch == ep.number
                              and 64 <= x.size), None)
                    if b is None or max(p.extent()[1] for p in streng.walk(s)) > b.end:
                        continue
                    d = a.end - 32 - s.addr  # b's first 32 bytes land on a's last 32
                    moved = edit(s, addr=s.addr + d, limit=s.limit and s.limit + d,
                                 offset_end=s.offset_end and s.offset_end + d)
                    eps = list(blk.epochs)
                    eps[ei] = edit(ep, strengs=tuple(moved if x is s else x for x in ep.strengs))
                    blocks = list(out.blocks)
                    blocks[bi] = edit(blk, epochs=tuple(eps))
                    bufs = tuple(edit(x, addr_base=x.addr_base + d) if x is b else x for x in out.buffers)
                    return edit(out, blocks=tuple(blocks), buffers=bufs), a, b, ep.number, r
    return None


def test_two_buffers_overlapping_while_live(shared):
    planted = next(p for name in EXPLICIT for p in [_plant_clash(shared(name))] if p)
    out, a, b, w, r = planted
    clash = [f for f in replay(out).faults if f.cls == "pool-overlap"]
    assert clash and clash[0].layer == b.name and clash[0].region.name == a.name
    assert clash[0].epoch == w and f"still read at epoch {r}" in clash[0].rule


def test_short_weight_image_is_refused(tmp_path):
    d = _copy(tmp_path, "st_ic_mnv1_nucleo")
    img = d / "network_data.xSPI2.bin"
    img.write_bytes(img.read_bytes()[:1000])
    with pytest.raises(StImportError, match="weight image holds 1000 bytes"):
        load(d)


# ------------------------------------------------------------------ bad input, CLI

def _cli(*args):
    """The CLI in a fresh process: what a user's shell sees of bad input (one line, the exit code)."""
    return subprocess.run([sys.executable, "-m", "npusim", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _main(capsys, *args) -> SimpleNamespace:
    """The CLI in this process (its imports paid once): for the commands whose output is the point."""
    from npusim.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    got = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=got.out, stderr=got.err)


def test_truncated_network_file_is_one_line_exit_65(tmp_path):
    d = _copy(tmp_path, YAM)
    s = (d / "network.c").read_text()
    (d / "network.c").write_text(s[: len(s) // 2])
    r = _cli("check", d)
    assert r.returncode == 65 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_unknown_struct_field_is_refused(tmp_path):
    d = _copy(tmp_path, YAM)
    _edit(d / "network.c", READ_SE, ".raw = 1,", ".raw = 1,\n    .bogus_field = 3,")
    with pytest.raises(StImportError, match="bogus_field"):
        load(d)


def test_folder_without_network_file(tmp_path):
    (tmp_path / "x.c").write_text("int main(void) { return 0; }\n")
    r = _cli("inspect", tmp_path)
    assert r.returncode == 65 and "no ST Edge AI network file" in r.stderr


def test_cli_check_run_inspect(tmp_path, capsys):
    d = _copy(tmp_path, YAM)
    _edit(d / "network.c", WRITE_SE, ".batch_offset = 32,", ".batch_offset = 40,")
    r = _cli("check", d, "--json", tmp_path / "c.json")  # a fault's exit code as a shell sees it
    assert r.returncode == 139 and "buffer-overflow" in r.stdout and (tmp_path / "c.json").exists()
    r = _main(capsys, "run", ST / YAM, "--trace", tmp_path / "t.json")
    assert r.returncode == 0 and "cycles" in r.stdout
    r = _main(capsys, "inspect", ST / YAM, "--epoch", 2)
    assert r.returncode == 0 and "CONVACC" in r.stdout
    r = _main(capsys, "inspect", ST / YAM, "--find-mask", "0x108/0x40")
    assert r.returncode == 0 and r.stdout.splitlines()[1].split()[1] == "2"


def test_doctor_runs_the_steps_that_apply_to_an_st_output(tmp_path):
    from npusim.tools.st_doctor import doctor_st

    rep = doctor_st(ST / YAM)
    status = {s.name: s.status for s in rep.steps}
    assert status == {"versions": "pass", "memory": "pass", "conversion": "pass", "operators": "skipped",
                      "layout": "skipped", "accuracy": "skipped", "fusion": "skipped", "stability": "pass"}
    assert rep.exit_code == 0
    d = _copy(tmp_path, YAM)
    _edit(d / "network.c", WRITE_SE, ".batch_offset = 32,", ".batch_offset = 40,")
    bad = doctor_st(d)
    assert bad.failed.name == "conversion" and bad.exit_code == 139 and "Conv2D_7_zero_off_out_16" in bad.failed.measured


def test_disasm_of_an_st_output_equals_st_listing(tmp_path, capsys):
    fg = ST / "fallguard_pe_yolov8n_pose256"
    r = _main(capsys, "disasm", fg, "--blob", "_ec_blob_72", "-o", tmp_path / "l.s")
    assert r.returncode == 0
    assert (tmp_path / "l.s").read_text() == (fg / "ec_asm" / "debug__ec_blob_72.s").read_text()
    r = _cli("disasm", ST / YAM)
    assert r.returncode == 2 and "explicit structs" in r.stderr


def test_plugin_assertions_take_st_outputs(tmp_path):
    from npusim.testing import NpusimCheckFailed, assert_check_clean, assert_st_clean

    res = assert_st_clean(ST / YAM, max_ms=20.0)
    assert res.cycles > 0 and assert_check_clean(ST / YAM).status == "ok"
    with pytest.raises(NpusimCheckFailed, match="over the budget"):
        assert_st_clean(ST / YAM, max_ms=1.0)
    d = _copy(tmp_path, YAM)
    _edit(d / "network.c", WRITE_SE, ".batch_offset = 32,", ".batch_offset = 40,")
    with pytest.raises(NpusimCheckFailed, match="buffer-overflow"):
        assert_check_clean(d)


def test_weights_as_intel_hex(tmp_path, shared):
    from intelhex import IntelHex

    d = _copy(tmp_path, "st_ic_mnv1_nucleo")
    raw = (d / "network_data.xSPI2.bin").read_bytes()
    flash = shared("st_ic_mnv1_nucleo").pool_named("octoFlash")
    ih = IntelHex()
    ih.frombytes(raw, offset=flash.address)
    ih.write_hex_file(str(d / "network_data.hex"))
    (d / "network_data.xSPI2.bin").unlink()
    assert load(d).weights["octoFlash"] == raw


def test_missing_epoch_controller_programs_are_refused(tmp_path):
    d = _copy(tmp_path, "st_ic_mnv1_nucleo")
    (d / "network_ecblobs.h").unlink()
    with pytest.raises(StImportError, match="missing companion file"):
        load(d)


def _strip_internal_table(path: Path) -> None:
    """The network file as a compile without --all-buffers-info has it: no internal buffer rows."""
    s = path.read_text()
    i = s.index("LL_ATON_Internal_Buffers_Info_")
    j = s.index("LL_Buffer_InfoTypeDef buff_info[] = {", i) + len("LL_Buffer_InfoTypeDef buff_info[] = {")
    k = s.index("\n  };", j)
    path.write_text(s[:j] + "\n    {\n      .name = NULL,\n    }" + s[k:])


# the smallest compile of each form of network file (explicit unit structs: YAMNet) stays fast; the others,
# ~1-2.5 s each to copy, re-parse and replay, run in CI's slow step
FAST_FORMS = ("st_ic_mnv1_nucleo", YAM)


@pytest.mark.parametrize("name", [n if n in FAST_FORMS else pytest.param(n, marks=pytest.mark.slow(cpu_s=2))
                                  for n in COMPILES])
def test_without_the_full_buffer_table_the_pools_stand_in(tmp_path, name):
    d = _copy(tmp_path, name)
    net = next(p for p in d.iterdir() if p.suffix == ".c" and "EpochBlock_ItemTypeDef" in p.read_text(errors="replace"))
    _strip_internal_table(net)
    out = load(d)
    assert not out.all_buffers_info and all(b.role != "internal" for b in out.buffers)
    assert replay(out).faults == []


def test_a_register_value_the_hardware_refuses_is_a_fault(shared):
    from dataclasses import replace as edit

    from npusim.importers.stedgeai.ec_registers import rule_violations
    from npusim.importers.stedgeai.ecblob import read_ecblobs

    blobs = read_ecblobs(ST / "st_ic_mnv1_nucleo" / "network_ecblobs.h")
    assert all(not rule_violations(p) for p in blobs.values())  # programs that ran on boards
    program = next(iter(blobs.values()))
    # an engine's control word asking for 16-bit channels (the field takes at most 8)
    k, ins = next((k, i) for k, i in enumerate(program.instructions)
                  if i.op in ("write", "burst", "burstinc") and 5 <= i.unit <= 14 and i.reg == 0 and i.values)
    bad = ins._replace(values=((ins.values[0] & ~(0xF << 16)) | 15 << 16,) + ins.values[1:])
    planted = edit(program, instructions=program.instructions[:k] + (bad,) + program.instructions[k + 1:])
    found = rule_violations(planted)
    assert any("CTRL" in m and "SIZE0" in m for ms in found.values() for m in ms)
    # the replay reports it as the hardware's refusal, in the epoch that programs it
    out = shared("st_ic_mnv1_nucleo")
    blk = next(b for b in out.blocks if b.epochs)
    ep = edit(blk.epochs[1], refused=("STRENG2.CTRL: SIZE0=15 outside 0..8 (instruction word 7)",))
    planted_out = edit(out, blocks=tuple(edit(b, epochs=(b.epochs[0], ep) + b.epochs[2:]) if b is blk else b
                                         for b in out.blocks))
    f = next(f for f in replay(planted_out).faults if f.cls == "bad-descriptor")
    assert (f.unit, f.epoch, f.layer) == ("STRENG2", ep.number, "STRENG2.CTRL") and "SIZE0=15" in f.rule


def test_html_page_of_an_st_replay_and_of_its_saved_report(tmp_path, capsys):
    d = _copy(tmp_path, YAM)
    _edit(d / "network.c", WRITE_SE, ".batch_offset = 32,", ".batch_offset = 40,")
    r = _main(capsys, "run", d, "--html", tmp_path / "r.html", "--json", tmp_path / "r.json")
    assert r.returncode == 139
    page = (tmp_path / "r.html").read_text()
    assert "buffer-overflow" in page and "Conv2D_7_zero_off_out_16" in page and page.count("<tr") > 36
    r = _main(capsys, "report", tmp_path / "r.json", "-o", tmp_path / "again.html")
    assert r.returncode == 0 and "Conv2D_7_zero_off_out_16" in (tmp_path / "again.html").read_text()


def test_a_repeat_load_reuses_the_parse_until_a_file_changes(tmp_path):
    d = _copy(tmp_path, YAM)
    first = load(d)
    assert load(d) is first
    _edit(d / "network.c", WRITE_SE, ".batch_offset = 32,", ".batch_offset = 40,")
    again = load(d)
    assert again is not first and replay(again).faults and not replay(first).faults


def _c_array(data: bytes, name: str, width: int) -> str:
    """`data` as a C array of `width`-byte unsigned elements (little-endian, zero-padded), 8 per line."""
    data = data + bytes(-len(data) % width)
    words = [int.from_bytes(data[i:i + width], "little") for i in range(0, len(data), width)]
    ctype = {1: "uint8_t", 4: "uint32_t", 8: "uint64_t"}[width]
    lines = [", ".join(f"0x{w:0{2 * width}x}U" for w in words[i:i + 8]) for i in range(0, len(words), 8)]
    return (f"#include <stdint.h>\n__attribute__((aligned(8)))\nconst {ctype} {name}[{len(words)}] = {{\n  "
            + ",\n  ".join(lines) + "\n};\n")


@pytest.mark.parametrize("width", [1, 8])
def test_weights_as_a_c_array(tmp_path, width):
    d = _copy(tmp_path, "st_ic_mnv1_nucleo")
    raw = d / "network_data.xSPI2.bin"
    data = raw.read_bytes()
    raw.unlink()
    (d / "network_weights.c").write_text(_c_array(data, "g_network_weights", width))
    out = load(d)
    assert out.weights["octoFlash"][:len(data)] == data and len(out.weights["octoFlash"]) - len(data) < width
    assert out.files["weights:octoFlash"].endswith("network_weights.c")


def test_a_short_c_array_image_is_refused(tmp_path):
    d = _copy(tmp_path, "st_ic_mnv1_nucleo")
    raw = d / "network_data.xSPI2.bin"
    data = raw.read_bytes()
    raw.unlink()
    (d / "network_data_xSPI2.c").write_text(_c_array(data[:-4096], "network_data_xSPI2", 1))
    p = _cli("check", d)
    assert p.returncode == 65 and p.stderr.count("\n") == 1 and "weight image holds" in p.stderr


def test_the_address_limiter_takes_whole_bus_words(tmp_path, shared):
    from npusim.importers.stedgeai.streng import hardware_limit

    # LIMITADDR's low three bits are read-only (ATON map): the limiter allows the bus word of the last byte
    assert [hardware_limit(a) for a in (0x1000, 0x1003, 0x1007, 0x1008)] == [0x1008, 0x1008, 0x1008, 0x1010]
    d = _copy(tmp_path, YAM)
    _edit(d / "network.c", READ_SE, ".offset_limit = ", ".offset_limit = 3 + ")
    def engine(out):
        return next(s for b in out.blocks for e in b.epochs for s in e.strengs if s.name == READ_SE.split()[-1])

    before, after = engine(shared(YAM)), engine(load(d))
    # offset_limit 55360 -> last byte 55359 -> word 55352 -> 55360; 55363 -> 55362 -> 55360 -> 55368
    assert before.limit % 8 == 0 and after.limit - before.limit == 8


@pytest.mark.parametrize("old,new", [(".offset_start = 49152,", ".offset_start = 4294967295,"),
                                     (".frame_tot_cnt = ", ".frame_tot_cnt = -1 * ")])
def test_a_stream_engine_no_register_can_hold_is_refused(tmp_path, old, new):
    d = _copy(tmp_path, YAM)
    _edit(d / "network.c", READ_SE, old, new)
    p = _cli("check", d)
    assert p.returncode == 65 and p.stderr.count("\n") == 1, p.stderr
    assert "stream engine" in p.stderr and "Conv2D_3_dma_init_in_0_2" in p.stderr
