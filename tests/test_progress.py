"""Progress of long work: the library reports stages and epochs; the CLI's bar is on stderr,
only on a terminal, and clears its line at the end (an error printed after it stands alone)."""

import io
import sys

import npusim
from npusim import zoo
from npusim.compiler.driver import STAGES
from npusim.progress import Bar


def test_compile_and_run_report_their_progress():
    seen = []
    prog = npusim.compile(zoo.resnet_style(), progress=lambda *a: seen.append(a))
    stages = [s for s, _, _ in seen]
    assert stages[0] == "front end" and stages[-1] == "done" and "calibration" in stages
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen) and {t for _, _, t in seen} == {len(STAGES)}
    epochs = []
    npusim.run(prog, random_inputs=True, progress=lambda *a: epochs.append(a))
    steps = sum(c.op in ("RUN", "HOST") for c in prog.commands)
    assert [d for _, d, _ in epochs] == list(range(steps)) and {t for _, _, t in epochs} == {steps}


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_bar_draws_on_a_terminal_and_clears_its_line(monkeypatch):
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    with Bar("compile", delay=0) as bar:
        for i in range(3):
            bar("stage", i, 3)
    text = tty.getvalue()
    assert "compile" in text and text.endswith("\r")  # the last write blanks the line
    assert text.rsplit("\r", 2)[-2].strip() == ""
    pipe = io.StringIO()  # not a terminal: nothing at all
    monkeypatch.setattr(sys, "stderr", pipe)
    with Bar("compile", delay=0) as bar:
        bar("stage", 1, 3)
    assert pipe.getvalue() == ""
