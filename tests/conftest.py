"""Shared fixtures: the default profile, a small hand-built conv program, zoo models built once per run
(`zoo_file`)."""

from __future__ import annotations

import fcntl
import os

import pytest
from hypothesis import settings

from npusim.hw import load_profile

# Property tests: no per-example deadline (shared CI machines are slow and noisy) and a fixed
# example sequence, so a red run can be reproduced exactly.
settings.register_profile("npusim", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("npusim")
# a subprocess that takes longer than this hung: a guard, never a speed claim (two suites at once on 2 cores
# ran the machine at load 13-21)
HANG_GUARD_S = 300
from npusim.program.codec import Command
from npusim.program.model import Buffer, Constant, Header, Program


def pytest_collection_modifyitems(items):
    """In xdist workers, the `slow` tests first, the costliest first (`@pytest.mark.slow(cpu_s=N)`, a
    measured hint; unhinted ones keep their place): xdist deals the first items out one per worker, so the
    long ones (the README replay alone takes ~2 CPU minutes) start at once beside the short ones instead
    of ending the run on one worker while the other idles. This orders CI's slow step (`-m slow`) and a
    whole run; the README's fast run has no slow test and keeps the file order. Only in xdist workers: a
    run in one process keeps each module's tests together (its module fixtures set up once)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        def order(item):
            slow = item.get_closest_marker("slow")
            return (slow is None, -(slow.kwargs.get("cpu_s", 0) if slow else 0))
        items.sort(key=order)


@pytest.fixture(scope="session", autouse=True)
def _numba_kernels_compiled_once(tmp_path_factory):
    """xdist workers share out the simulator's Numba warm-up (`npusim warmup`'s steps, which share 3 small
    signatures; not an imported ST program's): each compiles into the cache the steps no other has taken,
    then waits for the steps still compiling and runs its tests, which load those kernels. A fresh install
    otherwise compiles the same kernels in each worker as its first tests need them, and one worker warming
    all would idle the others meanwhile (measured at load 8 beside two busy loops: 197 s). The ST signatures
    (~70 CPU s cold for all) compile as tests use them: the fast tests need fewer than half of them."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from npusim.tools.warmup import warm_steps

    root = tmp_path_factory.getbasetemp().parent / "numba-warmup"
    root.mkdir(exist_ok=True)
    for wait in (False, True):  # first the steps nobody took, then wait for those being compiled
        for k, (_, step) in enumerate(warm_steps(imported=False)):
            with open(root / f"{k}.lock", "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                except BlockingIOError:
                    continue  # another worker compiles it
                if not (root / f"{k}.done").exists():
                    step()
                    (root / f"{k}.done").touch()


@pytest.fixture(scope="session")
def profile():
    return load_profile()


@pytest.fixture(scope="session")
def zoo_file(tmp_path_factory):
    """`zoo_file(name)`: the Path of zoo model `name` (defaults) saved as a file, built once per run: the file
    sits in the run's temporary root, which the xdist workers share; one builds it under a lock file while
    the others wait, then all read it. For a model several tests need whose build is long (VGG-19: 11 s)."""
    from npusim.zoo.catalog import build, suffix, catalog

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "zoo-files"
    root.mkdir(exist_ok=True)

    def get(name: str):
        path = root / f"{name}{suffix(catalog()[name])}"
        with open(root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.exists():
                model = build(name, [])
                tmp = path.with_suffix(".part")
                tmp.write_bytes(model.SerializeToString() if hasattr(model, "SerializeToString") else bytes(model))
                tmp.rename(path)
        return path

    return get


def conv_program() -> Program:
    """One int8 3x3 conv epoch (16 -> 16 channels, 14x14) following DESIGN.md's recipe."""
    ram, flash = 0x34200000, 0x70380000
    h = w = 14
    line = w * 16  # 224 B: a compiler that aligns lines to 16 B; the hardware rounds to 256
    in_size, out_size, w_size, q_size = line * h, line * h, 16 * 3 * 3 * 16, 16 * 12
    se = dict(layout="blocked16", dtype="int8", run=w * 16, n1=h, s1=line, n2=1, s2=0, n3=1, s3=0)
    cmds = [
        Command("EPOCH", {"id": 0}),
        Command("SE", dict(se, engine=0, port=0, dir="read", base=ram, limit=ram + in_size + 64)),
        Command("SE", dict(engine=1, port=0, dir="read", layout="linear", dtype="int8", base=flash,
                           limit=flash + w_size + 64, run=w_size, n1=1, s1=0, n2=1, s2=0, n3=1, s3=0)),
        Command("CONV", dict(unit=0, dtype="int8", in_h=h, in_w=w, in_c=16, out_c=16, kh=3, kw=3, sh=1, sw=1,
                             dh=1, dw=1, pad_t=1, pad_l=1, pad_b=1, pad_r=1, groups=1, in_layout="blocked16",
                             out_layout="blocked16", act="relu", act_lo=0, act_hi=0, in_zp=-3, out_zp=5,
                             qparams=flash + w_size)),
        Command("SE", dict(se, engine=5, port=1, dir="write", base=ram + 0x1000, limit=ram + 0x1000 + out_size + 64)),
        Command("LINK", dict(src_kind="SE", src=0, dst_kind="CA", dst=0, dst_port=0)),
        Command("LINK", dict(src_kind="SE", src=1, dst_kind="CA", dst=0, dst_port=1)),
        Command("LINK", dict(src_kind="CA", src=0, dst_kind="SE", dst=5, dst_port=0)),
        Command("RUN"),
        Command("WAIT"),
        Command("END"),
    ]
    buffers = [
        Buffer("x", "input", "npuRAM3", 0, in_size, 16, (1, 16, h, w), "int8", "blocked16", "", ("conv1",),
               0.02, -3, line, 0),
        Buffer("conv1.w", "weight", "octoFlash", 0, w_size, 8, (16, 16, 3, 3), "int8", "linear", "", ("conv1",)),
        Buffer("conv1.q", "weight", "octoFlash", w_size, q_size, 8, (16, 3), "int8", "linear", "", ("conv1",)),
        Buffer("y", "output", "npuRAM3", 0x1000, out_size, 16, (1, 16, h, w), "int8", "blocked16", "conv1", (),
               0.05, 5, line, 0),
    ]
    constants = [Constant("conv1.w", "octoFlash", 0, bytes((i * 7) & 0xFF for i in range(w_size))),
                 Constant("conv1.q", "octoFlash", w_size, bytes(i & 0xFF for i in range(q_size)))]
    return Program(cmds, buffers, constants, debug={0: "conv1"}, header=Header(compiler_version="0.1.0"))


@pytest.fixture
def program() -> Program:
    return conv_program()


# ---------------------------------------------------------------- check == run, for every run of the suite
# Every program the suite runs through the runtime (`run`, `run_shared`, and everything built on
# them: the plugin, sweep, bisect, validate, the in-process CLI) is also checked statically from the
# same start state; a test whose run disagrees with the prediction fails in its teardown, listing
# both reports (npusim.analysis.disagreement). Runs in subprocesses are not seen.

_AGREED = {"runs": 0, "contexts": 0, "checks": 0}  # this session's comparisons (printed in the terminal summary)


def pytest_terminal_summary(terminalreporter):
    if _AGREED["runs"] or _AGREED["contexts"]:
        terminalreporter.write_line(f"npusim check: compared with {_AGREED['runs']} run(s) ({_AGREED['checks']} static "
                                    f"check(s) computed, the others repeat runs of a checked program state) and "
                                    f"{_AGREED['contexts']} context run(s) of this session (a disagreement fails its test)")


@pytest.fixture(autouse=True)
def _static_check_agrees_with_every_run(monkeypatch):
    import npusim.runtime as rt
    from npusim.analysis import check, check_shared, disagreement

    found: list[str] = []
    execute, run_shared = rt._execute, rt.run_shared

    def checked_execute(prog, profile, isa, memory, regions, checker, options, context=None, progress=None, **kw):
        res = execute(prog, profile, isa, memory, regions, checker, options, context=context, progress=progress, **kw)
        if context is None:  # a single run (run_shared is compared as a whole below)
            # the check depends on the program's state, the profile and the mode only: a repeat run of
            # one Program (stress, sweeps, module fixtures) compares with the report of its first check
            def fresh():
                _AGREED["checks"] += 1
                return check(prog, profile, options.mode)
            report = prog.memo(f"static check ({options.mode})", (profile,), fresh) if hasattr(prog, "memo") else fresh()
            found.append(disagreement(report, res, options.keep_going, options.timing_only))
            _AGREED["runs"] += 1
        return res

    def checked_run_shared(jobs, profile=None, options=None):
        jobs = list(jobs)
        results = run_shared(jobs, profile, options)
        options = options or rt.RunOptions()
        reports = check_shared([(j[0], j[1]) for j in jobs], profile, options.mode)
        found.extend(disagreement(c, r, options.keep_going, options.timing_only) for c, r in zip(reports, results))
        _AGREED["contexts"] += len(reports)
        return results

    monkeypatch.setattr(rt, "_execute", checked_execute)
    monkeypatch.setattr(rt, "run_shared", checked_run_shared)
    yield
    bad = [d for d in found if d]
    if bad:
        pytest.fail(f"{len(bad)} run(s) disagree with `npusim check`:\n" + "\n".join(bad[:3]), pytrace=False)
