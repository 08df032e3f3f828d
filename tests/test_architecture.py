"""The layering of docs/concepts/architecture.md, checked on the source (imports parsed with ``ast``).

Layers, lowest first (:data:`LAYERS`); a module may import its own layer and the layers below, never one above:

0. ``kg`` (data);
1. ``rules`` (logic);
2. ``fednsl.federation``, ``fednsl.common`` and the support modules they and every layer above use:
   ``fednsl.config``, ``fednsl.registry``, ``fednsl.option_types``, ``fednsl.plots``;
3. ``fednsl.tasks`` (``fednsl.tasks.rule_learning`` included: it may import kg, rules, the federation and the
   shared helpers, never a method);
4. the method packages ``fednsl.methods.<name>``; no method package imports another one;
5. ``fednsl.engines``, ``fednsl.cli``, ``fednsl.pipeline``, ``fednsl.rule_counts``, ``fednsl.verify``.

Every module of ``fednsl``, ``kg`` and ``rules`` must sit in a layer (a new top-level module is placed here on
purpose). The package roots ``fednsl`` and ``fednsl.methods`` are namespaces outside the layers: they import no
project module (checked), so importing them (``fednsl.__version__``, the registry listing the method packages)
adds no dependency.

The module import graph has no cycle. What counts, for the cycles and for the layers alike: every import
statement, at module level and inside functions (a function-level import runs too, only later: a cycle closed by
one is still a cycle, and an upward one is still a dependency on the upper layer), and those under
``if TYPE_CHECKING:`` (they never run, but the annotations they serve are a dependency that static tools follow).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fednsl", "kg", "rules")

#: module prefix → layer (lowest first); the longest matching prefix decides. ``fednsl.methods.<name>``: 4.
LAYERS: dict[str, int] = {
    "kg": 0,
    "rules": 1,
    "fednsl.federation": 2,
    "fednsl.common": 2,
    "fednsl.config": 2,
    "fednsl.registry": 2,
    "fednsl.option_types": 2,
    "fednsl.plots": 2,
    "fednsl.plot_labels": 2,
    "fednsl.tasks": 3,
    "fednsl.methods": 4,
    "fednsl.engines": 5,
    "fednsl.cli": 5,
    "fednsl.pipeline": 5,
    "fednsl.rule_counts": 5,
    "fednsl.verify": 5,
}
LAYER_NAMES = ("kg", "rules", "federation/common", "tasks", "methods", "engines/cli/pipeline")
#: package roots outside the layers: namespaces that must import no project module
NAMESPACES = ("fednsl", "fednsl.methods")


def module_files(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (file, is_package) for every ``.py`` file under ``root/<package>``."""
    out: dict[str, tuple[Path, bool]] = {}
    for top in packages:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _imports(tree: ast.AST, lazy: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, with whether it runs only when a function is called (TYPE_CHECKING ones: never,
    counted as lazy)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, lazy
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), lazy)
            continue
        yield from _imports(node, inner)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, dict[str, bool]]:
    """module → {imported project module: True if only function-level (or TYPE_CHECKING) imports make the edge}.

    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``.
    """
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
                targets = [
                    resolve(f"{base}.{a.name}") if f"{base}.{a.name}" in mods else resolve(base) for a in node.names
                ]
            for t in targets:
                if t is not None and t != mod:
                    edges[t] = edges.get(t, True) and lazy
        graph[mod] = edges
    return graph


def layer_of(module: str) -> int | None:
    """The layer of ``module`` (None: a namespace root, or a module no layer claims)."""
    if module in NAMESPACES:
        return None
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)
    return None if best is None else LAYERS[best]


