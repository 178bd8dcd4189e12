"""`npusim check`: the static prediction equals what a run meets, for hand-assembled blobs of every
fault class, for contexts, and across alignment sweeps of the demo detector and zoo models."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import npusim
from npusim import zoo
from npusim.analysis import check, check_shared, disagreement, fault_keys, walk
from npusim.compiler import CompileOptions
from npusim.faults import STATIC_MARK, render_text, validate_fault_json
from npusim.hw import load_profile
from npusim.memory import Context
from npusim.program.asm import assemble
from npusim.program.blob import encode_blob
from npusim.runtime import RunOptions

PROFILE = load_profile()
RAM3, RAM4, RAM6 = (PROFILE.pool_named(n).base for n in ("npuRAM3", "npuRAM4", "npuRAM6"))
FLASH = PROFILE.pool_named("octoFlash").base
HEAD = '.header profile=n657 compiler=hand compiler_version="0.1.0" min_runtime="0.1.0"\n'


def buf(name, kind, pool, offset, size, **kw):
    shape = kw.pop("shape", [1, size, 1, 1])
    extra = " ".join(f"{k}={v}" for k, v in kw.items())
    return (f".buffer name={name} kind={kind} pool={pool} offset={offset:#x} size={size} align=8 "
            f"shape={json.dumps(shape, separators=(',', ':'))} dtype=int8 layout=linear {extra}\n")


def se(engine, direction, base, run, n1=1, s1=0, limit=0, port=None, layout="linear"):
    port = (0 if engine < 5 else 1) if port is None else port
    return (f"SE engine={engine} dir={direction} port={port} layout={layout} dtype=int8 base={base:#x} "
            f"limit={limit:#x} run={run} n1={n1} s1={s1} n2=1 s2=0 n3=1 s3=0\n")


def arith(op="copy", c=128, params=0, unit=0):
    return (f"ARITH unit={unit} dtype=int8 layout=linear op={op} per_channel=0 h=1 w=1 c={c} c2=0 a_zp=0 "
            f"b_zp=0 out_zp=0 act=none act_lo=0 act_hi=0 params={params:#x}\n")


def link(src, dst, port=0):
    sk, si = src.rstrip("0123456789"), src.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    dk, di = dst.rstrip("0123456789"), dst.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    return f"LINK src_kind={sk} src={si} dst_kind={dk} dst={di} dst_port={port}\n"


def copy_epoch(x_addr, y_addr, n=128, layer="copy", eid=0, read=None, write=None, links=None):
    """EPOCH: SE0 reads n bytes at x_addr -> ARITH0 copy -> SE5 writes them at y_addr."""
    return (f".layer {layer}\nEPOCH id={eid}\n" + (read or se(0, "read", x_addr, n)) + arith(c=n)
            + (write or se(5, "write", y_addr, n))
            + (links if links is not None else link("SE0", "ARITH0") + link("ARITH0", "SE5")) + "RUN\nWAIT\n")


def copy_asm(x_pool="npuRAM3", x_off=0, x_kind="input", y_pool="npuRAM4", y_off=0, n=128, x_size=None, **kw):
    base = {"npuRAM3": RAM3, "npuRAM4": RAM4, "npuRAM6": RAM6, "octoFlash": FLASH}
    x_size = n if x_size is None else x_size
    return (HEAD + buf("x", x_kind, x_pool, x_off, x_size) + buf("y", "output", y_pool, y_off, n)
            + copy_epoch(base[x_pool] + x_off, base[y_pool] + y_off, n, **kw) + "END\n")


def program(text):
    return assemble(text, PROFILE)


def agree(prog, profile=None):
    """check(prog) against a keep-going and a stopping functional run: same faults (disagreement() ==
    ""), and the stopping run's report lines are the prediction's first lines, marked static."""
    rep = check(prog, profile)
    go = npusim.run(prog, options=RunOptions(keep_going=True, trace=False), profile=profile, random_inputs=True)
    assert disagreement(rep, go, keep_going=True, timing_only=False) == ""
    stop = npusim.run(prog, options=RunOptions(trace=False), profile=profile, random_inputs=True)
    assert disagreement(rep, stop, keep_going=False, timing_only=False) == ""
    met = [f for f in stop.faults if f.command not in {u.command for u in rep.undecided}]
    assert render_text(rep.faults[:len(met)]).replace(STATIC_MARK, "") == render_text(met)
    for entry in rep.to_json()["faults"]:
        assert validate_fault_json(entry) == [] and entry["static"] is True
    return rep


def classes(rep):
    return [f.cls for f in rep.faults]


# ------------------------------------------------------------------ every fault class

def test_clean_copy_predicts_nothing():
    rep = agree(program(copy_asm()))
    assert rep.ok and rep.undecided == [] and rep.summary().startswith("npusim check: no faults predicted (static)")


def test_out_of_pool_read_past_the_last_pool():
    size = PROFILE.pool_named("npuRAM6").size
    rep = agree(program(copy_asm(x_pool="npuRAM6", x_off=size - 64, x_size=64)))
    assert classes(rep)[0] == "out-of-pool" and rep.faults[0].address == RAM6 + size


def test_write_to_readonly_flash():
    rep = agree(program(copy_asm(y_pool="octoFlash")))
    assert classes(rep) == ["write-to-readonly"] and rep.faults[0].address == FLASH


def test_misaligned_lut_is_refused():
    lut = "".join(f"{(i - 128) & 0xFF:02x}" for i in range(256))
    text = (HEAD + buf("x", "input", "npuRAM3", 0, 128) + buf("y", "output", "npuRAM4", 0, 128)
            + buf("lut", "weight", "octoFlash", 0, 260) + ".const name=lut pool=octoFlash offset=0 size=260\n"
            + f".data {lut}00000000\n.layer act\nEPOCH id=0\n" + se(0, "read", RAM3, 128)
            + f"ACT unit=0 dtype=int8 layout=linear func=lut h=1 w=1 c=128 alpha=0 lo=0 hi=0 lut={FLASH + 4:#x}\n"
            + se(5, "write", RAM4, 128) + link("SE0", "ACT0") + link("ACT0", "SE5") + "RUN\nWAIT\nEND\n")
    rep = agree(program(text))
    assert classes(rep) == ["misaligned-access"] and "residue 4" in rep.faults[0].rule


def test_bad_descriptor_engine_on_the_wrong_port():
    rep = agree(program(copy_asm(read=se(0, "read", RAM3, 128, port=1))))
    assert classes(rep) == ["bad-descriptor"] and "port" in rep.faults[0].message


def test_unknown_opcode():
    text = copy_asm().replace(".layer copy\n", ".layer copy\nUNKNOWN opcode=0x99 word=0xab00000000000099\n")
    rep = agree(program(text))
    assert classes(rep) == ["unknown-opcode"] and rep.faults[0].command == 0


def test_hang_when_a_link_is_missing():
    rep = agree(program(copy_asm(links=link("ARITH0", "SE5"))))
    assert classes(rep) == ["hang"] and "no link" in rep.faults[0].message


def test_buffer_overflow_from_the_stride_granule():
    # 13 pixels x 16 channels = 208 B lines laid out 16 B aligned; the hardware walks 256 B granules
    text = (HEAD + buf("x", "input", "npuRAM3", 0, 832, shape=[1, 16, 4, 13]).replace("layout=linear",
                                                                                     "layout=blocked16")
            .replace("\n", " line_stride=208 plane_stride=832\n") + buf("y", "output", "npuRAM4", 0, 832)
            + copy_epoch(RAM3, RAM4, 832, read=se(0, "read", RAM3, 208, n1=4, s1=208, layout="blocked16"),
                         write=se(5, "write", RAM4, 832)).replace("layout=linear op=copy per_channel=0 h=1 w=1 c=832",
                                                                   "layout=blocked16 op=copy per_channel=0 h=4 w=13 c=16")
            + "END\n")
    rep = agree(program(text))
    f = rep.faults[0]
    assert f.cls == "buffer-overflow" and f.address == RAM3 + 832 and f.relation.where == "after"
    assert "256 B lines" in f.why and "--mem-align 128" in f.why


def test_buffer_underflow_from_ignored_low_address_bits():
    # x starts 4 B past a word: the engine ignores the base's low bits and starts 4 B before it
    rep = agree(program(copy_asm(x_off=0x104)))
    f = rep.faults[0]
    assert f.cls == "buffer-underflow" and f.address == RAM3 + 0x100 and f.relation.where == "before"


def test_uninitialized_read_of_an_activation_nobody_wrote():
    rep = agree(program(copy_asm(x_kind="activation")))
    assert classes(rep) == ["uninitialized-read"] and rep.faults[0].address == RAM3


def test_written_before_read_across_epochs_is_clean():
    text = (HEAD + buf("x", "input", "npuRAM3", 0, 128) + buf("t", "activation", "npuRAM3", 0x100, 128)
            + buf("y", "output", "npuRAM4", 0, 128) + copy_epoch(RAM3, RAM3 + 0x100, layer="a")
            + copy_epoch(RAM3 + 0x100, RAM4, layer="b", eid=1) + "END\n")
    assert agree(program(text)).ok
    swapped = text.replace("EPOCH id=0", "EPOCH id=X").replace("EPOCH id=1", "EPOCH id=0")
    # reading t before the epoch that writes it (the epochs in the other order) is an uninitialized read
    first, second = swapped.split(".layer a\n")[1].split(".layer b\n")
    reordered = swapped.split(".layer a\n")[0] + ".layer b\n" + second.replace("END\n", "") + ".layer a\n" + first + "END\n"
    rep = agree(program(reordered.replace("EPOCH id=X", "EPOCH id=1")))
    assert classes(rep) == ["uninitialized-read"] and rep.faults[0].layer == "b"


def test_write_write_race_of_two_engines():
    rep = agree(program(copy_asm(write=se(5, "write", RAM4, 128) + se(6, "write", RAM4, 128),
                                 links=link("SE0", "ARITH0") + link("ARITH0", "SE5") + link("ARITH0", "SE6"))))
    assert classes(rep) == ["write-write-race"] and rep.faults[0].details["other_unit"] == "SE6"


def test_use_after_free_of_a_freed_region():
    """No region is freed while a blob runs (`run`, `run_shared`): the freed state comes from the
    runtime's allocator. The static walk reads it exactly as the machine does."""
    from npusim.engine import Machine, MachineOptions

    prog = program(copy_asm())

    def freed_setup():
        st = npusim.runtime.setup(prog, options=RunOptions(timing_only=True))
        st.regions.free(st.regions.named("x"))
        return st

    st = freed_setup()
    ran = Machine(st.profile, st.isa, st.memory, st.regions, st.checker,
                  MachineOptions(timing_only=True, keep_going=True, trace=False)).run(prog)
    rep = walk(freed_setup())[0]
    assert fault_keys(rep.faults) == fault_keys(ran.faults) and classes(rep) == ["use-after-free"]


