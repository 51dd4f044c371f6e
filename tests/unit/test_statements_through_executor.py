"""Every statement of the package runs through the executor (``postgres/_executor.py``): its span,
its error translation, its pooler and replica decisions (CONTRIBUTING, "The PostgreSQL adapter").

The test walks the syntax tree of every module of the package and fails on a call that reaches the
database around the executor -- opening a connection (``engine.connect()``, ``.begin()``,
``get_raw_connection()``), running a statement on a connection, session or driver
(``conn.execute(...)``, ``session.scalars(...)``, ``driver.fetch(...)``, ``exec_driver_sql``,
``copy_records_to_table``, ``conn.run_sync(...)``), or building a raw statement
(``sqlalchemy.text``) -- outside the modules of :data:`ALLOWED`, each there with its reason. The
executor's own API (``executor.fetch``, ``executor.unit(...)``, a unit's ``fetch``/``fetchval``/
``column``/``execute``) is what every other module calls.
"""

from __future__ import annotations

import ast
from pathlib import Path

import prism_memory

PACKAGE = Path(prism_memory.__file__).parent

ALLOWED: dict[str, str] = {
    "postgres/_executor.py": "the executor: every unit, its connections and its statements",
    "postgres/_engine.py": "the engines and the connections the executor keeps; the codec's setup",
    "postgres/_pipelined.py": (
        "the executor's one-flight reads behind a transaction pooler (psycopg): its connections, "
        "their setup and the reads Executor._fetch_on hands it, in its span and error translation"
    ),
    "postgres/_tenancy.py": (
        "the executor's own row-level security step: the tenant set on a unit's session before "
        "its statements (inside Executor.unit, in its span and error translation)"
    ),
    "postgres/repositories/entries.py": "Core statements on a session of an executor unit",
    "postgres/repositories/indexing.py": "Core statements on a session of an executor unit",
    "postgres/repositories/mapped.py": "ORM statements on a session of an executor unit",
    "postgres/rag_store.py": "the RAG session's Core statements, on a session of an executor unit",
    "postgres/migrate.py": (
        "Alembic's own connection: migrations and their DDL run under Alembic, not in a unit"
    ),
    "postgres/_history.py": "reads of the version tables on the migration's Alembic connection",
    "postgres/tables.py": (
        "sqlalchemy.text for the metadata's index expressions and predicates (DDL Alembic "
        "compares; nothing is executed)"
    ),
    "importing/readers.py": (
        "the LangGraph import source reads another application's database (a read-only asyncpg "
        "cursor on the host's LangGraph store), not prism_memory's: no store, no executor"
    ),
    "postgres/worker.py": (
        "the service worker's LISTEN connection: kept open for notifications, runs no statement "
        "of its own (asyncpg's add_listener)"
    ),
}
"""Modules that may open connections and run statements on them, each with its reason."""

OPENS = {"connect", "begin", "get_raw_connection", "exec_driver_sql", "copy_records_to_table"}
"""Methods that open a connection or run SQL whatever their receiver."""

RUNS = {"execute", "executemany", "scalars", "scalar", "stream", "fetch", "fetchval", "fetchrow"}
"""Methods that run a statement: allowed on the executor and on its units only."""

CARRIERS = {"conn", "connection", "session", "driver", "raw", "engine", "driver_connection"}
"""Receivers that are a connection, a session, a driver or an engine (not the executor's units)."""


def _receiver(node: ast.expr) -> str:
    """The last name of a call's receiver: ``conn`` of ``conn.execute``, ``engine`` of
    ``store.engine.connect``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _receiver(node.func)
    return ""


def bypasses(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, call)`` of every call in ``tree`` that reaches the database around the executor."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "sqlalchemy"
            and any(alias.name == "text" for alias in node.names)
        ):
            found.append((node.lineno, "from sqlalchemy import text"))
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method, receiver = node.func.attr, _receiver(node.func.value)
        if method in OPENS and receiver != "to_thread":
            found.append((node.lineno, f"{receiver}.{method}()"))
        elif method == "run_sync" and receiver != "to_thread":
            found.append((node.lineno, f"{receiver}.run_sync()"))
        elif method in RUNS and receiver in CARRIERS:
            found.append((node.lineno, f"{receiver}.{method}()"))
    return found


def _modules() -> list[Path]:
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.relative_to(PACKAGE).parts
    ]


def test_no_statement_runs_outside_the_executor() -> None:
    offenders = []
    for path in _modules():
        name = path.relative_to(PACKAGE).as_posix()
        if name in ALLOWED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [f"{name}:{line} {call}" for line, call in bypasses(tree)]
    assert offenders == [], (
        "these calls reach the database around postgres/_executor.py (no span, no error "
        f"translation, no rendered file): {offenders}. Run the statement through the executor "
        "(a repository, or executor.unit(...)), or add the module to ALLOWED with its reason."
    )


def test_the_allow_list_names_modules_that_need_it() -> None:
    for name in ALLOWED:
        path = PACKAGE / name
        assert path.is_file(), name
        assert bypasses(ast.parse(path.read_text(encoding="utf-8"))), name


def test_the_check_sees_the_bypasses_it_is_for() -> None:
    """The shapes the CLI and ``ops.py`` had before they went through the executor."""
    before = """
from sqlalchemy import select, text

async def threads(store):
    async with store.engine.connect() as conn:
        return await conn.execute(select(store.tables.entries.c.id))

async def scalar(conn, sql):
    return (await conn.execute(text(sql))).scalar()

async def invalid(conn, names):
    return await conn.run_sync(invalid_indexes, names)
"""
    calls = sorted(call for _, call in bypasses(ast.parse(before)))
    assert calls == sorted(
        [
            "from sqlalchemy import text",
            "engine.connect()",
            "conn.execute()",
            "conn.execute()",
            "conn.run_sync()",
        ]
    )
    after = """
async def threads(executor, sql):
    async with executor.unit("doctor", writes=False) as unit:
        return await unit.fetchval(sql)

async def embed(to_thread, f):
    return await to_thread.run_sync(f)
"""
    assert bypasses(ast.parse(after)) == []
