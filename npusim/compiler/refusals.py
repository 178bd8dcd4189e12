"""What npusim refuses outright, even on the CPU: operators (training, random, sequences, strings) and
kinds of tensors (element types, rank, dynamic shapes, non-tensors). The front ends raise with these
texts; the mapping table (`legality`) and the docs table read the same lists.
"""

from __future__ import annotations

from .ir import Node


# Operators (and operand kinds) refused outright, even on the CPU: the one list of refusals.
REFUSED = {
    # training-only operators
    **{op: "a training operator (not inference)" for op in (
        "Gradient", "Momentum", "Adagrad", "Adam")},
    # random operators: no reference value to validate against, and no seed the board shares
    **{op: "a random operator (values not reproducible against a reference)" for op in (
        "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial")},
    # sequence and optional types: not tensors in memory
    **{op: "works on sequences or optionals, not tensors" for op in (
        "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
        "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
        "OptionalHasElement")},
    # string and image-file operators
    **{op: "works on strings or encoded files, not numeric tensors" for op in (
        "StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch", "TfIdfVectorizer", "ImageDecoder")},
}


# a Dropout in training mode is random too
TRAINING_MODE_OPS = ("Dropout", "BatchNormalization")


TRAINING_MODE = "training_mode=1 (random or training behaviour)"


# operator versions the host cannot run: (op, first opset that works) -> reason
REFUSED_BEFORE = {("Scan", 9): "Scan before opset 9 (its batched form; ONNX's reference implements Scan-9 on)"}


def refusal(n: Node, opset: int) -> str | None:
    """Why the node cannot be compiled at all (not even on the CPU), or None."""
    if n.op in REFUSED:
        return REFUSED[n.op]
    if n.op in TRAINING_MODE_OPS and int(n.attrs.get("training_mode", 0)):
        return TRAINING_MODE
    for (op, below), why in REFUSED_BEFORE.items():
        if n.op == op and opset < below:
            return why
    return None


# kinds of tensors refused outright (frontend / modelcheck raise with these texts)
MAX_RANK = 8  # HTENSOR d0..d7


RANK_LIMIT = f"npusim tensors have rank 0 to {MAX_RANK}"


ELEMENT_TYPES = "npusim stores float32, float16, int8/16/32/64, uint8/16/32/64 and bool tensors"


NOT_TENSORS = "only tensors are supported (not sequences, maps or optionals)"


DYNAMIC_SHAPE = "its shape depends on the input values (npusim plans static buffers)"


UNSUPPORTED_KINDS = {
    "element types": f"float64, bfloat16, float8, 4-bit, 2-bit, string and complex tensors ({ELEMENT_TYPES})",
    "rank": RANK_LIMIT,
    "dynamic shapes": "a tensor whose shape depends on the input values: " + DYNAMIC_SHAPE,
    "non-tensors": NOT_TENSORS,
}