def test_a_table_entry_the_unit_refuses_is_predicted_from_the_blob():
    params = np.array([[1, 1, 99, 0]], "<i4").tobytes().hex()  # shift 99
    text = (HEAD + buf("x", "input", "npuRAM3", 0, 128) + buf("y", "output", "npuRAM4", 0, 128)
            + buf("p", "weight", "octoFlash", 0, 16) + f".const name=p pool=octoFlash offset=0 size=16\n.data {params}\n"
            + ".layer add\nEPOCH id=0\n" + se(0, "read", RAM3, 128) + se(1, "read", RAM3, 128)
            + arith("add", params=FLASH) + se(5, "write", RAM4, 128)
            + link("SE0", "ARITH0") + link("SE1", "ARITH0", 1) + link("ARITH0", "SE5") + "RUN\nWAIT\nEND\n")
    rep = agree(program(text))
    assert classes(rep) == ["bad-descriptor"] and "shift 99" in rep.faults[0].message


def test_a_table_the_program_wrote_is_undecided_not_guessed():
    text = (HEAD + buf("x", "input", "npuRAM3", 0, 128) + buf("p", "activation", "npuRAM3", 0x100, 16)
            + buf("y", "output", "npuRAM4", 0, 128)
            + copy_epoch(RAM3, RAM3 + 0x100, n=16, layer="make_table")
            + ".layer add\nEPOCH id=1\n" + se(0, "read", RAM3, 128) + se(1, "read", RAM3, 128)
            + arith("add", params=RAM3 + 0x100) + se(5, "write", RAM4, 128)
            + link("SE0", "ARITH0") + link("SE1", "ARITH0", 1) + link("ARITH0", "SE5") + "RUN\nWAIT\nEND\n")
    rep = agree(program(text))
    assert [(u.unit, u.layer) for u in rep.undecided] == [("ARITH0", "add")]
    assert "not decided statically" in rep.text() and rep.to_json()["undecided"][0]["unit"] == "ARITH0"


