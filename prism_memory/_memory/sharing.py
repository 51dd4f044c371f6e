"""Share grants: a parent thread lets a child thread recall named entries, until it expires."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..errors import NotFoundError, ValidationError
from ..models import MemoryIdentity, ShareGrant, check_ids, check_key
from ..stores.base import SharedSource, ShareGrants
from .core import MemoryContext, check_aware

__all__ = ["SharingService", "check_grant", "shared_source"]


def check_grant(
    ctx: MemoryContext,
    child_thread_id: str,
    source_ids: Sequence[str],
    expires_at: datetime | None,
) -> ShareGrant:
    """The grant :meth:`Memory.share_with <prism_memory.memory.Memory.share_with>` asks for, its
    arguments checked against ``ctx``'s scope and limits (created now)."""
    scope = ctx.identity
    child = check_key(child_thread_id, "child_thread_id")
    if child == scope.thread_id:
        raise ValidationError("a thread cannot share with itself")
    ids = check_ids(source_ids, "source_ids", cap=ctx.limits.share_ids)
    now = ctx.clock()
    if expires_at is not None:
        check_aware(expires_at, "expires_at")
        if expires_at <= now:
            raise ValidationError("expires_at must be in the future")
    return ShareGrant(
        tenant_id=scope.tenant_id,
        resource_id=scope.resource_id,
        parent_thread_id=scope.thread_id,
        child_thread_id=child,
        source_ids=ids,
        created_at=now,
        expires_at=expires_at,
    )


class SharingService:
    """:meth:`Memory.share_with` and :meth:`Memory.revoke_share` of one (parent) thread."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: MemoryContext) -> None:
        self._ctx = ctx

    async def share_with(self, grant: ShareGrant) -> ShareGrant:
        """Store ``grant`` (from :func:`check_grant`); one without source ids revokes instead."""
        scope = self._ctx.identity
        ids = grant.source_ids
        if not ids:
            await self.revoke_share(grant.child_thread_id)
            return grant
        found = {r.id for r in await self._ctx.backend.entries.get_entries(scope, list(ids))}
        missing = sorted(set(ids) - found)
        if missing:
            raise NotFoundError(f"cannot share {len(missing)} entries this thread does not hold")
        return await self._ctx.backend.grants.put_share_grant(grant)

    async def revoke_share(self, child: str) -> int:
        """Withdraw the grant to ``child``; 1 if there was one, else 0."""
        scope = self._ctx.identity
        return await self._ctx.backend.grants.delete_share_grant(
            scope.tenant_id, scope.resource_id, scope.thread_id, child
        )


async def shared_source(
    store: ShareGrants, scope: MemoryIdentity, parent: str | None, now: datetime
) -> SharedSource | None:
    """What ``parent`` grants ``scope``'s thread at ``now``; ``None`` (fail closed) without a
    live grant."""
    if parent is None:
        return None
    grant = await store.get_share_grant(scope.tenant_id, scope.resource_id, parent, scope.thread_id)
    if grant is None or not grant.source_ids:
        return None  # fail closed: no grant, no parent entries
    if grant.expires_at is not None and grant.expires_at <= now:
        return None
    return SharedSource(thread_id=parent, ids=grant.source_ids)
