"""Every SQL statement the PostgreSQL adapter runs, rendered for the default table set.

Shared by ``tests/unit/test_rendered_sql.py`` (the rendered text is checked in under
``tests/sql/``) and ``tests/unit/test_tenant_routing.py`` (every tenant-scoped statement names its
tenant as a plain equality). Nothing here touches a database:

* the named statements of :mod:`prism_memory.postgres.statements` are found by walking each
  statement family's own attributes (a new property or cached builder shows up by itself); a
  builder with keyword parameters is rendered once per combination of them, taken from its real
  signature (``bool`` -> both values, ``int`` -> 1 and 2), so recall's search comes in all its
  variants. The RAG builders take the flag sets :func:`~prism_memory.postgres.rag_store._read_params`
  really produces (``versioned`` only with ``acl``);
* the Core/ORM statements of :mod:`prism_memory.postgres.repositories` and of the RAG session are
  captured by calling the real methods on a recording session and compiled with the asyncpg
  PostgreSQL dialect (``session.get`` is rendered as the primary-key ``SELECT`` it issues);
* the schema revisions' DDL is :func:`prism_memory.postgres.migrate.build_ddl`.

A value that does not start with an SQL keyword (``recallable``: a predicate; ``stage``: a name) is
a fragment, rendered inside the statements that use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import asyncpg as pg_asyncpg
from sqlalchemy.sql.elements import TextClause

from prism_memory.models import MemoryConsent, MemoryIdentity, ShareGrant
from prism_memory.postgres import statements
from prism_memory.postgres._executor import SessionUnit
from prism_memory.postgres.migrate import build_ddl
from prism_memory.postgres.rag_store import RagSession, _read_params
from prism_memory.postgres.repositories import (
    EntryRepository,
    GenerationRepository,
    IndexingRepository,
    ShareGrantRepository,
    TombstoneRepository,
    WorkingRepository,
)
from prism_memory.postgres.statements import catalog, session
from prism_memory.postgres.tables import PrismTables, build_metadata
from prism_memory.rag_types import AccessConstraint, RagScope
from prism_memory.stores.base import MetadataPatch, Tombstone

__all__ = ["Rendered", "layout", "rendered_statements"]

PINNED = 4
"""The pinned dimension a statement is rendered for too, kept where its text differs."""

_KEYWORD = re.compile(
    r"^\s*(SELECT|WITH|INSERT|UPDATE|DELETE|CREATE|BEGIN|ANALYZE|DROP|REINDEX|ALTER)\b"
)

SCOPE = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-1")
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass(frozen=True)
class Rendered:
    """One statement: its file (``group/name``), where it comes from, and its text."""

    group: str
    name: str
    source: str
    sql: str


# ---- the named statements ---------------------------------------------------------------------


def _variants(function: Callable[..., Any]) -> list[dict[str, Any]]:
    """Every combination of ``function``'s keyword-only ``bool``/``int`` parameters (without
    defaults' exceptions: a parameter with a default is varied too)."""
    axes: list[list[tuple[str, Any]]] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name == "self":
            continue
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
            return []  # a fragment helper (columns, keys ...), not a statement builder
        if parameter.annotation == "bool":
            axes.append([(parameter.name, False), (parameter.name, True)])
        elif parameter.annotation == "int":
            axes.append([(parameter.name, 1), (parameter.name, 2)])
        else:
            return []
    return [dict(combo) for combo in itertools.product(*axes)]


def _variant_name(name: str, kwargs: dict[str, Any]) -> str:
    parts = [name]
    for key, value in kwargs.items():
        if value is True:
            parts.append(key)
        elif not isinstance(value, bool):
            parts.append(f"{key}{value}")
    return ".".join(parts)


def _family_statements(
    group: str, family: type[Any], instance: Any, *, flag_sets: list[dict[str, bool]] | None = None
) -> Iterator[Rendered]:
    """The statements ``family`` defines itself (not its bases'), rendered on ``instance``."""
    source = f"{family.__module__}.{family.__qualname__}"
    for name, attribute in sorted(vars(family).items()):
        if name.startswith("_"):
            continue
        if isinstance(attribute, functools.cached_property | property):
            value = getattr(instance, name)
            if isinstance(value, str) and _KEYWORD.match(value):
                yield Rendered(group, name, f"{source}.{name}", value)
            continue
        function = getattr(attribute, "__wrapped__", attribute)
        if not inspect.isfunction(function):
            continue
        variants = _variants(function)
        if flag_sets is not None and variants:
            variants = _restrict(variants, flag_sets)
        for kwargs in variants:
            value = getattr(instance, name)(**kwargs)
            if isinstance(value, str) and _KEYWORD.match(value):
                arguments = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
                yield Rendered(
                    group, _variant_name(name, kwargs), f"{source}.{name}({arguments})", value
                )