def test_software_epochs_are_checked_and_their_operator_is_undecided():
    from test_engine_build import Builder

    b = Builder()
    x = b.fm("x", "input", 1, 1, 10, dtype="fp32")
    y = b.fm("y", "output", 1, 1, 10, dtype="fp32", pool="npuRAM4")
    b.host("Softmax", [x], [y], layer="softmax")
    rep = agree(b.program())
    assert rep.ok and rep.host_epochs == 1 and [u.unit for u in rep.undecided] == ["HOST"]
    b = Builder()
    x = b.fm("x", "input", 1, 1, 10, dtype="fp32")
    y = b.fm("y", "output", 1, 1, 10, dtype="fp32", pool="octoFlash")  # the host writes read-only flash
    b.host("Softmax", [x], [y], layer="softmax")
    rep = agree(b.program())
    assert classes(rep) == ["write-to-readonly"] and rep.faults[0].unit == "HOST"


# ------------------------------------------------------------------ contexts

def _wild_reader():
    """A program whose SE reads 0x30000 past its own npuRAM3 partition (a wild pointer)."""
    return program(copy_asm(read=se(0, "read", RAM3 + 0x30000, 128)))


def _ctx(name, off):
    return Context(name, {"npuRAM3": (off, 0x30000), "npuRAM4": (off, 0x30000)})


