"""The :class:`Memory` facade: orchestration only — no SQL, no numpy.

``create_memory(...)`` wires an embedder, a vector store and a working store (the in-memory reference
adapters by default) to one exact scope: tenant, resource and (for semantic memory) thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, cast

import pydantic

from ._cursor import decode_cursor, encode_cursor
from .context import ContextProvider, TokenCounter, approximate_tokens
from .embedding import Embedder, check_embedder, embed_batched, embedder_model
from .entries import entry_digest, prepare_entry
from .errors import (
    AccessDeniedError,
    CapExceededError,
    ConfigurationError,
    DimensionMismatchError,
    EmbeddingModelMismatchError,
    IndexingError,
    InvalidVectorError,
    LineageCapError,
    NotFoundError,
    PrismMemoryError,
    ValidationError,
)
from .indexing import IndexingPolicy, QueueMember, join_queue, wait_for_worker
from .limits import Limits
from .models import (
    Candidate,
    ExportPage,
    IndexingReport,
    IndexStatus,
    MemoryEntry,
    MemoryIdentity,
    MemoryRecord,
    RebuildPage,
    RecallResult,
    RecallScoring,
    RememberResult,
    RetentionResult,
    ShareGrant,
    TombstoneReason,
    Vector,
    WorkingMemoryRecord,
    check_ids,
    check_json,
    check_key,
    check_text,
    parse,
)
from .ranking import chronological, query_terms, rerank
from .ranking import explain as explain_hits
from .redaction import Redactor, Scrubber
from .stores.base import (
    ClaimedEntry,
    ConsentUpdate,
    GovernanceChange,
    LineageWalk,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SharedSource,
    VectorStore,
    WorkingStore,
    walk_lineage,
)
from .stores.memory import InMemoryVectorStore, InMemoryWorkingStore
from .working import canonical_json, check_size, compile_validator

__all__ = [
    "MAX_RETENTION_DAYS",
    "Memory",
    "WorkingMemoryProcessor",
    "create_memory",
    "entry_digest",
]

MAX_RETENTION_DAYS = 36_525
"""Ceiling of ``retention_days`` and ``max_age_days`` (100 years): larger windows would reach
before year 1, which no datetime can hold."""

logger = logging.getLogger("prism_memory.memory")

ImportanceFrom = Callable[[Mapping[str, Any]], float | Awaitable[float]]
OnInvalidate = Callable[[Sequence[str]], Awaitable[None] | None]
EntryInput = MemoryEntry | Mapping[str, Any]


def _utcnow() -> datetime:
    return datetime.now(UTC)


T = TypeVar("T")

PENDING_WAIT_SECONDS = 5.0
"""How long ``recall(include_pending=True)`` waits for this memory's own pending writes."""
PENDING_WAIT_CEILING = 60.0
"""The longest wait ``include_pending`` may ask for."""


def _pending_wait(include_pending: bool | float) -> float:
    if include_pending is True:
        return PENDING_WAIT_SECONDS
    if include_pending is False:
        return 0.0
    if not isinstance(include_pending, int | float) or not math.isfinite(include_pending):
        raise ValidationError("include_pending must be a bool or a number of seconds")
    if include_pending < 0:
        raise ValidationError("include_pending must not be negative")
    if include_pending > PENDING_WAIT_CEILING:
        raise CapExceededError(
            f"include_pending={include_pending} s is over the cap {PENDING_WAIT_CEILING} s"
        )
    return float(include_pending)


async def _maybe_await(value: T | Awaitable[T]) -> T:
    if inspect.isawaitable(value):
        return await value
    return value


P = ParamSpec("P")


