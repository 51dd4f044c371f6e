"""Everything the package imports when it loads is declared in ``pyproject.toml``.

A plain ``pip install prism-memory`` (the README's first command) installs only the declared
dependencies; a module that imports anything else at load time fails there -- as ``cli.py`` once
did, importing ``click``, which typer stopped installing. Optional integrations import their
packages inside the functions that need them, behind a typed error naming the extra.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "prism_memory"

# Modules whose whole purpose is an extra (each documents it), loaded only when a host asks for them.
EXTRA_MODULES = {
    "prism_memory/testing": "test",  # run_memory_conformance is run under pytest
    "prism_memory/integrations": "langgraph/langchain",
}


@cache
def _declared() -> frozenset[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return frozenset(
        Requirement(spec).name.lower().replace("_", "-") for spec in project["dependencies"]
    )


@cache
def _providers() -> dict[str, list[str]]:
    return dict(packages_distributions())


def _load_time_imports(tree: ast.Module) -> set[str]:
    """Top-level names imported by the module body itself (not inside functions or TYPE_CHECKING)."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Try):  # an optional import guarded by ImportError is fine
            continue
    return found


def _modules() -> list[Path]:
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if not any(str(path.relative_to(ROOT)).startswith(prefix) for prefix in EXTRA_MODULES)
    ]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_load_time_imports_are_declared(path: Path) -> None:
    providers = _providers()
    declared = _declared()
    undeclared = []
    for name in sorted(_load_time_imports(ast.parse(path.read_text()))):
        if name in sys.stdlib_module_names or name in {"prism_memory", "__future__"}:
            continue
        distributions = {d.lower().replace("_", "-") for d in providers.get(name, [name])}
        if not distributions & declared:
            undeclared.append(f"{name} (from {sorted(distributions)})")
    assert not undeclared, f"{path.name} imports undeclared packages at load time: {undeclared}"


def test_the_check_sees_an_undeclared_import() -> None:
    tree = ast.parse("import click\nimport typer\nfrom rich.console import Console\n")
    assert _load_time_imports(tree) == {"click", "typer", "rich"}
    assert "click" not in _declared()
