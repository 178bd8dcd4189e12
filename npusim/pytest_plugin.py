"""pytest plugin (entry point `pytest11: npusim`): options and the `npusim_sim` fixture.

Enabled on install. Options: `--npusim-update-golden` (rewrite golden files instead of
comparing), `--npusim-no-cache` (always recompile), `--npusim-profile NAME|PATH` and
`--npusim-set KEY=VALUE` (target profile for every fixture). The assertion helpers live in
`npusim.testing`. Heavy modules (compiler, runtime) are imported only when a test uses them.
"""

from __future__ import annotations

import re

import pytest

_CACHE_KEY = pytest.StashKey[object]()
_UPDATED_KEY = pytest.StashKey[list]()


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


def pytest_terminal_summary(terminalreporter, config):
    updated = config.stash.get(_UPDATED_KEY, [])
    if updated:
        terminalreporter.write_sep("-", "npusim")
        terminalreporter.write_line(f"npusim: wrote {len(updated)} golden file(s); review and commit them")
