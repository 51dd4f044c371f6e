"""The share-grant role of the store contract: :class:`ShareGrants`. Re-exported by
:mod:`prism_memory.stores.base`.
"""

from __future__ import annotations

import abc

from ..models import ShareGrant

__all__ = ["ShareGrants"]


class ShareGrants(abc.ABC):
    """The grants by which a child thread recalls named entries of its parent (``Memory.share``)."""

    @abc.abstractmethod
    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant of ``(tenant, resource, parent, child)``."""

    @abc.abstractmethod
    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        """The grant, expired or not, or ``None``."""

    @abc.abstractmethod
    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        """Delete the grant; return 1 if there was one, else 0."""
