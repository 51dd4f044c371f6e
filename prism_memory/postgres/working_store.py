"""The working-memory store on PostgreSQL: one versioned JSON document per key, written in one
statement at the version the caller expects (no lost updates). Its reads stay on the primary: a
document is read to be updated."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..errors import ConflictError
from ..models import WorkingMemoryRecord
from ..stores.base import WorkingStore
from ._adapter import _Adapter
from .repositories import WorkingRepository

__all__ = ["PostgresWorkingStore"]


class PostgresWorkingStore(_Adapter, WorkingStore):
    """:class:`~prism_memory.stores.base.WorkingStore` on PostgreSQL (optimistic versions)."""

    def __repr__(self) -> str:
        names = self._tables.names
        return f"PostgresWorkingStore(schema={names.schema!r}, table={names.table!r})"

    async def get_working(
        self, tenant_id: str, resource_id: str, thread_id: str | None
    ) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` when none was written."""
        async with self._unit("get_working", writes=False) as session:
            return await WorkingRepository(session, self._tables).get(
                tenant_id, resource_id, thread_id
            )

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
        async with self._unit("put_working") as session:
            repo = WorkingRepository(session, self._tables)
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
        await self._dispose()
