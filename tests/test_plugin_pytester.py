"""The pytest plugin end to end, as a new user meets it: 10-line test files run by pytester."""

import xml.etree.ElementTree as ET


# Loaded before pytester's in-process runs snapshot sys.modules (C extensions load once).
import npusim.compiler  # noqa: F401
import npusim.reference  # noqa: F401
import npusim.runtime  # noqa: F401
import npusim.testing  # noqa: F401
import npusim.zoo  # noqa: F401
import onnxruntime  # noqa: F401

pytest_plugins = ["pytester"]

# A small 16-channel stage: with mem_align=16 its 52x52 feature map is laid out with 16 B
# strides while the hardware counts strides in 128 B granules, so the run overflows.
USER_TEST = '''
import pytest
from npusim import zoo
from npusim.compiler import CompileOptions
from npusim.testing import assert_no_faults, assert_cycles

@pytest.mark.parametrize("align", [128, {other}])
def test_conv(npusim_sim, align):
    run = npusim_sim.run(zoo.conv_model(16, 16, 52, 52, 3), CompileOptions(mem_align=align))
    assert_no_faults(run)
    npusim_sim.assert_golden(run, tolerance=0.02)
'''


def _write(pytester, other=256):
    pytester.makepyfile(test_npusim_user=USER_TEST.format(other=other))


def test_green_then_cycle_drift_is_a_readable_diff(pytester):
    _write(pytester)
    r = pytester.runpytest("--npusim-update-golden")
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines(["npusim: wrote 2 golden file(s); review and commit them"])
    golden = pytester.path / "golden" / "test_npusim_user.test_conv[128].json"
    assert golden.is_file()
    r = pytester.runpytest()
    r.assert_outcomes(passed=2)  # green: nothing changed
    # Pretend the golden came from a compiler that was 10% faster in its first layer.
    import json

    snap = json.loads(golden.read_text())
    layer = sorted(snap["layers"], key=lambda n: -snap["layers"][n])[0]
    cut = int(snap["layers"][layer] * 0.1)
    snap["layers"][layer] -= cut
    snap["cycles"] -= cut
    golden.write_text(json.dumps(snap, indent=2, sort_keys=True))
    r = pytester.runpytest("--junitxml=drift.xml")
    r.assert_outcomes(passed=1, failed=1)
    fail = next(ET.parse(pytester.path / "drift.xml").getroot().iter("failure"))
    first = fail.get("message").splitlines()[0]
    assert first.startswith("npusim.testing.assertions.NpusimCheckFailed: npusim golden mismatch")
    assert f"slowest layer {layer} +" in first
    out = r.stdout.str()
    assert "npusim golden mismatch (test_npusim_user.test_conv[128].json): cycles +" in out
    assert f"slowest layer {layer} +" in out
    assert f"! {layer}: {snap['layers'][layer]} -> {snap['layers'][layer] + cut} cycles" in out
    assert "--npusim-update-golden" in out


def test_faulting_blob_is_red_with_the_asan_report_in_junit(pytester):
    _write(pytester, other=16)
    pytester.runpytest("--npusim-update-golden", "-k", "128").assert_outcomes(passed=1, deselected=1)
    xml = pytester.path / "junit.xml"
    r = pytester.runpytest_subprocess(f"--junitxml={xml}")
    r.assert_outcomes(passed=1, failed=1)
    out = r.stdout.str()
    assert "==npusim== ERROR: NPUSanitizer:" in out and "SUMMARY: NPUSanitizer:" in out
    cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
    fail = cases["test_conv[16]"].find("failure")
    assert fail is not None and cases["test_conv[128]"].find("failure") is None
    first = fail.get("message").splitlines()[0]
    assert "npusim fault: " in first and " in layer " in first
    cls = first.split("npusim fault: ")[1].split(" in layer ")[0]
    from npusim.faults import FAULT_CLASSES

    assert cls in FAULT_CLASSES
    layer = first.split(" in layer ")[1].split(" ")[0]
    assert layer and layer != "?"
    assert "==npusim== ERROR" in fail.text


def test_foreign_blob_file(pytester):
    """A blob from 'another compiler' (here: ours, written to a file) gets the same checks."""
    from npusim import zoo
    from npusim.compiler import CompileOptions, compile
    from npusim.hw.profile import load_profile
    from npusim.program.blob import encode_blob

    prof = load_profile()
    for name, align in (("good", 128), ("bad", 16)):
        prog = compile(zoo.conv_model(16, 16, 52, 52, 3), CompileOptions(mem_align=align), profile=prof)
        (pytester.path / f"{name}.npu").write_bytes(encode_blob(prog, prof))
    pytester.makepyfile(test_npusim_blob='''
import pathlib, pytest
from npusim.testing import assert_no_faults, assert_cycles

@pytest.mark.parametrize("name", ["good", "bad"])
def test_blob(npusim_sim, name):
    run = npusim_sim.run(pathlib.Path(__file__).parent / f"{name}.npu", seed=1)
    assert_no_faults(run)
    assert_cycles(run, budget=10**9)
''')
    r = pytester.runpytest("-ra")
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines(["E *NpusimCheckFailed: npusim fault: * in layer *",
                            "*==npusim== ERROR: NPUSanitizer: *",
                            "FAILED test_npusim_blob.py::test_blob[[]bad[]]*"])


def test_missing_golden_tells_how_to_create_it(pytester):
    _write(pytester)
    r = pytester.runpytest("-k", "128")
    r.assert_outcomes(failed=1, deselected=1)
    r.stdout.fnmatch_lines(["E *NpusimCheckFailed: npusim golden: *does not exist*--npusim-update-golden*"])
    assert "golden.py:" not in r.stdout.str()  # a clean failure, not a traceback through npusim


def test_compile_cache_lives_in_the_pytest_cache(pytester):
    _write(pytester)
    pytester.runpytest("--npusim-update-golden").assert_outcomes(passed=2)
    cache = pytester.path / ".pytest_cache" / "d" / "npusim-compile"
    assert len(list(cache.glob("*.npu"))) == 2
    for p in cache.glob("*.npu"):
        p.unlink()
    r = pytester.runpytest("--npusim-no-cache")
    r.assert_outcomes(passed=2)
    assert not list(cache.glob("*.npu"))
    r.stdout.no_fnmatch_line("*wrote * golden file*")  # goldens unchanged, nothing rewritten


def test_golden_names_include_the_class(pytester):
    pytester.makepyfile(test_npusim_named='''
class TestA:
    def test_x(self, npusim_sim):
        assert npusim_sim.golden_path().name == "test_npusim_named.TestA.test_x.json"

def test_y(npusim_sim):
    assert npusim_sim.golden_path("mine").name == "mine.json"
    assert npusim_sim.golden_path().parent.name == "golden"
''')
    pytester.runpytest().assert_outcomes(passed=2)


def test_profile_options_reach_the_fixture(pytester):
    pytester.makepyfile(test_npusim_prof='''
def test_p(npusim_sim):
    assert npusim_sim.profile.bus.max_burst_beats == 8
''')
    pytester.runpytest("--npusim-set", "bus.max_burst_beats=8").assert_outcomes(passed=1)
    r = pytester.runpytest("--npusim-set", "bus.no_such_key=1")
    r.assert_outcomes(errors=1)
    r.stdout.fnmatch_lines(["*ProfileOverrideError*no_such_key*"])


def test_help_lists_the_options(pytester):
    r = pytester.runpytest("--help")
    r.stdout.fnmatch_lines(["*--npusim-update-golden*", "*--npusim-no-cache*"])
