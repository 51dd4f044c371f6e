# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""What every statement family of the entries tables shares: quoting, the rendered table names,
the record columns, and the rewrite of ``:name`` binds for the asyncpg driver."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Self, cast

from ..rows import RECORD_COLUMNS
from ..tables import Names, PrismTables

__all__ = ["TableSql", "quote", "to_positional"]


def quote(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class TableSql:
    """The entries and tombstones tables of one table set, rendered (schema-qualified, quoted);
    each statement family subclasses it and builds its statements from these names, once."""

    entries: str
    invalidation: str

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
    def columns(alias: str = "e", *, json_as_text: bool = False) -> str:
        """The record columns, qualified by ``alias``; ``json_as_text`` reads ``metadata`` as its
        JSON text, for :func:`record_from_row` to parse only when a record is built."""
        return ", ".join(
            f"CAST({alias}.metadata AS text) AS metadata"
            if json_as_text and name == "metadata"
            else f"{alias}.{quote(name)}"
            for name in RECORD_COLUMNS
        )

    def stored_key(self, outer: str) -> str:
        """``EXISTS``: the entry whose key is ``outer``'s ``(tenant_id, resource_id, thread_id,
        id)`` is stored -- one descent of the primary key for each outer row, whatever the
        statistics.

        A plain correlated probe (``WHERE e.tenant_id = k.tenant_id AND ... AND e.id = k.id``)
        leaves the index to the planner, which estimates the thread's three equalities at one row
        for *both* B-trees that lead with them, and on that tie took the ``(scope, sequence)`` one:
        it walked the whole thread's range, fetching every row to test its id, for each probed
        key (measured: 0.1 ms a key in 90-row threads, and growing with the thread). This form
        asks for the first stored key at or after ``outer``'s, in the primary key's order: only
        the primary key yields that without sorting the rest of the table, so no estimate can
        make another plan look cheaper; the key is stored when that first one is it."""
        key = ("tenant_id", "resource_id", "thread_id", "id")
        mine = ", ".join(f"e.{column}" for column in key)
        theirs = ", ".join(f"{outer}.{column}" for column in key)
        return (
            f"EXISTS (SELECT 1 FROM (SELECT {mine} FROM {self.entries} e WHERE ROW({mine}) >= "
            f"ROW({theirs}) ORDER BY {mine} LIMIT 1) AS e WHERE ROW({mine}) = ROW({theirs}))"
        )

    @functools.cached_property
    def any_width(self) -> str:
        """The width of some stored vector (unpinned tables keep one width, as pinned ones do);
        no index: the first row with a vector of a sequential scan."""
        return (
            f"SELECT vector_dims(embedding) FROM {self.entries} WHERE embedding IS NOT NULL LIMIT 1"
        )


@functools.lru_cache(maxsize=256)
def _render(family: type[TableSql], names: Names) -> Any:
    schema = quote(names.schema)
    return family(
        entries=f"{schema}.{quote(names.entries)}",
        invalidation=f"{schema}.{quote(names.invalidation)}",
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
