"""The working-memory document: one versioned, schema-checked JSON record per scope."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from ..errors import ValidationError
from ..models import WorkingMemoryRecord, check_json
from ..working import check_size
from .core import MemoryContext

__all__ = ["WorkingService", "check_update"]


def check_update(data: object, expected_version: object) -> Mapping[str, Any]:
    """The arguments of :meth:`Memory.update_working <prism_memory.memory.Memory.update_working>`
    checked: ``data`` as a JSON object (a pydantic model dumped), ``expected_version`` ``None`` or
    a non-negative integer."""
    if expected_version is not None and (
        isinstance(expected_version, bool)
        or not isinstance(expected_version, int)
        or expected_version < 0
    ):
        raise ValidationError("expected_version must be a non-negative integer")
    if isinstance(data, pydantic.BaseModel):
        data = data.model_dump(mode="json")
    if not isinstance(data, Mapping):
        raise ValidationError("working memory must be a JSON object")
    return data


class WorkingService:
    """:meth:`Memory.get_working` and :meth:`Memory.update_working` of one memory."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: MemoryContext) -> None:
        self._ctx = ctx

    async def get(self) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` before the first write."""
        ctx = self._ctx
        return await ctx.backend.working.get_working(
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
        return await ctx.backend.working.put_working(
            ctx.tenant_id,
            ctx.resource_id,
            ctx.working_thread,
            document,
            expected_version=expected_version,
            now=ctx.clock(),
        )
