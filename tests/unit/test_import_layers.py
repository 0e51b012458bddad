"""The modules of ``pytest_infercheck`` import each other without a circle, counting every
import: at the top of a module, under ``if TYPE_CHECKING:``, and inside a function.

The graph is read from the sources with :mod:`ast` (nothing is imported): an edge from a
module to each module of the package it names (``from .x import y`` names ``x``, or ``x.y``
when that is a module; ``from . import y`` names ``y``), resolved to the longest module or
package that exists. A package is its ``__init__``; importing a package's submodule is not
counted as importing the package's ``__init__`` too (as in import-linter's graph), so a
package may re-export its submodules while they import their siblings.

A circle means a layer that imports one above it (directly or through others): a type it
names, or work it delegates upward at run time. The test prints one shortest circle of each
tangle it finds, with where each of its imports is written.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest_infercheck

PACKAGE = Path(pytest_infercheck.__file__).parent
ROOT = PACKAGE.name


@dataclass(frozen=True)
class Import:
    """One import statement's edge: where it is written and how (``top``, ``type`` for
    ``if TYPE_CHECKING:``, ``function``)."""

    source: str
    target: str
    line: int
    how: str

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.how}, line {self.line})"


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = [package.name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


class _Imports(ast.NodeVisitor):
    def __init__(self, name: str, is_package: bool, known: set[str]) -> None:
        self.name, self.known = name, known
        self.package = name.split(".") if is_package else name.split(".")[:-1]
        self.how = ["top"]
        self.found: list[Import] = []

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            self.how.append("type")
            for child in node.body:
                self.visit(child)
            self.how.pop()
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.how.append("function" if self.how[-1] == "top" else self.how[-1])
        self.generic_visit(node)
        self.how.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _add(self, dotted: str, line: int) -> None:
        while dotted and dotted not in self.known:
            dotted = dotted.rpartition(".")[0]
        edge = Import(self.name, dotted, line, self.how[-1])
        if dotted and dotted != self.name and edge not in self.found:
            self.found.append(edge)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == ROOT:
                self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package[: len(self.package) - node.level + 1]
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        if module.split(".")[0] != ROOT:
            return
        for alias in node.names:
            named = f"{module}.{alias.name}"
            self._add(named if named in self.known else module, node.lineno)


def import_graph(package: Path = PACKAGE) -> dict[str, list[Import]]:
    """Each module's imports of the package's modules (every kind of import)."""
    found = modules(package)
    known = set(found)
    graph = {}
    for name, path in found.items():
        visitor = _Imports(name, path.name == "__init__.py", known)
        visitor.visit(ast.parse(path.read_text(), str(path)))
        graph[name] = visitor.found
    return graph


def tangles(graph: dict[str, list[Import]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative): each holds every module of one tangle of circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            edge = next(edges, None)
            if edge is not None:
                target = edge.target
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def shortest_circle(graph: dict[str, list[Import]], tangle: set[str]) -> list[Import]:
    """One shortest circle through the tangle (breadth-first from its first module)."""
    start = min(tangle)
    came: dict[str, Import] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for edge in graph[node]:
            if edge.target not in tangle:
                continue
            if edge.target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, came[path[0].source])
                return path
            if edge.target not in came:
                came[edge.target] = edge
                queue.append(edge.target)
    raise AssertionError(f"no circle through {start}")


def described(graph: dict[str, list[Import]], found: list[set[str]]) -> str:
    lines = []
    for tangle in found:
        lines.append(f"a tangle of {len(tangle)} modules: {', '.join(sorted(tangle))}")
        lines += [f"    {edge}" for edge in shortest_circle(graph, tangle)]
    return "\n".join(lines)


KIND_PACKAGE = f"{ROOT}.checks."
NOT_KINDS = (f"{ROOT}.checks.framework", f"{ROOT}.checks.registry")


def is_kind_module(name: str) -> bool:
    """A module of a check kind (``checks/<kind>``); not the framework or the registry."""
    return name.startswith(KIND_PACKAGE) and not name.startswith(NOT_KINDS)


# -- the reader itself ---------------------------------------------------------------------------
def write(root: Path, files: dict[str, str]) -> Path:
    package = root / ROOT
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_every_kind_of_import_is_an_edge(tmp_path: Path) -> None:
    package = write(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from . import b\n",
            "b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from .sub.c import C\n"
                "def f():\n    from .sub import d\n"
            ),
            "sub/__init__.py": "",
            "sub/c.py": f"import {ROOT}.a\nfrom ..a import x\n",
            "sub/d.py": "from .. import e\n",
            "e.py": "",
        },
    )
    graph = import_graph(package)
    edges = {(e.source, e.target, e.how) for edges in graph.values() for e in edges}
    p = ROOT
    assert edges == {
        (f"{p}.a", f"{p}.b", "top"),
        (f"{p}.b", f"{p}.sub.c", "type"),
        (f"{p}.b", f"{p}.sub.d", "function"),
        (f"{p}.sub.c", f"{p}.a", "top"),
        (f"{p}.sub.d", f"{p}.e", "top"),
    }
    (tangle,) = tangles(graph)
    assert tangle == {f"{p}.a", f"{p}.b", f"{p}.sub.c"}
    circle = shortest_circle(graph, tangle)
    assert [e.target for e in circle] == [f"{p}.b", f"{p}.sub.c", f"{p}.a"]
    assert f"{p}.b -> {p}.sub.c (type, line 3)" in described(graph, [tangle])


# -- the package ---------------------------------------------------------------------------------
GRAPH = import_graph()


def test_the_graph_is_read() -> None:
    assert len(GRAPH) > 100
    config = {e.target for e in GRAPH[f"{ROOT}.config"]}
    assert f"{ROOT}.backends.registry" in config and f"{ROOT}.checks.registry" in config


def test_no_import_circle_but_through_the_kinds() -> None:
    """No circle once the imports written in the check kinds' modules are set aside: the
    framework, config, the backends, the collection and the reports are layered."""
    graph = {name: [] if is_kind_module(name) else edges for name, edges in GRAPH.items()}
    found = tangles(graph)
    assert not found, "import circles:\n" + described(graph, found)


def test_no_import_circle() -> None:
    """No circle anywhere: top-level, type-only and function-local imports all count."""
    found = tangles(GRAPH)
    assert all(all(is_kind_module(m) for m in tangle) for tangle in found), described(GRAPH, found)
    assert not found, "import circles:\n" + described(GRAPH, found)


ABOVE_THE_CHECKS = tuple(
    f"{ROOT}.{name}"
    for name in ("config", "collect", "state", "plugin", "report", "schema", "fixtures", "cli")
)
"""The layers above the kinds: they ask the registry of kinds, so no kind may ask them."""


def _upward(names: list[str]) -> list[str]:
    return [
        str(edge)
        for name in names
        for edge in GRAPH[name]
        if edge.target == ABOVE_THE_CHECKS or edge.target.startswith(ABOVE_THE_CHECKS)
    ]


def test_the_framework_and_the_layers_below_config_do_not_import_it() -> None:
    """The framework, the generation cache, the goldens and the backends read the matrix
    through :mod:`pytest_infercheck.matrix` (Protocols config's classes satisfy)."""
    below = [
        name
        for name in GRAPH
        if name.startswith(
            tuple(
                f"{ROOT}.{p}"
                for p in ("checks", "backends", "golden", "generation_cache", "metrics")
            )
        )
        and not is_kind_module(name)
    ]
    assert _upward(below) == []


def test_no_kind_imports_the_layers_above_it() -> None:
    kinds = [name for name in GRAPH if is_kind_module(name)]
    assert _upward(kinds) == []


IO_MODULES = tuple(
    f"{ROOT}.{name}"
    for name in (
        "generation_cache",
        "backends.http",
        "backends.llama_server",
        "backends.vllm",
        "backends.mlx",
        "backends.openai_compat",
        "backends.sglang",
        "backends.ollama",
        "backends.endpoint_probe",
        "backends.hostile",
        "checks.framework.requests",
        "checks.framework.run",
        "structured.client",
        "structured.probe",
        "shared_work",
        "fixtures",
    )
)
"""The modules that send requests, hold live backends or run a gather facet."""


def reached_at_run_time(start: str) -> dict[str, str]:
    """Every module ``start`` imports when it runs (top-level and function-local imports,
    transitively; type-only imports are not run), each with the module that imports it."""
    via: dict[str, str] = {start: start}
    todo = deque([start])
    while todo:
        name = todo.popleft()
        for edge in GRAPH.get(name, []):
            if edge.how != "type" and edge.target not in via:
                via[edge.target] = name
                todo.append(edge.target)
    return via


def test_every_kind_judges_and_summarizes_without_reaching_io() -> None:
    """A prompt's path to its verdict does all its I/O before judging: each kind's ``judge``
    and ``summarize`` facets never import (even through others) a module that sends
    requests, holds a backend or gathers (its gather facet, the generation cache, the
    backends' clients). Before, structured-parity's spec reached tokenization's gather facet
    (through its package) and stress's measures reached the request runner."""
    from pytest_infercheck.checks.registry import all_kinds

    found = []
    for kind in all_kinds():
        for facet in (kind.judge, kind.summarize):
            via = reached_at_run_time(facet.__module__)
            for name, parent in via.items():
                if name.startswith(IO_MODULES) or name.endswith(".gather"):
                    found.append(f"{kind.name}: {facet.__module__} reaches {name} (via {parent})")
    assert found == [], "\n".join(found)
