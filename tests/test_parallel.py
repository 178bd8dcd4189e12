"""The execution layer (npusim.tools.parallel) on a real LocalCluster on loopback (2 workers), and
on a separately started `dask scheduler` + 2 `dask worker` processes: same rows as in-process,
failing tasks reported, a killed worker's task retried, nothing left running."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import onnx
import psutil
import pytest

from conftest import HANG_GUARD_S
from npusim import zoo
from npusim.cli import main
from npusim.hw import load_profile, profile_from_dict
from npusim.tools import parallel, parallel_cluster
from npusim.tools.grid import grid
from npusim.tools.parallel import ClusterError, Executor, executor
from npusim.tools.sweep import sweep

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import this test module

GRID_AXES = [("mem_align", [16, 64, 128]), ("quantization", ["int8", "fp16"])]


def square(task, offset=0):
    if task == 3:
        raise ValueError("three is not welcome")
    return task * task + offset


def die_once(task):
    marker = Path(task)
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(1)  # the worker process dies in the middle of its task
    return os.getpid()


def nap(task):
    time.sleep(task)
    return task


def nap_pid(task):
    time.sleep(task)
    return os.getpid()


HUNG_S = 120  # a guard against a hang, never a speed claim


def nap_start(task):
    start = time.time()
    time.sleep(task)
    return start, os.getpid()


def _wait_for_dask_import() -> None:
    """In a process whose executor imports Dask to start its cluster, wait for the import to end: the
    tasks that run here before the cluster takes over then do not depend on how loaded the machine is."""
    for t in threading.enumerate():
        if t.name == "npusim-import-dask":
            t.join(HUNG_S)


def nap_pid_through_import(task):
    time.sleep(task)
    _wait_for_dask_import()
    return os.getpid()


def nap_after_the_long_one(task):
    """(start time, pid, whether the long task had started) of a nap; on a worker, a short nap first waits
    for the long one to start: it does at once if it was sent first, and never (a hang) if it was sent last."""
    nap, folder, client_pid = task
    start, marker = time.time(), Path(folder) / "long-started"
    if nap >= 1:
        marker.touch()
    elif os.getpid() != client_pid:
        deadline = time.time() + HUNG_S
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.01)
    time.sleep(nap)
    if os.getpid() == client_pid:
        _wait_for_dask_import()
    return start, os.getpid(), marker.exists()


def byte_at(task, blob):
    return len(blob), blob[task], os.getpid()


def forget_inherited():
    from npusim.tools import parallel

    parallel._inherited.clear()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("grid_models")
    paths = []
    for name, m in (("conv", zoo.conv_model(cin=16, cout=16, h=20, w=20)), ("resnet", zoo.resnet_style(size=16)),
                    ("squeeze", zoo.squeezenet_style(size=16))):
        paths.append(d / f"{name}.onnx")
        onnx.save(m, paths[-1])
    return paths


def _sigint_as_in_a_terminal() -> None:
    """preexec_fn of the subprocesses a test interrupts: SIGINT at its default, as a terminal starts a
    command. A suite started in the background (`cmd &` in a script) runs with SIGINT ignored, every
    child inherits that, and a Ctrl-C test then hangs (its child never sees the signal)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pids) -> list[int]:
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _gone(pids, within: float = HUNG_S) -> bool:
    deadline = time.time() + within
    while _alive(pids) and time.time() < deadline:
        time.sleep(0.1)
    return not _alive(pids)


@pytest.fixture(scope="module")
def cluster():
    ex = executor(workers=2, progress=False)
    assert isinstance(ex, parallel.DaskExecutor)
    pids = set(ex.ready().run(os.getpid).values())
    assert len(pids) == 2 and os.getpid() not in pids  # two worker processes
    yield ex
    pids |= set(ex.client.run(os.getpid).values())  # with the one that replaced the killed worker
    ex.close()
    assert _gone(pids), f"worker processes left behind: {_alive(pids)}"


