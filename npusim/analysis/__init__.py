"""Static analysis of blobs: `check` predicts every fault a run would meet, without running it;
`disagreement` compares a prediction with a run (the agreement tests)."""

from .agreement import disagreement
from .check import CheckReport, check, check_shared, fault_keys, walk

__all__ = ["CheckReport", "check", "check_shared", "disagreement", "fault_keys", "walk"]
