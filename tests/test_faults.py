"""Fault records: text (ASan-style) and JSON reports for every fault class."""

import json
import re

from npusim.faults import (FAULT_CLASSES, FAULT_JSON_SCHEMA, HARDWARE_CLASSES, SANITIZER_CLASSES, Fault,
                           Relation, faults_to_json, merge_repeats, render_text, validate_fault_json)
from npusim.hw import load_profile
from npusim.memory import (AccessPattern, AddressMap, Allocator, Checker, Context, bad_descriptor, check_alignment, write_write_races)

PROFILE = load_profile()
RAM3 = 0x34200000
FIRST = re.compile(r"^==npusim== ERROR: NPUSanitizer: ([a-z-]+)")


def _all_faults() -> dict:
    """One real fault of every class, produced through the public memory API."""
    am = AddressMap(PROFILE)
    a = Allocator(am)
    t = a.regions
    ck = Checker(am, t)
    out = {}
    cin = t.add("conv2.in", "activation", RAM3 + 0x1000, 7200, producer="conv1",
                origin="buffer 'conv2.in' of the plan")
    t.mark_range_written(cin.start, cin.size)
    out["buffer-overflow"] = ck.check(AccessPattern(cin.start, 48, n1=4, s1=2416), "read", "SE0", 3, 17, "conv2")
    out["buffer-underflow"] = ck.check(AccessPattern(cin.start - 64, 128), "read", "SE1", 3, 18, "conv2",
                                       provenance="conv2.in")
    t.add("tail", "output", 0x343C0000 - 64, 64)
    out["out-of-pool"] = ck.check(AccessPattern(0x343C0000 - 8, 16), "write", "SE5", 4, 30, "conv3")
    out["write-to-readonly"] = ck.check(AccessPattern(0x70380000, 8), "write", "SE6", 4, 31, "conv3")
    out["misaligned-access"] = check_alignment(RAM3 + 0x1010, 128, "base", "SE0", 5, 40, "conv4", regions=t)
    out["bad-descriptor"] = bad_descriptor("CONV in_layout=image but in_c=16 requires blocked16", "CA0", 5, 41,
                                           "conv4", field="in_layout", value="image")
    tmp = a.alloc("npuRAM4", 256, 128, name="tmp", kind="scratch")
    t.mark_range_written(tmp.start, 256)
    a.free(tmp)
    out["use-after-free"] = ck.check(AccessPattern(tmp.start, 16), "read", "SE2", 6, 50, "add1")
    act = t.add("pool1.out", "activation", RAM3 + 0x8000, 512, producer="pool1")
    out["uninitialized-read"] = ck.check(AccessPattern(act.start, 64), "read", "SE3", 7, 60, "fc")
    a.add_context(Context("cam", {"npuRAM5": (0, 0x1000)}))
    out["pool-overlap"] = a.add_context(Context("kws", {"npuRAM5": (0x800, 0x1000)}))[0]
    own = a.alloc("npuRAM5", 64, 32, name="cam.x", kind="input", context="cam")
    t.mark_range_written(own.start, 64)
    out["cross-context-access"] = ck.check(AccessPattern(own.start, 64), "read", "SE4", 8, 70, "kws.conv",
                                           context="kws")
    out["write-write-race"] = write_write_races(
        [("SE5", AccessPattern(cin.start, 64)), ("SE6", AccessPattern(cin.start + 32, 64))],
        epoch=9, command=80, layer="concat", regions=t)[0]
    out["unknown-opcode"] = Fault("unknown-opcode", unit="EC", epoch=10, command=90, layer="",
                                  rule="opcode 0x3f is not in the ISA", message="unknown opcode 0x3f")
    out["hang"] = Fault("hang", unit="CA1", epoch=11, command=95, layer="conv9",
                        rule="epoch.timeout_cycles=50000000 exceeded", message="CA1 waits for 2304 more bytes")
    return out


def test_every_class_renders_and_validates():
    faults = _all_faults()
    assert set(faults) == set(FAULT_CLASSES) == set(HARDWARE_CLASSES) | set(SANITIZER_CLASSES)
    for cls, f in faults.items():
        assert f is not None and f.cls == cls
        text = render_text([f], program_name="m.npu")
        lines = text.strip().splitlines()
        assert FIRST.match(lines[0]).group(1) == cls
        assert lines[-1].startswith(f"SUMMARY: NPUSanitizer: {cls}")
        assert f.unit in lines[0]
        if f.epoch is not None:
            assert f"epoch {f.epoch}" in lines[0] and f"command {f.command}" in lines[0]
        if f.layer:
            assert f"in {f.layer}" in lines[-1]
        if f.rule:
            assert f"rule: {f.rule}" in text
        j = faults_to_json([f])[0]
        assert validate_fault_json(j) == [], (cls, validate_fault_json(j))
        assert j["class"] == cls and j["address"] == f.address and j["unit"] == f.unit
        json.dumps(j)


