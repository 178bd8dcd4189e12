"""One execution layer for many points: sweep, bisect, grid, the validation of many blobs, stress.

Work is a list of tasks: plain data (dicts, bytes, numbers) handed to a module-level function
`fn(task, *shared)` whose return value is plain data too (a report's JSON dict, blob bytes). So a
run gives the same results in-process and on any cluster, whatever the number of workers.

    with executor(workers=None, scheduler=None, tasks=len(points)) as ex:
        model = ex.share(model_bytes)                 # large inputs: sent to the workers once
        results = ex.map(point, points, model, desc="sweep")   # [TaskResult], in task order
    for r in results:
        r.value if r.ok else r.error                  # a failing task is reported, never lost

Where the work runs (`executor`):
- `workers=1` (`--workers 1`, `--no-parallel`) or fewer than `MIN_PARALLEL_TASKS` tasks: in this
  process, one task after another; dask is not even imported.
- `scheduler="tcp://HOST:PORT"` (`--scheduler`, or the `NPUSIM_SCHEDULER` environment variable):
  an existing Dask cluster. Every worker must run this npusim build (version and sources); a
  mismatch is refused at connect with one line, and a worker that joins later fails its tasks
  with a `version-mismatch` error instead of computing something else.
- otherwise a `LocalCluster` on loopback with one single-threaded worker process per core
  (`NPUSIM_WORKERS` sets the default count), started only when the work left pays for it; it is
  closed, with its processes, on exit. On Linux its workers are forked from this process, between
  two tasks (~0.2 s; no task holds a lock then): they start with this process's modules, compiled
  kernels and memoised front ends, and inherit every `share()`d input instead of receiving it.
  Elsewhere (and for a worker Dask spawns to replace a dead one) workers are spawned, and the
  inputs are sent once each.

Each worker process pins BLAS/OpenMP pools to one thread (threadpoolctl), so N workers use N
cores. A worker that dies is replaced and its tasks are retried on another worker (Dask's
`allowed-failures`, 3); a task that still cannot finish, or that raises, comes back as a
`TaskResult` with a `TaskError` (class, message, exit code). Ctrl-C cancels the submitted tasks and
raises `Interrupted` (a KeyboardInterrupt) carrying the results of the tasks that finished; leaving the
`with` closes the cluster. Worker processes of a local cluster ignore SIGINT (a terminal's Ctrl-C
reaches the whole process group): the client stops them, and they print nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import EXIT_INTERNAL, NpusimError, UsageError

ENV_SCHEDULER = "NPUSIM_SCHEDULER"
ENV_WORKERS = "NPUSIM_WORKERS"
MIN_PARALLEL_TASKS = 3  # below this a LocalCluster's start-up cannot pay off
PAYOFF_S = 8.0  # work left (s) below which tasks stay here when workers are spawned: a cluster's start,
# the shipping of the shared inputs and its workers' first imports cost a few seconds
FORK_COST_S = 0.4  # starting a cluster whose workers are forked from this process (and closing it): they
# start with this process's modules, compiled kernels and shared inputs (nothing is imported, sent or rebuilt)
DASK_IMPORT_S = 0.5  # Dask's import (0.4 s measured): a forked cluster must save more than it and FORK_COST_S
FORKS = sys.platform.startswith("linux")  # fork is safe and cheap here; macOS and Windows spawn
CONNECT_TIMEOUT_S = 30
_PINNED_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "NUMBA_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1"}


class ClusterError(NpusimError):
    """The cluster cannot be used: unreachable, no workers, or workers of another npusim build."""

    exit_code = 2


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


def _fresh_dask_offload() -> None:
    """In a forked child: a new thread pool for Dask's offloaded (de)serialisation. The module-level one
    (`distributed.utils._offload_executor`) counts the parent's thread, which a fork does not copy, so a
    forked worker would queue the deserialisation of any large message (a scattered input past Dask's
    10 MiB offload threshold) for a thread that never runs: a second local cluster of one process hung."""
    utils = sys.modules.get("distributed.utils")
    if utils is not None and hasattr(utils, "_offload_executor"):
        from concurrent.futures import ThreadPoolExecutor

        utils._offload_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="Dask-Offload")


_forking_workers = False  # True while a LocalCluster forks its worker processes from this one


def _ignore_sigint() -> None:
    """A local cluster's worker process: Ctrl-C in a terminal signals the whole process group, and a worker
    interrupted inside Dask's event loop prints a traceback of ~30 lines; the client cancels its tasks and
    closes it instead."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _after_fork_in_child() -> None:
    _fresh_dask_offload()
    if _forking_workers:
        _ignore_sigint()


