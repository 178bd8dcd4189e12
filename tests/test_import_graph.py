"""The import graph of `npusim/`, built from the source with `ast`: no cycle, and no import of a higher floor.

The floors are DESIGN.md's "Floors" table: each row a floor number and the modules or packages on it
(the longest dotted prefix decides a module's floor). A module may import its own floor and the ones
below. Every import counts, at module level or inside a function, so a function-level import cannot
hide a cycle; one that stays (a heavy or optional dependency kept off a fast path) says so in a
comment on its line.
"""

import ast
import functools
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "npusim"


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


MODULES = _modules()


def _owner(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache  # the source does not change during a run: each module is parsed once for all the tests
def imports_of(module: str) -> tuple[tuple[str, int, bool], ...]:
    """(imported npusim module, line, inside a function) for every import statement of `module`."""
    path, is_pkg = MODULES[module]
    tree = ast.parse(path.read_text())
    base = module if is_pkg else module.rpartition(".")[0]
    out = []

    def visit(node, nested: bool):
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            targets = []
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    b = base
                    for _ in range(child.level - 1):
                        b = b.rpartition(".")[0]
                    mod = b + ("." + child.module if child.module else "")
                else:
                    mod = child.module or ""
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in child.names]
            for t in targets:
                if t.split(".")[0] == "npusim" and (owner := _owner(t)) and owner != module:
                    out.append((owner, child.lineno, nested))
            visit(child, inner)

    visit(tree, False)
    return tuple(out)


def floors() -> dict[str, int]:
    """{dotted prefix: floor} from DESIGN.md's Floors table."""
    text = (ROOT / "DESIGN.md").read_text()
    section = text.split("## Floors", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if m:
            for name in re.findall(r"`([a-z_.]+)`", m.group(2)):
                out[name] = int(m.group(1))
    return out


FLOORS = floors()


def floor_of(module: str) -> int | None:
    name = module
    while name:
        if name in FLOORS:
            return FLOORS[name]
        name = name.rpartition(".")[0]
    return None


def graph() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in imports_of(m)} for m in MODULES}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            strong(v)
    return out


def test_the_graph_is_read_from_the_source():
    g = graph()
    assert "npusim.compiler.recipes" in g["npusim.compiler.legality"]
    assert "npusim.compiler.ir" in g["npusim.compiler.recipes.softmax"]


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_every_module_has_a_floor():
    assert [m for m in MODULES if floor_of(m) is None] == []


def test_no_import_of_a_higher_floor():
    up = [f"{m}:{line} imports {t} (floor {floor_of(t)} > {floor_of(m)})"
          for m in MODULES for t, line, _ in imports_of(m) if floor_of(t) > floor_of(m)]
    assert up == []


def test_function_level_imports_in_the_compiler_say_why():
    """The compiler imports its own and npusim's modules at the top; one inside a function is kept only
    for a heavy dependency off a fast path, and its line says so."""
    unexplained = []
    for m, (path, _) in MODULES.items():
        if not m.startswith("npusim.compiler"):
            continue
        lines = path.read_text().splitlines()
        unexplained += [f"{m}:{line}" for _, line, nested in imports_of(m) if nested and "#" not in lines[line - 1]]
    assert unexplained == []


def test_a_cycle_and_an_upward_import_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert floor_of("npusim.compiler.recipes.conv") > floor_of("npusim.compiler.ir")
