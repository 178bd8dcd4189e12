"""Does a static check agree with a run? The comparison the agreement tests make.

Both sides are reduced to `fault_keys` (context, class, first address, epoch, command), in the order
they were met. A keep-going run that ran to its end must meet exactly the predicted faults; a run
that stopped (at its first fault, or at a cycle limit) must have met a prefix of them. Two kinds of
predicted fault are set aside, because a run does not look for them: a parameter table's entries
are validated only when the unit computes values (not in a timing-only run), and faults at commands
the check left undecided are decided by the values of that run alone.
"""

from __future__ import annotations

from ..faults import render_text
from .check import fault_keys

TABLE_RULE = "parameter tables hold legal values"


def _comparable(faults, skip_commands, timing_only: bool) -> list:
    return [f for f in faults if f.command not in skip_commands
            and not (timing_only and f.cls == "bad-descriptor" and f.rule == TABLE_RULE)]


def disagreement(report, result, keep_going: bool, timing_only: bool) -> str:
    """"" if `report` (a CheckReport) agrees with `result` (the RunResult of the same program from the
    same start state), else a description listing both sides and both reports."""
    skip = {u.command for u in report.undecided}
    predicted = fault_keys(_comparable(report.faults, skip, timing_only))
    found = fault_keys(_comparable(result.faults, skip, timing_only))
    whole = (keep_going or not result.faults) and result.end_reason != "cycle-limit"
    if predicted == found or (not whole and predicted[:len(found)] == found):
        return ""
    at = next((i for i, (a, b) in enumerate(zip(predicted, found)) if a != b), min(len(predicted), len(found)))
    head = "check and run disagree" + (f" (context '{report.context}')" if report.context else "")
    lines = [f"{head}: first difference at fault #{at}",
             f"  check predicts ({len(predicted)}): " + ", ".join(map(str, predicted[at:at + 5])),
             f"  run found ({len(found)}, keep_going={keep_going}, end {result.end_reason}): "
             + ", ".join(map(str, found[at:at + 5])),
             "--- check report ---", report.text().rstrip("\n"),
             "--- run report ---", render_text(result.faults).rstrip("\n")]
    return "\n".join(lines) + "\n"