def _shared_agree(jobs):
    reps = check_shared(jobs)
    go = npusim.runtime.run_shared([(p, c, None) for p, c in jobs], options=RunOptions(keep_going=True, trace=False))
    for r, g in zip(reps, go):
        assert disagreement(r, g, keep_going=True, timing_only=False) == ""
        assert all(f.context == r.context for f in r.faults)
    return reps


def test_cross_context_access_of_a_wild_pointer():
    a, b = _shared_agree([(_wild_reader(), _ctx("a", 0)), (program(copy_asm()), _ctx("b", 0x30000))])
    assert classes(a)[0] == "cross-context-access" and a.faults[0].details["other_context"] == "b" and b.ok


def test_pool_overlap_of_two_partitions():
    a, b = _shared_agree([(program(copy_asm()), _ctx("a", 0)), (program(copy_asm()), _ctx("b", 0x10000))])
    assert classes(a)[0] == classes(b)[0] == "pool-overlap"


def test_cli_check_exit_codes_json_and_contexts(tmp_path, capsys, monkeypatch):
    from npusim.cli import main

    monkeypatch.chdir(tmp_path)
    clean, bad = tmp_path / "clean.npu", tmp_path / "bad.npu"
    clean.write_bytes(encode_blob(program(copy_asm()), PROFILE))
    bad.write_bytes(encode_blob(program(copy_asm(y_pool="octoFlash")), PROFILE))
    (tmp_path / "junk.npu").write_bytes(b"NPU? not a blob")

    def cli(*args):
        code = main(["check", *map(str, args)])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, err = cli(clean)
    assert code == 0 and "no faults predicted (static)" in out and not err
    code, out, err = cli(bad, "--json", "c.json")
    assert code == 139 and "write-to-readonly" in out.splitlines()[2] and STATIC_MARK in out
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["static"] and doc["faults"][0]["static"] and doc["faults"][0]["class"] == "write-to-readonly"
    code, out, err = cli("junk.npu")
    assert code == 65 and err.startswith("npusim: error:") and len(err.splitlines()) == 1
    ctx_a, ctx_b = "a:npuRAM3=0x0+0x30000,npuRAM4=0x0+0x30000", "b:npuRAM3=0x30000+0x30000,npuRAM4=0x30000+0x30000"
    code, out, err = cli(clean, bad, "--context", ctx_a)
    assert code == 2 and "2 --context" in err
    code, out, err = cli(clean, clean, "--context", ctx_a, "--context", ctx_b, "--json", "s.json")
    assert code == 0 and "context 'a'" in out and "context 'b'" in out
    assert set(json.loads((tmp_path / "s.json").read_text())["contexts"]) == {"a", "b"}
    r = subprocess.run([sys.executable, "-m", "npusim", "check", str(bad)], capture_output=True, text=True)
    assert r.returncode == 139 and r.stdout.startswith("npusim check: 1 fault(s) predicted (static")


