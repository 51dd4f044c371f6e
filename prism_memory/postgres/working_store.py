"""The working-memory store on PostgreSQL: one versioned JSON document per key, written in one
statement at the version the caller expects (no lost updates). Its reads stay on the primary: a
document is read to be updated."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import ConflictError
from ..models import WorkingMemoryRecord
from ..stores.base import WorkingStore
from ._engine import Pooling
from ._executor import Executor
from .repositories import WorkingRepository
from .tables import PrismTables

__all__ = ["PostgresWorkingStore"]


class PostgresWorkingStore(WorkingStore):
    """:class:`~prism_memory.stores.base.WorkingStore` on PostgreSQL (optimistic versions): a
    :class:`~prism_memory.postgres.repositories.WorkingRepository` over its own executor."""

    def __init__(
        self,
        engine: AsyncEngine,
        tables: PrismTables,
        *,
        owns_engine: bool,
        engine_sets_plans: bool = False,
        pooling: Pooling = "session",
    ) -> None:
        self.executor = Executor(
            engine, owns_engine=owns_engine, sets_plans=engine_sets_plans, pooling=pooling
        )
        """Where every statement of this store runs."""
        self._tables = tables
        self._documents = WorkingRepository(self.executor, tables)

    @property
    def engine(self) -> AsyncEngine:
        """The engine this store runs on."""
        return self.executor.engine

    @property
    def pooling(self) -> Pooling:
        """``"transaction"`` when this store runs behind a transaction-mode pooler."""
        return self.executor.pooling

    @property
    def tables(self) -> PrismTables:
        """The tables this store reads and writes."""
        return self._tables

    def __repr__(self) -> str:
        names = self._tables.names
        return f"PostgresWorkingStore(schema={names.schema!r}, table={names.table!r})"

    async def get_working(
        self, tenant_id: str, resource_id: str, thread_id: str | None
    ) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` when none was written."""
        return await self._documents.get(tenant_id, resource_id, thread_id)

    async def put_working(
        self,
        tenant_id: str,
        resource_id: str,
        thread_id: str | None,
        data: Mapping[str, Any],
        *,
        expected_version: int | None,
        now: datetime,
    ) -> WorkingMemoryRecord:
        """Write ``data`` as version ``current + 1`` in one statement (no lost updates).

        With ``expected_version`` the statement only applies at that version (``0``: no document
        yet); otherwise :class:`~prism_memory.errors.ConflictError`.
        """
        async with self.executor.unit("put_working", tenant=tenant_id) as unit:
            repo = WorkingRepository(unit, self._tables)
            written = await repo.put(
                tenant_id,
                resource_id,
                thread_id,
                data,
                expected_version=expected_version,
                now=now,
            )
            if written is None:
                found = await repo.version(tenant_id, resource_id, thread_id)
                raise ConflictError(
                    f"working memory is at version {found}, expected {expected_version}"
                )
        return written

    async def close(self) -> None:
        """Dispose of the engine if this store created it."""
        await self.executor.close()