def test_fast_path_imports_no_dask():
    code = ("import sys; from npusim.tools.parallel import executor; ex = executor(workers=1); "
            "print(ex.map(abs, [-1, -2])); assert 'distributed' not in sys.modules and 'dask' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr
    assert "value=1" in out.stdout and "value=2" in out.stdout


def test_executor_choice_and_usage_errors(monkeypatch):
    monkeypatch.delenv(parallel.ENV_SCHEDULER, raising=False)
    assert type(executor(workers=1)) is Executor
    assert type(executor(workers=4, tasks=2)) is Executor  # too few tasks to pay for a cluster
    with pytest.raises(parallel.UsageError, match="positive number of workers"):
        executor(workers=0)
    monkeypatch.setenv(parallel.ENV_SCHEDULER, "tcp://127.0.0.1:1")
    with pytest.raises(parallel.UsageError, match="exclude each other"):
        executor(workers=2)
    assert type(executor(workers=1)) is Executor  # --workers 1 wins: in-process
    monkeypatch.setenv(parallel.ENV_SCHEDULER, "127.0.0.1:8786")
    with pytest.raises(parallel.UsageError, match="tcp://HOST:PORT"):
        executor()


def test_profiles_travel_as_plain_data():
    p = load_profile(None, ["pool.npuRAM3.banks=4"])
    assert profile_from_dict(p.to_dict()) == p
    assert pickle.loads(pickle.dumps(p)) == p


def test_tasks_in_order_errors_reported_rest_complete(cluster):
    shared = cluster.share(100)
    res = cluster.map(square, list(range(6)), shared)
    assert [r.value for r in res if r.ok] == [100, 101, 104, 116, 125]
    bad = res[3]
    assert not bad.ok and bad.error.kind == "ValueError" and "three" in bad.error.message
    assert res == Executor(progress=False).map(square, list(range(6)), 100)  # same as in-process


def log_on_worker():
    """What a worker's `distributed.worker` logger lets through of a lost heartbeat and of another error."""
    import logging

    seen = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("distributed.worker")
    logger.addHandler(handler)
    try:
        logger.error(parallel.HEARTBEAT_LOST + ".")
        logger.error("a task's worker ran out of memory")
    finally:
        logger.removeHandler(handler)
    return seen


def test_a_local_clusters_workers_keep_a_heartbeat_lost_while_closing_quiet(cluster):
    # CI once printed Dask's traceback of a worker beating to the scheduler that had just closed
    seen = cluster.client.run(log_on_worker)
    assert len(seen) == 2 and all(v == ["a task's worker ran out of memory"] for v in seen.values())


def test_short_work_stays_here_longer_work_forks_the_cluster_between_tasks():
    if not parallel.FORKS:
        pytest.skip("workers are spawned on this platform")
    with executor(workers=2, progress=False) as ex:
        assert {r.value for r in ex.map(nap_pid, [0.01] * 4)} == {os.getpid()} and ex.client is None
        pids = [r.value for r in ex.map(nap_pid_through_import, [0.6] * 6)]
        here = next(k for k, p in enumerate(pids + [None]) if p != os.getpid())  # the first tasks, while Dask imports
        assert here == 2 and os.getpid() not in pids[here:]  # the rest on the forked workers
        assert set(ex.client.run(os.getpid).values()) >= set(pids[here:])


def test_a_cluster_starts_the_costliest_tasks_first_and_results_keep_task_order(tmp_path):
    if not parallel.FORKS:
        pytest.skip("workers are spawned on this platform")
    naps = [0.05] * 8 + [2.0]  # the long one last in task order (worth importing Dask and forking for)
    with executor(workers=2, progress=False) as ex:
        res = ex.map(nap_after_the_long_one, [(n, str(tmp_path), os.getpid()) for n in naps], cost=naps)
        with pytest.raises(ValueError, match="positive numbers"):
            ex.map(nap_start, naps, cost=[1.0])
    on_workers = [k for k, r in enumerate(res) if r.value[1] != os.getpid()]
    assert on_workers == list(range(2, 9))  # two cheap tasks ran here while Dask imported; the rest on workers ...
    assert all(res[k].value[2] for k in on_workers)  # ... the long one sent ahead of the cheap ones left
    with pytest.raises(ValueError, match="positive numbers"):
        Executor(progress=False).map(nap_start, [0.0], cost=[0])


def blob_len(task, blob):
    return len(blob) + task


def test_a_second_cluster_of_one_process_receives_a_large_input():
    """A large input sent to forked workers is deserialised on Dask's offload thread; a second local
    cluster of one process used to fork that pool with the first cluster's thread counted but not copied,
    and hung on it."""
    if not parallel.FORKS:
        pytest.skip("workers are spawned on this platform")
    blob = b"x" * (40 << 20)  # past Dask's 10 MiB offload threshold
    for _ in range(2):
        with executor(workers=2, progress=False) as ex:
            ex.ready()
            res = ex.map(blob_len, [0, 1, 2], ex.share(blob))
        assert [r.value for r in res] == [len(blob), len(blob) + 1, len(blob) + 2]


def test_forked_workers_inherit_shared_inputs_instead_of_receiving_them():
    """Shared before the cluster forks: its workers have the value and nothing is sent; a worker that
    lacks it (as a spawned replacement of a dead worker would) gets its tasks again with the value sent."""
    if not parallel.FORKS:
        pytest.skip("workers are spawned on this platform")
    blob = bytes(range(256)) * 4096
    expected = [(len(blob), i) for i in range(8)]
    with executor(workers=2, progress=False) as ex:
        handle = ex.share(blob)
        client = ex.ready()
        res = ex.map(byte_at, list(range(8)), handle)
        assert [r.value[:2] for r in res] == expected and os.getpid() not in {r.value[2] for r in res}
        assert handle.future is None  # never sent
        client.run(forget_inherited)
        again = ex.map(byte_at, list(range(8)), handle)
        assert [r.value[:2] for r in again] == expected and handle.future is not None
    assert handle.token not in parallel._inherited


def test_a_killed_workers_task_is_retried(cluster, tmp_path):
    res = cluster.map(die_once, [str(tmp_path / "died")])
    assert res[0].ok, res[0].error
    assert int((tmp_path / "died").read_text()) != res[0].value  # it finished on another process


def test_sweep_rows_equal_in_process(cluster, models, tmp_path):
    from npusim.tools.plots import plot_sweep
    from npusim.tools.sweep import write_csv

    here = sweep(models[0], "mem_align", [16, 32, 64, 128], progress=False)
    there = sweep(models[0], "mem_align", [16, 32, 64, 128], executor=cluster)
    assert [p.to_dict() for p in there.points] == [p.to_dict() for p in here.points]
    assert {p.status for p in here.points} == {"ok", "fault"}
    a, b = write_csv(here, tmp_path / "a.csv"), write_csv(there, tmp_path / "b.csv")
    assert a.read_bytes() == b.read_bytes()
    plot_sweep(here, tmp_path / "warm.png")  # the process's first figure loads fonts; compare like with like
    for ext in ("svg", "png"):
        pa, pb = plot_sweep(here, tmp_path / f"a.{ext}"), plot_sweep(there, tmp_path / f"b.{ext}")
        if ext == "svg" and pa.read_bytes() != pb.read_bytes():
            import difflib

            diff = difflib.unified_diff(pa.read_text().splitlines(), pb.read_text().splitlines(), lineterm="")
            pytest.fail("\n".join(list(diff)[:30]))
        assert pa.read_bytes() == pb.read_bytes()


def test_grid_rows_equal_in_process(cluster, models):
    here = grid(models, axes=GRID_AXES, progress=False)
    there = grid(models, axes=GRID_AXES, executor=cluster)
    assert len(here.rows) == 18 and [r.to_dict() for r in there.rows] == [r.to_dict() for r in here.rows]
    assert here.faulting() and here.fastest_clean()


def test_many_blobs_validated_on_the_cluster_and_from_the_cli(cluster, models, tmp_path, capsys):
    from npusim.compiler import CompileOptions, compile as compile_model
    from npusim.program.blob import encode_blob
    from npusim.tools.validate_many import validate_blobs

    profile = load_profile()
    blobs = []
    for name, opts in (("clean", CompileOptions(mem_align=128)), ("fp16", CompileOptions(quantization="fp16")),
                       ("bad", CompileOptions(mem_align=16))):
        blobs.append(tmp_path / f"{name}.npu")
        blobs[-1].write_bytes(encode_blob(compile_model(str(models[0]), opts, profile=profile), profile))
    here = validate_blobs(blobs, models[0], progress=False)
    assert validate_blobs(blobs, models[0], executor=cluster) == here
    assert [r["passed"] for r in here] == [True, True, False] and here[2]["first_fault"] == "buffer-overflow"
    code = main(["validate", *map(str, blobs), "--reference", str(models[0]), "--random-input", "--workers", "1"])
    out = capsys.readouterr().out
    assert code == 139 and "clean.npu: PASS" in out and "bad.npu: FAULT buffer-overflow" in out
    assert "validate: 2 of 3 blob(s) pass" in out


def test_version_mismatch_is_refused(cluster, monkeypatch):
    address = cluster.client.scheduler.address
    monkeypatch.setattr(parallel_cluster, "build_id", lambda: "0.0.1+other")  # the client side of the check
    with pytest.raises(ClusterError, match=r"runs npusim .*, this is npusim 0.0.1\+other"):
        executor(scheduler=address).ready()


def test_build_id_is_the_same_for_a_wheel_layout_and_the_checkout(tmp_path):
    """CI's workers import the installed wheel (ISA under npusim/isa_data) while the test process may import
    the checkout (ISA in the top-level isa/): the same sources must give the same id."""
    import npusim
    from npusim.program.spec import isa_path

    pkg = tmp_path / "site" / "npusim"
    shutil.copytree(Path(npusim.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__", "isa_data"))
    (pkg / "isa_data").mkdir()
    for f in isa_path().parent.glob("*.toml"):
        shutil.copy(f, pkg / "isa_data" / f.name)
    out = subprocess.run([sys.executable, "-c", "import npusim.tools.parallel as p, npusim; "
                          "print(npusim.__file__); print(p.build_id())"], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(pkg.parent)}, check=True).stdout.split()
    assert out[0].startswith(str(pkg)) and out[1] == parallel.build_id()


def test_unreachable_scheduler_is_one_line_exit_2(capsys, models, monkeypatch):
    monkeypatch.setattr(parallel_cluster, "CONNECT_TIMEOUT_S", 1)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["sweep", str(models[0]), "--mem-align", "16,128", "--scheduler", f"tcp://127.0.0.1:{port}",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "cannot connect to the Dask scheduler" in err


def test_ctrl_c_cancels_and_leaves_no_process(tmp_path):
    script = tmp_path / "interrupt.py"
    script.write_text(
        "import os, signal, sys, threading, psutil\n"
        "sys.path.insert(0, %r)\n"
        "import test_parallel as t\n"
        "from npusim.tools.parallel import executor\n"
        "if __name__ == '__main__':\n"
        "    ex = executor(workers=2, progress=False)\n"
        "    print(' '.join(str(p) for p in ex.ready().run(os.getpid).values()), flush=True)\n"
        "    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "    try:\n"
        "        with ex:\n"
        "            ex.map(t.nap, [3600] * 4)\n"
        "    except KeyboardInterrupt:\n"
        "        print('interrupted', flush=True)\n" % str(Path(__file__).parent))
    try:  # the naps take an hour: only a cancel ends the script in time
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=HUNG_S * 2,
                             preexec_fn=_sigint_as_in_a_terminal)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: Ctrl-C did not cancel the map within {HUNG_S * 2} s")
    assert "interrupted" in out.stdout, out.stderr
    pids = [int(p) for p in out.stdout.split()[:-1]]
    assert len(pids) == 2 and _gone(pids)


@pytest.mark.slow  # a whole CLI sweep in a subprocess (~10-35 CPU s); the executor's cancel is test_ctrl_c_cancels_and_leaves_no_process
def test_ctrl_c_in_a_sweep_writes_the_finished_points_prints_one_line_exits_130(tmp_path):
    """Ctrl-C in a terminal signals the whole process group: the client and its forked workers. The
    workers used to print Dask's tracebacks (67 lines for two) and the finished points' CSV was lost."""
    if not parallel.FORKS:
        pytest.skip("workers are spawned on this platform")
    model, csv_path = tmp_path / "m.onnx", tmp_path / "out" / "points.csv"
    onnx.save(zoo.resnet_style(size=128, width=48), model)
    seeds = [str(k) for k in range(24)]  # a calibration each: ~0.5 s a point, the cluster forks after the first ones
    cmd = [sys.executable, "-m", "npusim", "sweep", str(model), "--calibration-seed", ",".join(seeds), "--workers", "2",
           "--no-progress", "--csv", str(csv_path)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=_sigint_as_in_a_terminal)
    try:
        me, deadline = psutil.Process(p.pid), time.time() + 240
        # the cluster forks only once a point ran here (the pace of the work decides): forked workers
        # mean finished points
        while p.poll() is None and len(me.children()) < 2 and time.time() < deadline:
            time.sleep(0.05)
        workers = [c.pid for c in me.children()] if p.poll() is None else []
        assert len(workers) == 2, "the sweep ended (or never forked its workers) before the test could interrupt it"
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, err
    assert len(err.splitlines()) == 1 and err.startswith("npusim: interrupted: "), err
    assert out == ""
    rows = csv_path.read_text().splitlines()
    n = int(err.split("interrupted: ")[1].split(" of ")[0])
    assert err.split(" of ")[1].startswith(f"{len(seeds)} point(s) finished")
    assert 1 <= n == len(rows) - 1 and rows[0].startswith("param,value,")
    here = sweep(model, "seed", [0], progress=False).points[0]
    first = rows[1].split(",")  # the row as an uninterrupted run gives it
    assert first[:5] == ["seed", "0", str(here.mem_align), "ok", str(here.cycles)] and here.cycles > 0
    assert _gone(workers)


@pytest.mark.slow
def test_grid_on_a_separately_started_scheduler_and_workers(models, tmp_path):
    """The done-when: `dask scheduler` + 2 `dask worker` processes on loopback give the rows of a
    LocalCluster and of an in-process run."""
    dask = shutil.which("dask", path=str(Path(sys.executable).parent))
    assert dask, "the dask command comes with dask[distributed]"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--dashboard-address", ":0"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, preexec_fn=_sigint_as_in_a_terminal)]
    try:
        for _ in range(2):
            procs.append(subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard"], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          preexec_fn=_sigint_as_in_a_terminal))
        ex = executor(scheduler=address, progress=False)
        with ex:
            ex.ready()
            deadline = time.time() + 60
            while len(ex.client.scheduler_info(n_workers=-1)["workers"]) < 2 and time.time() < deadline:
                time.sleep(0.2)
            there = grid(models, axes=GRID_AXES, executor=ex)
            pids = set(ex.client.run(os.getpid).values())
        here = grid(models, axes=GRID_AXES, progress=False)
        assert len(pids) == 2
        assert [r.to_dict() for r in there.rows] == [r.to_dict() for r in here.rows]
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGINT)
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