if FORKS:
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _pin_threads() -> None:
    os.environ.update(_PINNED_ENV)
    from threadpoolctl import threadpool_limits

    global _limits
    _limits = threadpool_limits(limits=1)  # kept referenced: the limit holds for the process


_limits = None


HEARTBEAT_LOST = "Failed to communicate with scheduler during heartbeat"


def _drop_lost_heartbeat(record: logging.LogRecord) -> bool:
    """Log filter of a LocalCluster's workers: when the cluster closes, a worker's heartbeat can lose the race
    with the scheduler's shutdown (the nannies stop the workers first, but a slow one still beats), and Dask
    logs that as an error with a traceback on the user's terminal. Everything else passes."""
    return not str(record.msg).startswith(HEARTBEAT_LOST)


def _worker_plugin(local: bool):
    from distributed import WorkerPlugin

    class PinThreads(WorkerPlugin):
        """One BLAS/OpenMP thread per worker process (N workers use N cores); a LocalCluster's workers
        also keep their closing heartbeat quiet (`_drop_lost_heartbeat`)."""

        name = "npusim-pin-threads"

        def setup(self, worker):
            _pin_threads()
            if local:
                _ignore_sigint()  # a spawned worker (forked ones ignore it from the fork on)
                logger = logging.getLogger("distributed.worker")
                if _drop_lost_heartbeat not in logger.filters:
                    logger.addFilter(_drop_lost_heartbeat)

    return PinThreads()


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# ------------------------------------------------------------------ executors