def method_package(module: str) -> str | None:
    """``fednsl.methods.<name>`` for a module of a method package, else None."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["fednsl", "methods"] and len(parts) > 2 else None


def layer_violations(graph: dict[str, dict[str, bool]]) -> list[str]:
    """One line per import that breaks the layers (upward, or into a sibling method package), per import a
    namespace root makes, and per module outside every layer."""
    out = []
    for mod, edges in sorted(graph.items()):
        here = layer_of(mod)
        if mod in NAMESPACES:
            out += [f"{mod} imports {dst}: the namespace {mod} must import no project module" for dst in sorted(edges)]
            continue
        if here is None:
            out.append(f"{mod}: in no layer (place it in tests/test_architecture.py LAYERS)")
            continue
        for dst in sorted(edges):
            there = layer_of(dst)
            if there is not None and there > here:
                out.append(f"{mod} imports {dst}: upward, from layer {LAYER_NAMES[here]} to layer {LAYER_NAMES[there]}")
            if method_package(mod) and method_package(dst) and method_package(mod) != method_package(dst):
                out.append(f"{mod} imports {dst}: a method package must not import another method package")
    return out


def cycles(graph: dict[str, dict[str, bool]]) -> list[tuple[frozenset[str], bool]]:
    """Strongly connected components with more than one module, each with whether it only closes lazily
    (without its function-level and TYPE_CHECKING edges it falls apart)."""
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
        out.append((comp, not has_cycle(eager)))
    return out


def has_cycle(edges: dict[str, set[str]]) -> bool:
    state: dict[str, int] = {}

    def dfs(v: str) -> bool:
        state[v] = 1
        for w in edges[v]:
            if state.get(w) == 1 or (w not in state and dfs(w)):
                return True
        state[v] = 2
        return False

    return any(v not in state and dfs(v) for v in edges)


def cycle_report(graph: dict[str, dict[str, bool]]) -> list[str]:
    """One line per cycle: its modules and each edge that closes it (``*``: function-level or TYPE_CHECKING)."""
    out = []
    for comp, lazy in cycles(graph):
        edges = [f"{v} -> {w}{'*' if graph[v][w] else ''}" for v in sorted(comp) for w in sorted(graph[v]) if w in comp]
        out.append(f"{'lazy' if lazy else 'module-level'} cycle {sorted(comp)}: {', '.join(edges)}")
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, bool]]:
    return import_graph(ROOT)


def test_layers_hold(graph) -> None:
    bad = layer_violations(graph)
    assert bad == [], "layer violations:\n" + "\n".join(bad)


def test_import_graph_has_no_cycle(graph) -> None:
    bad = cycle_report(graph)
    assert bad == [], "import cycles:\n" + "\n".join(bad)


def test_every_package_is_in_its_documented_layer() -> None:
    """The layers of docs/concepts/architecture.md, rule_learning in the tasks layer."""
    expected = {
        "kg.triples": 0,
        "rules.stl.syntax": 1,
        "fednsl.federation.loop": 2,
        "fednsl.common.bnn": 2,
        "fednsl.tasks.numeric": 3,
        "fednsl.tasks.rule_learning.proposal": 3,
        "fednsl.methods.fednsl_kg.client": 4,
        "fednsl.engines.flower": 5,
        "fednsl.cli.main": 5,
        "fednsl.pipeline": 5,
        "fednsl.methods": None,
    }
    assert {m: layer_of(m) for m in expected} == expected
    text = " ".join((ROOT / "docs" / "concepts" / "architecture.md").read_text(encoding="utf-8").split())
    assert (
        "`kg` → `rules` → `fednsl.federation`/`fednsl.common` → `fednsl.tasks` → `fednsl.methods.*` → "
        "`fednsl.engines`, `fednsl.cli`, `fednsl.pipeline`" in text
    )
    for module in ("fednsl.config", "fednsl.registry", "fednsl.option_types", "fednsl.plots"):
        assert f"`{module}`" in text and layer_of(module) == layer_of("fednsl.federation")
    assert "`fednsl.rule_counts` and `fednsl.verify` in the top one" in text


def test_the_checks_catch_each_kind_of_violation(tmp_path: Path) -> None:
    """A small tree with one violation of each kind: all are reported (function-level ones included)."""
    files = {
        "kg/__init__.py": "",
        "kg/a.py": "def f():\n    from fednsl.tasks import t\n",
        "rules/__init__.py": "",
        "rules/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fednsl.federation.core\n",
        "rules/c.py": "from . import d\n",
        "rules/d.py": "def g():\n    from rules import c\n",
        "rules/e.py": "import kg.a\n",
        "fednsl/__init__.py": "",
        "fednsl/pipeline.py": "import fednsl.methods.x.m\n",
        "fednsl/federation/__init__.py": "",
        "fednsl/federation/core.py": "import fednsl.methods.x.m\n",
        "fednsl/common/__init__.py": "from fednsl.tasks import t\n",
        "fednsl/stray.py": "",
        "fednsl/tasks/__init__.py": "",
        "fednsl/tasks/t.py": "from fednsl.methods.y import n\n",
        "fednsl/tasks/rule_learning/__init__.py": "",
        "fednsl/tasks/rule_learning/server.py": "def s():\n    from fednsl.methods.x.m import z\n",
        "fednsl/methods/__init__.py": "import fednsl.registry\n",
        "fednsl/registry.py": "def load():\n    import fednsl.methods as pkg\n",
        "fednsl/methods/x/__init__.py": "",
        "fednsl/methods/x/m.py": "from fednsl.federation.core import z\nimport fednsl.cli\n",
        "fednsl/cli/__init__.py": "",
        "fednsl/methods/y/__init__.py": "",
        "fednsl/methods/y/n.py": "from ..x import m\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    g = import_graph(tmp_path)
    v = layer_violations(g)

    def reported(start: str) -> bool:
        return any(s.startswith(start) for s in v)

    assert reported("kg.a imports fednsl.tasks.t: upward, from layer kg to layer tasks")  # function-level too
    assert reported("rules.b imports fednsl.federation.core: upward")  # TYPE_CHECKING too
    assert not reported("rules.e")  # rules may import kg
    assert reported("fednsl.federation.core imports fednsl.methods.x.m: upward")
    assert reported("fednsl.common imports fednsl.tasks.t: upward")  # common sits below the tasks
    assert reported("fednsl.tasks.t imports fednsl.methods.y.n: upward")
    assert reported("fednsl.tasks.rule_learning.server imports fednsl.methods.x.m: upward")
    assert reported("fednsl.methods.y.n imports fednsl.methods.x.m: a method package must not import another")
    assert reported("fednsl.methods.x.m imports fednsl.cli: upward")
    assert not reported("fednsl.pipeline")  # the top layer imports any layer
    assert not reported("fednsl.registry")  # importing a namespace root is no dependency ...
    assert reported("fednsl.methods imports fednsl.registry: the namespace")  # ... as long as it imports nothing
    assert reported("fednsl.stray: in no layer")
    found = dict(cycles(g))
    assert found == {
        frozenset({"rules.c", "rules.d"}): True,  # closed by a function-level import: still a cycle
        frozenset({"fednsl.federation.core", "fednsl.methods.x.m"}): False,
        frozenset({"fednsl.methods", "fednsl.registry"}): True,
    }
    assert any(
        line.startswith("lazy cycle ['rules.c', 'rules.d']: rules.c -> rules.d, rules.d -> rules.c*")
        for line in cycle_report(g)
    )
