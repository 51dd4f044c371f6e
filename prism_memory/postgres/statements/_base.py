# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""What every statement family of the entries tables shares: quoting, the rendered table names,
the record columns, and the rewrite of ``:name`` binds for the asyncpg driver."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self, cast

from ..._entry_fields import RECORD_COLUMNS
from ..tables import Names, PrismTables

__all__ = ["TableSql", "quote", "to_positional"]

_KEY = ("tenant_id", "resource_id", "thread_id", "id")
"""The entries table's primary key."""


def quote(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class TableSql:
    """The entries and tombstones tables of one table set, and its vector generations' registry
    and vectors, rendered (schema-qualified, quoted); each statement family subclasses it and
    builds its statements from these names, once."""

    entries: str
    invalidation: str
    generations: str
    vectors: str

    @classmethod
    def for_tables(cls, tables: PrismTables) -> Self:
        """The statements of ``tables`` (cached per family and table set)."""
        return cls.for_names(tables.names)

    @classmethod
    def for_names(cls, names: Names) -> Self:
        """The statements of the table set ``names`` (cached per family and names)."""
        family: Any = cls  # a class is hashable; mypy's Hashable protocol disagrees
        return cast("Self", _render(family, names))

    @staticmethod
    def columns(
        alias: str = "e", *, json_as_text: bool = False, instead: Mapping[str, str] | None = None
    ) -> str:
        """The record columns, qualified by ``alias``; ``json_as_text`` reads ``metadata`` as its
        JSON text, for :func:`~prism_memory.postgres.rows.record_from_row` to parse only when a record
        is built; ``instead`` selects other SQL (with its ``AS <column>``) for some columns."""
        replaced = dict(instead or {})
        if json_as_text:
            replaced.setdefault("metadata", f"CAST({alias}.metadata AS text) AS metadata")
        return ", ".join(replaced.get(name) or f"{alias}.{quote(name)}" for name in RECORD_COLUMNS)

    def first_stored(
        self, key: str | tuple[str, str, str, str], columns: str, *, tenant: str | None = None
    ) -> str:
        """A subquery: ``columns`` of the first stored entry at or after ``key`` (the SQL of a
        ``tenant_id, resource_id, thread_id, id``: :meth:`key_of`, :meth:`thread_key`, or its four
        parts) in the primary key's order -- one descent of the primary key, whatever the
        statistics.

        A plain probe (``WHERE e.tenant_id = ... AND e.id = ...``, or ``e.id = ANY(...)``) leaves
        the index to the planner, which estimates the thread's three equalities at one row for
        *both* B-trees that lead with them, and took the ``(scope, sequence)`` one: it walked the
        whole thread's range, fetching every row to test its id, for each probed key (measured:
        0.1 ms a key in 90-row threads, and growing with the thread). Only the primary key yields
        this order without sorting the rest of the table, so no estimate can make another plan
        look cheaper. The key is stored when the row found has it (:meth:`is_key`).

        ``tenant`` (SQL, a bound parameter; ``key`` then given as its four parts) is named as a
        plain ``e.tenant_id = …``, for a shard router that prunes by the distribution column
        (docs/scaling.md), and the row comparison then covers the *other* three columns:
        ``e.tenant_id = :tenant AND ROW(e.tenant_id, …) >= ROW(…)`` made the B-tree start at the
        tenant's first key (the equality) and test the row comparison on every key after it, so
        each descent walked the tenant up to the id (16,000 ids of a 100,000-row tenant: 15 s).
        With ``ROW(e.resource_id, e.thread_id, e.id) >= …`` after the equality, the descent starts
        at the probed key itself."""
        mine = self.key_of("e")
        if tenant is None:
            start = key if isinstance(key, str) else ", ".join(key)
            where = f"ROW({mine}) >= ROW({start})"
        else:
            if isinstance(key, str):
                raise TypeError("first_stored(tenant=...) takes the key as its four parts")
            rest = ", ".join(f"e.{column}" for column in _KEY[1:])
            where = f"e.tenant_id = {tenant} AND ROW({rest}) >= ROW({', '.join(key[1:])})"
        return f"(SELECT {columns} FROM {self.entries} e WHERE {where} ORDER BY {mine} LIMIT 1)"

    def stored_key(self, key: str | tuple[str, str, str, str], *, tenant: str | None = None) -> str:
        """``EXISTS``: the entry of ``key`` (as in :meth:`first_stored`, ``tenant`` too, with the
        key then in its four parts) is stored."""
        found = self.first_stored(key, self.key_of("e"), tenant=tenant)
        whole = key if isinstance(key, str) else ", ".join(key)
        return f"EXISTS (SELECT 1 FROM {found} AS e WHERE {self.is_key('e', whole)})"

    def stored_of_ids(self, columns: str) -> str:
        """``FROM ... WHERE ...``: the stored entries of the thread's ``:ids`` (``:tenant``,
        ``:resource``, ``:thread``), each id once, as ``e`` with ``columns`` (the primary key's
        among them) -- one :meth:`first_stored` descent per distinct id."""
        key = self.thread_key("k.id")
        parts = self.thread_key_parts("k.id")
        return (
            "FROM (SELECT DISTINCT id FROM unnest(CAST(:ids AS text[])) AS u(id)) AS k "
            f"CROSS JOIN LATERAL {self.first_stored(parts, columns, tenant=':tenant')} AS e "
            f"WHERE {self.is_key('e', key)}"
        )

    @staticmethod
    def key_of(alias: str) -> str:
        """The primary key's columns of ``alias``, in order."""
        return ", ".join(f"{alias}.{column}" for column in _KEY)

    @classmethod
    def thread_key(cls, entry_id: str) -> str:
        """The key of the entry ``entry_id`` (SQL) of the bound thread (``:tenant`` ...)."""
        return ", ".join(cls.thread_key_parts(entry_id))

    @staticmethod
    def thread_key_parts(entry_id: str) -> tuple[str, str, str, str]:
        """:meth:`thread_key`'s four columns, apart."""
        return (
            "CAST(:tenant AS text)",
            "CAST(:resource AS text)",
            "CAST(:thread AS text)",
            entry_id,
        )

    @classmethod
    def is_key(cls, alias: str, key: str) -> str:
        """``alias``'s primary key equals ``key``."""
        return f"ROW({cls.key_of(alias)}) = ROW({key})"

    def own_vector_of(self, entry: str = "e", *, model: str = "CAST(:model AS text)") -> str:
        """The entry ``entry``'s own vector is of the generation ``model`` (an own vector that
        records no model counts as the primary generation's, read once per statement); never
        NULL."""
        primary = f"(SELECT g.model FROM {self.generations} g WHERE g.role = 'primary')"
        return (
            f"COALESCE({entry}.embedding IS NOT NULL "
            f"AND COALESCE({entry}.embedding_model, {primary}) = {model}, false)"
        )

    def kept_vector(self, entry: str = "e", *, model: str = "CAST(:model AS text)") -> str:
        """``EXISTS``: a *current* vector of the generation ``model`` is kept beside the entry
        ``entry`` -- one of its current revision (one primary-key probe of the vectors table)."""
        return (
            f"EXISTS (SELECT 1 FROM {self.vectors} v WHERE v.tenant_id = {entry}.tenant_id "
            f"AND v.resource_id = {entry}.resource_id AND v.thread_id = {entry}.thread_id "
            f"AND v.entry_id = {entry}.id AND v.model = {model} "
            f"AND v.revision = {entry}.revision AND v.embedding IS NOT NULL)"
        )

    def current_vector(self, entry: str = "e", *, model: str = "CAST(:model AS text)") -> str:
        """The entry ``entry`` (an alias of the entries table) holds a current vector of the
        generation ``model``: its own (:meth:`own_vector_of`) or one kept beside it
        (:meth:`kept_vector`, probed only when the own one is of another model)."""
        return (
            f"({self.own_vector_of(entry, model=model)} OR {self.kept_vector(entry, model=model)})"
        )

    @functools.cached_property
    def any_width(self) -> str:
        """The width of some stored vector (unpinned tables keep one width, as pinned ones do);
        no index: the first row with a vector of a sequential scan."""
        return (
            f"SELECT vector_dims(embedding) FROM {self.entries} WHERE embedding IS NOT NULL LIMIT 1"
        )


@functools.lru_cache(maxsize=256)
def windows_of(ordinal: str) -> str:
    """The ``vector[]`` of the later windows bound for the row of ordinal ``ordinal`` (SQL): the
    statement's ``:windows`` (every later window of the batch, in order) whose ``:window_rows``
    entry is that ordinal; NULL for a row without any (an empty batch of windows costs one empty
    scan per row)."""
    return (
        "(SELECT array_agg(w.v ORDER BY w.n) FROM unnest(CAST(:windows AS vector[]), "
        "CAST(:window_rows AS bigint[])) WITH ORDINALITY AS w(v, owner, n) "
        f"WHERE w.owner = {ordinal})"
    )


def _render(family: type[TableSql], names: Names) -> Any:
    schema = quote(names.schema)
    return family(
        entries=f"{schema}.{quote(names.entries)}",
        invalidation=f"{schema}.{quote(names.invalidation)}",
        generations=f"{schema}.{quote(names.generations)}",
        vectors=f"{schema}.{quote(names.vectors)}",
    )


@functools.lru_cache(maxsize=256)
def to_positional(statement: str) -> tuple[str, tuple[str, ...]]:
    """Rewrite ``:name`` binds (never ``::casts``) into asyncpg's ``$n``; return the names in order.

    Lets a read go to the asyncpg driver directly, where the statement is prepared once per
    connection and cached by asyncpg.
    """
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    return _BIND.sub(number, statement), tuple(names)


_BIND = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")
