"""The working-memory document: one versioned, schema-checked JSON record per scope."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..models import WorkingMemoryRecord, check_json
from ..working import check_size
from .core import MemoryContext

__all__ = ["WorkingService"]


class WorkingService:
    """:meth:`Memory.get_working` and :meth:`Memory.update_working` of one memory."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: MemoryContext) -> None:
        self._ctx = ctx

    async def get(self) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` before the first write."""
        ctx = self._ctx
        return await ctx.working_store.get_working(
            ctx.tenant_id, ctx.resource_id, ctx.working_thread
        )

    async def put(
        self, data: Mapping[str, Any], *, expected_version: int | None
    ) -> WorkingMemoryRecord:
        """Validate ``data`` (a JSON object, checked by the facade), scrub it and write it."""
        ctx = self._ctx
        check_json(data, "working memory")
        scrub = ctx.scrubber
        document = ctx.validator(scrub.value(data) if scrub.active else data)
        check_size(document, ctx.limits.working_memory_bytes)
        return await ctx.working_store.put_working(
            ctx.tenant_id,
            ctx.resource_id,
            ctx.working_thread,
            document,
            expected_version=expected_version,
            now=ctx.clock(),
        )
