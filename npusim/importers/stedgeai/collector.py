"""Python's cyclic garbage collector paused over one walk of an imported program (a replay, a functional run).

A walk allocates many small objects, which set off full collections that visit every object of the process
(the loaded output, its plans): 30-50 ms each on YOLOX, landing in some walks and not others. Paused, a walk
costs the same every time; the collector is left as it was found (enabled or not), so nested or concurrent
walks restore what their caller had.
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused():
    """The collector off inside the block; on again after it if it was on before."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
