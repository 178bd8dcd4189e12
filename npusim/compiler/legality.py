"""The mapping table: which ONNX operators run on the NPU, which on the host CPU, and why.

One place decides, for every node, "NPU recipe" or "CPU with a reason" (Vela style), from the recipes'
registry (`recipes.MAPPINGS`): each NPU recipe lists small named checks (`checks.py` and its family
module); the first check that fails gives the reason its node runs as a software epoch (HOST) instead,
e.g. "LRN x2 -> CPU (no NPU unit)". The compile summary, `--no-cpu-fallback` (strict refusal) and the
docs table (`scripts/gen_ops_doc.py`) all derive from `MAPPINGS`, `refusals.REFUSED` and `decide`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir import Graph, Node
from .recipes import MAPPINGS

NO_UNIT = "no NPU unit"


@dataclass(frozen=True)
class Decision:
    npu: bool
    recipe: str
    reason: str  # why the CPU (empty on the NPU)


# operators that never need a unit: they name the same bytes under another shape (when they do)
ALIAS_OPS = ("Flatten", "Reshape", "Squeeze", "Unsqueeze")


def float_island(g: Graph, n: Node):
    """a quantized model's float tensors (no scale between Q/DQ pairs) stay float: the CPU runs them in fp32"""
    for t in list(n.inputs) + list(n.outputs):
        if t in g.float_islands:
            return "float in the quantized model (no scale and zero point)"
    return None


def decide(g: Graph, n: Node) -> Decision:
    """NPU recipe or CPU reason for one node (aliases are decided by the lowering)."""
    m = MAPPINGS.get(n.op)
    if g.float_islands:
        why = float_island(g, n)
        if why:
            return Decision(False, m.recipe if m else "", why)
    if m is None:
        return Decision(False, "", NO_UNIT)
    for check in m.checks:
        why = check(g, n)
        if why:
            return Decision(False, m.recipe, why)
    return Decision(True, m.recipe, "")


def summary(host_ops: list[tuple[str, str]]) -> list[str]:
    """One line per operator class from (op, reason) pairs, in first-seen order: 'LRN x2 -> CPU (no NPU
    unit)'; a class whose nodes have different reasons shows the most frequent and how many others."""
    by_op: dict[str, dict[str, int]] = {}
    for op, why in host_ops:
        reasons = by_op.setdefault(op, {})
        reasons[why] = reasons.get(why, 0) + 1
    out = []
    for op, reasons in by_op.items():
        n = sum(reasons.values())
        top = max(reasons, key=lambda r: reasons[r])  # first seen among the most frequent
        more = f"; {len(reasons) - 1} other reason(s)" if len(reasons) > 1 else ""
        out.append(f"{op} x{n} -> CPU ({top}{more})")
    return out


