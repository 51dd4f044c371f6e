"""What every repository shares: the session, the tables and their statements, and the small
helpers of Core statements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, Text, any_, bindparam
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from ..statements import EntrySql
from ..tables import PrismTables

__all__: list[str] = []


class _Repository:
    """Base: a session to execute on, the tables and their SQL."""

    __slots__ = ("session", "sql", "tables")

    def __init__(self, session: AsyncSession, tables: PrismTables) -> None:
        self.session = session
        self.tables = tables
        self.sql = EntrySql.for_tables(tables)


_POPULATE: dict[str, Any] = {"populate_existing": True}
"""Rows an ORM statement returns replace what the identity map held (the database wins)."""


def _primary_key(table: Table) -> list[str]:
    """The primary-key column names of ``table`` (the ``ON CONFLICT`` target)."""
    return [column.name for column in table.primary_key]


def _in_array(column: Any, values: Sequence[str]) -> Any:
    """``column = ANY(:array)``: one bound parameter however many values (``IN`` binds one each,
    and a statement may bind at most 32,767)."""
    return column == any_(bindparam(None, list(values), type_=ARRAY(Text)))


def _rowcount(result: Any) -> int:
    count = getattr(result, "rowcount", -1)
    return max(int(count), 0)


_STATUS_SQL: dict[str, str] = {"pending": "pending", "indexed": "indexed", "failed": "failed"}
"""The statuses an SQL text may hold as constants (a key error for anything else)."""
