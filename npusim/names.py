"""Layer and node names in fixed-width text tables: a name too long for its column keeps its end.

A TFLite model names a layer by its tensors (`mobilenet_v1_alpha_0.25/conv_dw_4_relu/Relu6;...;
mobilenet_v1_alpha_0.25/conv_dw_4/depthwise`): the layers share their start, their end tells them apart.
So a long name is shown as `…` and its last characters. Where two names' ends read alike, their start is
kept too (`start…end`); the column widens only when no such cut tells every name apart.
"""

from __future__ import annotations

ELLIPSIS = "…"


def _cut(name: str, width: int, head: int) -> str:
    if len(name) <= width:
        return name
    tail = width - 1 - head
    return name[:head] + ELLIPSIS + name[len(name) - tail:]


def fit(names, limit: int = 40, least: int = 5) -> tuple[int, dict[str, str]]:
    """(column width, {name: text shown}) for `names`: the width of the longest name, at most `limit` unless
    no cut tells the names apart, at least `least`. Every name is shown distinct from the others: by its end,
    or, for names whose ends read alike, by its start and end."""
    distinct = list(dict.fromkeys(str(n) for n in names))
    longest = max((len(n) for n in distinct), default=0)
    width = max(least, min(longest, limit))
    while width < longest:
        shown = {n: _cut(n, width, 0) for n in distinct}
        seen: dict[str, int] = {}
        for v in shown.values():
            seen[v] = seen.get(v, 0) + 1
        alike = [n for n in distinct if seen[shown[n]] > 1]
        others = {shown[n] for n in distinct if seen[shown[n]] == 1}
        for head in range(8, width - 12, 4):  # more and more of their start
            cut = {n: _cut(n, width, head) for n in alike}
            if len(set(cut.values())) == len(alike) and not set(cut.values()) & others:
                return width, {**shown, **cut}
        if not alike:
            return width, shown
        width = min(longest, width + 8)
    return width, {n: n for n in distinct}
