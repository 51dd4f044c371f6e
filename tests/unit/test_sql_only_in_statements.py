"""No SQL text outside ``prism_memory/postgres/statements/`` and the schema revisions: every other
module of the package hands its statements over by name (CONTRIBUTING, "The PostgreSQL adapter").

The test walks the syntax tree of every module of the package and fails on a string constant (or
the literal start of an f-string) that reads as an SQL statement: an SQL keyword first, after
blanks, followed by more text. Docstrings are prose and left out."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import prism_memory

PACKAGE = Path(prism_memory.__file__).parent
ALLOWED = (PACKAGE / "postgres" / "statements", PACKAGE / "migrations")

SQL = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|SET|RESET|BEGIN|COMMIT|ROLLBACK|"
    r"COPY|LISTEN|UNLISTEN|NOTIFY|ANALYZE|VACUUM|REINDEX|TRUNCATE|GRANT|REVOKE|EXPLAIN|LOCK|"
    r"DECLARE|PREPARE|EXECUTE|DO)([\s;]+\S|\s*;?\s*$)",
    re.IGNORECASE,
)
"""A statement's start: a keyword, then more text or nothing (``"COMMIT"``); ``"delete_source"``
is not one."""

CLAUSE = re.compile(
    r"\b(from|into|table|where|values|extension|index|schema|local|transaction|isolation|"
    r"returning|conflict|join)\b",
    re.IGNORECASE,
)
"""A second SQL word: what a keyword written in lower case (``"set aside"``, ``"do not ..."``:
prose) needs besides to count as SQL."""


def _reads_as_sql(text: str) -> bool:
    match = SQL.match(text)
    if match is None:
        return False
    return match.group(1).isupper() or CLAUSE.search(text) is not None


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    # an attribute's docstring: a bare string right after an assignment
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for before, after in itertools.pairwise(body):
                if (
                    isinstance(before, ast.Assign | ast.AnnAssign)
                    and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                ):
                    found.add(id(after.value))
    return found


def sql_strings(source: str) -> list[tuple[int, str]]:
    """``(line, start)`` of every string constant of ``source`` that reads as SQL."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    parts = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    skip = prose | parts
    hits: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        text: str | None = None
        if isinstance(node, ast.JoinedStr):
            first = node.values[0] if node.values else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                text = first.value + " x"
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
        ):
            text = node.value
        if text is not None and _reads_as_sql(text):
            hits.append((node.lineno, text.strip()[:60]))
    return hits


def test_the_scanner_finds_sql_and_leaves_prose() -> None:
    source = (
        '"""SELECT in a docstring is prose."""\n'
        'A = "SELECT 1"\n'
        'B = f"  insert into {table} values (1)"\n'
        'C = "set the variable first"\n'
        'F = "do not ask for confirmation"\n'
        'G = "COMMIT"\n'
        'D = "delete_source"\n'
        'E = ("ANALYZE "\n "x")\n'
    )
    assert [line for line, _ in sql_strings(source)] == [2, 3, 6, 8]


def test_no_sql_outside_the_statements_package_and_the_revisions() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(path.is_relative_to(allowed) for allowed in ALLOWED):
            continue
        for line, start in sql_strings(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {start}")
    assert not found, "SQL text outside postgres/statements/:\n" + "\n".join(found)
