"""The import graph of ``prism_memory`` has no circle, ``testing/`` included.

Every ``import`` statement of every module counts -- at module level, inside functions (a "lazy"
import still makes two modules depend on each other) and under ``TYPE_CHECKING`` -- so a circle that
a future change closes fails here, not in a reader's head. The graph is read from the source with
:mod:`ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "prism_memory"

# Circles known and accepted for now, each a sorted tuple of module names with the reason it stays.
# Empty: add one only with a reason, and an issue that removes it.
KNOWN_CIRCLES: dict[tuple[str, ...], str] = {}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _owner(target: str, modules: dict[str, Path]) -> str | None:
    """The package module that ``target`` names (an attribute of a module names that module)."""
    while target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]
    return target if target in modules else None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``module`` imports anywhere in its source."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = package[: len(package) - (node.level - 1)]
                base = ".".join([*parent, node.module] if node.module else parent)
            else:
                base = node.module or ""
            # ``from pkg import sub`` imports the submodule ``pkg.sub`` when there is one
            targets = [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            owner = _owner(target, modules)
            if owner is not None and owner != module:
                found.add(owner)
    return found


def import_graph() -> dict[str, set[str]]:
    """``module -> the package modules it imports``, for every module of ``prism_memory``."""
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_package_import_graph_has_no_circle() -> None:
    found = [circle for circle in circles(import_graph()) if circle not in KNOWN_CIRCLES]
    assert found == [], f"import circles in prism_memory: {found}"


def test_known_circles_still_exist() -> None:
    """An exception that no longer matches a circle is stale: remove it."""
    current = circles(import_graph())
    assert [circle for circle in KNOWN_CIRCLES if circle not in current] == []


def test_the_graph_reads_real_edges() -> None:
    """The reader finds the arrows it must, so an empty result means no circle, not a blind spot."""
    graph = import_graph()
    assert "prism_memory.errors" in graph["prism_memory._validation"]  # from .errors import …
    assert "prism_memory.lexical" in graph["prism_memory.ranking"]  # from .lexical import (…)
    assert "prism_memory.testing._support" in graph["prism_memory.testing._governance"]
    assert (
        "prism_memory.stores.base" in graph["prism_memory.testing._support"]
    )  # from ..stores.base
    assert len(graph) > 50


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": set()}, [("a", "b")]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [("a", "b", "c")]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [("a", "b"), ("c", "d")]),
    ],
)
def test_circles_finds_every_circle(
    graph: dict[str, set[str]], expected: list[tuple[str, ...]]
) -> None:
    assert circles(graph) == expected