# ------------------------------------------------------------------ compiled models, alignment sweeps

def _sweep_agrees(model, aligns, timing_only=False, **opts):
    """check == keep-going run at every alignment; returns the faults' classes per point."""
    from npusim.compiler import finish, prepare

    prep = prepare(model, CompileOptions(**opts), PROFILE)
    out = {}
    for a in aligns:
        prog = finish(prep, CompileOptions(mem_align=a, **opts), PROFILE)
        rep = check(prog)
        go = npusim.run(prog, options=RunOptions(keep_going=True, trace=False, timing_only=timing_only),
                        random_inputs=True)
        assert disagreement(rep, go, keep_going=True, timing_only=timing_only) == "", f"mem_align={a}"
        out[a] = sorted({f.cls for f in rep.faults})
    return out


@pytest.mark.slow  # the demo's detector at 224, five alignments (~9 CPU s); the smaller models: test_zoo_sweeps_agree, the rendering: agree()
def test_demo_detector_sweep_agrees_and_the_first_fault_is_the_demos():
    got = _sweep_agrees(zoo.yolo_style(size=224), (16, 32, 64, 128, 256))
    assert got[16] and "buffer-overflow" in got[16] and got[128] == got[256] == []
    prog = npusim.compile(zoo.yolo_style(size=224), CompileOptions(mem_align=16))
    rep, stop = check(prog), npusim.run(prog, random_inputs=True, options=RunOptions(trace=False))
    first = render_text(rep.faults[:1]).splitlines()
    assert first[0].endswith(STATIC_MARK) and first[0].replace(STATIC_MARK, "") == render_text(stop.faults).splitlines()[0]
    assert first[1:] == [line + (STATIC_MARK if line.startswith("SUMMARY") else "")
                         for line in render_text(stop.faults).splitlines()[1:]]


@pytest.mark.parametrize("name", ["squeezenet_style", "unet_style", "resnet_style", "mobilenet_style",
                                  "mobilenet_v3_style"])
def test_zoo_sweeps_agree(name):
    got = _sweep_agrees(getattr(zoo, name)(), (16, 32, 64, 128, 256), timing_only=True)
    assert got[128] == got[256] == []


