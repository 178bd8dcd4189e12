"""Contexts end to end: programs relocated into pool partitions, sharing one memory (run_shared)."""

from dataclasses import replace

import numpy as np
import pytest

from npusim import zoo
from npusim.compiler import CompileOptions, compile
from npusim.errors import DataError, IsaSpecError, UsageError
from npusim.hw import load_profile
from npusim.memory import Context
from npusim.program import Command, address_fields, load_isa, relocate
from npusim.program.codec import hardware_view
from npusim.program.spec import isa_path
from npusim.runtime import RunOptions, run, run_shared

PROF = load_profile("n657")
RAM3 = PROF.pool_named("npuRAM3").base
FLASH = 0x10000  # octoFlash partition size used by every context here


@pytest.fixture(scope="module")
def softmax():
    return compile(zoo.op_model("softmax"), CompileOptions())


@pytest.fixture(scope="module")
def mobilenet():
    return compile(zoo.mobilenet_v3_style(size=16), CompileOptions())


@pytest.fixture(scope="module")
def misaligned():  # blocked16 832 B lines stored as 7 granules: the SEs walk 896 B lines
    return compile(zoo.conv_model(16, 16, 52, 52), CompileOptions(mem_align=16))


def ctx(name, off, size, flash_slot):
    return Context(name, {"npuRAM3": (off, size), "octoFlash": (flash_slot * FLASH, FLASH)})


