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

This module chooses the executor; the tasks, their results and the in-process `Executor` are
`parallel_tasks.py`, the Dask cluster (`DaskExecutor`, its worker processes) `parallel_cluster.py`.
"""

from __future__ import annotations

import os

from ..errors import UsageError
from .parallel_cluster import (CONNECT_TIMEOUT_S, ENV_WORKERS, FORKS, HEARTBEAT_LOST, ClusterError,  # noqa: F401
                               DaskExecutor, _positive, default_workers)
from .parallel_tasks import (Executor, Inherited, Interrupted, NotInherited, Shared, TaskError,  # noqa: F401
                             TaskFailed, TaskResult, _inherited, build_id, memo, run_task, worker_info)

ENV_SCHEDULER = "NPUSIM_SCHEDULER"
MIN_PARALLEL_TASKS = 3  # below this a LocalCluster's start-up cannot pay off


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