def _scrubbing_errors(
    method: Callable[Concatenate[Memory, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Memory, P], Coroutine[Any, Any, T]]:
    """A public call whose :class:`PrismMemoryError` messages pass through the memory's scrubber
    (its ``secrets`` and ``redactor``), like the text it stores: whatever a message names, no
    configured secret leaves in it."""

    @functools.wraps(method)
    async def scrubbing(self: Memory, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(self, *args, **kwargs)
        except PrismMemoryError as exc:
            self._scrub_error(exc)
            raise

    return scrubbing


class WorkingMemoryProcessor:
    """Explicit, host-invoked working-memory updater. It never runs by itself.

    ``extract(current_data, *args, **kwargs)`` returns the new document (or ``None`` for "no change");
    :meth:`process` writes it with optimistic concurrency against the version it read.
    """

    def __init__(self, memory: Memory, extract: Callable[..., Any]) -> None:
        if not callable(extract):
            raise ConfigurationError("extract must be callable")
        self._memory = memory
        self._extract = extract

    async def process(self, *args: Any, **kwargs: Any) -> WorkingMemoryRecord | None:
        """Run ``extract`` over the current document and write its result, if any."""
        current = await self._memory.get_working()
        data = dict(current.data) if current is not None else {}
        proposed = await _maybe_await(self._extract(data, *args, **kwargs))
        if proposed is None:
            return current
        return await self._memory.update_working(
            proposed, expected_version=current.version if current is not None else 0
        )


class Memory:
    """Working and semantic memory of one scope. Create it with :func:`create_memory`.

    Use it as an async context manager (or call :meth:`aclose`): leaving drains the indexing queue,
    and on a durable store anything not yet embedded stays pending for the next start.
    """

    def __init__(
        self,
        *,
        tenant_id: str,
        resource_id: str,
        thread_id: str | None,
        embedder: Embedder,
        vector_store: VectorStore,
        working_store: WorkingStore,
        validator: Callable[[Any], dict[str, Any]],
        template: str | None,
        limits: Limits,
        scrubber: Scrubber,
        require_consent: bool,
        importance_from: ImportanceFrom | None,
        on_invalidate: OnInvalidate | None,
        retention: timedelta | None,
        working_scope: Literal["resource", "thread"],
        indexing: IndexingPolicy,
        clock: Callable[[], datetime],
    ) -> None:
        self.tenant_id = tenant_id
        self.resource_id = resource_id
        self.thread_id = thread_id
        self.embedder = embedder
        self.embedding_model = embedder_model(embedder)
        """The embedder's ``model`` identifier, recorded with every vector this memory stores."""
        self.vector_store = vector_store
        self.working_store = working_store
        self.limits = limits
        self._validate = validator
        self._template = template
        self._scrub = scrubber
        self._require_consent = require_consent
        self._importance_from = importance_from
        self._on_invalidate = on_invalidate
        self._retention = retention
        self._working_thread = thread_id if working_scope == "thread" else None
        self._indexing = indexing
        self._clock = clock
        self._queue: QueueMember | None = None
        self._inflight: dict[asyncio.Future[IndexingReport], int] = {}
        """This memory's ``done`` futures not yet resolved, each with how many rows it waits for."""
        self._pollers: set[asyncio.Task[None]] = set()
        """Worker-only mode: the tasks asking the store whether the worker embedded a write."""
        self._closed = False
        self._model_checked = False
        """Whether this memory's thread was seen to hold no other model's vectors (see
        :meth:`_check_write_model`); a memory checks once, not on every write."""
        self._identity = (
            None
            if thread_id is None
            else MemoryIdentity(tenant_id=tenant_id, resource_id=resource_id, thread_id=thread_id)
        )

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def identity(self) -> MemoryIdentity:
        """The exact scope of semantic memory; :class:`ConfigurationError` without a thread."""
        if self._identity is None:
            raise ConfigurationError("semantic memory needs a thread_id")
        return self._identity

    async def __aenter__(self) -> Memory:
        if self.thread_id is not None and self._indexing.in_process:
            await self._ensure_queue()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> int:
        """Wait for this memory's own writes to be embedded, then leave the indexing queue; return
        how many of its rows it left pending. Stores stay open: the host owns them.

        The wait is bounded by the indexing policy's ``drain_seconds``: past it, the rows not yet
        embedded stay pending in the store (for the next memory on the thread, or ``prism-memory
        worker``), a warning says how many, and their ``done`` fails with
        :class:`~prism_memory.errors.IndexingError`. In worker-only mode
        (``IndexingPolicy(in_process=False)``) it returns at once, leaving them to the worker.
        """
        self._closed = True
        waiting = [future for future in self._inflight if not future.done()]
        if waiting and self._queue is not None:
            await asyncio.wait(waiting, timeout=self._indexing.drain_seconds)
        left = sum(count for future, count in self._inflight.items() if not future.done())
        if self._queue is not None:
            queue, self._queue = self._queue, None
            # the own writes are in; past the bound, the rest is left pending at once
            await queue.aclose(drain=left == 0)
        for poller in self._pollers:
            poller.cancel()
        if self._pollers:
            await asyncio.wait(self._pollers)
        if left and self._indexing.in_process:
            logger.warning(
                "memory closed with %d of its entries not yet embedded after %.0f s; they stay "
                "pending for the next start on the thread, or prism-memory worker",
                left,
                self._indexing.drain_seconds,
            )
        return left

    def _settled(self, future: asyncio.Future[IndexingReport]) -> None:
        self._inflight.pop(future, None)

    def _watch_worker(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> asyncio.Future[IndexingReport]:
        """Worker-only mode's ``done``: resolves once the worker indexed (or failed) every one of
        ``ids``; fails with :class:`IndexingError` if this memory closes first."""
        future: asyncio.Future[IndexingReport] = asyncio.get_running_loop().create_future()
        if not ids:
            future.set_result(IndexingReport(indexed=()))
            return future

        async def poll() -> None:
            try:
                report = await wait_for_worker(self.vector_store, scope, ids, self._indexing)
            except asyncio.CancelledError:
                if not future.done():
                    future.set_exception(
                        IndexingError(
                            "memory closed before the worker indexed these entries; they remain "
                            "pending for it",
                            dict.fromkeys(ids, "pending at close"),
                        )
                    )
                    future.exception()  # retrieved here, so asyncio does not log it as lost
                raise
            except BaseException as exc:
                if not future.done():
                    future.set_exception(exc)
                raise
            if not future.done():
                future.set_result(report)

        task = asyncio.create_task(poll(), name=f"prism-worker-watch-{scope.thread_id}")
        self._pollers.add(task)
        task.add_done_callback(self._pollers.discard)
        return future

    async def _ensure_queue(self) -> QueueMember:
        if self._closed:
            raise ConfigurationError("this memory is closed")
        if self._queue is None:  # one queue per store and embedder, shared by its open memories
            self._queue = join_queue(
                store=self.vector_store,
                embedder=self.embedder,
                scope=self.identity,
                batch_size=self.limits.embed_batch,
                clock=self._clock,
                policy=self._indexing,
            )
        await self._queue.start()
        return self._queue

    async def resume_indexing(self) -> int:
        """Embed whatever this thread left pending (for example after a crash); return how many.

        In worker-only mode it raises :class:`ConfigurationError`: the worker embeds them.
        """
        if not self._indexing.in_process:
            raise ConfigurationError(
                "a worker-only memory does not embed: prism-memory worker does"
            )
        queue = await self._ensure_queue()
        return await queue.run_until_idle()

    # ---- working memory ----------------------------------------------------------------------

    async def get_working(self) -> WorkingMemoryRecord | None:
        """The current working-memory document, or ``None`` before the first write."""
        return await self.working_store.get_working(
            self.tenant_id, self.resource_id, self._working_thread
        )

    @_scrubbing_errors
    async def update_working(
        self, data: Mapping[str, Any] | pydantic.BaseModel, *, expected_version: int | None = None
    ) -> WorkingMemoryRecord:
        """Validate and write a new working-memory document (version + 1).

        ``expected_version`` (0 for "none yet") makes the write conditional: a stale version raises
        :class:`~prism_memory.errors.ConflictError`.
        """
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
        check_json(data, "working memory")
        document = self._validate(self._scrub.value(data) if self._scrub.active else data)
        check_size(document, self.limits.working_memory_bytes)
        return await self.working_store.put_working(
            self.tenant_id,
            self.resource_id,
            self._working_thread,
            document,
            expected_version=expected_version,
            now=self._clock(),
        )

    def working_memory_processor(self, extract: Callable[..., Any]) -> WorkingMemoryProcessor:
        """An explicit updater the host invokes; see :class:`WorkingMemoryProcessor`."""
        return WorkingMemoryProcessor(self, extract)

    # ---- remember ----------------------------------------------------------------------------

    @_scrubbing_errors
    async def remember(
        self, entries: EntryInput | Sequence[EntryInput], *, wait: bool = False
    ) -> RememberResult:
        """Store entries durably, then embed them in the background.

        Returns once the rows are stored. ``pending`` lists the ids awaiting their vector (an entry is
        not recallable until it has one); ``await result.done`` for the :class:`IndexingReport`.
        With ``wait=True`` the entries are embedded first and stored already indexed, with their
        vectors, in one write (recallable as soon as this returns). If the embedder fails they are
        stored pending instead and the indexing queue retries them as in the background case; this
        then returns once they are indexed, and raises :class:`~prism_memory.errors.IndexingError`
        if any failed (the rows stay stored).
        """
        scope = self.identity
        items = self._entry_list(entries)
        now = self._clock()
        prepared: dict[str, NewEntry] = {}
        hooked = self._importance_from is not None
        for position, item in enumerate(items):
            entry = self._prepare(item, now, position)
            if hooked and item.importance is None and item.reflection is not None:
                entry = replace(entry, importance=await self._importance(item))
            previous = prepared.get(entry.id)
            if previous is not None and previous != entry:
                raise ValidationError(
                    f"entries[{position}] repeats an earlier entry's id with different content"
                )
            prepared[entry.id] = entry
        await self._check_write_model(scope)
        # worker-only mode: stored pending, embedded by `prism-memory worker` alone
        queue = await self._ensure_queue() if self._indexing.in_process else None
        new = list(prepared.values())
        records = await self._put_indexed(scope, new, now) if wait and queue is not None else None
        # the rows just written with their vectors (an existing id is never rewritten)
        indexed = tuple(
            r.id
            for r in records or ()
            if r.status == "indexed" and r.created_at == now and r.revision == 1
        )
        lease = None
        if records is None:
            # new rows are stored already leased to this memory's worker: it embeds them at once,
            # without a claim round trip, and no other worker takes them meanwhile
            lease = queue.lease(prepared) if queue is not None else None
            records = await self.vector_store.put_entries(scope, new, now=now, lease=lease)
        failed = [record.id for record in records if record.status == "failed"]
        if failed:  # remembering again is how a host retries a failed entry
            await self.vector_store.requeue_failed(scope, failed)
        pending = tuple(r.id for r in records if r.status == "pending" or r.id in failed)
        done = queue.watch(pending) if queue is not None else self._watch_worker(scope, pending)
        if queue is not None and lease is not None:
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
                if lease.covers(r.id)
                and r.status == "pending"
                and r.created_at == now
                and r.revision == 1
            )
        if not done.done():
            self._inflight[done] = len(pending)
            done.add_done_callback(self._settled)
        result = RememberResult(accepted=tuple(prepared), pending=pending, done=done)
        if wait:
            report = await done
            if report.failed:
                raise IndexingError(
                    f"{len(report.failed)} entries failed to index", dict(report.failed)
                )
            if indexed:
                report = replace(report, indexed=tuple(sorted({*report.indexed, *indexed})))
                settled: asyncio.Future[IndexingReport] = asyncio.get_running_loop().create_future()
                settled.set_result(report)
                done = settled
            result = replace(result, pending=(), done=done)  # everything it waited for is indexed
        return result

    async def _put_indexed(
        self, scope: MemoryIdentity, entries: Sequence[NewEntry], now: datetime
    ) -> list[MemoryRecord] | None:
        """Embed ``entries`` now and store the new ones indexed with their vectors (one write per
        row); ``None`` -- nothing stored -- if the embedder or its vectors fail, so the caller
        stores them pending and the queue retries, records and reports the failure as usual."""
        try:
            vectors = await embed_batched(
                self.embedder,
                [entry.text for entry in entries],
                batch_size=self.limits.embed_batch,
                dimensions=self.embedder.dimensions,
            )
        except Exception as exc:  # noqa: BLE001 - the queue retries it and records the failure
            logger.debug("embedding before the write failed; storing pending: %s", exc)
            return None
        try:
            return await self.vector_store.put_entries(
                scope, entries, now=now, vectors=vectors, model=self.embedding_model
            )
        except (InvalidVectorError, DimensionMismatchError) as exc:  # checked before any write
            logger.debug("the store refused the vectors; storing pending: %s", exc)
            return None

    def _entry_list(self, entries: EntryInput | Sequence[EntryInput]) -> list[MemoryEntry]:
        if isinstance(entries, MemoryEntry | Mapping):
            raw: list[EntryInput] = [entries]
        elif isinstance(entries, Sequence) and not isinstance(entries, str | bytes):
            raw = list(entries)
        else:
            raise ValidationError("entries must be an entry, a mapping, or a sequence of them")
        if not raw:
            raise ValidationError("remember() needs at least one entry")
        if len(raw) > self.limits.remember_batch:
            raise CapExceededError(
                f"{len(raw)} entries in one call, over the cap {self.limits.remember_batch}"
            )
        return [parse(MemoryEntry, item, "memory entry") for item in raw]

    def _prepare(self, entry: MemoryEntry, now: datetime, position: int) -> NewEntry:
        """``entry`` redacted, checked against the caps and given its id (:func:`prepare_entry`);
        :meth:`_importance` asks the host's hook, when there is one, for an entry with a
        reflection and no importance."""
        return prepare_entry(
            entry, now, scrubber=self._scrub, limits=self.limits, label=f"entries[{position}]"
        )

    async def _importance(self, entry: MemoryEntry) -> float:
        if entry.importance is not None:
            return min(1.0, max(0.0, entry.importance))
        if entry.reflection is None or self._importance_from is None:
            return 1.0
        reflection = self._scrub.value(entry.reflection)  # the hook only ever sees redacted data
        value = await _maybe_await(self._importance_from(reflection))
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValidationError(f"importance_from returned {value!r}, not a finite number")
        return min(1.0, max(0.0, float(value)))

    # ---- recall ------------------------------------------------------------------------------

    @_scrubbing_errors
    async def recall(
        self,
        query: str,
        *,
        top_k: int | None = None,
        message_range: int | None = None,
        require_consent: bool | None = None,
        scoring: RecallScoring | Mapping[str, Any] | None = None,
        explain: bool = False,
        share_from_parent_thread_id: str | None = None,
        include_pending: bool | float = False,
        scope: Literal["thread", "resource"] = "thread",
    ) -> RecallResult:
        """Recall the entries most similar to ``query`` (similarity + lexical; see :mod:`prism_memory.ranking`).

        The single consent gate: invisible, revoked, non-consented (when required), invalidated,
        expired, held and not-yet-embedded entries never come back. ``message_range`` adds up to that
        many neighbours by sequence on each side of each hit, under the same rules.

        Read-after-write: an entry is recallable only once embedded, so a ``recall`` right after
        ``remember()`` may miss it; ``RecallResult.pending`` says how many of the thread's entries
        were still waiting. ``include_pending=True`` first waits (up to 5 s; a number gives the
        bound in seconds, at most 60) for the entries *this memory* remembered to be indexed or
        failed; on timeout recall goes ahead and ``pending`` reports what is left.

        ``scope="resource"`` also recalls, from every other thread of this tenant and resource,
        the entries whose consent scope is ``"user"`` or ``"profile"`` (memory that follows a user
        across conversations); ``"thread"`` entries never leave their thread. Every exclusion rule
        applies to them unchanged, and such hits come back with ``shared=True`` (they stay owned,
        forgotten and exported by their own thread). ``pending`` still counts this thread only.
        """
        if scope not in ("thread", "resource"):
            raise ValidationError("scope must be 'thread' or 'resource'")
        resource_wide = scope == "resource"
        identity = self.identity
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("query must be a non-empty string")
        check_text(query, "query")
        if len(query.encode()) > self.limits.payload_bytes:
            raise CapExceededError("query is over the payload cap")
        terms = query_terms(query)
        if len(terms) > self.limits.query_terms:
            raise CapExceededError(
                f"query has {len(terms)} distinct terms, over the cap {self.limits.query_terms}"
            )
        k = self.limits.resolve("top_k", top_k)
        window = self.limits.resolve("message_range", message_range or 0, minimum=0)
        rules = None if scoring is None else parse(RecallScoring, scoring, "recall scoring")
        consent = self._require_consent if require_consent is None else bool(require_consent)
        shared_thread = None
        if share_from_parent_thread_id is not None:
            shared_thread = check_key(share_from_parent_thread_id, "share_from_parent_thread_id")
            if shared_thread == identity.thread_id:
                raise ValidationError("a thread cannot share from itself")
        wait = _pending_wait(include_pending)
        if wait and self._inflight:
            await asyncio.wait(list(self._inflight), timeout=wait)
        vector = await self._embed_one(query, "query embedding")
        now = self._clock()
        recall_filter = self._filter(now, require_consent=consent)
        shared = await self._shared_source(identity, shared_thread, now)
        found = await self.vector_store.search(
            identity,
            SearchRequest(
                vector=vector,
                terms=terms,
                limit=k * 4,
                filter=recall_filter,
                shared=shared,
                resource_wide=resource_wide,
            ),
        )
        self._check_models(found.candidates)
        hits = rerank(
            found.candidates,
            query_vector=vector,
            query_text=query,
            top_k=k,
            now=now,
            stats=found.stats,
            scoring=rules,
            shared_thread_id=shared_thread if shared else None,
        )
        if resource_wide:  # hits owned by another thread are marked, like granted ones
            hits = [
                replace(hit, shared=True) if hit.record.thread_id != identity.thread_id else hit
                for hit in hits
            ]
        if self._scrub.active:
            hits = [replace(hit, record=self._scrubbed(hit.record)) for hit in hits]
        adjacent: tuple[MemoryRecord, ...] = ()
        own = [hit.record for hit in hits if not hit.shared]
        if window and own:
            hit_ids = {record.id for record in own}
            ranges = [(r.sequence - window, r.sequence + window) for r in own]
            neighbours = await self.vector_store.neighbors(identity, ranges, recall_filter)
            adjacent = tuple(
                self._scrubbed(r) for r in chronological(neighbours) if r.id not in hit_ids
            )
        pending = found.pending  # counted by the search itself when the store can (one round trip)
        if pending is None:
            pending = await self.vector_store.count_pending(identity)
        return RecallResult(
            hits=tuple(hits),
            adjacent=adjacent,
            explanations=explain_hits(hits, rules) if explain else None,
            pending=pending,
        )

    def _check_models(self, candidates: Sequence[Candidate]) -> None:
        """Refuse to rank vectors another (known) embedding model made, or vectors of two models
        together (whatever this memory's own model is)."""
        known = {c.embedding_model for c in candidates if c.embedding_model is not None}
        if self.embedding_model is not None:
            foreign = sorted(known - {self.embedding_model})
        else:
            foreign = sorted(known) if len(known) > 1 else []
        if foreign:
            raise EmbeddingModelMismatchError(
                f"stored vectors were made by {foreign}, this memory embeds with "
                f"{self.embedding_model!r}; use that model, or re-embed the thread with "
                "rebuild_index(switch_model=True) (docs/operations.md, 'Switching models')"
            )

    async def _check_write_model(
        self, scope: MemoryIdentity, *, switch_model: bool = False
    ) -> None:
        """Refuse to add vectors of this memory's model to a thread whose rows hold another
        model's (rows without a recorded model do not count); ``switch_model`` allows it."""
        if self.embedding_model is None or switch_model or self._model_checked:
            return
        held = await self.vector_store.embedding_models(scope)
        foreign = sorted(held - {self.embedding_model})
        if foreign:
            raise EmbeddingModelMismatchError(
                f"the thread's vectors were made by {foreign}, this memory embeds with "
                f"{self.embedding_model!r}: nothing was written. Use that model, or re-embed the "
                "thread with rebuild_index(switch_model=True) (docs/operations.md, "
                "'Switching models')"
            )
        self._model_checked = True

    def _filter(self, now: datetime, *, require_consent: bool) -> RecallFilter:
        cutoff = None if self._retention is None else now - self._retention
        return RecallFilter(now=now, require_consent=require_consent, occurred_after=cutoff)

    async def _shared_source(
        self, scope: MemoryIdentity, parent: str | None, now: datetime
    ) -> SharedSource | None:
        if parent is None:
            return None
        grant = await self.vector_store.get_share_grant(
            scope.tenant_id, scope.resource_id, parent, scope.thread_id
        )
        if grant is None or not grant.source_ids:
            return None  # fail closed: no grant, no parent entries
        if grant.expires_at is not None and grant.expires_at <= now:
            return None
        return SharedSource(thread_id=parent, ids=grant.source_ids)

    def _scrub_error(self, exc: PrismMemoryError) -> None:
        """Scrub ``exc``'s message in place (its type and attributes stay)."""
        if self._scrub.active and exc.args and isinstance(exc.args[0], str):
            exc.args = (self._scrub.text(exc.args[0]), *exc.args[1:])

    def _scrubbed(self, record: MemoryRecord) -> MemoryRecord:
        if not self._scrub.active:
            return record
        lineage = record.lineage
        if lineage is not None and lineage.reason is not None:
            lineage = lineage.model_copy(update={"reason": self._scrub.text(lineage.reason)})
        return replace(
            record,
            text=self._scrub.text(record.text),
            role=self._scrub.text(record.role),
            metadata=self._scrub.value(record.metadata),
            lineage=lineage,
        )

    async def _embed_one(self, text: str, label: str) -> Vector:
        vectors = await embed_batched(self.embedder, [text], batch_size=1)
        if vectors.shape[0] != 1:
            raise ValidationError(f"{label}: embedder returned no vector")
        return cast("Vector", vectors[0])

    def context_provider(
        self,
        *,
        working: bool = True,
        semantic: bool = True,
        top_k: int | None = None,
        max_tokens: int | None = None,
        token_counter: TokenCounter | None = None,
        include_pending: bool | float = False,
        scope: Literal["thread", "resource"] = "thread",
    ) -> ContextProvider:
        """A provider of inert system blocks: working memory and/or recalled memories.

        Recalled memories are chosen best-first within ``max_tokens`` (default 2000, cap 8000) and
        presented chronologically, so the block stays byte-identical unless the chosen set changes.
        ``include_pending`` is passed to every :meth:`recall` (read-after-write), and so is
        ``scope`` (``"resource"``: the user's ``user``/``profile`` entries from their other threads
        too, in the same single chronological block).
        """
        if scope not in ("thread", "resource"):
            raise ValidationError("scope must be 'thread' or 'resource'")
        k = self.limits.resolve("top_k", top_k)
        budget = self.limits.resolve("injected_tokens", max_tokens)
        _pending_wait(include_pending)  # validated now, not at the first provide()

        async def recall(query: str, limit: int) -> RecallResult:
            return await self.recall(
                query, top_k=limit, include_pending=include_pending, scope=scope
            )

        return ContextProvider(
            recall=recall if semantic else None,
            get_working=self.get_working if working else None,
            template=self._template,
            scrub=self._scrub.value,
            top_k=k,
            max_tokens=budget,
            token_counter=token_counter or approximate_tokens,
        )

    # ---- consent, correction, lineage --------------------------------------------------------

    async def _get(self, scope: MemoryIdentity, entry_id: str) -> MemoryRecord:
        found = await self.vector_store.get_entries(scope, [check_key(entry_id, "entry id")])
        if not found:
            raise NotFoundError("no such entry in this thread")
        return found[0]

    @_scrubbing_errors
    async def get(self, entry_id: str) -> MemoryRecord:
        """One stored entry of this thread, whatever its state; :class:`NotFoundError` if absent."""
        return await self._get(self.identity, entry_id)

    @_scrubbing_errors
    async def index_status(self, ids: Sequence[str]) -> dict[str, IndexStatus]:
        """``id -> pending | indexed | failed`` for the ids that exist in this thread.

        ``ids`` is a list, tuple or set (a bare string is refused), at most
        ``Limits.ids_per_call`` (65,536) of them, else :class:`CapExceededError`.
        """
        wanted = check_ids(ids, "ids", cap=self.limits.ids_per_call)
        status = await self.vector_store.index_status(self.identity, wanted)
        return {entry_id: state for entry_id, (state, _) in status.items()}

    @_scrubbing_errors
    async def set_consent(
        self,
        entry_id: str,
        *,
        visible: bool | None = None,
        source: str | None = None,
        scope: str | None = None,
    ) -> MemoryRecord:
        """Grant or revoke an entry's consent, or change its provenance; never re-embeds.

        ``visible=False`` revokes: tombstones for the entry and everything derived from it land in
        the same transaction as the consent, so dependents drop out of recall at once.
        ``visible=True`` grants again and removes only the ``revoked`` tombstones this entry caused
        (a correction's or a hold's stay). ``on_invalidate`` runs after the change is committed.
        """
        if visible is None and source is None and scope is None:
            raise ValidationError("set_consent needs visible, source or scope")
        memory_scope = self.identity
        record = await self._get(memory_scope, entry_id)
        now = self._clock()
        update = ConsentUpdate(
            entry_id=record.id,
            revoke_walk=self._walk([record.id], "revoked"),
            visible=visible,
            source=source,
            scope=scope,
        )
        update.applied_to(record.effective_consent, now)  # a bad source or scope: nothing sent
        # the store decides revoke-or-grant against the consent it reads under the thread's lock
        change = GovernanceChange(consent_update=update)
        result = await self.vector_store.apply_governance(memory_scope, change, now=now)
        if result.walked:
            await self._notify([record.id, *result.dependents])
        assert result.record is not None
        return self._scrubbed(result.record)

    @_scrubbing_errors
    async def correct(self, entry_id: str, text: str) -> MemoryRecord:
        """Replace an entry's text and re-embed it, keeping its consent.

        Entries derived from it (its lineage dependents, transitively) written before the correction
        are invalidated in the same transaction as the new text; the corrected entry itself stays
        recallable. A rejected text or vector changes nothing and tells ``on_invalidate`` nothing.
        """
        scope = self.identity
        record = await self._get(scope, entry_id)
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("corrected text must be a non-empty string")
        check_text(text, "corrected text")
        clean = self._scrub.text(text)
        payload = len(clean.encode()) + len(canonical_json(dict(record.metadata)).encode())
        if payload > self.limits.payload_bytes:
            raise CapExceededError(f"entry payload is {payload} bytes, over the cap")
        await self._check_write_model(scope)
        vector = await self._embed_one(clean, "corrected embedding")  # fails before any write
        now = self._clock()
        change = GovernanceChange(
            walk=self._walk([record.id], "corrected"),
            text=(record.id, clean, vector),
            text_model=self.embedding_model,
        )
        result = await self.vector_store.apply_governance(scope, change, now=now)
        await self._notify(result.dependents)
        assert result.record is not None
        return self._scrubbed(result.record)

    def _walk(
        self, roots: Sequence[str], reason: TombstoneReason, *, delete: bool = False
    ) -> LineageWalk:
        """The lineage walk the store runs inside the governance call (this memory's caps)."""
        return LineageWalk(
            roots=tuple(roots),
            reason=reason,
            max_depth=self.limits.lineage_depth,
            max_entries=self.limits.lineage_edges,
            delete_dependents=delete,
        )

    async def _notify(self, affected: Sequence[str]) -> None:
        """Tell ``on_invalidate`` about a committed change; its failure cannot undo the change.

        The hook's exception is logged and re-raised: the caller learns of it, and the data change
        (already committed) stands.
        """
        if self._on_invalidate is None or not affected:
            return
        try:
            await _maybe_await(self._on_invalidate(list(affected)))
        except Exception:
            logger.exception("on_invalidate failed after the change was committed")
            raise

    # ---- deletion ----------------------------------------------------------------------------

    @_scrubbing_errors
    async def forget(self, *, ids: Sequence[str] | None = None, hold: bool = False) -> int:
        """Really delete entries and everything derived from them; return how many rows went.

        Tombstones land in the same transaction as the delete. ``ids=None`` means the whole thread
        (entries under legal hold stay); it deletes everything it can and then raises
        :class:`~prism_memory.errors.LineageCapError` naming the entries whose lineage is over the
        caps. Named ``ids`` over the caps raise :class:`CapExceededError` before anything changes.
        ``hold=True`` instead puts the entries under legal hold: bodies are kept, they and their
        dependents are excluded from recall, injection and export, and 0 is returned. A later
        ``forget(ids=[...])`` naming a held entry deletes it (that is how a hold is lifted).
        Named ``ids`` are a list, tuple or set (a bare string is refused), at most
        ``Limits.ids_per_call`` (65,536) of them, else :class:`CapExceededError`.
        """
        scope = self.identity
        if ids is None:
            targets = await self._all_ids(scope, include_held=hold)
        else:
            wanted = check_ids(ids, "ids", cap=self.limits.ids_per_call)
            targets = [r.id for r in await self.vector_store.get_entries(scope, wanted)]
        if not targets:
            return 0
        now = self._clock()
        if hold:
            change = GovernanceChange(walk=self._walk(targets, "held"), hold=tuple(targets))
            result = await self.vector_store.apply_governance(scope, change, now=now)
            await self._notify([*targets, *result.dependents])
            return 0
        if ids is not None and len(targets) > self.limits.delete_batch:
            # named ids over several batches: all-or-nothing, so check every lineage cap first
            # (one batch is checked by the store itself, before it changes anything)
            walk = self._walk(targets, "forgotten")
            await walk_lineage(
                lambda batch, limit: self.vector_store.dependents(scope, batch, limit=limit),
                targets,
                max_depth=walk.max_depth,
                max_entries=walk.max_entries,
            )
        deleted, blocked = await self._delete(scope, targets, "forgotten", now)
        _raise_blocked(deleted, blocked)
        return deleted

    async def _all_ids(self, scope: MemoryIdentity, *, include_held: bool) -> list[str]:
        ids: list[str] = []
        after: tuple[int, str] | None = None
        while True:
            page = await self.vector_store.list_by_thread(scope, after=after, limit=256)
            ids.extend(r.id for r in page if include_held or not r.legal_hold)
            if len(page) < 256:
                return ids
            after = (page[-1].sequence, page[-1].id)

    async def _delete(
        self, scope: MemoryIdentity, roots: Sequence[str], reason: TombstoneReason, now: datetime
    ) -> tuple[int, list[str]]:
        """Delete ``roots`` and their dependents, one transaction per batch of roots.

        A batch whose lineage is over the caps is retried root by root; roots still over the caps
        are left in place and returned as blocked, so one wide source never stops a sweep.
        """
        deleted = 0
        blocked: list[str] = []
        hook_error: Exception | None = None
        step = self.limits.delete_batch
        batches = [list(roots[i : i + step]) for i in range(0, len(roots), step)]
        while batches:
            batch = batches.pop(0)
            # a derived entry under legal hold stays, excluded by its own tombstone
            change = GovernanceChange(
                walk=self._walk(batch, reason, delete=True), delete=tuple(batch)
            )
            try:
                result = await self.vector_store.apply_governance(scope, change, now=now)
            except CapExceededError:
                if len(batch) == 1:
                    blocked.extend(batch)
                else:
                    batches[:0] = [[root] for root in batch]
                continue
            deleted += result.deleted
            try:
                await self._notify([*batch, *result.dependents])
            except Exception as exc:  # noqa: BLE001 - the sweep goes on; re-raised below
                hook_error = hook_error or exc
        if hook_error is not None:
            raise hook_error
        return deleted, blocked

    @_scrubbing_errors
    async def forget_before(self, occurred_before: datetime) -> int:
        """Delete entries that *occurred* before ``occurred_before`` (not when they were written).

        Entries under legal hold stay; dependents of deleted entries go too. Returns the count. An
        entry whose lineage is over the caps stays; after deleting everything else the call raises
        :class:`~prism_memory.errors.LineageCapError` naming those entries.
        """
        if not isinstance(occurred_before, datetime) or occurred_before.utcoffset() is None:
            raise ValidationError("occurred_before must be a timezone-aware datetime")
        scope = self.identity
        total = 0
        blocked: list[str] = []
        while True:
            page = await self.vector_store.list_oldest(
                scope,
                limit=self.limits.delete_batch * 4 + len(blocked),
                occurred_before=occurred_before,
                include_held=False,
            )
            due = [r.id for r in page if r.id not in blocked]
            if not due:
                _raise_blocked(total, blocked)
                return total
            deleted, stuck = await self._delete(scope, due, "forgotten", self._clock())
            total += deleted
            blocked.extend(stuck)

    @_scrubbing_errors
    async def apply_retention(
        self,
        *,
        max_age_days: float | None = None,
        max_entries: int | None = None,
        batch_size: int | None = None,
    ) -> RetentionResult:
        """One bounded real-delete sweep over the thread's oldest entries; skips legal hold.

        Deletes what occurred more than ``max_age_days`` ago (default: the memory's
        ``retention_days``) and, with ``max_entries``, the oldest entries beyond that count.
        Entries whose lineage is over the caps stay and are listed in ``blocked``.
        """
        days = max_age_days if max_age_days is not None else self._retention_days()
        if days is not None and (
            isinstance(days, bool)
            or not isinstance(days, int | float)
            or not days > 0
            or not math.isfinite(days)
        ):
            raise ValidationError("max_age_days must be a positive number")
        if days is not None and days > MAX_RETENTION_DAYS:
            raise CapExceededError(f"max_age_days is over the ceiling {MAX_RETENTION_DAYS}")
        if max_entries is not None and (
            isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0
        ):
            raise ValidationError("max_entries must be a non-negative integer")
        if days is None and max_entries is None:
            raise ValidationError(
                "no retention rule: pass max_age_days/max_entries or set retention_days"
            )
        batch = self.limits.resolve("retention_batch", batch_size)
        scope = self.identity
        now = self._clock()
        scanned = await self.vector_store.list_oldest(scope, limit=batch)
        deletable = [r for r in scanned if not r.legal_hold]
        doomed: list[str] = []
        if days is not None:
            cutoff = now - timedelta(days=days)
            doomed = [r.id for r in deletable if r.occurred_at < cutoff]
        if max_entries is not None:
            overflow = await self.vector_store.count_by_thread(scope) - max_entries
            for record in deletable:
                if len(doomed) >= overflow:
                    break
                if record.id not in doomed:
                    doomed.append(record.id)
        deleted, blocked = await self._delete(scope, doomed, "retention", now)
        return RetentionResult(deleted=deleted, scanned=len(scanned), blocked=tuple(blocked))

    def _retention_days(self) -> float | None:
        return None if self._retention is None else self._retention / timedelta(days=1)

    # ---- sharing -----------------------------------------------------------------------------

    @_scrubbing_errors
    async def share_with(
        self,
        child_thread_id: str,
        source_ids: Sequence[str],
        *,
        expires_at: datetime | None = None,
    ) -> ShareGrant:
        """Let a child thread recall the named entries of this (parent) thread.

        The grant is tenant- and resource-bound, replaces any earlier one for that child, and is
        checked for expiry on every read. Empty ``source_ids`` revokes.
        """
        scope = self.identity
        child = check_key(child_thread_id, "child_thread_id")
        if child == scope.thread_id:
            raise ValidationError("a thread cannot share with itself")
        ids = check_ids(source_ids, "source_ids", cap=self.limits.share_ids)
        now = self._clock()
        if expires_at is not None:
            if not isinstance(expires_at, datetime) or expires_at.utcoffset() is None:
                raise ValidationError("expires_at must be a timezone-aware datetime")
            if expires_at <= now:
                raise ValidationError("expires_at must be in the future")
        grant = ShareGrant(
            tenant_id=scope.tenant_id,
            resource_id=scope.resource_id,
            parent_thread_id=scope.thread_id,
            child_thread_id=child,
            source_ids=ids,
            created_at=now,
            expires_at=expires_at,
        )
        if not ids:
            await self.revoke_share(child)
            return grant
        found = {r.id for r in await self.vector_store.get_entries(scope, list(ids))}
        missing = sorted(set(ids) - found)
        if missing:
            raise NotFoundError(f"cannot share {len(missing)} entries this thread does not hold")
        return await self.vector_store.put_share_grant(grant)

    @_scrubbing_errors
    async def revoke_share(self, child_thread_id: str) -> int:
        """Withdraw this thread's grant to a child; return 1 if there was one, else 0."""
        scope = self.identity
        child = check_key(child_thread_id, "child_thread_id")
        return await self.vector_store.delete_share_grant(
            scope.tenant_id, scope.resource_id, scope.thread_id, child
        )

    # ---- export and re-index -----------------------------------------------------------------

    @_scrubbing_errors
    async def export_memory(
        self,
        *,
        identity: MemoryIdentity | Mapping[str, Any],
        cursor: str | None = None,
        limit: int | None = None,
        max_bytes: int | None = None,
        max_seconds: int | None = None,
    ) -> ExportPage:
        """One page of this thread's exportable entries, redacted, in ``(sequence, id)`` order.

        ``identity`` must equal this memory's exact scope. Exported: entries with explicit consent
        that are visible, not revoked, not held, not invalidated, within retention, and indexed.
        """
        scope = self.identity
        claimed = parse(MemoryIdentity, identity, "identity")
        if claimed != scope:
            raise AccessDeniedError("export identity does not match this memory's scope")
        after = decode_cursor("export", cursor)
        page_size = self.limits.resolve("export_entries", limit)
        byte_cap = self.limits.resolve("export_bytes", max_bytes)
        deadline = time.monotonic() + self.limits.resolve("export_seconds", max_seconds)
        recall_filter = self._filter(self._clock(), require_consent=True)
        entries: list[dict[str, Any]] = []
        size = 0
        while True:
            page = await self.vector_store.list_by_thread(scope, after=after, limit=page_size)
            if not page:
                return _export_page(entries, size, None)
            allowed = {
                r.id
                for r in await self.vector_store.neighbors(
                    scope, [(page[0].sequence, page[-1].sequence)], recall_filter
                )
            }
            for index, record in enumerate(page):
                if record.id in allowed:
                    body = self._scrubbed(record).to_json()
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

    @_scrubbing_errors
    async def rebuild_index(
        self,
        *,
        cursor: str | None = None,
        batch_size: int | None = None,
        max_seconds: int | None = None,
        switch_model: bool = False,
    ) -> RebuildPage:
        """Re-embed one page of this thread's entries; store ``next_cursor`` to resume later.

        The thread's rows must hold this memory's embedding model (or none recorded): re-embedding
        with another model raises :class:`~prism_memory.errors.EmbeddingModelMismatchError` and
        writes nothing, unless ``switch_model=True`` -- the first step of a model switch, which
        re-embeds every page with the new model (pass it for every page; see docs/operations.md,
        "Switching models").
        """
        scope = self.identity
        after = decode_cursor("rebuild", cursor)
        if not switch_model:
            self._model_checked = False  # a rebuild asks the store again
        await self._check_write_model(scope, switch_model=switch_model)
        page_size = self.limits.resolve("rebuild_batch", batch_size)
        deadline = time.monotonic() + self.limits.resolve("rebuild_seconds", max_seconds)
        page = await self.vector_store.list_by_thread(scope, after=after, limit=page_size)
        rebuilt = 0
        step = self.limits.embed_batch
        for start in range(0, len(page), step):
            chunk = page[start : start + step]
            vectors = await embed_batched(self.embedder, [r.text for r in chunk], batch_size=step)
            rebuilt += await self.vector_store.store_vectors(
                scope,
                [(r.id, r.revision, v) for r, v in zip(chunk, vectors, strict=True)],
                now=self._clock(),
                model=self.embedding_model,
            )
            last = chunk[-1]
            if time.monotonic() > deadline and start + step < len(page):
                return RebuildPage(rebuilt, encode_cursor("rebuild", (last.sequence, last.id)))
        if len(page) < page_size:
            return RebuildPage(rebuilt=rebuilt, next_cursor=None)
        return RebuildPage(rebuilt, encode_cursor("rebuild", (page[-1].sequence, page[-1].id)))


def _raise_blocked(deleted: int, blocked: Sequence[str]) -> None:
    if blocked:
        raise LineageCapError(
            f"deleted {deleted} entries; {len(blocked)} were left because their lineage is over "
            "the caps (their ids are in .blocked)",
            deleted=deleted,
            blocked=tuple(blocked),
        )


def _export_page(
    entries: list[dict[str, Any]], size: int, position: tuple[int, str] | None
) -> ExportPage:
    cursor = None if position is None else encode_cursor("export", position)
    return ExportPage(entries=tuple(entries), bytes=size, next_cursor=cursor)


def create_memory(
    *,
    tenant_id: str,
    resource_id: str,
    thread_id: str | None = None,
    embedder: Embedder,
    vector_store: VectorStore | None = None,
    working_store: WorkingStore | None = None,
    schema: Mapping[str, Any] | type[pydantic.BaseModel] | None = None,
    validate_working_memory: Callable[[dict[str, Any]], Any] | None = None,
    working_memory_template: str | None = None,
    limits: Limits | Mapping[str, Any] | None = None,
    redactor: Redactor | None = None,
    secrets: Iterable[str] | None = None,
    require_consent: bool = False,
    importance_from: ImportanceFrom | None = None,
    on_invalidate: OnInvalidate | None = None,
    retention_days: float | None = None,
    working_scope: Literal["resource", "thread"] = "resource",
    indexing: IndexingPolicy | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Memory:
    """Create the memory of one scope. Stores default to fresh in-memory reference adapters.

    ``schema`` is a JSON-Schema subset dict or a pydantic model class; ``validate_working_memory`` is
    an extra host check. ``working_scope="thread"`` keeps one working document per thread instead of
    per resource. ``retention_days`` turns on a retention window enforced on every read.
    """
    tenant = check_key(tenant_id, "tenant_id")
    resource = check_key(resource_id, "resource_id")
    thread = None if thread_id is None else check_key(thread_id, "thread_id")
    width, _ = check_embedder(embedder)
    store = vector_store if vector_store is not None else InMemoryVectorStore()
    if not isinstance(store, VectorStore):
        raise ConfigurationError("vector_store must subclass prism_memory.stores.VectorStore")
    if store.dimension is not None and store.dimension != width:
        raise DimensionMismatchError(
            f"the vector store is pinned to width {store.dimension}, the embedder makes {width}"
        )
    working = working_store if working_store is not None else InMemoryWorkingStore()
    if not isinstance(working, WorkingStore):
        raise ConfigurationError("working_store must subclass prism_memory.stores.WorkingStore")
    if working_scope not in ("resource", "thread"):
        raise ConfigurationError("working_scope must be 'resource' or 'thread'")
    if working_scope == "thread" and thread is None:
        raise ConfigurationError("working_scope='thread' needs a thread_id")
    if retention_days is not None and (
        isinstance(retention_days, bool)
        or not isinstance(retention_days, int | float)
        or not math.isfinite(retention_days)
        or retention_days <= 0
    ):
        raise ValidationError("retention_days must be a positive number")
    if retention_days is not None and retention_days > MAX_RETENTION_DAYS:
        raise CapExceededError(f"retention_days is over the ceiling {MAX_RETENTION_DAYS}")
    if working_memory_template is not None and not isinstance(working_memory_template, str):
        raise ConfigurationError("working_memory_template must be a string")
    for name, hook in (("importance_from", importance_from), ("on_invalidate", on_invalidate)):
        if hook is not None and not callable(hook):
            raise ConfigurationError(f"{name} must be callable")
    return Memory(
        tenant_id=tenant,
        resource_id=resource,
        thread_id=thread,
        embedder=embedder,
        vector_store=store,
        working_store=working,
        validator=compile_validator(schema, validate_working_memory),
        template=working_memory_template,
        limits=parse(Limits, limits if limits is not None else {}, "limits"),
        scrubber=Scrubber(redactor, secrets),
        require_consent=bool(require_consent),
        importance_from=importance_from,
        on_invalidate=on_invalidate,
        retention=None if retention_days is None else timedelta(days=retention_days),
        working_scope=working_scope,
        indexing=indexing or IndexingPolicy(),
        clock=clock or _utcnow,
    )
