"""pytest plugin (entry point `pytest11: npusim`): options and the `npusim_sim` fixture.

Enabled on install. Options: `--npusim-update-golden` (rewrite golden files instead of
comparing), `--npusim-no-cache` (always recompile), `--npusim-profile NAME|PATH` and
`--npusim-set KEY=VALUE` (target profile for every fixture). The assertion helpers live in
`npusim.testing`. Heavy modules (compiler, runtime) are imported only when a test uses them.

Under pytest-xdist (`pytest -n auto`) every worker shares the compile cache in pytest's cache
folder: a key is compiled once (the first worker takes the key's lock, the others load its blob)
and blob and golden files are written by atomic rename, never torn. Each worker reports what it
compiled, reused and wrote to the controller, whose summary counts the whole session.
"""

from __future__ import annotations

import re

import pytest

_CACHE_KEY = pytest.StashKey[object]()
_UPDATED_KEY = pytest.StashKey[list]()
_WORKERS_KEY = pytest.StashKey[list]()  # on the xdist controller: what each worker reported


def pytest_addoption(parser):
    g = parser.getgroup("npusim", "npusim compiler regression testing")
    g.addoption("--npusim-update-golden", action="store_true", default=False,
                help="rewrite npusim golden snapshot files instead of comparing against them")
    g.addoption("--npusim-no-cache", action="store_true", default=False,
                help="do not reuse compiled programs from the pytest cache")
    g.addoption("--npusim-profile", default=None, metavar="NAME|PATH",
                help="hardware profile for the npusim_sim fixture (default: n657)")
    g.addoption("--npusim-set", action="append", default=[], metavar="KEY=VALUE",
                help="override one profile key for the npusim_sim fixture (repeatable)")


def _compile_cache(config):
    """One compile cache per pytest session, stored on disk under pytest's cache dir."""
    from npusim.testing.sim import CompileCache

    cache = config.stash.get(_CACHE_KEY, None)
    if cache is None:
        disk = None
        if not config.getoption("npusim_no_cache") and getattr(config, "cache", None) is not None:
            disk = config.cache.mkdir("npusim-compile")
        cache = CompileCache(disk)
        config.stash[_CACHE_KEY] = cache
    return cache


def golden_name(node) -> str:
    """File-safe golden name of a test item: `<module stem>[.<class>].<test name>`."""
    stem = node.path.stem if getattr(node, "path", None) else "test"
    parts = node.nodeid.split("::")[1:] or [node.name]
    return re.sub(r"[^A-Za-z0-9_.\-\[\]]+", "_", ".".join([stem, *parts]))


@pytest.fixture
def npusim_sim(request):
    """A `npusim.testing.Sim` bound to this test: cached compile, run, golden files next to the test."""
    from npusim.testing.sim import Sim

    cfg = request.config
    return Sim(cache=_compile_cache(cfg), profile=cfg.getoption("npusim_profile"),
               overrides=tuple(cfg.getoption("npusim_set")),
               golden_dir=request.node.path.parent / "golden",
               golden_name=golden_name(request.node),
               update_golden=cfg.getoption("npusim_update_golden"),
               updated=cfg.stash.setdefault(_UPDATED_KEY, []))


def pytest_report_header(config):
    mode = "update" if config.getoption("npusim_update_golden") else "compare"
    return f"npusim: golden files {mode}"


def _counts(config) -> dict:
    cache = config.stash.get(_CACHE_KEY, None)
    return {"updated": [str(p) for p in config.stash.get(_UPDATED_KEY, [])],
            "compiled": cache.misses if cache is not None else 0, "reused": cache.hits if cache is not None else 0}


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: hand the counts to the controller
        workeroutput["npusim"] = _counts(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: a worker finished; keep what it reported for the summary."""
    data = getattr(node, "workeroutput", {}).get("npusim")
    if data:
        node.config.stash.setdefault(_WORKERS_KEY, []).append(data)


def pytest_terminal_summary(terminalreporter, config):
    parts = [_counts(config), *config.stash.get(_WORKERS_KEY, [])]
    updated = sum(len(p["updated"]) for p in parts)
    compiled, reused = sum(p["compiled"] for p in parts), sum(p["reused"] for p in parts)
    if updated or compiled or reused:
        terminalreporter.write_sep("-", "npusim")
    if compiled or reused:
        terminalreporter.write_line(f"npusim: compiled {compiled} program(s), reused {reused} from the compile cache")
    if updated:
        terminalreporter.write_line(f"npusim: wrote {updated} golden file(s); review and commit them")
