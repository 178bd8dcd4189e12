"""Fault explanations: the descriptor the hardware used vs the buffer table the compiler wrote."""

import npusim
from npusim.compiler import CompileOptions, compile as compile_model
from npusim.zoo import conv_model


def test_overflow_names_the_stride_the_hardware_walked():
    prog = compile_model(conv_model(cin=16, cout=16, h=52, w=52), CompileOptions(mem_align=16))
    res = npusim.run(prog, random_inputs=True)
    (f,) = res.faults
    # 52 pixels x 16 B = 832 B per line as laid out; the hardware stores 7 granules = 896 B. The
    # conv runs on 4 CAs in row bands: the last band's read SE walks its 14 lines 64 B too far each
    assert "walked 896 B lines (7 x 128 B granules" in f.why
    assert "832 B lines in buffer 'input'" in f.why
    lines = f.pattern[2]
    assert lines == 14 and f"{lines} lines drift {(896 - 832) * (lines - 1)} B" in f.why
    assert "why: " in res.report_text()
    assert res.report_json()["faults"][0]["why"] == f.why


def test_clean_and_unrelated_faults_get_no_explanation():
    prog = compile_model(conv_model(cin=16, cout=16, h=52, w=52), CompileOptions(mem_align=128))
    assert npusim.run(prog, random_inputs=True).faults == []
