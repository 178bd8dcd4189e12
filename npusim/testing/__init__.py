"""Regression testing of compiler output -- the public place for the pytest helpers.

    from npusim.testing import (assert_no_faults, assert_matches_reference, assert_cycles,
                                assert_golden, assert_valid_blob, assert_check_clean, assert_st_clean)

The pytest plugin (`npusim.pytest_plugin`, enabled on install) provides the `npusim_sim`
fixture, a `Sim` bound to the test; `Sim` also works without pytest.
"""

from .assertions import (NpusimCheckFailed, assert_check_clean, assert_cycles, assert_golden,
                         assert_matches_reference, assert_no_faults, assert_st_clean, assert_valid_blob,
                         fault_headline)
from .sim import CompileCache, Sim, SimRun, random_inputs

__all__ = ["assert_no_faults", "assert_matches_reference", "assert_cycles", "assert_golden",
           "assert_valid_blob", "assert_check_clean", "assert_st_clean", "fault_headline", "NpusimCheckFailed", "Sim", "SimRun", "CompileCache", "random_inputs"]
