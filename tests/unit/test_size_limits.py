"""The house's size limits hold by themselves: no module over 600 lines, no class over 400 -- in the
package and in the scripts beside it (``benchmarks/``, ``tools/``) -- read from the syntax tree, so a
test fails the commit that slips past them."""

from __future__ import annotations

import ast
from pathlib import Path

import prism_memory

PACKAGE = Path(prism_memory.__file__).parent
ROOT = PACKAGE.parent
CHECKED = (PACKAGE, ROOT / "benchmarks", ROOT / "tools")
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400


def _modules() -> list[Path]:
    return sorted(path for directory in CHECKED for path in directory.rglob("*.py"))


def test_no_module_is_over_600_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)} ({lines})"
        for path in _modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_class_is_over_400_lines() -> None:
    long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                # from the first decorator to the last line of the body
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - start + 1
                if lines > MAX_CLASS_LINES:
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    long.append(f"{where} {node.name} ({lines})")
    assert not long, f"classes over {MAX_CLASS_LINES} lines: {long}"


def test_the_limits_test_sees_a_long_module_and_class(tmp_path: Path) -> None:
    """The measures above are the ones that fail: a 601-line module, a 401-line class."""
    source = "class Long:\n" + "    x = 1\n" * 400 + "\n" * 200
    tree = ast.parse(source)
    (cls,) = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    assert (cls.end_lineno or 0) - cls.lineno + 1 == 401 > MAX_CLASS_LINES
    assert len(source.splitlines()) == 601 > MAX_MODULE_LINES
