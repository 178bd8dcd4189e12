"""`validate --per-layer` on an ST output: which of ST's buffers stands for which reference tensor.

ST compiled its own ONNX export of the model, so names rarely match; ST carries the source model's
quantisation scales, so a buffer and its tensor share a scale and a value count. A pair is first sought at
the same NHWC shape (`_pair_groups`); a buffer left over is then paired through a `View`: the same values
once unit dimensions are dropped, adjacent dimensions merged or split (a reshape), and the axes permuted
only where the non-unit dimensions say how (NCHW against NHWC, a 2-D head against a 4-D buffer).
Whatever stays unmatched is listed with the reason.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

CONFIDENT_COSINE = 0.99  # a pair this close is taken whatever the order (parallel branches run in either order)
PAIRED_TYPES = ("INT8", "UINT8", "INT16", "UINT16")


def _squeezed(shape) -> tuple:
    return tuple(int(d) for d in shape if d != 1)


def _reshapes(a: tuple, b: tuple) -> bool:
    """One is the other with adjacent dimensions merged (a reshape that keeps the element order)."""
    pa, pb = set(np.cumprod(a or (1,)).tolist()), set(np.cumprod(b or (1,)).tolist())
    return pa <= pb or pb <= pa


@dataclass(frozen=True)
class View:
    """How a buffer's logical (N, H, W, C) array reads as a reference tensor: drop the unit dimensions,
    permute the rest (`perm`), reshape to `shape`."""

    perm: tuple
    shape: tuple

    def of(self, a: np.ndarray) -> np.ndarray:
        return a.reshape(_squeezed(a.shape)).transpose(self.perm).reshape(self.shape)

    def back(self, t: np.ndarray, shape: tuple) -> np.ndarray:
        """A reference-shaped array in the buffer's logical shape."""
        sq = _squeezed(shape)
        return t.reshape(tuple(sq[p] for p in self.perm)).transpose(np.argsort(self.perm)).reshape(shape)


def view(shape: tuple, ref_shape: tuple) -> View | None:
    """The view pairing a buffer of `shape` with a tensor of `ref_shape`, None when their layouts do not
    relate: the element order kept (up to reshapes), else the one axis permutation (fewest inversions) after
    which it is kept; a permutation is never guessed among dimensions of equal size that would swap."""
    if int(np.prod(shape)) != int(np.prod(ref_shape)):
        return None
    s, r = _squeezed(shape), _squeezed(ref_shape)
    ident = tuple(range(len(s)))
    if _reshapes(s, r):
        return View(ident, tuple(ref_shape))
    if len(s) > 4:
        return None
    fits = sorted((sum(p[i] > p[j] for i in range(len(p)) for j in range(i + 1, len(p))), p)
                  for p in itertools.permutations(ident) if _reshapes(tuple(s[i] for i in p), r))
    if not fits or (len(fits) > 1 and fits[0][0] == fits[1][0]):
        return None
    return View(fits[0][1], tuple(ref_shape))