def _progress(total: int, desc: str, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="point", leave=False, file=sys.stderr)


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
        try:
            for i, t in enumerate(tasks):
                out[i] = run_task(fn, t, values)
                if bar is not None:
                    bar.update()
        except KeyboardInterrupt:
            raise Interrupted(out) from None
        finally:
            if bar is not None:
                bar.close()
        return out

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class DaskExecutor(Executor):
    """Runs tasks on a Dask cluster: a LocalCluster it starts in the background, or an existing one.

    While a LocalCluster is still starting, `map` runs tasks here, one at a time; the tasks left
    when the cluster is ready go to its workers. So a short run never waits for the cluster, and
    a long one uses every core as soon as it can (results are the same either way)."""

    def __init__(self, scheduler: str | None = None, workers: int | None = None, progress: bool = True):
        super().__init__(progress)
        self.scheduler = scheduler
        self.forks = scheduler is None and FORKS  # workers forked from this process, not spawned
        self._tokens: list[str] = []  # this executor's entries in `_inherited`
        self._inherited_tokens: frozenset[str] = frozenset()  # those its workers were forked with
        self.workers = workers or default_workers()
        self.where = scheduler or f"local cluster of {self.workers} workers"
        self.client = self.cluster = None
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._start, name="npusim-cluster-start", daemon=True)
        self._lock = threading.Lock()
        # with forked workers Dask is imported in the background once sharing the work would pay for the
        # import and the fork (`_run_here_until_worth_forking`): tasks go on here meanwhile, and a run too
        # short to fork never imports it (the import holds the GIL and module locks the caller's work needs)
        self._preload = threading.Thread(target=_import_dask, name="npusim-import-dask", daemon=True)
        if scheduler is not None:  # the user asked for that cluster: connect (and check it) now
            self._ensure_started()

    def _ensure_started(self) -> None:
        with self._lock:
            if not self._thread.is_alive() and not self._closed and self.client is None and self._error is None:
                if self._thread.ident is None:
                    self._thread.start()

    def _start(self) -> None:
        global _forking_workers
        try:
            if self._preload.ident is not None:
                self._preload.join()
            from distributed import Client, LocalCluster

            logging.getLogger("distributed").setLevel(logging.ERROR)  # no shutdown chatter on stderr
            if self.scheduler is None:
                import dask

                # points allocate and free hundreds of MB: keep glibc's default trimming (Dask's nanny
                # lowers it to return memory early, which costs page faults on every point), and no
                # statistical profiler sampling the worker's stack
                config = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                          "distributed.worker.profile.enabled": False}
                if self.forks:  # a replacement for a dead worker is spawned (the setting is gone by then)
                    config["distributed.worker.multiprocessing-method"] = "fork"
                    self._inherited_tokens = frozenset(_inherited)  # before the fork: what workers will have
                with dask.config.set(config):
                    _forking_workers = self.forks  # the workers forked now ignore SIGINT (`_after_fork_in_child`)
                    try:
                        self.cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                                    host="127.0.0.1", dashboard_address=":0",
                                                    silence_logs=logging.ERROR, env=dict(_PINNED_ENV))
                    finally:
                        _forking_workers = False
                self.client = Client(self.cluster)
            else:
                try:
                    self.client = Client(self.scheduler, timeout=CONNECT_TIMEOUT_S)
                except (OSError, TimeoutError) as e:
                    raise ClusterError(f"cannot connect to the Dask scheduler at {self.scheduler} ({_one_line(e)})")
                try:
                    self.client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
                except TimeoutError:
                    raise ClusterError(f"the Dask scheduler at {self.scheduler} has no workers "
                                       f"(start some: dask worker {self.scheduler} --nthreads 1)") from None
            self._check_versions()
            self.client.register_plugin(_worker_plugin(local=self.scheduler is None))
            if self.scheduler is not None:
                self.workers = len(self.client.scheduler_info(n_workers=-1)["workers"]) or 1
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            self._error = e

    def _check_versions(self) -> None:
        mine = build_id()
        try:
            infos = self.client.run(worker_info)
        except Exception as e:  # noqa: BLE001 - e.g. a worker without npusim cannot unpickle worker_info
            raise ClusterError(f"the workers of {self.where} cannot run npusim ({_one_line(e)}): "
                               f"install npusim {mine.split('+')[0]} on every worker") from None
        for addr, info in sorted(infos.items()):
            if info.get("build") != mine:
                raise ClusterError(f"worker {addr} on {info.get('host')} runs npusim {info.get('build')}, this is "
                                   f"npusim {mine}: run every worker from the same npusim version")

    def share(self, value) -> Shared:
        s = Shared(value)
        if self.forks:
            _inherited[s.token] = value
            self._tokens.append(s.token)
        return s

    def ready(self):
        """Start the cluster if needed and wait until it is up (workers checked); returns the Dask client."""
        self._ensure_started()
        self._thread.join()
        if self._error is not None:
            err, self._error = self._error, None
            self.close()
            if isinstance(err, (NpusimError, KeyboardInterrupt)):
                raise err
            raise ClusterError(f"cannot start the Dask cluster ({type(err).__name__}: {_one_line(err)})") from err
        if self.client is None:
            raise ClusterError(f"the Dask cluster ({self.where}) is closed")
        return self.client

    def _up(self) -> bool:
        return self._thread.ident is not None and not self._thread.is_alive()

    def map(self, fn: Callable, tasks: Sequence, *shared, desc: str = "", cost: Sequence[float] | None = None
            ) -> list[TaskResult]:
        """Every task's result, in task order. With a local cluster, tasks run here as long as what
        is left would take less than `PAYOFF_S` at the pace seen so far (the cheapest first); past that
        the cluster is started (in the background, while work goes on here) and takes the rest once it
        is up, the costliest first (`cost`: expected work per task; longest-first keeps both workers
        busy to the end)."""
        out: list[TaskResult | None] = [None] * len(tasks)
        bar = _progress(len(tasks), desc, self.progress)
        order = list(range(len(tasks)))
        _check_cost(cost, tasks)
        if cost is not None:
            order.sort(key=lambda i: (float(cost[i]), i))
        try:
            values = tuple(s.value if isinstance(s, Shared) else s for s in shared)
            first = 0
            if self.scheduler is None and not (self._up() and self.client is not None):
                here = self._run_here_until_worth_forking if self.forks else self._run_here_while_cheap
                weights = [float(cost[i]) if cost is not None else 1.0 for i in order]
                first = here(fn, [tasks[i] for i in order], values, out, bar, order, weights)
            if first < len(tasks):
                rest = order[first:][::-1] if cost is not None else order[first:]
                again = self._run_on_cluster(fn, tasks, shared, rest, out, bar)
                if again:  # tasks that met a spawned replacement worker: now with the inputs sent
                    self._run_on_cluster(fn, tasks, shared, again, out, bar)
        except KeyboardInterrupt:
            raise Interrupted(out) from None
        finally:
            if bar is not None:
                bar.close()
        return out

    def _run_here_until_worth_forking(self, fn, tasks, values, out, bar, index, weights) -> int:
        """Run tasks here until sharing the work left (its cost x the time per unit of cost so far) among
        the workers would save more than starting them costs; returns how many ran here (`tasks[k]` is
        task `index[k]` of the map, of cost `weights[k]`). The cluster is then forked from this process
        between two tasks, so its workers inherit the warm state and no lock a task holds."""
        spent, done, total = 0.0, 0.0, sum(weights)
        for first in range(len(tasks)):
            saved = spent / done * (total - done) * (1 - 1 / self.workers) if done else 0.0
            if self._preload.ident is None:
                if saved > FORK_COST_S + DASK_IMPORT_S:  # worth it even paying the import: import beside the tasks
                    self._preload.start()
            elif saved > FORK_COST_S and not self._preload.is_alive():
                return first
            t0 = time.perf_counter()
            out[index[first]] = run_task(fn, tasks[first], values)
            spent += time.perf_counter() - t0
            done += weights[first]
            if bar is not None:
                bar.update()
        return len(tasks)

    def _run_here_while_cheap(self, fn, tasks, values, out, bar, index, weights) -> int:
        """Run tasks here while the work left (tasks left x mean time so far, or the running task's
        time) stays under PAYOFF_S or the cluster is not up yet; returns how many ran here (`tasks[k]`
        is task `index[k]` of the map)."""
        total = sum(weights)
        state = {"done": 0.0, "spent": 0.0, "t0": time.perf_counter(), "stop": False, "next": weights[0] if weights else 0}

        def left_work() -> float:  # the running task counts at least as long as it has taken so far
            pace = state["spent"] / state["done"] if state["done"] else 0.0
            running = (time.perf_counter() - state["t0"]) / state["next"] if state["next"] else 0.0
            return max(pace, running) * (total - state["done"])

        def watch():  # start the cluster as soon as the work left looks worth it
            while not state["stop"] and self._thread.ident is None:
                if left_work() >= PAYOFF_S:
                    self._ensure_started()
                    return
                time.sleep(0.02)

        threading.Thread(target=watch, name="npusim-payoff", daemon=True).start()
        first = 0
        try:
            while first < len(tasks):
                if self._up() and state["done"] and state["spent"] / state["done"] * (total - state["done"]) >= PAYOFF_S:
                    break
                state["t0"], state["next"] = time.perf_counter(), weights[first]
                out[index[first]] = run_task(fn, tasks[first], values)
                state["spent"] += time.perf_counter() - state["t0"]
                state["done"] += weights[first]
                first += 1
                if bar is not None:
                    bar.update()
        finally:
            state["stop"] = True
        return first

    def _run_on_cluster(self, fn, tasks, shared, todo, out, bar) -> list[int]:
        """Run tasks[i] for i in todo on the cluster; returns those to run again (their worker lacked
        an inherited input: the inputs are then sent instead)."""
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        client = self.ready()
        args = []
        for s in shared:
            if not isinstance(s, Shared):
                args.append(s)
            elif s.token in self._inherited_tokens:
                args.append(Inherited(s.token))
            else:
                if s.future is None:
                    s.future = client.scatter(s.value, broadcast=True, hash=False)
                args.append(s.future)
        build = build_id()
        tag = f"npusim-{uuid.uuid4().hex[:8]}"
        futures = [client.submit(run_task, fn, tasks[i], tuple(args), build, key=f"{tag}-{i}", pure=False)
                   for i in todo]
        index = {f.key: i for i, f in zip(todo, futures)}
        again = []
        try:
            for fut in as_completed(futures):
                i = index[fut.key]
                retry = False
                try:
                    out[i] = fut.result()
                    retry = not out[i].ok and out[i].error.kind == NotInherited.__name__
                    if retry:
                        again.append(i)
                        self._inherited_tokens = frozenset()  # from now on send the inputs
                except KilledWorker:
                    out[i] = TaskResult(error=TaskError("worker-died", "the worker running this task died; it was "
                                                        "retried on other workers and they died too"))
                except Exception as e:  # noqa: BLE001 - e.g. a result that cannot be sent back
                    out[i] = TaskResult(error=TaskError(type(e).__name__, _one_line(e)))
                fut.release()
                if bar is not None and not retry:
                    bar.update()
        except BaseException:
            client.cancel(futures, force=True)
            raise
        return sorted(again)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._preload.ident is not None:
            self._preload.join()  # never leave an import running into the interpreter's exit
        for token in self._tokens:
            _inherited.pop(token, None)
        if self._thread.ident is not None:
            self._thread.join()
        if self.cluster is not None:  # our own cluster: nothing its nannies log while it closes is news
            logging.getLogger("distributed").setLevel(logging.CRITICAL)
        for part in (self.client, self.cluster):
            if part is not None:
                try:
                    part.close()
                except Exception:  # noqa: BLE001 - closing must not hide the real error
                    pass
        self.client = self.cluster = None


