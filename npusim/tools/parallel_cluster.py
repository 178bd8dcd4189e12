"""The Dask executor of the execution layer (`parallel.py`): a LocalCluster it starts, or an existing cluster.

`DaskExecutor` runs tasks (`parallel_tasks.py`) on Dask workers: a LocalCluster of forked (Linux) or
spawned worker processes, started in the background while tasks run here until the work left pays for
it, or a cluster at a scheduler address, its workers' npusim build checked at connect. Each worker
process pins BLAS/OpenMP pools to one thread and ignores SIGINT (`_worker_plugin`, the fork hook).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import uuid
from typing import Callable, Sequence

from ..errors import NpusimError, UsageError
from .parallel_tasks import (Executor, Inherited, NotInherited, Shared, TaskError, TaskResult, _check_cost,
                             _inherited, _one_line, _progress, build_id, mapping, run_task, worker_info)

ENV_WORKERS = "NPUSIM_WORKERS"
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
        with mapping(out, bar):
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
