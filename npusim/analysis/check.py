"""`npusim check`: every memory fault of a blob, predicted from its descriptors without running it.

The check is the machine's own walk in static mode (`engine.Machine.check`): the same decoded
commands (`codec.hardware_view`: granule units, ignored low address bits, the limit register), the
same per-epoch plan (refusals, dataflow, watchdog, every demand pattern and its prefetch window), the
same `memory.Checker` calls (interval arithmetic over the nested strides: the first bad byte of each
access in closed form, nothing enumerated per byte) against the same region table, whose written
bytes advance epoch by epoch as exact interval sets. Nothing moves and no time passes: the one
fault that depends on timing, an epoch whose timed body (port and bank sharing, the NPU cache) outlasts
the watchdog, is decided by a cache-free upper bound of the body, and by the timing arithmetic itself
in the rare epoch whose bound passes the watchdog. So the faults
it predicts are those `run --keep-going` meets, with the same class, address, region, relation,
layer and `why`, each marked `static`.

What depends on values that exist only while running is not guessed: a software epoch's operator
run on its operands, and a parameter table or host record the program itself wrote before reading
it, are listed in `CheckReport.undecided`. Everything else is decided: a parameter table that is a
constant of the blob is read from the blob and validated like the unit does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..faults import faults_to_json, render_text

UNDECIDED_SHOWN = 10  # notes printed in the text form (all are in the JSON)


@dataclass
class CheckReport:
    """What `check` predicts for one program (one context of a shared check)."""

    faults: list  # Fault records (static=True), in the order a keep-going run meets them
    undecided: list  # engine.static.Undecided: decisions that need values known only when running
    epochs: int = 0  # NPU epochs and software (HOST) epochs walked, commands decoded
    host_epochs: int = 0
    commands: int = 0
    context: str | None = None
    profile_name: str = ""
    blob: dict = field(default_factory=dict)
    program_name: str = ""

    @property
    def ok(self) -> bool:
        return not self.faults

    @property
    def status(self) -> str:
        return "ok" if self.ok else "fault"

    def summary(self) -> str:
        what = (f"{self.epochs} NPU epochs, {self.host_epochs} CPU epochs, {self.commands} commands")
        ctx = f" (context '{self.context}')" if self.context else ""
        if self.ok:
            return f"npusim check{ctx}: no faults predicted (static) in {what}"
        n = sum(f.count for f in self.faults)
        return f"npusim check{ctx}: {n} fault(s) predicted (static; first: {self.faults[0].cls}) in {what}"

    def undecided_text(self, limit: int = UNDECIDED_SHOWN) -> str:
        if not self.undecided:
            return ""
        lines = ["not decided statically (needs values known only when running):"]
        for u in self.undecided[:limit]:
            lines.append(f"  command {u.command}" + (f" (layer '{u.layer}')" if u.layer else "") + f", {u.unit}: {u.what}")
        if len(self.undecided) > limit:
            lines.append(f"  ... {len(self.undecided) - limit} more (all in the JSON report)")
        return "\n".join(lines) + "\n"

    def text(self) -> str:
        parts = [self.summary() + "\n"]
        if self.faults:
            parts.append("\n" + render_text(self.faults, self.program_name))
        if self.undecided:
            parts.append("\n" + self.undecided_text())
        return "".join(parts)

    def to_json(self) -> dict:
        return {"static": True, "status": self.status, "context": self.context, "profile": self.profile_name,
                "program": self.program_name, "blob": dict(self.blob),
                "checked": {"epochs": self.epochs, "host_epochs": self.host_epochs, "commands": self.commands},
                "faults": faults_to_json(self.faults),
                "fault_text": render_text(self.faults, self.program_name) if self.faults else "",
                "undecided": [u.to_json() for u in self.undecided]}


def fault_keys(faults) -> list[tuple]:
    """(context, class, first address, epoch, command) of each fault: what `check` and a keep-going
    run are compared on."""
    return [(f.context, f.cls, f.address, f.epoch, f.command) for f in faults]


def check(program, profile=None, mode: str = "fast") -> CheckReport:
    """The static check of one program (Program, blob bytes or path): every fault a keep-going run
    would meet, predicted without running it. `mode`: the timing model whose watchdog it predicts
    (`RunOptions.mode`)."""
    from ..runtime import RunOptions, setup

    st = setup(program, profile, options=RunOptions(timing_only=True, keep_going=True, mode=mode))
    return walk(st, mode)[0]


def check_shared(jobs, profile=None, mode: str = "fast") -> list[CheckReport]:
    """The static check of several programs sharing one NPU, as `runtime.run_shared` runs them:
    `jobs` = [(program, memory.Context)] (a third item, the inputs, is ignored: no values move).
    One report per job, in order, each fault carrying its context."""
    from ..runtime import RunOptions, setup_shared

    jobs = [(j[0], j[1], {}) for j in jobs]
    st = setup_shared(jobs, profile, RunOptions(timing_only=True, keep_going=True, mode=mode))
    return walk(st, mode)


def walk(st, mode: str = "fast") -> list[CheckReport]:
    """The static walk of every job of a `runtime.Setup`, in order, on its one memory state (which
    it advances: a Setup is walked once)."""
    from ..diagnose import explain_all
    from ..engine import Machine, MachineOptions
    from ..engine.static import KnownBytes
    from ..runtime import job_faults

    amap = st.memory.map
    known = KnownBytes.of_programs([p for p, _ in st.jobs], amap)
    reports = []
    for prog, ctx in st.jobs:
        opts = MachineOptions(timing_only=True, keep_going=True, trace=False, mode=mode, context=ctx, static=True)
        m = Machine(st.profile, st.isa, st.memory, st.regions, st.checker, opts, known=known).check(
            prog, solo=len(st.jobs) == 1)
        faults = explain_all(m.faults, prog, st.profile, st.isa)
        if ctx is not None:
            faults = job_faults(st.faults.get(ctx, []), faults, ctx)
        ops = [c.op for c in prog.commands]
        reports.append(CheckReport([replace(f, static=True) for f in faults], list(m.undecided),
                                   epochs=ops.count("EPOCH"), host_epochs=ops.count("HOST"), commands=len(ops),
                                   context=ctx, profile_name=st.profile.name, blob=_header(prog)))
    return reports


def _header(prog) -> dict:
    from dataclasses import asdict

    return asdict(prog.header)
