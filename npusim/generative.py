"""A generative loop on one program: each step's outputs fed back as the next step's inputs.

`feedback_pairs(program)`: which output feeds which input (each input the output of its shape);
`run_steps(program, inputs, steps, ...)`: every step a fresh single-process `runtime.run`, as a
diffusion sampler's loop runs its network. `npusim run --steps` and stress's `--steps` use them.
"""

from __future__ import annotations

from .errors import UsageError
from .program.model import Program
from .runtime import RunOptions, load, run


def feedback_pairs(program: Program) -> dict[str, str]:
    """{input: the output of the same shape fed back into it} for a generative loop, in buffer-table
    order (UsageError naming an input that has no output of its shape)."""
    outs = program.buffers_of("output")
    pairs = {}
    for b in program.buffers_of("input"):
        o = next((o for o in outs if tuple(o.shape) == tuple(b.shape)), None)
        if o is None:
            have = ", ".join(f"{o.name} {list(o.shape)}" for o in program.buffers_of("output"))
            raise UsageError(f"steps: input {b.name!r} {list(b.shape)} has no output of its shape to be fed back "
                             f"(outputs: {have})")
        outs = [x for x in outs if x is not o]
        pairs[b.name] = o.name
    return pairs


def run_steps(program, inputs, steps: int, options=None, profile=None, on_step=None):
    """Run `program` `steps` times, each step's outputs fed back as the next step's inputs
    (`feedback_pairs`; a diffusion sampler's loop), every step a fresh single-process `run`. Stops at
    the first faulting step; returns its (or the last step's) RunResult. `on_step(step, result)`
    sees every step. Timing-only steps have no values to feed back: each runs on no inputs."""
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 10_000:
        raise UsageError(f"steps={steps!r}: expected an integer in [1, 10000]")
    options = options or RunOptions()
    prog = load(program, profile)
    pairs = feedback_pairs(prog) if steps > 1 else {}
    x = inputs
    res = None
    for step in range(steps):
        res = run(prog, x, options, profile=profile)
        if on_step is not None:
            on_step(step, res)
        if res.faults:
            break
        x = {i: res.outputs[o] for i, o in pairs.items()} if res.outputs else x
    return res