def not_compared(b) -> str | None:
    """Why a buffer an epoch produces is not compared per layer (None: it is)."""
    from ..importers.stedgeai.sw_exec import channel_block

    if b.dtype == "FLOAT":
        return "float values (compared as outputs; per layer compares quantised tensors)"
    if not b.scale:
        return f"ST-internal {b.nbits}-bit {b.dtype or 'raw'} staging (no quantisation scale)"
    if b.dtype not in PAIRED_TYPES:
        return f"{b.dtype} values"
    if len(b.shape) != 4 or int(np.prod(b.shape)) * max(b.nbits // 8, 1) != b.size:
        return f"shape {list(b.shape)} is not its {b.size} bytes"
    if b.shape[3] % max(channel_block(b), 1):
        return f"{b.shape[3]} channels in blocks of {channel_block(b)}"
    return None


@dataclass
class Pair:
    metrics: object  # st_validate.OutputMetrics of the buffer against the tensor
    ref: tuple  # (op index, name, values, scale, zero point) as the interpreter gave it
    expected: np.ndarray  # the tensor dequantised, in its own shape
    view: View


def monotone_pairs(score: np.ndarray) -> list:
    """[(i, j)] pairing rows with columns in order (i and j both increasing): as many pairs as the shorter
    side allows, and among those the largest total score (scores in [-1, 1]; NaN: may not pair)."""
    n, m = score.shape
    bonus = 2.0 * (min(n, m) + 1)  # one pair more always outweighs any scores
    best = np.zeros((n + 1, m + 1))
    for i in range(n):
        for j in range(m):
            take = best[i, j] + bonus + score[i, j] if score[i, j] == score[i, j] else -np.inf
            best[i + 1, j + 1] = max(best[i, j + 1], best[i + 1, j], take)
    pairs, i, j = [], n, m
    while i and j:
        if best[i, j] == best[i - 1, j]:
            i -= 1
        elif best[i, j] == best[i, j - 1]:
            j -= 1
        else:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
    return pairs[::-1]


def confident_then_ordered(score: np.ndarray) -> list:
    """[(row, column)]: the unambiguous pairs (each the other's closest, cosine >= CONFIDENT_COSINE); then
    the rows and columns left (layers gone wrong and those after them, near-twin branches) aligned in order
    (`monotone_pairs`). NaN scores never pair."""
    if not score.size:
        return []
    filled = np.nan_to_num(score, nan=-np.inf)
    pairs = [(i, int(j)) for i, j in enumerate(filled.argmax(axis=1))
             if filled[i, j] >= CONFIDENT_COSINE and int(filled[:, j].argmax()) == i]
    used_i, used_j = {i for i, _ in pairs}, {j for _, j in pairs}
    rest_i = [i for i in range(score.shape[0]) if i not in used_i]
    rest_j = [j for j in range(score.shape[1]) if j not in used_j]
    if rest_i and rest_j:
        pairs += [(rest_i[a], rest_j[b]) for a, b in monotone_pairs(score[np.ix_(rest_i, rest_j)])]
    return pairs


def _same_scale(r, scale: float) -> bool:
    return abs(r[3] - scale) <= 1e-6 * r[3]


def _reference_dequantised(r) -> np.ndarray:
    """A reference tensor (name, index, values, scale, zero point) in real units."""
    return (r[2].astype(np.float64) - r[4]) * r[3]


def _twins(taken: list, idx: list) -> dict:
    """{i: the earlier buffer of `idx` it equals, unit dimensions aside} (copies take their source's partner)."""
    out = {}
    for i in idx:
        k = next((k for k in idx if k < i and _squeezed(taken[k][2].shape) == _squeezed(taken[i][2].shape)
                  and np.array_equal(taken[k][2].reshape(-1), taken[i][2].reshape(-1))), None)
        if k is not None:
            out[i] = k
    return out


ORDER_STEPS = 2  # sorted values this close (in quantisation steps): the same values, whatever the order


def same_values_other_order(sim: np.ndarray, expected: np.ndarray, step: float) -> bool:
    """Whether a buffer holds a tensor's values in another order: sorted, both agree within ORDER_STEPS
    steps everywhere; element by element, not even at CONFIDENT_COSINE (a layout the pairing's view does
    not match)."""
    a, r = sim.reshape(-1).astype(np.float64), expected.reshape(-1).astype(np.float64)
    if not step or a.shape != r.shape or not a.size:
        return False
    if float(np.abs(np.sort(a) - np.sort(r)).max()) > ORDER_STEPS * step:
        return False
    den = float(np.linalg.norm(a) * np.linalg.norm(r))
    return den > 0 and float(a @ r) / den < CONFIDENT_COSINE


def _pair_groups(taken: list, groups: dict, cands_of, rows: dict, metrics) -> None:
    """Pairs within each group of buffers: close pairs first, then in order (`confident_then_ordered`)."""
    for key, idx in groups.items():
        cands = cands_of(key, idx)
        twins = _twins(taken, idx)
        own = [i for i in idx if i not in twins]
        scored = [[None if v is None else (metrics(taken[i][1].name, r[1], v.of(taken[i][2]), f, r[3]), v)
                   for r, f, v in ((r, f, view(taken[i][2].shape, r[2].shape)) for r, f in cands)] for i in own]
        score = np.array([[np.nan if m is None else m[0].cosine for m in row] for row in scored]).reshape(
            len(own), len(cands))
        for a, j in confident_then_ordered(score):
            m, v = scored[a][j]
            rows[own[a]] = Pair(m, cands[j][0], cands[j][1], v)
        for i in idx:
            if i in twins and twins[i] in rows and i not in rows:
                rows[i] = rows[twins[i]]


INTERNAL_WIDE = "ST-internal 16-bit intermediate (no reference tensor at its scale: the program's own staging)"


def pair_layers(taken: list, refs: list, metrics) -> tuple[dict, list, list]:
    """({index in taken: Pair}, [(buffer name, why unmatched)], [wider-than-8-bit buffers left over with no
    reference tensor at their scale: ST's own staging, `INTERNAL_WIDE`]) for `taken` [(epoch, buffer,
    logical values dequantised)] against `refs` [(op index, name, values, scale, zero point)] in graph order.

    First per (NHWC shape, scale) group, against the tensors of that shape and scale; then the buffers left,
    per (value count, scale) group, against every tensor a `View` relates to them (reshaped, squeezed or
    transposed); close pairs in any order, the rest in order against the tensors no pair took yet. A buffer
    equal to an earlier one of its group (a layout copy) takes that one's partner."""
    rows: dict = {}
    groups: dict = {}
    for i, (_, b, _) in enumerate(taken):
        groups.setdefault((tuple(b.shape), round(float(b.scale[0]), 9)), []).append(i)

    def same_shape(key, idx):
        shape, scale = key
        return [(r, _reference_dequantised(r)) for r in refs if tuple(r[2].shape) == shape and _same_scale(r, scale)]

    _pair_groups(taken, groups, same_shape, rows, metrics)
    left: dict = {}
    for i, (_, b, v) in enumerate(taken):
        if i not in rows:
            left.setdefault((v.size, round(float(b.scale[0]), 9)), []).append(i)
    used = {id(p.ref) for p in rows.values()}

    def reshaped(key, idx):
        size, scale = key
        related = [r for r in refs if r[2].size == size and _same_scale(r, scale)
                   and any(view(taken[i][2].shape, r[2].shape) for i in idx)]
        close = []  # a close partner may have been taken already (a second copy of one tensor)
        for i in idx:
            best = max(related, default=None, key=lambda r, i=i: _cosine_in_view(taken[i][2], r))
            if best is not None and _cosine_in_view(taken[i][2], best) >= CONFIDENT_COSINE:
                close.append(best)
        return [(r, _reference_dequantised(r)) for r in related if id(r) not in used or any(r is c for c in close)]

    _pair_groups(taken, left, reshaped, rows, metrics)
    unmatched, internal = [], []
    for i, (_, b, v) in enumerate(taken):
        if i in rows:
            continue
        scale = float(b.scale[0])
        if b.nbits > 8 and not any(_same_scale(r, scale) for r in refs):
            internal.append(b.name)
            continue
        n = sum(1 for r in refs if r[2].size == v.size and _same_scale(r, scale))
        unmatched.append((b.name, f"no reference tensor of its {v.size} values at scale {scale:.6g}"
                          if not n else f"{n} reference tensor(s) of its size and scale, none in a related "
                                        f"layout (a reshape, squeeze or transpose of its values) left unpaired"))
    return rows, unmatched, internal


def _cosine_in_view(a: np.ndarray, r) -> float:
    v = view(a.shape, r[2].shape)
    if v is None:
        return -1.0
    x, y = v.of(a).reshape(-1), _reference_dequantised(r).reshape(-1)
    den = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(x @ y / den) if den > 0 else -1.0


def consumers_note(unmatched: list, traffic: list, buffers, rows_by_buffer: dict, hops: int = 4) -> list:
    """`unmatched` [(buffer, why)] with, where the replay's `traffic` (`EpochTraffic` per epoch) shows it,
    the first later epoch reading the buffer (or, up to `hops` epochs on, what that epoch produces) and the
    paired buffer it produces (an intermediate of an operator ST's compiler split, such as a nearest-neighbour
    resize or a decomposed max-pool, is compared there)."""
    produced = {b.name: b.epoch for b in buffers}
    out = []
    for name, why in unmatched:
        names, found = [name], None
        for _ in range(hops):
            readers = [t for t in traffic if any(produced.get(n) is not None and t.epoch > produced[n]
                                                 and n in t.reads for n in names)]
            if not readers:
                break
            reader = readers[0]
            made = [b.name for b in buffers if b.epoch == reader.epoch and not b.is_param]
            paired = [n for n in made if n in rows_by_buffer]
            if paired:
                found = (reader.epoch, paired[0])
                break
            names = made
        if found:
            why += (f"; read by epoch {found[0]}{'' if names == [name] else ' (through ' + ', '.join(names) + ')'}, "
                    f"which produces '{found[1]}' (paired with {rows_by_buffer[found[1]]}), where its values are "
                    f"compared")
        out.append((name, why))
    return out
