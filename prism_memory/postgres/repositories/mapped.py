"""The ORM repositories: share grants and the working-memory documents, through the mapped
classes of the table set."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import delete, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from ...models import ShareGrant, WorkingMemoryRecord
from ..orm import ShareGrantRow, WorkingMemoryRow
from ._base import _POPULATE, _primary_key, _Repository, _rowcount

__all__ = ["ShareGrantRepository", "WorkingRepository"]

_WORKING_NO_THREAD = ""


class ShareGrantRepository(_Repository):
    """Parent -> child share grants, through the mapped class ``tables.orm.ShareGrant``."""

    __slots__ = ()

    @staticmethod
    def _grant(row: ShareGrantRow) -> ShareGrant:
        return ShareGrant(
            tenant_id=row.tenant_id,
            resource_id=row.resource_id,
            parent_thread_id=row.parent_thread_id,
            child_thread_id=row.child_thread_id,
            source_ids=tuple(row.source_ids),
            created_at=row.created_at,
            expires_at=row.expires_at,
        )

    async def put(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant.

        One ORM-enabled ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``, so concurrent writers
        of the same grant never collide; the returned row lands in the session's identity map.
        """
        model = self.tables.orm.ShareGrant
        stmt = pg_insert(model).values(
            tenant_id=grant.tenant_id,
            resource_id=grant.resource_id,
            parent_thread_id=grant.parent_thread_id,
            child_thread_id=grant.child_thread_id,
            source_ids=list(grant.source_ids),
            created_at=grant.created_at,
            expires_at=grant.expires_at,
        )
        upsert = stmt.on_conflict_do_update(
            index_elements=_primary_key(model.__table__),
            set_={
                "source_ids": stmt.excluded.source_ids,
                "created_at": stmt.excluded.created_at,
                "expires_at": stmt.excluded.expires_at,
            },
        ).returning(model)
        async with self._session("put_share_grant") as session:
            row = (await session.scalars(upsert, execution_options=_POPULATE)).one()
            return self._grant(row)

    async def get(self, tenant: str, resource: str, parent: str, child: str) -> ShareGrant | None:
        """The grant, expired or not (``session.get`` by primary key)."""
        key = (tenant, resource, parent, child)
        async with self._session("get_share_grant", writes=False) as session:
            row = await session.get(self.tables.orm.ShareGrant, key)
            return None if row is None else self._grant(row)

    async def delete(self, tenant: str, resource: str, parent: str, child: str) -> int:
        """Delete the grant; 1 if there was one."""
        model = self.tables.orm.ShareGrant
        stmt = delete(model).where(
            model.tenant_id == tenant,
            model.resource_id == resource,
            model.parent_thread_id == parent,
            model.child_thread_id == child,
        )
        async with self._session("delete_share_grant") as session:
            return _rowcount(await session.execute(stmt))


class WorkingRepository(_Repository):
    """Versioned working-memory documents (one per tenant, resource and thread or none), through
    the mapped class ``tables.orm.WorkingMemory``.

    Writes stay single statements so concurrent writers never lose an update: an ORM-enabled
    ``INSERT ... ON CONFLICT`` (unconditional write, or create at version 0) or a conditional
    ``UPDATE ... WHERE version = :expected`` (optimistic concurrency), each ``RETURNING`` the
    mapped row.
    """

    __slots__ = ()

    @staticmethod
    def _key(tenant: str, resource: str, thread: str | None) -> tuple[str, str, str]:
        return (tenant, resource, _WORKING_NO_THREAD if thread is None else thread)

    @staticmethod
    def _record(row: WorkingMemoryRow | None) -> WorkingMemoryRecord | None:
        if row is None:
            return None
        return WorkingMemoryRecord(
            version=int(row.version), data=dict(row.data), updated_at=row.updated_at
        )

    async def get(
        self, tenant: str, resource: str, thread: str | None
    ) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` (``session.get`` by primary key, re-read)."""
        async with self._session("get_working", writes=False) as session:
            row = await session.get(
                self.tables.orm.WorkingMemory,
                self._key(tenant, resource, thread),
                populate_existing=True,
            )
            return self._record(row)

    async def put(
        self,
        tenant: str,
        resource: str,
        thread: str | None,
        data: Mapping[str, Any],
        *,
        expected_version: int | None,
        now: datetime,
    ) -> WorkingMemoryRecord | None:
        """Write the next version atomically; ``None`` when ``expected_version`` did not match."""
        model = self.tables.orm.WorkingMemory
        tenant, resource, thread_key = self._key(tenant, resource, thread)
        document = dict(data)
        if expected_version is None or expected_version == 0:
            stmt = pg_insert(model).values(
                tenant_id=tenant,
                resource_id=resource,
                thread_key=thread_key,
                version=1,
                data=document,
                updated_at=now,
            )
            index = _primary_key(model.__table__)
            if expected_version is None:
                upsert = stmt.on_conflict_do_update(
                    index_elements=index,
                    set_={
                        "version": model.version + 1,
                        "data": stmt.excluded.data,
                        "updated_at": stmt.excluded.updated_at,
                    },
                )
            else:
                upsert = stmt.on_conflict_do_nothing(index_elements=index)
            async with self._session("put_working") as session:
                written = await session.scalars(
                    upsert.returning(model), execution_options=_POPULATE
                )
                return self._record(written.one_or_none())
        conditional = (
            update(model)
            .where(
                model.tenant_id == tenant,
                model.resource_id == resource,
                model.thread_key == thread_key,
                model.version == expected_version,
            )
            .values(version=model.version + 1, data=document, updated_at=now)
            .returning(model)
        )
        async with self._session("put_working") as session:
            found = await session.scalars(conditional, execution_options=_POPULATE)
            return self._record(found.one_or_none())

    async def version(self, tenant: str, resource: str, thread: str | None) -> int:
        """The current version, 0 when there is no document."""
        found = await self.get(tenant, resource, thread)
        return 0 if found is None else found.version
