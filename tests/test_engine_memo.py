"""What a Program keeps for its next runs (`Program.memo`) never changes a run: the epoch timing
memo per plan (keyed by the NPU cache's answers), the NPU cache transcript a fresh cache follows,
the check geometry, written intervals and starting stats of each plan, the region table, the mapped
constants and the memory map's layout. A run of a Program that kept all of that is the run of a
fresh copy of it (no memo): cycles, stats, faults, report, trace -- also after runs that took other
paths (faults, a cycle limit, keep-going, the static check) and ended their transcripts early."""

from __future__ import annotations

import copy

import pytest

import npusim
from npusim import zoo
from npusim.analysis import check
from npusim.compiler import CompileOptions, compile as compile_model
from npusim.runtime import RunOptions

from test_runtime_memo import same


def fresh(prog):
    """A copy of the program without its memo (pickling drops it)."""
    return copy.deepcopy(prog)


CASES = {
    "hyperRAM weights (cached pool)": (lambda: zoo.yolo_style(size=96), CompileOptions(weights_pool="hyperRAM")),
    "flash weights, multi-CA": (lambda: zoo.resnet_style(), CompileOptions()),
    "mem-align 16 (faults)": (lambda: zoo.conv_model(16, 32, 20, 20), CompileOptions(mem_align=16)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_repeat_runs_are_the_runs_of_a_fresh_program(case):
    make, opts = CASES[case]
    prog = compile_model(make(), opts)
    ins = npusim.runtime.seeded_inputs(prog, 0)
    paths = [RunOptions(timing_only=True), RunOptions(timing_only=True, max_cycles=5000),
             RunOptions(timing_only=True, keep_going=True), RunOptions(), RunOptions(keep_going=True),
             RunOptions(timing_only=True, mode="burst"), RunOptions(timing_only=True)]
    for opt in paths:  # each after the others' memos, against a program that kept none
        same(npusim.run(prog, ins, opt), npusim.run(fresh(prog), ins, opt))
        assert check(prog).to_json() == check(fresh(prog)).to_json()


def test_transcript_of_a_shorter_run_is_left_where_the_run_goes_on():
    """A cycle-limited run keeps the first transcript (it ends early); a run after a run that met a
    fault part way follows the transcript and leaves it where its look-ups differ."""
    prog = compile_model(zoo.yolo_style(size=96), CompileOptions(weights_pool="hyperRAM"))
    cut = npusim.run(prog, options=RunOptions(timing_only=True, max_cycles=20000))
    assert cut.end_reason == "cycle-limit"
    full = npusim.run(prog, options=RunOptions(timing_only=True))
    same(full, npusim.run(fresh(prog), options=RunOptions(timing_only=True)))
    same(npusim.run(prog, options=RunOptions(timing_only=True)), full)