def test_assert_check_clean_in_the_plugin(tmp_path):
    from npusim.testing import NpusimCheckFailed, assert_check_clean

    good, bad = tmp_path / "good.npu", tmp_path / "bad.npu"
    good.write_bytes(encode_blob(program(copy_asm()), PROFILE))
    bad.write_bytes(encode_blob(program(copy_asm(y_pool="octoFlash")), PROFILE))
    assert assert_check_clean(good).ok and assert_check_clean(str(good)).ok
    with pytest.raises(NpusimCheckFailed) as e:
        assert_check_clean(bad.read_bytes())
    first, *rest = str(e.value).splitlines()
    assert first.startswith("npusim check predicts: write-to-readonly in layer copy (SE5 write at 0x70380000")
    assert any(line.startswith("==npusim== ERROR") and line.endswith(STATIC_MARK) for line in rest)
    (tmp_path / "junk.npu").write_bytes(b"junk")
    with pytest.raises(NpusimCheckFailed, match="npusim invalid blob"):
        assert_check_clean(tmp_path / "junk.npu")


def test_a_timed_hang_is_decided_with_the_npu_cache_as_the_run_leaves_it():
    """Epoch 'again' reads a 1 KiB flash constant 8 times: with the cache warmed by epoch 'warm' it
    fits the watchdog, cold it does not. The static walk decides 'warm' by its cache-free bound and
    must still hand its cache look-ups on before timing 'again' exactly."""
    size, k = 1024, 8

    def prog(warm: bool):
        text = (HEAD + buf("c", "weight", "octoFlash", 0, size) + f".const name=c pool=octoFlash offset=0 size={size}\n"
                f".data {'11' * size}\n" + buf("t", "output", "npuRAM3", 0, size) + buf("y", "output", "npuRAM4", 0, size * k))
        if warm:
            text += copy_epoch(FLASH, RAM3, n=size, layer="warm")
        lines = size * k // 256
        text += (".layer again\nEPOCH id=1\n"
                 f"SE engine=0 dir=read port=0 layout=image dtype=int8 base={FLASH:#x} limit=0 run={size} n1=1 s1=0 "
                 f"n2=1 s2=0 n3={k} s3=0\n"
                 f"ARITH unit=0 dtype=int8 layout=image op=copy per_channel=0 h={lines} w=64 c=4 c2=0 a_zp=0 b_zp=0 "
                 "out_zp=0 act=none act_lo=0 act_hi=0 params=0x0\n"
                 f"SE engine=5 dir=write port=1 layout=image dtype=int8 base={RAM4:#x} limit=0 run=256 n1={lines} "
                 "s1=256 n2=1 s2=0 n3=1 s3=0\n" + link("SE0", "ARITH0") + link("ARITH0", "SE5") + "RUN\nWAIT\nEND\n")
        return program(text)

    opts = RunOptions(timing_only=True, trace=False)
    body = [e.cycles - e.setup_cycles for e in npusim.run(prog(True), options=opts).stats.epochs]
    cold = npusim.run(prog(False), options=opts).stats.epochs[0]
    limit = int((max(body) + cold.cycles - cold.setup_cycles) / 2 + 100)
    assert max(body) < limit < cold.cycles - cold.setup_cycles
    prof = load_profile(overrides=[f"epoch.timeout_cycles={limit}"])
    warm, again = prog(True), prog(False)
    assert agree(warm, prof).ok
    plans = warm.memo("epoch plans", (prof, npusim.program.spec.load_isa(), prof), dict)
    assert min(p.body_bound for _, p in plans.values()) <= limit  # 'warm' was decided by the bound
    rep = agree(again, prof)
    assert classes(rep) == ["hang"] and "port and bank sharing" in rep.faults[0].message


@pytest.mark.slow
def test_resnet50_agrees_and_checks_clean(zoo_file):
    got = _sweep_agrees(zoo_file("resnet50").read_bytes(), (16, 128), timing_only=True)  # zoo.resnet50()
    assert got[128] == []