def _restrict(
    variants: list[dict[str, Any]], flag_sets: list[dict[str, bool]]
) -> list[dict[str, Any]]:
    """The variants whose RAG flags (``acl``, ``versioned``, ``filtered``) are a set the store
    really passes."""
    return [
        kwargs
        for kwargs in variants
        if any(all(kwargs.get(k, v) == v for k, v in flags.items()) for flags in flag_sets)
    ]


def _rag_flag_sets() -> list[dict[str, bool]]:
    """The flag sets :func:`_read_params` produces, over filters and authorizations."""
    scope = RagScope(tenant_id="tenant-a", resource_id="user-1")
    found: dict[tuple[tuple[str, bool], ...], dict[str, bool]] = {}
    for filter_ in (None, {"kind": "doc"}):
        for auth in (
            None,
            AccessConstraint(principal_id="p", group_ids=("g",)),
            AccessConstraint(principal_id="p", group_ids=("g",), access_version=1),
        ):
            _, flags = _read_params(scope, filter_, auth)
            found[tuple(sorted(flags.items()))] = flags
    return list(found.values())


def _named(tables: PrismTables) -> Iterator[Rendered]:
    names = tables.names
    entry_sql = statements.EntrySql.for_tables(tables)
    for group, family, instance in (
        ("entries", statements.TableSql, entry_sql.rows),
        ("entries", statements.RowSql, entry_sql.rows),
        ("recall", statements.RecallSql, entry_sql.recall),
        ("lineage", statements.LineageSql, entry_sql.lineage),
        ("indexing", statements.IndexingSql, entry_sql.indexing),
        ("importing", statements.ImportSql, entry_sql.importing),
    ):
        yield from _family_statements(group, family, instance)
    yield from _family_statements(
        "generations", statements.GenerationSql, statements.GenerationSql.for_tables(tables)
    )
    yield Rendered(
        "entries",
        "begin_locked",
        "prism_memory.postgres.statements.entries.begin_locked_statement",
        statements.begin_locked_statement(SCOPE),
    )
    yield from _family_statements(
        "rag", statements.RagSql, statements.RagSql.for_tables(tables), flag_sets=_rag_flag_sets()
    )
    schema_sql = statements.SchemaSql(names)
    yield from _family_statements("catalog", statements.SchemaSql, schema_sql)
    for method in ("drop_index", "reindex"):
        yield Rendered(
            "catalog",
            method,
            f"prism_memory.postgres.statements.catalog.SchemaSql.{method}",
            getattr(schema_sql, method)(names.ix_hnsw),
        )
    for constant in sorted(catalog.__all__):
        value = getattr(catalog, constant)
        if isinstance(value, str):
            yield Rendered(
                "catalog",
                constant.lower(),
                f"prism_memory.postgres.statements.catalog.{constant}",
                value,
            )
    for constant in sorted(session.__all__):
        value = getattr(session, constant)
        if isinstance(value, str):
            yield Rendered(
                "session",
                constant.lower(),
                f"prism_memory.postgres.statements.session.{constant}",
                value,
            )
    for vectors in (False, True):
        yield Rendered(
            "session",
            f"langgraph_items.vectors_{vectors}",
            "prism_memory.postgres.statements.session.langgraph_items",
            session.langgraph_items(vectors=vectors),
        )


# ---- Core and ORM statements, captured on a recording session ---------------------------------


class _StopError(Exception):
    """Raised by a fake result a caller reads rows from: the statement is recorded by then."""


class _Result:
    rowcount = 0

    def mappings(self) -> _Result:
        return self

    def scalars(self) -> _Result:
        return self

    def all(self) -> list[Any]:
        return []

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def one(self) -> Any:
        raise _StopError

    def one_or_none(self) -> None:
        return None

    def scalar_one(self) -> int:
        return 0

    def scalar_one_or_none(self) -> None:
        return None


