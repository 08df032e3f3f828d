"""The layering the README's "Layout" section promises, checked on the source (imports parsed with ``ast``).

* ``kg`` (data) and ``rules`` (logic) never import ``fednsl``;
* no method package (``fednsl.methods.<name>``) imports another one; tasks and the shared helpers
  (``fednsl.tasks``, ``fednsl.common``) never import a method;
* the module import graph of ``fednsl``, ``kg`` and ``rules`` has no cycle.

Every import counts, also the ones inside functions (they run too, only later); imports under
``if TYPE_CHECKING:`` do not (they never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fednsl", "kg", "rules")

# Cycles that only close through a function-level import, known and owned elsewhere. Each entry must stay a
# *lazy* cycle: the same modules importing each other at module level still fails.
KNOWN_LAZY_CYCLES = {
    # Formula.robustness/violation/holds are sugar over the evaluator, which dispatches on the syntax classes.
    frozenset({"rules.stl.robustness", "rules.stl.syntax"}),
}


def module_files(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (file, is_package) for every ``.py`` file under ``root/<package>``."""
    out: dict[str, tuple[Path, bool]] = {}
    for top in packages:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, lazy: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement with whether it runs only when a function is called (skips TYPE_CHECKING)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), lazy)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, lazy
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _imports(node, inner)


def import_graph(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, dict[str, bool]]:
    """module → {imported project module: True if only function-level imports make the edge}."""
    mods = module_files(root, packages)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, bool]] = {}
    for mod, (path, is_pkg) in mods.items():
        edges: dict[str, bool] = {}
        here = mod if is_pkg else mod.rpartition(".")[0]
        for node, lazy in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = here.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                targets = [resolve(f"{base}.{a.name}") if f"{base}.{a.name}" in mods else resolve(base)
                           for a in node.names]
            for t in targets:
                if t is not None and t != mod:
                    edges[t] = edges.get(t, True) and lazy
        graph[mod] = edges
    return graph


def layer_violations(graph: dict[str, dict[str, bool]]) -> list[str]:
    out = []
    for mod, edges in sorted(graph.items()):
        top = mod.split(".")
        for dst in sorted(edges):
            d = dst.split(".")
            if top[0] in ("kg", "rules") and d[0] == "fednsl":
                out.append(f"{mod} imports {dst}: kg/ and rules/ must not import fednsl/")
            if top[:2] == ["fednsl", "methods"] and d[:2] == ["fednsl", "methods"] and len(top) > 2 and len(d) > 2 \
                    and top[2] != d[2]:
                out.append(f"{mod} imports {dst}: a method package must not import another method package")
            if top[:2] in (["fednsl", "tasks"], ["fednsl", "common"]) and d[:2] == ["fednsl", "methods"]:
                out.append(f"{mod} imports {dst}: tasks and shared helpers must not import a method")
            if top[:2] == ["fednsl", "common"] and d[:2] == ["fednsl", "tasks"]:
                out.append(f"{mod} imports {dst}: fednsl.common sits below the tasks")
    return out


def cycles(graph: dict[str, dict[str, bool]]) -> list[tuple[frozenset[str], bool]]:
    """Strongly connected components with more than one module, each with whether it only closes lazily
    (without its function-level edges it falls apart)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for comp in found:
        eager = {v: {w for w, lazy in graph[v].items() if not lazy and w in comp} for v in comp}
        sub = cycles_of_eager(eager)
        out.append((comp, not sub))
    return out


def cycles_of_eager(eager: dict[str, set[str]]) -> bool:
    """Whether the module-level edges alone still contain a cycle."""
    state: dict[str, int] = {}

    def dfs(v: str) -> bool:
        state[v] = 1
        for w in eager[v]:
            if state.get(w) == 1 or (w not in state and dfs(w)):
                return True
        state[v] = 2
        return False

    return any(v not in state and dfs(v) for v in eager)


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, bool]]:
    return import_graph(ROOT)


def test_layers_hold(graph) -> None:
    assert layer_violations(graph) == []


def test_import_graph_has_no_cycle(graph) -> None:
    bad = [f"{sorted(comp)} ({'function-level' if lazy else 'module-level'})" for comp, lazy in cycles(graph)
           if not (lazy and comp in KNOWN_LAZY_CYCLES)]
    assert bad == [], "import cycles: " + "; ".join(bad)


def test_the_checks_catch_each_kind_of_violation(tmp_path: Path) -> None:
    """A small tree with one violation of each kind: all are reported (function-level ones included)."""
    files = {
        "kg/__init__.py": "",
        "kg/a.py": "def f():\n    from fednsl.tasks import t\n",
        "rules/__init__.py": "",
        "rules/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fednsl.core\n",
        "rules/c.py": "from . import d\n",
        "rules/d.py": "def g():\n    from rules import c\n",
        "fednsl/__init__.py": "",
        "fednsl/core.py": "import fednsl.methods.x.m\n",
        "fednsl/tasks/__init__.py": "",
        "fednsl/tasks/t.py": "from fednsl.methods.y import n\n",
        "fednsl/methods/__init__.py": "",
        "fednsl/methods/x/__init__.py": "",
        "fednsl/methods/x/m.py": "from fednsl.core import z\n",
        "fednsl/methods/y/__init__.py": "",
        "fednsl/methods/y/n.py": "from ..x import m\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    g = import_graph(tmp_path)
    v = layer_violations(g)
    assert any(s.startswith("kg.a imports fednsl.tasks.t") for s in v)
    assert not any(s.startswith("rules.b") for s in v)  # TYPE_CHECKING-only imports never run
    assert any(s.startswith("fednsl.methods.y.n imports fednsl.methods.x.m") for s in v)
    assert any(s.startswith("fednsl.tasks.t imports fednsl.methods.y.n") for s in v)
    found = dict(cycles(g))
    assert found == {frozenset({"rules.c", "rules.d"}): True, frozenset({"fednsl.core", "fednsl.methods.x.m"}): False}
