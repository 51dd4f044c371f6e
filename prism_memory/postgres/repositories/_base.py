"""What every repository shares: where its statements run (the executor, or a unit of it), the
tables and their statements, and the small helpers of Core statements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import Table, Text, any_, bindparam
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from .._executor import Executor, Params, SessionUnit, Unit, rowcount
from ..statements import EntrySql
from ..tables import PrismTables

__all__: list[str] = []


class _Repository:
    """Base: where statements run, the tables and their SQL.

    ``on`` is the store's :class:`~prism_memory.postgres._executor.Executor` -- then every call is
    its own unit of work, opened through it -- or a unit the caller opened (a
    :class:`~prism_memory.postgres._executor.SessionUnit` or
    :class:`~prism_memory.postgres._executor.DriverUnit`) -- then every call runs inside it, and
    the caller's unit commits. Nothing here commits.
    """

    __slots__ = ("on", "sql", "tables")

    def __init__(self, on: Executor | Unit, tables: PrismTables) -> None:
        self.on = on
        self.tables = tables
        self.sql = EntrySql.for_tables(tables)

    async def _rows(
        self,
        action: str,
        statement: str,
        params: Params = None,
        *,
        replica: bool = False,
        custom_plans: bool = False,
    ) -> Sequence[Any]:
        """The rows of one named statement (a read: on the replica when ``replica`` allows)."""
        on = self.on
        if isinstance(on, Executor):
            return await on.fetch(
                action, statement, params, replica=replica, custom_plans=custom_plans
            )
        return await on.fetch(statement, params)

    async def _value(self, action: str, statement: str, params: Params = None) -> Any:
        """The first column of a named read's first row, or ``None``."""
        on = self.on
        if isinstance(on, Executor):
            return await on.fetchval(action, statement, params)
        return await on.fetchval(statement, params)

    async def _changed(
        self, action: str, statement: str, params: Params = None, *, visible: bool = True
    ) -> int:
        """Run one named writing statement; how many rows it changed."""
        on = self.on
        if isinstance(on, Executor):
            (count,) = await on.write(action, statement, params, count=True, visible=visible)
            return int(count)
        return await on.execute(statement, params)

    async def _written(
        self, action: str, statement: str, params: Params = None, *, visible: bool = True
    ) -> Sequence[Any]:
        """Run one named writing statement; its rows."""
        on = self.on
        if isinstance(on, Executor):
            return await on.write(action, statement, params, visible=visible)
        return await on.fetch(statement, params)

    @asynccontextmanager
    async def _session(
        self, action: str, *, writes: bool = True, read: bool = False
    ) -> AsyncIterator[AsyncSession]:
        """The session a Core or ORM statement runs in: the caller's unit's, or a unit of its own
        (``writes=False``: it only reads; ``read``: it may read on the replica)."""
        on = self.on
        if isinstance(on, Executor):
            async with on.unit(action, writes=writes, read=read) as unit:
                yield unit.session
        elif isinstance(on, SessionUnit):
            yield on.session
        else:
            raise TypeError("a Core or ORM statement needs a session unit")


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
    return rowcount(result)


_STATUS_SQL: dict[str, str] = {"pending": "pending", "indexed": "indexed", "failed": "failed"}
"""The statuses an SQL text may hold as constants (a key error for anything else)."""