class _Recorder:
    """An ``AsyncSession`` stand-in that records what it is asked to execute."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, Any]] = []

    async def execute(self, statement: Any, params: Any = None, **_: Any) -> _Result:
        self.seen.append((statement, params))
        return _Result()

    async def scalars(self, statement: Any, params: Any = None, **_: Any) -> _Result:
        return await self.execute(statement, params)

    async def get(self, model: Any, key: tuple[Any, ...], **_: Any) -> None:
        # the ORM's primary-key SELECT (loading.load_on_pk_identity), as an equivalent statement
        columns = list(model.__table__.primary_key)
        where = [column == value for column, value in zip(columns, key, strict=True)]
        await self.execute(select(model).where(*where))


_DIALECT = pg_asyncpg.dialect()


def _compile(statement: Any, params: Any) -> str:
    keys = None
    if isinstance(params, list) and params:
        keys = list(params[0])
    elif isinstance(params, dict):
        keys = list(params)
    return str(statement.compile(dialect=_DIALECT, column_keys=keys))


TEXT_ONLY = {
    "EntryRepository": {
        "lock_thread",
        "get",
        "known_ids",
        "replace_text",
        "dependents",
        "search",
        "neighbors",
        "any_width",
        "lock_threads",
        "insert_batch",
        "insert_staged",
        "lineage_sources",
        "inherit",
        "known_keys",
        "models_of",
        "stage",
        "analyze",
    },
    "IndexingRepository": {
        "claim",
        "claim_in",
        "release",
        "due_tenants",
        "complete",
        "fail",
        "status",
        "store_vectors",
    },
    "GenerationRepository": {
        "registry",
        "lock",
        "register",
        "claim",
        "store",
        "progress",
        "switch",
        "promote",
        "finish_promotion",
        "drop",
    },
    "RagSession": {
        "list_sources",
        "query",
        "lexical_query",
        "lexical_stats",
        "get_current_generation",
        "set_current_generation",
    },
}
"""Methods that run only named statements of ``statements/`` (rendered with them above)."""


def _calls(tables: PrismTables) -> list[tuple[str, str, Callable[[Any], Any]]]:
    """``(class, method, call on a session)`` for every method that builds a Core/ORM statement."""
    rag_scope = RagScope(tenant_id="tenant-a", resource_id="user-1")
    consent = MemoryConsent()
    stone = Tombstone(entry_id="e1", cause_id="e1", reason="forgotten", created_at=NOW)
    other = Tombstone(entry_id="e2", cause_id="e1", reason="forgotten", created_at=NOW)
    grant = ShareGrant("tenant-a", "user-1", "parent", "child", ("e1",), NOW)
    chunk = _chunk()

    def rag(session: Any) -> RagSession:
        return RagSession(
            session, tables, dimension=tables.dimension, width=lambda: 4, learn_width=lambda _: None
        )

    def e(q: Any, t: PrismTables) -> EntryRepository:
        return EntryRepository(SessionUnit(q), t)

    def x(q: Any, t: PrismTables) -> IndexingRepository:
        return IndexingRepository(SessionUnit(q), t)

    def s(q: Any, t: PrismTables) -> ShareGrantRepository:
        return ShareGrantRepository(SessionUnit(q), t)

    def w(q: Any, t: PrismTables) -> WorkingRepository:
        return WorkingRepository(SessionUnit(q), t)

    return [
        (
            "EntryRepository",
            "set_consent",
            lambda q: e(q, tables).set_consent(SCOPE, "e1", consent),
        ),
        ("EntryRepository", "set_legal_hold", lambda q: e(q, tables).set_legal_hold(SCOPE, ["e1"])),
        ("EntryRepository", "delete", lambda q: e(q, tables).delete(SCOPE, ["e1"])),
        (
            "EntryRepository",
            "merge_metadata",
            lambda q: e(q, tables).merge_metadata(
                SCOPE, {"e1": MetadataPatch(2, NOW, {"langgraph_ttl": {"minutes": 5.0}})}
            ),
        ),
        (
            "EntryRepository",
            "list_by_thread",
            lambda q: e(q, tables).list_by_thread(SCOPE, None, 5),
        ),
        (
            "EntryRepository",
            "list_by_thread.after",
            lambda q: e(q, tables).list_by_thread(SCOPE, (3, "e3"), 5),
        ),
        ("EntryRepository", "count", lambda q: e(q, tables).count(SCOPE)),
        ("EntryRepository", "count.pending", lambda q: e(q, tables).count(SCOPE, "pending")),
        ("EntryRepository", "embedding_models", lambda q: e(q, tables).embedding_models(SCOPE)),
        ("EntryRepository", "indexed_threads", lambda q: e(q, tables).indexed_threads(100)),
        (
            "EntryRepository",
            "embedding_models.any_scope",
            lambda q: e(q, tables).embedding_models(None),
        ),
        (
            "EntryRepository",
            "list_oldest",
            lambda q: e(q, tables).list_oldest(SCOPE, 5, None, True),
        ),
        (
            "EntryRepository",
            "list_oldest.before.unheld",
            lambda q: e(q, tables).list_oldest(SCOPE, 5, NOW, False),
        ),
        (
            "TombstoneRepository",
            "upsert",
            lambda q: TombstoneRepository(SessionUnit(q), tables).upsert(SCOPE, [stone, other]),
        ),
        (
            "TombstoneRepository",
            "remove",
            lambda q: TombstoneRepository(SessionUnit(q), tables).remove(SCOPE, "e1", "forgotten"),
        ),
        (
            "IndexingRepository",
            "requeue_failed",
            lambda q: x(q, tables).requeue_failed(SCOPE, None),
        ),
        (
            "IndexingRepository",
            "requeue_failed.ids",
            lambda q: x(q, tables).requeue_failed(SCOPE, ["e1"]),
        ),
        ("ShareGrantRepository", "put", lambda q: s(q, tables).put(grant)),
        ("ShareGrantRepository", "get", lambda q: s(q, tables).get("tenant-a", "u", "p", "c")),
        (
            "ShareGrantRepository",
            "delete",
            lambda q: s(q, tables).delete("tenant-a", "u", "p", "c"),
        ),
        ("WorkingRepository", "get", lambda q: w(q, tables).get("tenant-a", "user-1", "t")),
        (
            "WorkingRepository",
            "put",
            lambda q: w(q, tables).put(
                "tenant-a", "user-1", "t", {}, expected_version=None, now=NOW
            ),
        ),
        (
            "WorkingRepository",
            "put.create",
            lambda q: w(q, tables).put("tenant-a", "user-1", "t", {}, expected_version=0, now=NOW),
        ),
        (
            "WorkingRepository",
            "put.expected",
            lambda q: w(q, tables).put("tenant-a", "user-1", "t", {}, expected_version=3, now=NOW),
        ),
        (
            "WorkingRepository",
            "version",
            lambda q: w(q, tables).version("tenant-a", "user-1", None),
        ),
        ("RagSession", "upsert", lambda q: rag(q).upsert(rag_scope, [chunk], generation=1)),
        (
            "RagSession",
            "get_by_source",
            lambda q: rag(q).get_by_source(rag_scope, "s1", generation=1),
        ),
        (
            "RagSession",
            "delete_source",
            lambda q: rag(q).delete_source(rag_scope, "s1", generation=1),
        ),
        ("RagSession", "delete_generation", lambda q: rag(q).delete_generation(rag_scope, 1)),
        (
            "RagSession",
            "set_source_access",
            lambda q: rag(q).set_source_access(
                rag_scope, "s1", principal_ids=["p"], group_ids=["g"], access_version=1
            ),
        ),
        ("RagSession", "get_source_access", lambda q: rag(q).get_source_access(rag_scope, "s1")),
    ]


def _chunk() -> Any:
    from prism_memory.rag_types import Chunk

    return Chunk(
        source_id="s1", index=0, text="a chunk", embedding=np.ones(4, dtype=np.float32), metadata={}
    )


CORE_CLASSES = {
    "EntryRepository": EntryRepository,
    "TombstoneRepository": TombstoneRepository,
    "IndexingRepository": IndexingRepository,
    "ShareGrantRepository": ShareGrantRepository,
    "WorkingRepository": WorkingRepository,
    "GenerationRepository": GenerationRepository,
    "RagSession": RagSession,
}


def _core(tables: PrismTables) -> Iterator[Rendered]:
    for owner, label, call in _calls(tables):
        recorder = _Recorder()
        with contextlib.suppress(_StopError):
            asyncio.run(call(recorder))
        built = [(s, p) for s, p in recorder.seen if not isinstance(s, TextClause)]
        module = CORE_CLASSES[owner].__module__
        group = "rag_store" if owner == "RagSession" else "repositories"
        for number, (statement, params) in enumerate(built, start=1):
            suffix = f".{number}" if len(built) > 1 else ""
            yield Rendered(
                group,
                f"{owner}.{label}{suffix}",
                f"{module}.{owner}.{label.split('.')[0]}",
                _compile(statement, params),
            )


def uncovered_methods() -> list[str]:
    """Public async methods of the repository classes neither captured nor listed in
    :data:`TEXT_ONLY` (a new method must be added to one of them)."""
    called = {(owner, label.split(".")[0]) for owner, label, _ in _calls(build_metadata())}
    missing = []
    for owner, cls in CORE_CLASSES.items():
        for name, member in vars(cls).items():
            if not inspect.iscoroutinefunction(member):
                continue
            if name.startswith("_") or (owner, name) in called:
                continue
            if name not in TEXT_ONLY.get(owner, set()):
                missing.append(f"{owner}.{name}")
    return missing


# ---- everything -------------------------------------------------------------------------------


def _for_tables(tables: PrismTables) -> list[Rendered]:
    return [*_named(tables), *_core(tables)]


@functools.lru_cache(maxsize=1)
def rendered_statements() -> tuple[Rendered, ...]:
    """Every statement, for the default table set; where the text differs for a table pinned to
    :data:`PINNED` dimensions, that rendering too (``<name>.dim4``); the revisions' DDL."""
    plain = _for_tables(build_metadata())
    pinned = {(r.group, r.name): r for r in _for_tables(build_metadata(dimension=PINNED))}
    found = list(plain)
    for rendered in plain:
        other = pinned[(rendered.group, rendered.name)]
        if other.sql != rendered.sql:
            found.append(
                Rendered(rendered.group, f"{rendered.name}.dim{PINNED}", other.source, other.sql)
            )
    ddl = "prism_memory.postgres.migrate.build_ddl"
    found.append(Rendered("migrations", "upgrade_head", ddl, build_ddl()))
    found.append(
        Rendered("migrations", f"upgrade_head.dim{PINNED}", ddl, build_ddl(dimension=PINNED))
    )
    keys = [(r.group, r.name) for r in found]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise AssertionError(f"two statements render to one file: {duplicates}")
    return tuple(sorted(found, key=lambda r: (r.group, r.name)))


