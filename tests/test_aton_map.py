"""ATON's register map (isa/aton/*.toml, npusim.program.aton): loading, unit numbers, the
registers an ST-compile decoder needs, field round trips, layout sanity, the check script."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from npusim.errors import IsaSpecError
from npusim.program.aton import AtonMap, aton_path, load_aton_map

ROOT = Path(__file__).resolve().parents[1]
ATON_DIR = ROOT / "isa" / "aton"


@pytest.fixture(scope="module")
def amap() -> AtonMap:
    return load_aton_map()


def _fields(amap, kind, reg):
    r = amap.register_named(kind, reg)
    return {f.name: (f.lsb, f.width) for f in r.fields}


def test_loads_cached_and_complete(amap):
    assert load_aton_map() is amap
    assert set(amap.kinds) == {"CLKCTRL", "INTCTRL", "BUSIF", "STRSWITCH", "STRENG", "CONVACC", "DECUN", "ACTIV",
                               "ARITH", "POOL", "RECBUF", "EPOCHCTRL", "DEBUG_TRACE"}
    assert sum(len(k.registers) for k in amap.kinds.values()) == 211
    assert sum(len(r.fields) for k in amap.kinds.values() for r in k.registers) == 987
    assert amap.size == 0x20000 and amap.unit_size == 0x1000
    for k in amap.kinds.values():
        for r in k.registers:
            assert r.meaning and all(f.meaning for f in r.fields), (k.kind, r.name)


def test_unit_numbers(amap):
    expect = {0: ("CLKCTRL", 0), 1: ("INTCTRL", 0), 4: ("STRSWITCH", 0), 29: ("RECBUF", 0),
              30: ("EPOCHCTRL", 0), 31: ("DEBUG_TRACE", 0)}
    for kind, first, n in (("BUSIF", 2, 2), ("STRENG", 5, 10), ("CONVACC", 15, 4), ("DECUN", 19, 2),
                           ("ACTIV", 21, 2), ("ARITH", 23, 4), ("POOL", 27, 2)):
        expect.update({first + i: (kind, i) for i in range(n)})
    assert {u: amap.unit_of(u) for u in range(32)} == expect
    assert amap.instances["STRENG3"].unit == 8 and amap.instances["CONVACC2"].unit == 17
    with pytest.raises(KeyError):
        amap.unit_of(32)


def test_clock_gates_and_interrupts(amap):
    bgates = amap.register_named("CLKCTRL", "BGATES")
    for inst in amap.instances.values():
        if inst.clock_gate:
            reg, fld = inst.clock_gate.split(".")
            assert amap.register_named("CLKCTRL", reg).field(fld).lsb == inst.clock_bit
    assert bgates.field("STRENG0").lsb == 0 and bgates.field("CONVACC0").lsb == 10
    assert bgates.field("EPOCHCTRL0").lsb == 25
    assert dict(amap.instances["STRENG7"].irq) == {"main": 7, "err": 17}
    assert dict(amap.instances["EPOCHCTRL0"].irq) == {"main": 28, "noack": 29, "err": 30}


def test_stream_engine_registers(amap):
    offsets = {"CTRL": 0x00, "ADDR": 0x08, "FSIZE": 0x0C, "DEPTH": 0x10, "STRD": 0x14, "FOFFSET": 0x18,
               "FRAME_RPT": 0x1C, "FRPTOFF": 0x20, "POS": 0x24, "EVENT": 0x28, "LIMITEN": 0x30, "LIMIT": 0x34,
               "LIMITADDR": 0x38, "CID_CACHE": 0x48}
    for name, off in offsets.items():
        assert amap.register_named("STRENG", name).offset == off
        assert amap.register("STRENG", off // 4).name == name
    ctrl = _fields(amap, "STRENG", "CTRL")
    assert ctrl["EN"] == (0, 1) and ctrl["DIR"] == (3, 1) and ctrl["NOINC"] == (4, 1) and ctrl["CONT"] == (7, 1)
    assert ctrl["RAW"] == (8, 1) and ctrl["SIZE0"] == (16, 4) and ctrl["SIZE1"] == (20, 4)
    assert ctrl["SIZE2"] == (24, 4) and ctrl["RUNNING"] == (31, 1)
    assert amap.register_named("STRENG", "CTRL").field("RUNNING").access == "ro"
    assert _fields(amap, "STRENG", "ADDR") == {"REG": (0, 32)}
    assert _fields(amap, "STRENG", "FSIZE") == {"WIDTH": (0, 16), "HEIGHT": (16, 16)}
    assert _fields(amap, "STRENG", "DEPTH") == {"SIZE": (0, 16), "OFFSET": (16, 16)}
    assert _fields(amap, "STRENG", "STRD") == {"LOFF": (0, 16), "FGAP": (16, 6), "BGAP": (24, 6)}
    for name in ("FOFFSET", "FRAME_RPT", "FRPTOFF", "LIMITADDR"):
        assert _fields(amap, "STRENG", name) == {"REG": (0, 32)}
    assert _fields(amap, "STRENG", "LIMIT") == {"CNT": (0, 32)}
    limiten = amap.register_named("STRENG", "LIMITEN")
    assert {f.name: (f.lsb, f.width) for f in limiten.fields if f.access == "rw"} == {
        "ADDRLIMIT": (0, 1), "STOPPREFTC": (1, 1), "FRAMELIMIT": (2, 1), "AUTOCLR": (3, 1), "DOFF_MSB": (16, 16)}
    assert limiten.reset == 0x2  # STOPPREFTC is on after reset
    assert _fields(amap, "STRENG", "CID_CACHE")["LOFF_MSB"] == (16, 16)
    assert amap.register_named("STRENG", "CTRL").field("DIR").values == "STRENGDIR"
    assert amap.values["STRENGDIR"] == {"BUS2STR": 0, "STR2BUS": 1}


def test_hardware_rules(amap):
    la = amap.register_named("STRENG", "LIMITADDR").field("REG")
    assert la.ro_mask == 0x7 and la.locked_while_running
    d = amap.register_named("STRENG", "DESCRADDR").field("REG")
    assert d.align == 8 and d.refused
    assert amap.register_named("EPOCHCTRL", "ADDR").field("REG").align == 8
    s0 = amap.register_named("STRENG", "CTRL").field("SIZE0")
    assert s0.max == 8 and s0.refused
    assert amap.register_named("STRENG", "CTRL").field("SIZE2").zero_when == "CTRL.SUBSAMPLE"
    assert amap.register_named("STRENG", "EXTSYNC").field("SRC").max == 3
    assert all(f.w1c for f in amap.register_named("STRENG", "IRQ").fields if f.access == "rw")
    assert amap.register_named("STRENG", "CTRL").field("CONFCLR").self_clearing
    assert not amap.register_named("STRENG", "CTRL").field("EN").locked_while_running
    assert amap.register_named("ARITH", "CTRL").field("ORNDMODE").ignored_mask == 0b10
    assert amap.register_named("ACTIV", "CTRL").field("FBYTES").valid == (1, 2, 3)
    assert amap.violations("STRENG", 0, 9 << 16) == ["SIZE0=9 outside 0..8"]
    assert amap.violations("STRENG", 0, 8 << 16) == []
    assert amap.violations("STRENG", 0x54 // 4, 0x34000004) == ["REG=0x34000004 not a multiple of 8"]


def test_stream_switch(amap):
    sw = amap.kinds["STRSWITCH"]
    dsts = [r for r in sw.registers if r.dest is not None]
    assert len(dsts) == 41
    assert amap.register_named("STRSWITCH", "DSTSTRENG0").offset == 0x08
    assert amap.register_named("STRSWITCH", "DSTSTRENG9").offset == 0x2C
    conv11 = amap.register_named("STRSWITCH", "DSTCONVACC11")
    assert (conv11.offset, conv11.dest, conv11.dest_port) == (0x40, "CONVACC1", 1)
    assert (amap.register_named("STRSWITCH", "DSTARITH31").offset, amap.register_named("STRSWITCH", "DSTPOOL1").offset,
            amap.register_named("STRSWITCH", "DSTRECBUF02").offset) == (0x94, 0x9C, 0xA8)
    layout = {"EN0": (0, 1), "LINK0": (1, 5), "FNR0": (8, 8), "EN1": (16, 1), "LINK1": (17, 5),
              "TICKTYPE": (23, 1), "FNR1": (24, 8)}
    for r in dsts:
        assert {f.name: (f.lsb, f.width) for f in r.fields} == layout
        assert r.field("LINK0").values == r.field("LINK1").values == "LINK"
        assert r.dest in amap.instances
    link = amap.values["LINK"]
    assert [link[f"STRENG{i}"] for i in range(10)] == list(range(10))
    assert (link["CONVACC0"], link["DECUN1"], link["ACTIV0"], link["ARITH3"], link["POOL1"]) == (10, 15, 16, 21, 23)
    assert sorted(link.values()) == list(range(27))
    v = amap.encode_fields("STRSWITCH", 0x30 // 4, {"EN0": 1, "LINK0": link["STRENG2"]}, base=0)
    assert v == 0x5 and amap.decode_fields("STRSWITCH", 0x30 // 4, v)["LINK0"] == 2


def test_compute_unit_registers(amap):
    assert {r.name: r.offset for r in amap.kinds["CONVACC"].registers} == {
        "CTRL": 0x00, "VERSION": 0x04, "KFORMAT": 0x08, "SAMPLE": 0x0C, "DFORMAT": 0x10, "FFORMAT": 0x14,
        "FHCROP": 0x18, "FVCROP": 0x1C, "KFILT": 0x20, "AFILT": 0x24, "ZFRAME": 0x28, "ITER": 0x2C,
        "FSUB": 0x30, "ZFBIAS": 0x34}
    assert _fields(amap, "CONVACC", "KFORMAT") == {"WIDTH": (0, 8), "HEIGHT": (8, 8), "BTCDEPTH": (16, 8),
                                                   "NR": (24, 8)}
    sample = _fields(amap, "CONVACC", "SAMPLE")
    assert sample["HSTRD"] == (8, 3) and sample["VSTRD"] == (12, 3) and sample["LPAD"] == (0, 2)
    df = _fields(amap, "CONVACC", "DFORMAT")
    assert df["INSHIFT"] == (0, 6) and df["OUTSHIFT"] == (8, 6) and df["OBYTES"] == (20, 2) and df["FSAT"] == (31, 1)
    assert amap.register_named("CONVACC", "FFORMAT").reset == 0xFFFFFFFF
    assert amap.register_named("CONVACC", "KFORMAT").reset == 0x01010303

    assert {r.name: r.offset for r in amap.kinds["ARITH"].registers}["CLIPRANGE"] == 0x38
    actrl = amap.register_named("ARITH", "CTRL")
    assert (actrl.field("OP").lsb, actrl.field("OP").width, actrl.field("OP").values) == (9, 6, "ARITHOP")
    assert amap.values["ARITHOP"]["AX_BY_C"] == 0 and amap.values["ARITHOP"]["CLIP"] == 0x37
    assert _fields(amap, "ARITH", "COEFFAC") == {"A": (0, 16), "C": (16, 16)}
    assert _fields(amap, "ARITH", "SHIFT") == {"AX": (0, 5), "BY": (5, 5), "C": (10, 5), "RES": (15, 6)}
    assert amap.window("ARITH", 0x400 // 4) == "coefficients" and amap.register("ARITH", 0x400 // 4) is None

    assert _fields(amap, "POOL", "PDIMS") == {"WINX": (0, 3), "WINY": (3, 3), "STRDX": (6, 4), "STRDY": (10, 4),
                                              "TPAD": (14, 3), "BPAD": (17, 3), "LPAD": (20, 3), "RPAD": (23, 3),
                                              "BSIZE": (26, 4)}
    assert amap.register_named("POOL", "CTRL").field("TYPE").values == "POOLTYPE"
    assert amap.values["POOLTYPE"]["AVG_POOLING"] == 2 and amap.values["POOLTYPE"]["GMAX_POOLING"] == 8

    assert {r.name: r.offset for r in amap.kinds["ACTIV"].registers} == {
        "CTRL": 0, "VERSION": 4, "ACTIVPARAM": 8, "FUNC": 0xC, "ACTIVPARAM2": 0x10, "FSUB": 0x14}
    assert amap.register_named("ACTIV", "CTRL").field("TYPE").values == "ACTIVTYPE"
    assert amap.values["ACTIVTYPE"] == {"RELU": 0, "PRELU": 1, "TRELU": 2, "FUNCTION": 3}
    assert [r.name for r in amap.kinds["DECUN"].registers] == ["CTRL", "VERSION", "BFORMAT", "DFORMAT", "FFORMAT"]
    assert [r.name for r in amap.kinds["RECBUF"].registers] == ["CTRL", "VERSION", "FORMAT0", "FORMAT1", "FORMAT2"]
    assert {r.name: r.offset for r in amap.kinds["EPOCHCTRL"].registers}["LABEL"] == 0x1C


@given(st.data())
def test_decode_encode_round_trip(amap, data):
    kinds = sorted(amap.kinds)
    kind = data.draw(st.sampled_from(kinds))
    reg = data.draw(st.sampled_from(amap.kinds[kind].registers))
    value = data.draw(st.integers(0, 0xFFFFFFFF))
    fields = amap.decode_fields(kind, reg.word_index, value)
    assert set(fields) == {f.name for f in reg.fields}
    assert amap.encode_fields(kind, reg.word_index, fields, base=0) == value & reg.defined_mask
    assert amap.encode_fields(kind, reg.word_index, fields, base=value) == value


def test_decode_reset_values(amap):
    assert amap.decode_fields("STRENG", 0x24 // 4, amap.register_named("STRENG", "POS").reset)["GAPCYCLES"] == 8
    with pytest.raises(KeyError):
        amap.decode_fields("STRENG", 0x3F0 // 4, 0)
    with pytest.raises(ValueError):
        amap.encode_fields("STRENG", 0, {"SIZE0": 16})


def test_raw_files_fields_fit_and_do_not_overlap():
    """Straight from the TOML (not through the loader, which rejects such files)."""
    head = tomllib.loads((ATON_DIR / "npu.toml").read_text())
    n = 0
    for name in head["unit_files"]:
        unit = tomllib.loads((ATON_DIR / f"{name}.toml").read_text())
        for reg in unit["register"]:
            used = 0
            assert reg["offset"] % 4 == 0 and reg["offset"] < unit["size"]
            for f in reg["fields"]:
                mask = ((1 << f["width"]) - 1) << f["lsb"]
                assert f["width"] >= 1 and f["lsb"] + f["width"] <= 32, (name, reg["name"], f["name"])
                assert not used & mask, (name, reg["name"], f["name"])
                assert f["reset"] < 1 << f["width"]
                used |= mask
                n += 1
    assert n == 987


def _copy_map(tmp_path) -> Path:
    d = tmp_path / "aton"
    shutil.copytree(ATON_DIR, d)
    return d


def test_loader_rejects_bad_files(tmp_path):
    d = _copy_map(tmp_path)
    (d / "ec_lift_extra.toml").write_text("not = 'a unit file'\n")  # other files in the folder are ignored
    assert load_aton_map(str(d)).unit_of(5) == ("STRENG", 0)
    p = d / "pool.toml"
    good = p.read_text()
    p.write_text(good.replace('{ name = "WINY", lsb = 3,', '{ name = "WINY", lsb = 2,'))
    with pytest.raises(IsaSpecError, match="overlaps"):
        load_aton_map.__wrapped__(str(d))
    p.write_text(good.replace('{ name = "WINY", lsb = 3, width = 3,', '{ name = "WINY", lsb = 30, width = 3,'))
    with pytest.raises(IsaSpecError, match="fit 32"):
        load_aton_map.__wrapped__(str(d))
    p.write_text(good.replace('kind = "POOL"', 'kind = "POOL"\ncolour = 1'))
    with pytest.raises(IsaSpecError, match="unknown key"):
        load_aton_map.__wrapped__(str(d))
    p.write_text(good.replace("unit = 27", "unit = 5"))
    with pytest.raises(IsaSpecError, match="unit number 5"):
        load_aton_map.__wrapped__(str(d))
    p.write_text(good + "[[[")
    with pytest.raises(IsaSpecError, match="cannot load"):
        load_aton_map.__wrapped__(str(d))


def test_shipped_with_the_package():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert data["package-dir"]["npusim.isa_data.aton"] == "isa/aton"
    assert "*.toml" in data["package-data"]["npusim.isa_data.aton"]
    assert (aton_path() / "npu.toml").exists()


def _check_script():
    spec = importlib.util.spec_from_file_location("check_aton_map", ROOT / "scripts" / "check_aton_map.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _header_from_map(amap) -> dict:
    """The numbers the check script reads from ATON.h, rebuilt from the map itself."""
    kinds = {}
    for k in amap.kinds.values():
        base = k.instances[0].unit * amap.unit_size
        kinds[k.kind] = {
            "num": len(k.instances), "version": k.version, "size": k.size, "base": base,
            "stride": amap.unit_size if len(k.instances) > 1 else 0, "names": [i.name for i in k.instances],
            "registers": {r.name: {"offset": r.offset, "fields": {f.name: {"lsb": f.lsb, "width": f.width,
                                                                            "reset": f.reset, "access": f.access}
                                                                   for f in r.fields}} for r in k.registers}}
    clocks = {i.name: ("A" if i.clock_gate.startswith("AGATES") else "B", i.clock_bit)
              for i in amap.instances.values() if i.clock_gate}
    irqs = {i.name: dict(i.irq) for i in amap.instances.values() if i.irq}
    return {"size": amap.size, "kinds": kinds, "values": {k: dict(v) for k, v in amap.values.items()},
            "clocks": clocks, "irqs": irqs}


def test_check_script_reports_differences(amap):
    mod = _check_script()
    h = _header_from_map(amap)
    assert mod.compare(h, amap) == []
    h["kinds"]["STRENG"]["registers"]["LIMITADDR"]["offset"] = 0x3C
    h["kinds"]["STRENG"]["registers"]["STRD"]["fields"]["LOFF"]["width"] = 15
    h["kinds"]["POOL"]["registers"]["PDIMS"]["fields"]["WINX"]["reset"] = 1
    del h["kinds"]["ARITH"]["registers"]["CLIPRANGE"]
    h["values"]["LINK"]["CONVACC0"] = 11
    h["irqs"]["STRENG0"]["err"] = 11
    diffs = mod.compare(h, amap)
    assert len(diffs) == 6, diffs
    assert any("STRENG.LIMITADDR offset" in d for d in diffs) and any("LINK.CONVACC0" in d for d in diffs)


@pytest.mark.skipif(not Path(os.environ.get("NPUSIM_ATON_H", "/nonexistent")).is_file(),
                    reason="set NPUSIM_ATON_H to a local copy of ST's ATON.h")
def test_map_agrees_with_st_header():
    assert _check_script().main([os.environ["NPUSIM_ATON_H"]]) == 0
