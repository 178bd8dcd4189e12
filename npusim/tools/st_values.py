"""Output values of ST's own program without a reference model (`npusim run ST_OUTPUT --outputs DIR`).

The functional run (`importers.stedgeai.execute`) on the compile's weight image, fed by ST's input
buffers: `--input NAME=FILE` names an input buffer of the buffer table; FILE is a .npy in the buffer's
memory layout (its `mem_shape`, channels last for images) and type, float values quantised by the
buffer's scale and zero point, or a photo for an 8-bit image buffer. Unbound inputs get seeded codes,
uniform over the buffer's integer range (standard normal for a float buffer). Each output is the raw
content of its buffer: its type and `mem_shape`, what the board's application reads."""

from __future__ import annotations

import numpy as np

from ..errors import DataError


def input_buffers(out) -> list:
    """The input buffers the application fills, in table order."""
    return [b for b in out.buffers if b.role == "input" and not b.is_param]


def _image_target(b):
    from ..model_inputs import ImageTarget

    shape = tuple(b.mem_shape or b.shape)
    if len(shape) == 4 and b.numpy_type in ("uint8", "int8"):
        return ImageTarget(shape, "NHWC", b.numpy_type)
    return None


def load_st_inputs(out, items) -> dict[str, np.ndarray]:
    """--input NAME=FILE arguments bound to ST's input buffers by name (a name the table does not have
    is refused with the names it has)."""
    from .inputs import load_inputs

    bufs = input_buffers(out)
    targets = {b.name: t for b in bufs if (t := _image_target(b)) is not None}
    given = load_inputs(items, targets)
    names = [b.name for b in bufs]
    unknown = [n for n in given if n not in names]
    if unknown:
        raise DataError(f"--input {unknown[0]}: ST's program has no input buffer of that name "
                        f"(its inputs: {', '.join(names)})")
    return given


def seeded_buffer_values(b, rng: np.random.Generator) -> np.ndarray:
    """Seeded values for an input buffer: uniform codes over its integer type, else standard normal."""
    from ..importers.stedgeai.execute import buffer_dtype
    from .st_validate import seeded_array

    dt = buffer_dtype(b)
    return seeded_array(rng, tuple(b.mem_shape or b.shape) or (b.size // dt.itemsize,), dt)


def st_output_values(out, given: dict, seed: int = 0) -> tuple[dict[str, np.ndarray], list[str]]:
    """({output buffer: its values}, [input buffers that got seeded values]) of one functional run."""
    from ..importers.stedgeai.execute import run
    from .st_validate import st_inputs

    rng = np.random.default_rng(seed)
    arrays, seeded = [], []
    for b in input_buffers(out):
        if b.name in given:
            arrays.append(given[b.name])
        else:
            arrays.append(seeded_buffer_values(b, rng))
            seeded.append(b.name)
    res = run(out, st_inputs(out, arrays, "NHWC"), seed=seed)
    return res.outputs, seeded
