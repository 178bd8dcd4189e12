"""Tasks of the execution layer (`parallel.py`) and the executor that runs them in this process.

A task is plain data handed to a module-level `fn(task, *shared)` (`run_task`): its value, or the
`TaskError` it raised, comes back as a `TaskResult`. Large inputs are `Shared` handles (a forked
worker finds them in `_inherited`, by token: `Inherited`); `memo` keeps what tasks rebuild from them
per process; `build_id` says which npusim computes. `Executor` runs tasks here, one after another:
the reference every cluster (`parallel_cluster.py`) must match.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import uuid
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import EXIT_INTERNAL, NpusimError


@dataclass(frozen=True)
class TaskError:
    """Why a task produced no value: the exception's class, its message and the CLI exit code."""

    kind: str  # exception class name, "worker-died", "version-mismatch"
    message: str
    exit_code: int = EXIT_INTERNAL

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" if self.message else self.kind

    @property
    def internal(self) -> bool:
        """True for a bug or a lost worker (not a problem of the user's input)."""
        return self.exit_code == EXIT_INTERNAL

    def text(self) -> str:
        """The message as the CLI would print it in-process: input errors bare, bugs with their class."""
        return str(self) if self.internal else self.message

    def failed(self, prefix: str = "") -> "TaskFailed":
        return TaskFailed(prefix + self.text(), self.exit_code)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during `map`: the tasks not finished were cancelled; `results[i]` is task i's TaskResult if it
    finished, else None (task order). A KeyboardInterrupt, so a caller that keeps nothing needs no change."""

    def __init__(self, results: list):
        super().__init__()
        self.results = results

    @property
    def finished(self) -> int:
        return sum(r is not None for r in self.results)


class TaskFailed(NpusimError):
    """A task's error raised in the caller, with the exit code it would have had in-process."""

    def __init__(self, message: str, exit_code: int = EXIT_INTERNAL):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class TaskResult:
    value: Any = None
    error: TaskError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# ------------------------------------------------------------------ what runs on a worker

@lru_cache(maxsize=1)
def build_id() -> str:
    """npusim's version plus a hash of its sources (Python, ISA, profiles): equal ids compute equal results.

    Files are keyed by their path inside the package, so a wheel install (ISA under npusim/isa_data)
    and a source checkout (ISA in the top-level isa/ folder) of the same sources give the same id.
    """
    from .. import __version__
    from ..program.spec import isa_path

    root = Path(str(resources.files("npusim")))
    named = {p.relative_to(root).as_posix(): p for pat in ("*.py", "*.toml") for p in root.rglob(pat)
             if "isa_data" not in p.relative_to(root).parts}
    for p in isa_path().parent.glob("*.toml"):
        named[f"isa_data/{p.name}"] = p
    h = hashlib.sha256()
    for name in sorted(named):
        h.update(name.encode() + b"\0")
        h.update(named[name].read_bytes())
    return f"{__version__}+{h.hexdigest()[:12]}"


def run_task(fn: Callable, task, shared: tuple = (), expected_build: str | None = None) -> TaskResult:
    """Run `fn(task, *shared)`; any exception becomes a TaskError (the task is reported, not lost)."""
    if expected_build is not None and build_id() != expected_build:
        return TaskResult(error=TaskError("version-mismatch", f"this worker runs npusim {build_id()}, "
                                          f"the client {expected_build}"))
    try:
        return TaskResult(fn(task, *map(_resolve, shared)))
    except NpusimError as e:
        return TaskResult(error=TaskError(type(e).__name__, _one_line(e), e.exit_code))
    except Exception as e:  # noqa: BLE001 - a bug in one point must not lose the others
        return TaskResult(error=TaskError(type(e).__name__, _one_line(e), EXIT_INTERNAL))


def worker_info() -> dict:
    """What the version check compares (runs on every worker at connect)."""
    import socket

    from .. import __version__

    return {"version": __version__, "build": build_id(), "host": socket.gethostname(), "pid": os.getpid()}


_memo: dict = {}
_MEMO_LIMIT = 4  # entries per kind (the first element of a key): a few models' worth


def memo(key: tuple, make: Callable[[], Any]):
    """A per-process cache for what tasks rebuild from shared data (a parsed model, a prepared front
    end, a profile): the first task on a worker builds it, the next ones reuse it. `key[0]` names the
    kind; each kind keeps its `_MEMO_LIMIT` most recently used entries."""
    if key in _memo:
        _memo[key] = _memo.pop(key)  # most recently used last
        return _memo[key]
    value = make()
    same = [k for k in _memo if k[0] == key[0]]
    for k in same[:max(0, len(same) + 1 - _MEMO_LIMIT)]:
        del _memo[k]
    _memo[key] = value
    return value


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# ------------------------------------------------------------------ the in-process executor

def _progress(total: int, desc: str, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="point", leave=False, file=sys.stderr)


@contextlib.contextmanager
def mapping(out: list, bar):
    """The frame of a `map`: Ctrl-C becomes `Interrupted` carrying the results finished so far (`out`),
    and the progress bar is closed however the map ends."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(out) from None
    finally:
        if bar is not None:
            bar.close()


class Shared:
    """A large input of many tasks: the value here, sent once to a cluster's workers when first needed
    (workers forked from this process after it was shared inherit it instead)."""

    def __init__(self, value):
        self.value = value
        self.future = None
        self.token = uuid.uuid4().hex


_inherited: dict[str, Any] = {}  # Shared values by token, for the worker processes forked from here


@dataclass(frozen=True)
class Inherited:
    """A Shared value in a task's arguments, by token: a forked worker has it in `_inherited`."""

    token: str


def _resolve(arg):
    if not isinstance(arg, Inherited):
        return arg
    try:
        return _inherited[arg.token]
    except KeyError:
        raise NotInherited("this worker was not forked from the client after the input was shared") from None


class NotInherited(RuntimeError):
    """A task's shared input is missing on its worker (a worker process not forked from the client)."""


def _check_cost(cost, tasks) -> None:
    if cost is not None and (len(cost) != len(tasks) or any(not float(c) > 0 for c in cost)):
        raise ValueError(f"cost: expected {len(tasks)} positive numbers, one per task")


class Executor:
    """Runs tasks in this process, one after another (the reference every cluster must match)."""

    workers = 1
    where = "in-process"

    def __init__(self, progress: bool = True):
        self.progress = progress

    def share(self, value) -> Shared:
        """A handle for a large input many tasks use (sent to each worker once)."""
        return Shared(value)

    def map(self, fn: Callable, tasks: Sequence, *shared, desc: str = "", cost: Sequence[float] | None = None
            ) -> list[TaskResult]:
        """`[run_task(fn, t, shared)]` for every task, in task order (`shared`: `share()` handles or values).
        `cost`: each task's expected work (any unit); a cluster starts the costliest first, so one long task
        does not finish alone at the end. The results never depend on it."""
        _check_cost(cost, tasks)
        values = tuple(s.value if isinstance(s, Shared) else s for s in shared)
        bar = _progress(len(tasks), desc, self.progress)
        out: list[TaskResult | None] = [None] * len(tasks)
        with mapping(out, bar):
            for i, t in enumerate(tasks):
                out[i] = run_task(fn, t, values)
                if bar is not None:
                    bar.update()
        return out

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