def _import_dask() -> None:
    try:
        import distributed  # noqa: F401
    except Exception:  # noqa: BLE001 - the same import in `_start` reports it
        pass


def default_workers() -> int:
    """Worker processes of the LocalCluster: `NPUSIM_WORKERS`, else one per core."""
    env = os.environ.get(ENV_WORKERS)
    if env:
        return _positive(env, ENV_WORKERS)
    from ..cores import usable_cores

    return usable_cores()


def _positive(text, what: str) -> int:
    try:
        n = int(text)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise UsageError(f"{what}={text!r}: expected a positive number of workers")
    return n


def executor(workers: int | None = None, scheduler: str | None = None, tasks: int | None = None,
             progress: bool = True) -> Executor:
    """The executor for a run of `tasks` tasks (see the module doc for the rules)."""
    if workers is not None:
        workers = _positive(workers, "workers")
    if workers == 1:
        return Executor(progress)
    source = "--scheduler" if scheduler else f"${ENV_SCHEDULER}"
    scheduler = scheduler or os.environ.get(ENV_SCHEDULER) or None
    if scheduler is not None:
        if workers is not None:
            raise UsageError(f"--workers {workers} and {source} exclude each other: the cluster's workers run the tasks")
        if "://" not in scheduler:
            raise UsageError(f"{source} {scheduler!r}: expected a scheduler address like tcp://HOST:PORT")
        return DaskExecutor(scheduler=scheduler, progress=progress)
    n = default_workers() if workers is None else workers
    if n == 1 or (tasks is not None and tasks < MIN_PARALLEL_TASKS):
        return Executor(progress)
    return DaskExecutor(workers=n, progress=progress)


def add_arguments(parser) -> None:
    """`--workers N`, `--no-parallel` and `--scheduler ADDRESS` for a command that runs many points."""
    g = parser.add_argument_group("parallel execution")
    g.add_argument("--workers", metavar="N", default=None,
                   help=f"worker processes of the local Dask cluster (default: ${ENV_WORKERS} or one per core); "
                        "1 runs in this process")
    g.add_argument("--no-parallel", action="store_true", help="run every point in this process (= --workers 1)")
    g.add_argument("--scheduler", metavar="tcp://HOST:PORT", default=None,
                   help=f"use an existing Dask cluster (default: ${ENV_SCHEDULER})")


def from_args(args, tasks: int | None = None, progress: bool = True) -> Executor:
    """The executor selected by `add_arguments` flags."""
    workers = 1 if args.no_parallel else (None if args.workers is None else _positive(args.workers, "--workers"))
    return executor(workers=workers, scheduler=args.scheduler, tasks=tasks, progress=progress)
