"""Progress of long work (a big compile, a big run) as a callback, and the CLI's bar for it.

The library reports progress through `progress(stage: str, done: int, total: int)`, called at
each stage or epoch; it never draws anything itself. The CLI passes a `Bar`: a tqdm bar on stderr
that appears only after the work has taken `delay` seconds (a small model shows nothing), is off
when stderr is not a terminal, and clears its line when it ends, so an error line printed after
it stands alone.
"""

from __future__ import annotations

import sys
from typing import Callable

ProgressFn = Callable[[str, int, int], None]


def report(progress: ProgressFn | None, stage: str, done: int, total: int) -> None:
    """Call `progress` if one was given."""
    if progress is not None:
        progress(stage, done, total)


class Bar:
    """`with Bar("compile") as bar: compile(..., progress=bar)`: a self-clearing stderr bar."""

    def __init__(self, desc: str, delay: float = 1.0, unit: str = "step"):
        self.desc, self.delay, self.unit = desc, delay, unit
        self._bar = None

    def __enter__(self) -> "Bar":
        from tqdm import tqdm

        self._bar = tqdm(total=1, desc=self.desc, unit=self.unit, file=sys.stderr, leave=False,
                         delay=self.delay, disable=None, dynamic_ncols=True)
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        bar = self._bar
        if bar is None or bar.disable:
            return
        if bar.total != total:
            bar.reset(total=max(total, 1))
        bar.set_description_str(f"{self.desc}: {stage}", refresh=False)
        bar.update(done - bar.n)

    def write(self, line: str) -> None:
        """Print a line on stdout above the bar (the bar is redrawn below it)."""
        from tqdm import tqdm

        tqdm.write(line, file=sys.stdout)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
