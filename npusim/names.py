"""Layer and node names in fixed-width text tables: a name too long for its column keeps its end.

A TFLite model names a layer by its tensors (`mobilenet_v1_alpha_0.25/conv_dw_4_relu/Relu6;...;
mobilenet_v1_alpha_0.25/conv_dw_4/depthwise`): the layers share their start, their end tells them apart.
So a long name is shown as `…` and its last characters. Where two names' ends read alike, each shows the
characters where it departs from the other, then its end (`…conv_dw_13_r…conv_pw_13/Conv2D`); the column
widens only when no such cut tells every name apart.
"""

from __future__ import annotations

import os

ELLIPSIS = "…"


def _cut(name: str, width: int) -> str:
    return name if len(name) <= width else ELLIPSIS + name[len(name) - width + 1:]


def _apart(name: str, others, width: int, around: int = 8) -> str | None:
    """`name` in `width` characters as the few around where it departs from `others` (names whose end
    reads the same), then its end; None if that leaves under `around` characters of the end."""
    d = max(len(os.path.commonprefix([name, o])) for o in others)
    lo = max(0, d - around)
    piece = (ELLIPSIS if lo else "") + name[lo:d + around]
    tail = width - len(piece) - 1
    if tail < around:
        return None
    return piece + ELLIPSIS + name[len(name) - tail:]


def fit(names, limit: int = 40, least: int = 5) -> tuple[int, dict[str, str]]:
    """(column width, {name: text shown}) for `names`: the width of the longest name, at most `limit` unless
    the names cannot be told apart in it, at least `least`. Every name is shown distinct from the others:
    by its end, or, for names whose ends read alike, by where they differ and their end."""
    distinct = list(dict.fromkeys(str(n) for n in names))
    longest = max((len(n) for n in distinct), default=0)
    width = max(least, min(longest, limit))
    while width < longest:
        shown = {n: _cut(n, width) for n in distinct}
        groups: dict[str, list[str]] = {}
        for n in distinct:
            groups.setdefault(shown[n], []).append(n)
        for group in (g for g in groups.values() if len(g) > 1):
            for n in group:
                cut = _apart(n, [o for o in group if o != n], width)
                shown[n] = cut if cut is not None else shown[n]
        if len(set(shown.values())) == len(distinct):
            return width, shown
        width = min(longest, width + 8)
    return width, {n: n for n in distinct}
