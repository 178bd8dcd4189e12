"""One NPU shared by several processes: who runs the next epoch, by a seeded policy.

Each process's Machine asks for the NPU before every epoch (`acquire`) and gives it back after it
(`release`); HOST steps run on the CPU and do not hold it. When the NPU is free, the scheduler
decides among the processes waiting at that instant (decided in a zero-delay event, so every
process that becomes ready at the same time takes part):

  round-robin  the next waiting process after the one that ran last, in registration order
  random       a seeded uniform choice among the waiting processes
  priority     the waiting process of highest priority (ties: round-robin among them)

With `serialise=True` a process also takes the NPU for a whole inference (`begin` / `end`): the
scheduler then grants inferences, not epochs, by the same policy (the "serialised whole inferences"
fix of the shared-pool field failure). Everything depends on the seed and the simulated times only,
so an interleaving is reproducible; `log` keeps the last grants (time, process, label) and
`interleaving()` renders them compactly ("a:e0-e5 b:in b:e0 a:e6 ...").
"""

from __future__ import annotations

from collections import deque

import numpy as np
import simpy

from ..errors import UsageError
from ..sharing import POLICIES
LOG_SIZE = 256  # grants kept for the interleaving report (bounded, whatever the run length)


class _Token:
    """A unit one process holds at a time; `pick` chooses among the waiting ones."""

    def __init__(self, sched: "NpuScheduler", what: str):
        self.sched, self.what = sched, what
        self.holder: str | None = None
        self.waiting: dict[str, tuple[simpy.Event, str]] = {}
        self._pending = False

    def acquire(self, name: str, label: str) -> simpy.Event:
        if name in self.waiting or self.holder == name:
            raise UsageError(f"scheduler: process {name!r} asked for the {self.what} twice")
        ev = self.sched.env.event()
        self.waiting[name] = (ev, label)
        self._schedule()
        return ev

    def release(self, name: str) -> None:
        if self.holder != name:
            raise UsageError(f"scheduler: process {name!r} released the {self.what} it does not hold")
        self.holder = None
        self._schedule()

    def _schedule(self) -> None:
        if self.holder is None and self.waiting and not self._pending:
            self._pending = True
            self.sched.env.timeout(0).callbacks.append(self._decide)

    def _decide(self, _event) -> None:
        self._pending = False
        if self.holder is not None or not self.waiting:
            return
        name = self.sched.pick(self.waiting)
        ev, label = self.waiting.pop(name)
        self.holder = name
        self.sched._granted(name, label)
        ev.succeed()


class NpuScheduler:
    def __init__(self, env: simpy.Environment, policy: str = "round-robin", seed: int = 0,
                 priorities: dict | None = None, serialise: bool = False):
        if policy not in POLICIES:
            raise UsageError(f"schedule {policy!r}: expected one of {', '.join(POLICIES)}")
        self.env, self.policy, self.seed = env, policy, seed
        self.rng = np.random.default_rng(seed)
        self.priorities = dict(priorities or {})
        self.serialise = serialise
        self.order: list[str] = []
        self._rank: dict[str, int] = {}
        self._last: str | None = None
        self.npu = _Token(self, "NPU")
        self.inference = _Token(self, "NPU for an inference")
        self.log: deque = deque(maxlen=LOG_SIZE)
        self.grants = 0
        self.busy_cycles = 0.0  # NPU time granted to epochs
        self._since: float | None = None

    def register(self, name: str, priority: int = 0) -> None:
        if name in self._rank:
            raise UsageError(f"scheduler: process {name!r} registered twice")
        self._rank[name] = len(self.order)
        self.order.append(name)
        self.priorities.setdefault(name, priority)

    # ------------------------------------------------------------ the gate the Machine calls
    def acquire(self, name: str, label: str = "") -> simpy.Event:
        """An event that fires when `name` may run its next epoch (`label` goes to the log)."""
        if self.serialise and self.inference.holder != name:
            raise UsageError(f"scheduler: {name!r} runs an epoch outside its serialised inference")
        return self.npu.acquire(name, label)

    def release(self, name: str) -> None:
        if self._since is not None:
            self.busy_cycles += self.env.now - self._since
            self._since = None
        self.npu.release(name)

    # ------------------------------------------------------------ whole inferences
    def begin(self, name: str) -> simpy.Event:
        """Fires when the inference of `name` may start (at once unless serialised)."""
        if not self.serialise:
            ev = self.env.event()
            ev.succeed()
            return ev
        return self.inference.acquire(name, "start")

    def end(self, name: str) -> None:
        if self.serialise:
            self.inference.release(name)

    # ------------------------------------------------------------ policy
    def pick(self, waiting: dict) -> str:
        names = sorted(waiting, key=self._rank.__getitem__)
        if len(names) == 1:
            return names[0]
        if self.policy == "random":
            return names[int(self.rng.integers(len(names)))]
        if self.policy == "priority":
            top = max(self.priorities.get(n, 0) for n in names)
            names = [n for n in names if self.priorities.get(n, 0) == top]
        last = self._rank.get(self._last, -1)
        return min(names, key=lambda n: (self._rank[n] - last - 1) % len(self.order))

    def _granted(self, name: str, label: str) -> None:
        if label != "start":
            self._last = name
            self.grants += 1
            self._since = self.env.now
        self.log.append((float(self.env.now), name, label))

    def note(self, name: str, label: str) -> None:
        """Log a host-side step of a process (an allocation, an input copy) in the interleaving."""
        self.log.append((float(self.env.now), name, label))

    def interleaving(self, last: int = 40) -> str:
        """The last grants and notes, consecutive epochs of one process merged: 'a:e0-e5 b:in b:e0'."""
        out: list[list] = []
        for _, name, label in self.log:
            num = label[1:] if label.startswith("e") and label[1:].isdigit() else None
            if out and num is not None and out[-1][0] == name and out[-1][2] is not None \
                    and int(num) == out[-1][3] + 1:
                out[-1][3] = int(num)
                continue
            out.append([name, label, num and int(num), num and int(num)])
        parts = [f"{n}:{lab}" if a is None or a == b else f"{n}:e{a}-e{b}" for n, lab, a, b in out]
        if len(parts) > last:
            parts = ["..."] + parts[-last:]
        return " ".join(parts)
