"""The pytest plugin under pytest-xdist: `pytest -n 2` with a shared compile cache and golden files."""

import json

import pytest

pytest_plugins = ["pytester"]

# Four tests, two workers, one compile key: the model and options are the same, only the seed differs.
USER_TEST = '''
import pytest
from npusim import zoo
from npusim.compiler import CompileOptions
from npusim.testing import assert_no_faults

@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_conv(npusim_sim, seed):
    run = npusim_sim.run(zoo.conv_model(16, 16, 20, 20, 3), CompileOptions(mem_align=128), seed=seed)
    assert_no_faults(run)
    npusim_sim.assert_golden(run, tolerance=0.02)
'''


@pytest.mark.slow  # a pytest run with two workers in fresh processes: 7 s of CPU
def test_xdist_workers_share_one_compile_and_write_whole_goldens(pytester):
    pytester.makepyfile(test_user=USER_TEST)
    r = pytester.runpytest_subprocess("-n", "2", "--npusim-update-golden")
    r.assert_outcomes(passed=4)
    r.stdout.fnmatch_lines(["*npusim: compiled 1 program(s), reused 3 from the compile cache*",
                            "*npusim: wrote 4 golden file(s); review and commit them*"])
    goldens = sorted((pytester.path / "golden").glob("*.json"))
    assert len(goldens) == 4 and not list((pytester.path / "golden").glob("*.tmp"))
    assert all(json.loads(g.read_text())["cycles"] > 0 for g in goldens)
