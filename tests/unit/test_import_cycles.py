"""The package imports downward: no import cycle, lower layers never import upper ones.

The module import graph is read from the source with ``ast`` (nothing is imported):

- an edge ``a -> b`` for every ``import b`` / ``from b import x`` in ``a`` (``from p import m``
  where ``p.m`` is a module is an edge to ``p.m``, else to ``p``); relative imports resolved;
- *import-time* edges: statements executed when ``a`` is imported (module level, inside
  ``try``/``if``/``with`` too), except under ``if TYPE_CHECKING:`` (never executed);
- *lazy* edges: imports inside functions and methods, executed on first call.

Rules checked:

1. no cycle among import-time edges (a cycle there breaks depending on which module is
   imported first);
2. import-time plus lazy edges never form a cycle through two subpackages: a lazy import
   may only loop inside one subpackage (a facade deferring to its own builder, e.g.
   ``compare/summary`` -> ``compare/summary_build``), never between layers (the former
   ``ops/select`` -> ``analysis/registry`` for ``--step`` phase detection);
3. the lower layers (io, ingest, engine, store, model, ops) never import, in any way
   (``TYPE_CHECKING`` included), the upper ones (analysis, advisor, report, compare, export,
   view, cli).

Cycles are found with Tarjan's strongly connected components.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import traceatlas

PACKAGE = Path(traceatlas.__file__).resolve().parent
LOWER = ("io", "ingest", "engine", "store", "model", "ops")
UPPER = ("analysis", "advisor", "report", "compare", "export", "view", "cli")

Graph = dict[str, set[str]]


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under the package ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, *, lazy: bool = False, typing: bool = False
             ) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """(statement, kind) for every import: kind is ``top``, ``lazy`` or ``typing``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, "typing" if typing else "lazy" if lazy else "top"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _imports(node, lazy=True, typing=typing)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), lazy=lazy,
                                    typing=True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), lazy=lazy,
                                    typing=typing)
        else:
            yield from _imports(node, lazy=lazy, typing=typing)


def import_graph(root: Path, kinds: frozenset[str]) -> Graph:
    """Edges between the package's modules for the import ``kinds`` asked for."""
    mods = modules(root)
    top = root.name

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: Graph = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node, kind in _imports(ast.parse(path.read_text(), str(path))):
            if kind not in kinds:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            for target in targets:
                if target == top or target.startswith(top + "."):
                    found = known(target)
                    if found is not None and found != mod:
                        graph[mod].add(found)
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    item = stack.pop()
                    on_stack.discard(item)
                    comp.append(item)
                    if item == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def explain(graph: Graph, comp: list[str]) -> str:
    """The edges inside one cycle, one per line."""
    inside = set(comp)
    return "\n".join(f"  {a} -> {b}" for a in comp for b in sorted(graph[a] & inside))


def subpackage(module: str) -> str:
    """``traceatlas.ops.select`` -> ``ops``; ``traceatlas.api`` -> ``api``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


# -- the package -------------------------------------------------------------------------


def test_no_cycle_among_import_time_imports() -> None:
    graph = import_graph(PACKAGE, frozenset({"top"}))
    found = cycles(graph)
    assert not found, "import cycles (module-level imports):\n" + "\n".join(
        explain(graph, c) for c in found)


def test_lazy_imports_never_loop_between_subpackages() -> None:
    graph = import_graph(PACKAGE, frozenset({"top", "lazy"}))
    across = [c for c in cycles(graph) if len({subpackage(m) for m in c}) > 1]
    assert not across, "import cycles through several subpackages:\n" + "\n".join(
        explain(graph, c) for c in across)


def test_lower_layers_never_import_upper_layers() -> None:
    graph = import_graph(PACKAGE, frozenset({"top", "lazy", "typing"}))
    bad = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                 if subpackage(a) in LOWER and subpackage(b) in UPPER)
    assert not bad, "lower layers importing upper layers:\n" + "\n".join(bad)


def test_step_selection_uses_phase_detection_below_the_analyses() -> None:
    graph = import_graph(PACKAGE, frozenset({"top", "lazy"}))
    assert "traceatlas.ops.phases" in graph["traceatlas.ops.select"]
    assert not any(subpackage(m) == "analysis" for m in graph["traceatlas.ops.select"])
    assert "traceatlas.ops.phases" in graph["traceatlas.analysis.phases"]


def test_command_modules_import_the_shared_options_not_main() -> None:
    graph = import_graph(PACKAGE, frozenset({"top", "lazy"}))
    for name in ("analyze", "report", "transform"):
        assert "traceatlas.cli.main" not in graph[f"traceatlas.cli.{name}"]
        assert "traceatlas.cli.options" in graph[f"traceatlas.cli.{name}"]


# -- the checker itself, on small packages written here ------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_checker_finds_a_module_level_cycle_of_three(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "a.py": "from pkg import b\n",
        "b.py": "import pkg.c\n",
        "c.py": "from .a import thing\n",  # relative: pkg.a
        "d.py": "from pkg import a\n",  # imports into the cycle, not part of it
    })
    assert cycles(import_graph(root, frozenset({"top"}))) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_checker_sorts_imports_into_top_lazy_and_typing(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "sub/__init__.py": "",
        "sub/x.py": ("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from pkg.sub import y\n"
                     "def f():\n    from pkg import z\n"),
        "sub/y.py": "from pkg.sub import x\n",
        "z.py": "try:\n    from pkg.sub import x\nexcept ImportError:\n    pass\n",
    })
    top = import_graph(root, frozenset({"top"}))
    assert top["pkg.sub.x"] == set() and top["pkg.z"] == {"pkg.sub.x"}
    assert cycles(top) == []
    lazy = import_graph(root, frozenset({"top", "lazy"}))
    assert cycles(lazy) == [["pkg.sub.x", "pkg.z"]]  # through two subpackages
    assert {subpackage(m) for m in cycles(lazy)[0]} == {"sub", "z"}
    typed = import_graph(root, frozenset({"top", "typing"}))
    assert cycles(typed) == [["pkg.sub.x", "pkg.sub.y"]]