def test_overflow_report_contents():
    f = _all_faults()["buffer-overflow"]
    start = RAM3 + 0x1000
    text = render_text([f], program_name="mobilenet.npu")
    lines = text.splitlines()
    assert lines[0] == (f"==npusim== ERROR: NPUSanitizer: buffer-overflow on address 0x{start + 7248:08x}"
                        " at SE0, epoch 3, command 17 in layer 'conv2'")
    assert f"READ of size 48 at 0x{start + 7248:08x} by SE0, epoch 3, command 17" in text
    assert "layer 'conv2' (ONNX node)" in text
    assert f"0x{start + 7248:08x} is located 48 bytes after the 7200-byte region 'conv2.in'" in text
    assert f"region 'conv2.in' kind=activation [0x{start:08x}, 0x{start + 7200:08x}) size=7200" in text
    assert "state=live" in text
    assert "origin: buffer 'conv2.in' of the plan in pool npuRAM3, produced by layer 'conv1'" in text
    assert lines[-1] == (f"SUMMARY: NPUSanitizer: buffer-overflow read at 0x{start + 7248:08x} by SE0 in conv2"
                         " in program 'mobilenet.npu'")
    j = faults_to_json([f])[0]
    assert j["region"] == {"name": "conv2.in", "kind": "activation", "start": start, "size": 7200,
                           "state": "live", "end": start + 7200, "perms": "rw", "owner": None,
                           "producer": "conv1", "origin": "buffer 'conv2.in' of the plan", "pool": "npuRAM3"}
    assert j["relation"] == {"where": "after", "offset": 48}
    assert (j["access"], j["size"], j["epoch"], j["command"], j["layer"]) == ("read", 48, 3, 17, "conv2")


def test_misaligned_rule_and_race_names_both_units():
    fs = _all_faults()
    text = render_text([fs["misaligned-access"]])
    assert "rule: field 'base': required alignment 128, actual residue 16" in text
    race = render_text([fs["write-write-race"]])
    assert "SE5 and SE6 both write" in race and "other_unit=SE6" in race


def test_repeats_suppressed_with_counts():
    f = _all_faults()["buffer-overflow"]
    g = _all_faults()["use-after-free"]
    many = [f] * 5 + [g, g]
    merged = merge_repeats(many)
    assert [(m.cls, m.count) for m in merged] == [("buffer-overflow", 5), ("use-after-free", 2)]
    text = render_text(many)
    assert text.count("==npusim== ERROR") == 2
    assert "4 more identical fault(s) suppressed" in text and "1 more identical fault(s) suppressed" in text
    assert "7 faults (5 buffer-overflow, 2 use-after-free); 2 shown" in text
    assert text.strip().splitlines()[-1].startswith("SUMMARY: NPUSanitizer: buffer-overflow")
    assert [e["count"] for e in faults_to_json(many, merge=True)] == [5, 2]
    assert len(faults_to_json(many)) == 7


def test_no_faults_and_schema_catches_bad_entries():
    assert render_text([], program_name="x") == "==npusim== no faults in program 'x'\n"
    good = faults_to_json([_all_faults()["out-of-pool"]])[0]
    assert validate_fault_json(good) == []
    bad = dict(good, relation={"where": "sideways", "offset": 1})
    del bad["unit"]
    probs = validate_fault_json(bad)
    assert any("unit: missing" in p for p in probs) and any("sideways" in p for p in probs)
    assert validate_fault_json(dict(good, address="0x10"))
    assert set(FAULT_JSON_SCHEMA["required"]) <= set(good)


def test_relation_text():
    from npusim.faults import RegionRef
    r = RegionRef("b", "scratch", 100, 50, "live")
    assert Relation("before", 3).text(r) == "3 bytes before the 50-byte region 'b'"
    assert Relation("inside", 7).text(r) == "7 bytes inside the 50-byte region 'b'"
    assert Relation("unmapped", 0).text(None) == "outside every known region"