# ---- layout -------------------------------------------------------------------------------------

_BREAK = re.compile(
    r"(?:WITH|SELECT|FROM|WHERE|AND|OR|ORDER BY|GROUP BY|LIMIT|OFFSET|UNION ALL|UNION|"
    r"CROSS JOIN|LEFT JOIN|JOIN|ON CONFLICT|ON|RETURNING|SET|VALUES|WINDOW|USING|"
    r"INSERT INTO|UPDATE|DELETE FROM|DO UPDATE|DO NOTHING)\b"
)


def layout(sql: str) -> str:
    """``sql`` laid out for reading: a statement written on one line is broken before its clause
    keywords and indented by parenthesis depth (a space becomes a newline and indentation; nothing
    else changes, inside quotes nothing at all); a statement that has its own line breaks (DDL,
    SQLAlchemy's compiled Core) is kept as it is."""
    if "\n" in sql.strip():
        return sql.strip("\n") + "\n"
    out: list[str] = []
    depth = 0
    quote: str | None = None
    for i, char in enumerate(sql):
        if quote is not None:
            out.append(char)
            if char == quote:
                quote = None
            continue
        if char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == " " and _breaks(sql, i):
            out.append("\n" + "    " * depth)
            continue
        out.append(char)
    return "".join(out) + "\n"


_GLUED = re.compile(r"(?:BETWEEN \S+|\b(?:CROSS|LEFT|DO|DELETE|TIMESTAMP|AS)|,)$")
"""What the break keyword after it belongs to (``CROSS JOIN``, ``BETWEEN x AND y`` ...)."""

_CTE = re.compile(r"\w+ AS (?:MATERIALIZED )?\(")


def _breaks(sql: str, i: int) -> bool:
    """Whether the space at ``i`` becomes a line break."""
    before = sql[max(0, i - 40) : i]
    if before.endswith(",") and _CTE.match(sql, i + 1):
        return True  # the next common table expression
    if not _BREAK.match(sql, i + 1) or _GLUED.search(before):
        return False
    return not re.match(r"WITH (?:ORDINALITY|TIME)", sql[i + 1 :])