def ram3_need(prog):
    """Bytes of npuRAM3 the program reserves: buffer ends and SE limits (prefetch zones), computed here."""
    ends = [b.offset + b.size for b in prog.buffers if b.pool == "npuRAM3"]
    ends += [-(-c.args["limit"] // 8) * 8 - RAM3 for c in prog.commands
             if c.op == "SE" and RAM3 < c.args.get("limit", 0) <= RAM3 + 0x80000]
    return max(ends)


def test_two_clean_programs_in_disjoint_partitions_match_their_solo_runs(softmax, mobilenet):
    jobs = [(softmax, ctx("a", 0, 0x10000, 0), None), (mobilenet, ctx("b", 0x10000, 0x10000, 1), None)]
    res = run_shared(jobs)
    for r, prog in zip(res, (softmax, mobilenet)):
        alone = run(prog, random_inputs=True)
        assert r.status == "ok" and alone.status == "ok" and not r.faults
        assert r.raw_outputs.keys() == alone.raw_outputs.keys() and r.raw_outputs
        for k in alone.raw_outputs:
            assert np.array_equal(r.raw_outputs[k], alone.raw_outputs[k])
        assert r.stats.cycles == alone.stats.cycles  # same placement relative to bank lines (64 KiB shift)


def test_overlapping_partitions_are_pool_overlap_in_both_results(softmax, mobilenet):
    jobs = [(softmax, ctx("a", 0, 0x10000, 0), None), (mobilenet, ctx("b", 0x8000, 0x10000, 1), None)]
    ra, rb = run_shared(jobs)
    for r, me, other in ((ra, "a", "b"), (rb, "b", "a")):
        assert r.status == "fault" and r.end_reason == "fault" and [f.cls for f in r.faults] == ["pool-overlap"]
        f = r.faults[0]
        assert (f.context, f.details["other_context"], f.address, f.size) == (me, other, RAM3 + 0x8000, 0x8000)
        assert r.stats.cycles == 0  # stop at the first fault: an overlapping context does not run
    kept = run_shared(jobs, options=RunOptions(keep_going=True))
    assert all(r.faults[0].cls == "pool-overlap" and r.stats.cycles > 0 for r in kept)


def test_only_affected_contexts_get_the_overlap(softmax):
    jobs = [(softmax, ctx("a", 0, 0x8000, 0), None), (softmax, ctx("b", 0x4000, 0x8000, 1), None),
            (softmax, ctx("c", 0x10000, 0x8000, 2), None)]
    ra, rb, rc = run_shared(jobs)
    assert ra.faults[0].cls == rb.faults[0].cls == "pool-overlap"
    assert rc.status == "ok"


def test_misaligned_program_overruns_into_the_next_context(misaligned, softmax):
    """The write SE of the last row band of 'conv' (a's last buffer; 4 CAs, SE8 writes rows 39-51) walks
    12 x 64 B past the compiler's buffer. Its base
    lies in a's own region, so the checker reports the first bad byte -- the byte after 'conv', in
    a's prefetch guard -- as buffer-overflow (it precedes cross-context-access in the per-byte
    order); the fault names the region of context b the access runs on into."""
    need = ram3_need(misaligned)
    assert need % 128 == 0
    jobs = [(misaligned, ctx("a", 0, need, 0), None), (softmax, ctx("b", need, 0x10000, 1), None)]
    ra, rb = run_shared(jobs, options=RunOptions(keep_going=True))
    out = misaligned.buffer("conv")
    f = next(f for f in ra.faults if f.region is not None and f.region.name == "conv")
    assert (f.cls, f.access, f.context, f.unit) == ("buffer-overflow", "write", "a", "SE8")
    assert f.address == RAM3 + out.offset + out.size
    b_first = min(b.offset for b in softmax.buffers if b.pool == "npuRAM3")
    assert f.details["other_context"] == "b" and f.details["other_address"] == RAM3 + need + b_first
    assert "of context 'b'" in f.rule and f.region.owner == "a"
    assert rb.status == "ok"  # a's overrun ends before b's input: b's results are unharmed
    # stop at the first fault: a stops at its input read (into its own output); b still runs
    ra1, rb1 = run_shared(jobs)
    assert [x.cls for x in ra1.faults] == ["buffer-overflow"] and ra1.faults[0].region.name == "input"
    assert "other_context" not in ra1.faults[0].details and rb1.status == "ok"


def test_wild_pointer_into_another_context_is_cross_context_access(softmax):
    """a's HOST reads one partition further: after relocation its base lies in b's copy of the
    buffer (b ran first, so the bytes are written): the base's region belongs to b."""
    n = 0x10000
    host = next(i for i, c in enumerate(softmax.commands) if c.op == "HTENSOR" and c.args["dir"] == "read")
    cmd = softmax.commands[host]
    wild = replace(softmax, commands=[*softmax.commands[:host], Command("HTENSOR", {**cmd.args, "addr": cmd.args["addr"] + n}),
                                      *softmax.commands[host + 1:]])
    rb, ra = run_shared([(softmax, ctx("b", n, n, 1), None), (wild, ctx("a", 0, n, 0), None)])
    assert rb.status == "ok"
    f = ra.faults[0]
    assert (f.cls, f.context, f.unit, f.access) == ("cross-context-access", "a", "HOST", "read")
    assert f.address == cmd.args["addr"] + n and f.region.owner == "b"
    assert "belongs to context 'b', not to 'a'" in f.rule


def _hw_addresses(prog, isa):
    fields = address_fields(isa)
    out = []
    for i, c in enumerate(prog.commands):
        hw = hardware_view(c, isa, PROF)
        out += [((i, c.op, n), int(hw.args.get(n, 0))) for n in fields.get(c.op, ())]
    return out


def test_relocation_moves_every_address_field(softmax, mobilenet):
    isa = load_isa()
    d3, df = 0x24000, 0x3000
    flash = PROF.pool_named("octoFlash")
    seen = set()
    for prog in (softmax, mobilenet):
        moved = relocate(prog, {"npuRAM3": d3, "octoFlash": df}, PROF)
        for (key, before), (key2, after) in zip(_hw_addresses(prog, isa), _hw_addresses(moved, isa)):
            assert key == key2
            if before == 0:
                assert after == 0
                continue
            seen.add(key[1:])
            in_flash = flash.base <= before <= flash.end
            assert after - before == (df if in_flash else d3), key
        for a, b in zip(prog.commands, moved.commands):  # non-address fields unchanged
            keep = set(a.args) - set(address_fields(isa).get(a.op, ()))
            assert {k: a.args[k] for k in keep} == {k: b.args[k] for k in keep}
        for a, b in zip(prog.buffers + prog.constants, moved.buffers + moved.constants):
            assert b.offset - a.offset == (df if a.pool == "octoFlash" else d3)
    want = {(c, f) for c, names in address_fields(isa).items() for f in names}
    assert seen == want  # every address field of the ISA was exercised
    with pytest.raises(UsageError, match="multiple of 8"):
        relocate(softmax, {"npuRAM3": 4}, PROF)


def test_program_that_does_not_fit_its_partition(mobilenet):
    need = ram3_need(mobilenet)
    with pytest.raises(DataError, match=rf"needs {need} B of pool npuRAM3.*room for {need - 128} B"):
        run_shared([(mobilenet, ctx("a", 0, need - 128, 0), None)])
    with pytest.raises(DataError, match="no partition in it"):
        run_shared([(mobilenet, Context("a", {"npuRAM3": (0, 0x10000)}), None)])
    with pytest.raises(DataError, match="not a multiple of 128"):
        run_shared([(mobilenet, ctx("a", 0x40, 0x10000, 0), None)])


def test_isa_address_attribute_is_checked(tmp_path):
    text = isa_path().read_text().replace('address = true, doc = "first byte address"',
                                          'address = "yes", doc = "first byte address"')
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(IsaSpecError, match="SE.base: address must be"):
        load_isa(str(p))


def test_cli_runs_blobs_in_contexts(tmp_path, softmax, misaligned):
    import json

    from npusim.cli import main
    from npusim.program.blob import encode_blob

    for name, prog in (("a", softmax), ("c", misaligned)):
        (tmp_path / f"{name}.npu").write_bytes(encode_blob(prog, PROF))
    a, c, rep = str(tmp_path / "a.npu"), str(tmp_path / "c.npu"), str(tmp_path / "r.json")
    ok = ["--context", "a:npuRAM3=0x0+0x10000,octoFlash=0x0+0x10000",
          "--context", "b:npuRAM3=0x10000+0x10000,octoFlash=0x10000+0x10000"]
    assert main(["run", a, a, *ok, "--json", rep]) == 0
    assert {k: v["status"] for k, v in json.loads(open(rep).read())["contexts"].items()} == {"a": "ok", "b": "ok"}
    big = ["--context", "a:npuRAM3=0x0+0x20000,octoFlash=0x0+0x10000",
           "--context", "b:npuRAM3=0x20000+0x10000,octoFlash=0x10000+0x10000"]
    assert main(["run", c, a, *big]) == 139  # the misaligned blob overflows its buffers
    assert main(["run", a, a, *ok[:3], ok[3].replace("0x10000+", "0x8000+", 1)]) == 139  # pool-overlap
    assert main(["run", a, a, *ok[:2]]) == 2  # one --context per blob
    assert main(["run", a, "--context", "a:npuRAM3=0x0"]) == 2
    assert main(["run", a, "--context", "a:npuRAM3=0x0+0x100,octoFlash=0x0+0x10000"]) == 65  # does not fit


def test_wild_write_into_free_bytes_of_another_partition_is_cross_context_access(softmax):
    """a's HOST writes 0x18000 further: into bytes of b's partition no region of b covers.
    The partition, not a region, makes it b's: cross-context-access naming both contexts."""
    n, shift = 0x10000, 0x18000
    host = next(i for i, c in enumerate(softmax.commands) if c.op == "HTENSOR" and c.args["dir"] == "write")
    cmd = softmax.commands[host]
    wild = replace(softmax, commands=[*softmax.commands[:host], Command("HTENSOR", {**cmd.args, "addr": cmd.args["addr"] + shift}),
                                      *softmax.commands[host + 1:]])
    ra, rb = run_shared([(wild, ctx("a", 0, n, 0), None), (softmax, ctx("b", n, n, 1), None)])
    f = ra.faults[0]
    x = cmd.args["addr"] + shift
    b_ram3 = [(RAM3 + n + b.offset, RAM3 + n + b.offset + b.size) for b in softmax.buffers if b.pool == "npuRAM3"]
    assert RAM3 + n <= x < RAM3 + 2 * n and not any(lo <= x < hi for lo, hi in b_ram3)  # free bytes of b
    assert (f.cls, f.context, f.unit, f.access, f.address) == ("cross-context-access", "a", "HOST", "write", x)
    assert f.details["other_context"] == "b" and f.details["other_partition"] == "npuRAM3"
    assert "partition" in f.rule and "context 'b'" in f.rule and "context 'a'" in f.rule
    assert rb.status == "ok"


def test_partition_bytes_checker_level():
    """Checker(partitions=): a byte of another context's partition (and of none of one's own) is
    cross-context-access, region or not, and wins over an overflow at the same byte."""
    from npusim.memory import AccessPattern, AddressMap, Checker, RegionTable

    am = AddressMap(PROF)
    t = RegionTable(am)
    parts = {("a", "npuRAM3"): (RAM3, RAM3 + 0x1000), ("b", "npuRAM3"): (RAM3 + 0x1000, RAM3 + 0x2000),
             ("c", "npuRAM3"): (RAM3 + 0x1800, RAM3 + 0x2800)}  # c overlaps b
    end = RAM3 + 0x1000
    last = t.add("a.last", "output", end - 0x100, 0x100, owner="a")  # ends where b's partition starts
    mid = t.add("a.mid", "output", RAM3 + 0x200, 0x100, owner="a")
    ck = Checker(am, t, partitions=parts)
    assert ck.check(AccessPattern(last.start, 0x100), "write", "SE0", context="a") is None
    f = ck.check(AccessPattern(last.start, 0x108), "write", "SE0", context="a")
    assert (f.cls, f.address, f.details["other_context"]) == ("cross-context-access", end, "b")
    assert "partition" in f.rule and "'b'" in f.rule and "'a'" in f.rule and f.context == "a"
    # the first bad byte in a's own free bytes stays an overflow (no region of b is reached)
    f = ck.check(AccessPattern(mid.start, 0x200), "write", "SE0", context="a")
    assert (f.cls, f.address) == ("buffer-overflow", mid.end) and "other_context" not in f.details
    # wild runs into b's free bytes: the first foreign byte in stream order
    w = ck.check(AccessPattern(end + 0x40, 16, n1=4, s1=0x20), "read", "DMA", context="a")
    assert (w.cls, w.address, w.details["other_context"]) == ("cross-context-access", end + 0x40, "b")
    # c's own bytes inside b's partition (the overlap) are c's; b's other bytes are not
    g = ck.check(AccessPattern(RAM3 + 0x1800, 16), "read", "SE0", context="c")
    assert g.cls == "buffer-overflow"
    g = ck.check(AccessPattern(RAM3 + 0x17f8, 16), "read", "SE0", context="c")
    assert (g.cls, g.address, g.details["other_context"]) == ("cross-context-access", RAM3 + 0x17f8, "b")
    # `only` filters it like any class; without a context or partitions nothing changes
    assert ck.check(AccessPattern(end, 16), "write", "SE0", context="a", only=("write-to-readonly",)) is None
    assert ck.check(AccessPattern(end + 0x40, 16), "write", "DMA").cls == "buffer-overflow"
    assert Checker(am, t).check(AccessPattern(end + 0x40, 16), "write", "DMA", context="a").cls == "buffer-overflow"


def test_program_with_a_buffer_across_merged_pools_is_refused_clearly():
    prog = compile(zoo.yolo_style(), CompileOptions())
    ram3 = PROF.pool_named("npuRAM3").size
    wide = [b for b in prog.buffers if b.pool == "npuRAM3" and b.offset + b.size > ram3]
    assert wide  # the compiler merged npuRAM3 and npuRAM4 for it
    big = Context("a", {"npuRAM3": (0, ram3), "npuRAM4": (0, PROF.pool_named("npuRAM4").size),
                        "octoFlash": (0, PROF.pool_named("octoFlash").size)})
    with pytest.raises(DataError, match=rf"buffer '{wide[0].name}' runs past the end of pool npuRAM3.*"
                                        r"need every buffer inside one pool"):
        run_shared([(prog, big, None)])


def _reaches_reference(runs_, others):
    """Brute force: first byte in stream order of any region in `others`, and the first such region."""
    for s, e in runs_:
        for x in range(s, e):
            for r in others:
                if r.start <= x < r.end:
                    return x, r
    return None


def test_overflow_names_the_first_other_context_region_it_reaches():
    """Many regions of another context, overlapping ones among them: the overflow fault's
    other_address / other_region are the first such byte in stream order (brute force reference)."""
    from npusim.memory import AccessPattern, AddressMap, Checker, RegionTable

    am = AddressMap(PROF)
    rng = np.random.default_rng(7)
    for trial in range(20):
        t = RegionTable(am)
        mine = t.add("mine", "output", RAM3 + 0x100, 0x100, owner="a")
        others = []
        for i in range(40):
            start = RAM3 + 0x200 + int(rng.integers(0, 0x2000))
            o = t.add(f"o{i}", "activation", start, int(rng.integers(1, 0x80)), owner=str(rng.choice(["b", "c"])))
            if rng.random() < 0.2:
                t.free(o)
            else:
                others.append(o)
        t.add("own_far", "activation", RAM3 + 0x180 + 0x100, 0x40, owner="a")
        ck = Checker(am, t)
        run, n1, s1 = int(rng.integers(1, 0x100)), int(rng.integers(1, 12)), int(rng.integers(-0x200, 0x400))
        base = mine.start + int(rng.integers(0, 0x100))
        p = AccessPattern(base, run, n1=n1, s1=s1)
        f = ck.check(p, "write", "SE0", context="a", provenance=mine)
        if f is None or f.cls not in ("buffer-overflow", "buffer-underflow"):
            continue
        want = _reaches_reference([(base + k * s1, base + k * s1 + run) for k in range(n1)], others)
        if want is None:
            assert "other_context" not in f.details
        else:
            x, r = want
            assert (f.details["other_address"], f.details["other_region"], f.details["other_context"]) == \
                (x, r.name, r.owner), trial
            assert f"of context '{r.owner}' at {x:#x}" in f.rule
