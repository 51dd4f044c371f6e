"""Export pages (what a thread may hand out, redacted) and re-indexing with the memory's model."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .._cursor import encode_cursor
from ..errors import AccessDeniedError, CapExceededError
from ..models import ExportPage, MemoryIdentity, RebuildPage, parse
from ..windows import embed_entries
from ..working import canonical_json
from .core import MemoryContext, ModelGuard

__all__ = ["ExportService", "check_identity"]


def check_identity(ctx: MemoryContext, identity: MemoryIdentity | Mapping[str, Any]) -> None:
    """:class:`AccessDeniedError` unless an export's ``identity`` is ``ctx``'s exact scope."""
    scope = ctx.identity
    if parse(MemoryIdentity, identity, "identity") != scope:
        raise AccessDeniedError("export identity does not match this memory's scope")


class ExportService:
    """:meth:`Memory.export_memory` and :meth:`Memory.rebuild_index` of one thread."""

    __slots__ = ("_ctx", "_models")

    def __init__(self, ctx: MemoryContext, models: ModelGuard) -> None:
        self._ctx = ctx
        self._models = models

    async def export_page(
        self, after: tuple[int, str] | None, page_size: int, byte_cap: int, seconds: int
    ) -> ExportPage:
        """See :meth:`Memory.export_memory <prism_memory.memory.Memory.export_memory>` (the
        arguments checked and resolved by the facade)."""
        ctx = self._ctx
        scope = ctx.identity
        store = ctx.backend.entries
        deadline = time.monotonic() + seconds
        recall_filter = ctx.recall_filter(ctx.clock(), require_consent=True)
        entries: list[dict[str, Any]] = []
        size = 0
        while True:
            page = await store.list_by_thread(scope, after=after, limit=page_size)
            if not page:
                return _export_page(entries, size, None)
            allowed = {
                r.id
                for r in await store.neighbors(
                    scope, [(page[0].sequence, page[-1].sequence)], recall_filter
                )
            }
            for index, record in enumerate(page):
                if record.id in allowed:
                    body = ctx.scrubbed(record).to_json()
                    cost = len(canonical_json(body).encode())
                    if size + cost > byte_cap:
                        if not entries:
                            raise CapExceededError(
                                f"the next entry alone is {cost} bytes, over max_bytes {byte_cap}"
                            )
                        return _export_page(entries, size, after)
                    entries.append(body)
                    size += cost
                after = (record.sequence, record.id)
                if len(entries) >= page_size or time.monotonic() > deadline:
                    more = index < len(page) - 1 or len(page) == page_size
                    return _export_page(entries, size, after if more else None)
            if len(page) < page_size:
                return _export_page(entries, size, None)

    async def rebuild_page(
        self,
        after: tuple[int, str] | None,
        batch_size: int | None,
        max_seconds: int | None,
        *,
        switch_model: bool,
    ) -> RebuildPage:
        """See :meth:`Memory.rebuild_index <prism_memory.memory.Memory.rebuild_index>` (``after``
        decoded by the facade; the page size and time bound resolved once the model is checked)."""
        ctx = self._ctx
        scope = ctx.identity
        if not switch_model:
            self._models.forget_check()  # a rebuild asks the store again
        await self._models.check_write(scope, switch_model=switch_model)
        page_size = ctx.limits.resolve("rebuild_batch", batch_size)
        deadline = time.monotonic() + ctx.limits.resolve("rebuild_seconds", max_seconds)
        page = await ctx.backend.entries.list_by_thread(scope, after=after, limit=page_size)
        rebuilt = 0
        step = ctx.limits.embed_batch
        for start in range(0, len(page), step):
            chunk = page[start : start + step]
            vectors = await embed_entries(ctx.embedder, [r.text for r in chunk], batch_size=step)
            rebuilt += await ctx.backend.ledger.store_vectors(
                scope,
                [(r.id, r.revision, v) for r, v in zip(chunk, vectors, strict=True)],
                now=ctx.clock(),
                model=ctx.embedding_model,
            )
            last = chunk[-1]
            if time.monotonic() > deadline and start + step < len(page):
                return RebuildPage(rebuilt, encode_cursor("rebuild", (last.sequence, last.id)))
        if len(page) < page_size:
            return RebuildPage(rebuilt=rebuilt, next_cursor=None)
        return RebuildPage(rebuilt, encode_cursor("rebuild", (page[-1].sequence, page[-1].id)))


def _export_page(
    entries: list[dict[str, Any]], size: int, position: tuple[int, str] | None
) -> ExportPage:
    cursor = None if position is None else encode_cursor("export", position)
    return ExportPage(entries=tuple(entries), bytes=size, next_cursor=cursor)
