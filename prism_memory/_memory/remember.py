"""``remember``: entries redacted, capped and given their ids, then handed to the store and the
indexing queue in one place (:meth:`RememberService._hand_over`)."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from .. import _telemetry as otel
from .._offload import PREPARE_SLICE_CHARS, terms_of_texts
from ..entries import prepare_entry
from ..errors import (
    CapExceededError,
    ConfigurationError,
    DimensionMismatchError,
    IndexingError,
    InvalidVectorError,
    ValidationError,
)
from ..models import (
    IndexingReport,
    MemoryEntry,
    MemoryIdentity,
    RememberResult,
    parse,
)
from ..stores.base import ClaimedEntry, NewEntry, StoredEntries
from ..windows import embed_entries
from .core import MemoryContext, ModelGuard, maybe_await
from .session import IndexingSession

__all__ = ["EntryInput", "RememberService"]

logger = logging.getLogger("prism_memory.memory")

EntryInput = MemoryEntry | Mapping[str, Any]


def _settled(report: IndexingReport) -> asyncio.Future[IndexingReport]:
    """A ``done`` future already resolved to ``report``."""
    future: asyncio.Future[IndexingReport] = asyncio.get_running_loop().create_future()
    future.set_result(report)
    return future


class RememberService:
    """The write path of :meth:`Memory.remember <prism_memory.memory.Memory.remember>`."""

    __slots__ = ("_ctx", "_models", "_session")

    def __init__(self, ctx: MemoryContext, session: IndexingSession, models: ModelGuard) -> None:
        self._ctx = ctx
        self._session = session
        self._models = models

    async def remember(
        self, entries: EntryInput | Sequence[EntryInput], *, wait: bool
    ) -> RememberResult:
        """See :meth:`Memory.remember <prism_memory.memory.Memory.remember>`."""
        ctx = self._ctx
        scope = ctx.identity
        now = ctx.clock()
        prepared: dict[str, NewEntry] = {}
        hooked = ctx.importance_from is not None
        # each input parsed and prepared in turn: its parsed form is dropped at once, so a batch
        # in flight holds only the prepared entries (fewer objects for the garbage collector)
        handled = 0
        for position, raw in enumerate(self._entry_list(entries)):
            item = parse(MemoryEntry, raw, "memory entry")
            entry = self._prepare(item, now, position)
            handled += len(entry.text)
            if handled > PREPARE_SLICE_CHARS:  # checks, redaction and digest of a large batch:
                handled = 0  # the event loop runs between slices (prism_memory._offload)
                await asyncio.sleep(0)
            if hooked and item.importance is None and item.reflection is not None:
                entry = replace(entry, importance=await self._importance(item))
            previous = prepared.get(entry.id)
            if previous is not None and previous != entry:
                raise ValidationError(
                    f"entries[{position}] repeats an earlier entry's id with different content"
                )
            prepared[entry.id] = entry
        # the texts' terms, made once here for the store -- on worker threads for a large batch,
        # so tokenizing it never stalls the event loop (prism_memory._offload)
        made = await terms_of_texts([entry.text for entry in prepared.values()])
        prepared = {
            key: replace(entry, terms=terms)
            for (key, entry), terms in zip(prepared.items(), made, strict=True)
        }
        await self._models.check_write(scope)
        pending, done, indexed = await self._hand_over(scope, prepared, now, wait=wait)
        if pending:
            self._session.track(done, len(pending))
            meters = otel.instruments()
            if meters is not None:
                meters.pending.add(len(pending), {"gen_ai.memory.store.id": ctx.store_id})
        result = RememberResult(accepted=tuple(prepared), pending=pending, done=done)
        if wait:
            report = await done
            if report.failed:
                raise IndexingError(
                    f"{len(report.failed)} entries failed to index", dict(report.failed)
                )
            if indexed:
                report = replace(report, indexed=tuple(sorted({*report.indexed, *indexed})))
                done = _settled(report)
            result = replace(result, pending=(), done=done)  # everything it waited for is indexed
        return result

    async def _hand_over(
        self,
        scope: MemoryIdentity,
        prepared: Mapping[str, NewEntry],
        now: datetime,
        *,
        wait: bool,
    ) -> tuple[tuple[str, ...], asyncio.Future[IndexingReport], tuple[str, ...]]:
        """Store ``prepared`` and give the queue what it must embed: ``(pending, done, indexed)``.

        The one place where the facade, the queue and the store meet on a write:

        1. ``wait`` with a queue: embed first and store the new rows indexed, with their vectors
           (:meth:`_put_indexed`); if that fails, or while the memory writes a model change's
           next vectors too (``next_embedder``), fall through to 2. When every row is stored
           indexed (nothing pending or failed), the queue is not asked at all: nothing to join,
           start, lease or watch.
        2. Otherwise the new rows are stored pending and leased to this memory's worker
           (``queue.lease``), so it embeds them without a claim round trip and no other worker
           takes them meanwhile. Worker-only mode (no queue): stored pending, unleased.
        3. Rows the store holds as ``failed`` are requeued: remembering again is how a host
           retries a failed entry.
        4. ``done`` watches every pending id (the queue's, or the worker's in worker-only mode),
           and the queue *adopts* the leased rows this call inserted, as if it had claimed them.

        ``put_entries`` says which rows it inserted (:attr:`StoredEntries.inserted`; an existing
        id is never rewritten). ``indexed`` lists the new rows stored with their vectors in step 1.
        """
        ctx = self._ctx
        store = ctx.backend.entries
        new = list(prepared.values())
        writer = ctx.next_writer
        # worker-only mode (not in_process): stored pending, embedded by `prism-memory worker`
        # alone. During a model change the queue embeds them (the next model's vectors first),
        # so a row is never indexed -- recallable under the old model -- without the new
        # model's vector
        in_process = ctx.indexing.in_process
        if in_process and self._session.closed:
            raise ConfigurationError("this memory is closed")
        embed_first = wait and in_process and (writer is None or not await writer.active())
        records = await self._put_indexed(scope, new, now) if embed_first else None
        indexed = (
            ()
            if records is None
            else tuple(r.id for r in records if r.status == "indexed" and r.id in records.inserted)
        )
        if records is not None and all(r.status == "indexed" for r in records):
            return (), _settled(IndexingReport(indexed=())), indexed  # no queue needed
        queue = await self._session.ensure_queue() if in_process else None
        lease = None
        if records is None:
            lease = queue.lease(prepared) if queue is not None else None
            records = await store.put_entries(scope, new, now=now, lease=lease)
        failed = [record.id for record in records if record.status == "failed"]
        if failed:
            await self._ctx.backend.ledger.requeue_failed(scope, failed)
        pending = tuple(r.id for r in records if r.status == "pending" or r.id in failed)
        if queue is None:
            return pending, self._session.watch_worker(scope, pending), indexed
        done = queue.watch(pending)
        if pending and otel.tracer() is not None:  # the batch that embeds them links to this call
            otel.remember_links(scope, pending)
        if lease is not None:
            queue.adopt(
                ClaimedEntry(
                    scope=scope,
                    id=r.id,
                    revision=r.revision,
                    text=r.text,
                    attempts=0,
                    lease_until=lease.until,
                )
                for r in records
                if lease.covers(r.id) and r.status == "pending" and r.id in records.inserted
            )
        return pending, done, indexed

    async def _put_indexed(
        self, scope: MemoryIdentity, entries: Sequence[NewEntry], now: datetime
    ) -> StoredEntries | None:
        """Embed ``entries`` now and store the new ones indexed with their vectors (one write per
        row); ``None`` -- nothing stored -- if the embedder or its vectors fail, so the caller
        stores them pending and the queue retries, records and reports the failure as usual."""
        ctx = self._ctx
        try:
            vectors = await embed_entries(
                ctx.embedder,
                [entry.text for entry in entries],
                batch_size=ctx.limits.embed_batch,  # of the embedder's width (embed_batched)
            )
        except Exception as exc:  # noqa: BLE001 - the queue retries it and records the failure
            logger.debug("embedding before the write failed; storing pending: %s", exc)
            return None
        try:
            return await ctx.backend.entries.put_entries(
                scope, entries, now=now, vectors=vectors, model=ctx.embedding_model
            )
        except DimensionMismatchError as exc:  # checked before any write: nothing was written
            # the store holds another width (fixed since this memory checked): the queue could
            # never store these rows either, so the caller hears it now
            raise DimensionMismatchError(
                f"the vector store refused vectors of width {ctx.embedder.dimensions} ({exc}): "
                "nothing was written"
            ) from exc
        except InvalidVectorError as exc:  # checked before any write
            logger.debug("the store refused the vectors; storing pending: %s", exc)
            return None

    def _entry_list(self, entries: EntryInput | Sequence[EntryInput]) -> list[EntryInput]:
        if isinstance(entries, MemoryEntry | Mapping):
            raw: list[EntryInput] = [entries]
        elif isinstance(entries, Sequence) and not isinstance(entries, str | bytes):
            raw = list(entries)
        else:
            raise ValidationError("entries must be an entry, a mapping, or a sequence of them")
        if not raw:
            raise ValidationError("remember() needs at least one entry")
        cap = self._ctx.limits.remember_batch
        if len(raw) > cap:
            raise CapExceededError(f"{len(raw)} entries in one call, over the cap {cap}")
        return raw

    def _prepare(self, entry: MemoryEntry, now: datetime, position: int) -> NewEntry:
        """``entry`` redacted, checked against the caps and given its id (:func:`prepare_entry`);
        :meth:`_importance` asks the host's hook, when there is one, for an entry with a
        reflection and no importance."""
        return prepare_entry(
            entry,
            now,
            scrubber=self._ctx.scrubber,
            limits=self._ctx.limits,
            label=f"entries[{position}]",
        )

    async def _importance(self, entry: MemoryEntry) -> float:
        if entry.importance is not None:
            return min(1.0, max(0.0, entry.importance))
        hook = self._ctx.importance_from
        if entry.reflection is None or hook is None:
            return 1.0
        reflection = self._ctx.scrubber.value(entry.reflection)  # the hook only sees redacted data
        value = await maybe_await(hook(reflection))
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValidationError(f"importance_from returned {value!r}, not a finite number")
        return min(1.0, max(0.0, float(value)))
