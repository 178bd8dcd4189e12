"""CLI flags are derived from CompileOptions metadata; args round-trip into CompileOptions."""

from __future__ import annotations

import argparse

import pytest

from npusim.compiler import CompileOptions
from npusim.compiler.cli_args import add_compile_arguments, options_from_args
from npusim.compiler.options import option_fields
from npusim.errors import UsageError


def _parser():
    p = argparse.ArgumentParser()
    add_compile_arguments(p)
    return p


def test_every_option_has_a_flag():
    help_text = _parser().format_help()
    for f in option_fields():
        assert f.metadata["flag"] in help_text


def test_defaults_round_trip():
    assert options_from_args(_parser().parse_args([])) == CompileOptions()


def test_flags_parse():
    args = _parser().parse_args(["--input-shape", "x=1,3,8,8", "--input-shape", "y=1,3,4,4", "--quantization",
                                 "fp16", "--mem-align", "16", "--fuse", "conv-bn,conv-act", "--mem-plan",
                                 "per-layer", "--io-pad", "64", "--guard", "0", "--calibration", "c.npz"])
    o = options_from_args(args)
    assert o.input_shapes == {"x": (1, 3, 8, 8), "y": (1, 3, 4, 4)}
    assert (o.quantization, o.mem_align, o.mem_plan, o.io_pad, o.guard, o.calibration) == \
        ("fp16", 16, "per-layer", 64, 0, "c.npz")
    assert o.fusions() == {"conv-bn", "conv-act"}
    assert options_from_args(_parser().parse_args(["--input-shape", "1,3,8,8"])).input_shapes == (1, 3, 8, 8)


def test_bad_values():
    with pytest.raises(SystemExit):
        _parser().parse_args(["--quantization", "int4"])
    with pytest.raises(UsageError):
        options_from_args(_parser().parse_args(["--input-shape", "1,a,3"]))
    with pytest.raises(UsageError):
        options_from_args(_parser().parse_args(["--fuse", "conv-softmax"]))
