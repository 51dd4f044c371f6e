"""Share grants on PostgreSQL: :class:`PostgresGrants`, the
:class:`~prism_memory.stores.base.ShareGrants` role over
:class:`~prism_memory.postgres.repositories.ShareGrantRepository`."""

from __future__ import annotations

from ..models import ShareGrant
from ..stores.base import ShareGrants
from ._executor import Executor
from .repositories import ShareGrantRepository
from .tables import PrismTables

__all__ = ["PostgresGrants"]


class PostgresGrants(ShareGrants):
    """The :class:`~prism_memory.stores.base.ShareGrants` of the PostgreSQL backend (one ORM
    unit of work per call)."""

    def __init__(self, executor: Executor, tables: PrismTables) -> None:
        self._grants = ShareGrantRepository(executor, tables)

    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant of ``(tenant, resource, parent, child)``."""
        return await self._grants.put(grant)

    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        """The grant, expired or not, or ``None``."""
        return await self._grants.get(tenant_id, resource_id, parent_thread_id, child_thread_id)

    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        """Delete the grant; return 1 if there was one, else 0."""
        return await self._grants.delete(tenant_id, resource_id, parent_thread_id, child_thread_id)
