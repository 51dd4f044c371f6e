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
