"""The :class:`Memory` facade: it checks a call's arguments and delegates -- no SQL, no numpy.

``create_memory(...)`` wires an embedder, a vector store and a working store (the in-memory reference
adapters by default) to one exact scope: tenant, resource and (for semantic memory) thread. The
work itself is done by the private services of :mod:`prism_memory._memory`, one per concern.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import pydantic

from . import _telemetry as otel
from ._clock import utcnow
from ._cursor import decode_cursor
from ._memory.core import (
    ImportanceFrom,
    MemoryContext,
    ModelGuard,
    OnInvalidate,
    check_aware,
)
from ._memory.export import ExportService, check_identity
from ._memory.governance import (
    MAX_RETENTION_DAYS,
    GovernanceService,
    check_days,
    check_retention_rule,
)
from ._memory.observed import public_call
from ._memory.recall import RecallQuery, RecallService, context_provider
from ._memory.remember import EntryInput, RememberService
from ._memory.session import IndexingSession
from ._memory.sharing import SharingService, check_grant
from ._memory.working_memory import WorkingService, check_update
from ._processor import WorkingMemoryProcessor
from .context import ContextProvider, TokenCounter
from .embedding import Embedder, check_embedder
from .entries import entry_digest
from .errors import ConfigurationError, DimensionMismatchError, ValidationError
from .indexing import IndexingPolicy, QueueMember
from .indexing.generations import NextModelWriter
from .limits import Limits
from .models import (
    ExportPage,
    IndexStatus,
    MemoryIdentity,
    MemoryRecord,
    RebuildPage,
    RecallResult,
    RecallScoring,
    RememberResult,
    RetentionResult,
    ShareGrant,
    WorkingMemoryRecord,
    check_ids,
    check_key,
    parse,
)
from .redaction import Redactor, Scrubber
from .reranking import Reranker, check_reranker
from .stores.backend import MemoryBackend, backend_of
from .stores.base import VectorStore, WorkingStore
from .stores.memory import InMemoryVectorStore, InMemoryWorkingStore
from .working import compile_validator

__all__ = [
    "MAX_RETENTION_DAYS",
    "Memory",
    "WorkingMemoryProcessor",
    "create_memory",
    "entry_digest",
]


class Memory:
    """Working and semantic memory of one scope. Create it with :func:`create_memory`.

    Use it as an async context manager (or call :meth:`aclose`): leaving drains the indexing queue,
    and on a durable store anything not yet embedded stays pending for the next start.
    """

    def __init__(self, ctx: MemoryContext, *, vector_store: VectorStore) -> None:
        self.tenant_id = ctx.tenant_id
        self.resource_id = ctx.resource_id
        self.thread_id = ctx.thread_id
        self.embedder = ctx.embedder
        self.embedding_model = ctx.embedding_model
        """The embedder's ``model`` identifier, recorded with every vector this memory stores."""
        self.next_embedder = ctx.next_embedder
        """The embedder of a model change in progress (see :func:`create_memory`), or ``None``."""
        self.backend = ctx.backend
        """The role objects this memory calls (:class:`~prism_memory.stores.MemoryBackend`)."""
        self.vector_store = vector_store
        """The vector store given to :func:`create_memory` (or one over ``backend``'s roles)."""
        self.working_store = ctx.backend.working
        self.limits = ctx.limits
        self._ctx = ctx
        self._session = session = IndexingSession(ctx)
        self._models = models = ModelGuard(ctx)
        self._working = WorkingService(ctx)
        self._remember = RememberService(ctx, session, models)
        self._recall = RecallService(ctx, session, models)
        self._governance = GovernanceService(ctx, models)
        self._sharing = SharingService(ctx)
        self._export = ExportService(ctx, models)

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def identity(self) -> MemoryIdentity:
        """The exact scope of semantic memory; :class:`ConfigurationError` without a thread."""
        return self._ctx.identity

    @property
    def _queue(self) -> QueueMember | None:
        """This memory's member of the indexing queue, once joined (tests look at it)."""
        return self._session.queue

    async def __aenter__(self) -> Memory:
        await self._models.check_width()
        await self._session.enter()
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
        return await self._session.aclose()

    @public_call("update_memory")
    async def resume_indexing(self) -> int:
        """Embed whatever this thread left pending (for example after a crash); return how many.

        In worker-only mode it raises :class:`ConfigurationError`: the worker embeds them.
        """
        return await self._session.resume()

    # ---- working memory ----------------------------------------------------------------------

    @public_call("get_memory")
    async def get_working(self) -> WorkingMemoryRecord | None:
        """The current working-memory document, or ``None`` before the first write."""
        return await self._working.get()

    @public_call("update_memory")
    async def update_working(
        self, data: Mapping[str, Any] | pydantic.BaseModel, *, expected_version: int | None = None
    ) -> WorkingMemoryRecord:
        """Validate and write a new working-memory document (version + 1).

        ``expected_version`` (0 for "none yet") makes the write conditional: a stale version raises
        :class:`~prism_memory.errors.ConflictError`.
        """
        document = check_update(data, expected_version)
        return await self._working.put(document, expected_version=expected_version)

    def working_memory_processor(self, extract: Callable[..., Any]) -> WorkingMemoryProcessor:
        """An explicit updater the host invokes; see :class:`WorkingMemoryProcessor`."""
        return WorkingMemoryProcessor(self, extract)

    # ---- remember ----------------------------------------------------------------------------

    @public_call("create_memory")
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
        return await self._remember.remember(entries, wait=wait)

    # ---- recall ------------------------------------------------------------------------------

    @public_call("search_memory")
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
        reranker: Reranker | None = None,
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

        ``reranker`` (default: the memory's own, if any) reorders the best fused candidates before
        the cut to ``top_k``; it is only shown entries that passed every rule above
        (:mod:`prism_memory.reranking`, docs/reranking.md).
        """
        checked = RecallQuery.check(
            self._ctx,
            query,
            top_k=top_k,
            message_range=message_range,
            require_consent=require_consent,
            scoring=scoring,
            explain=explain,
            share_from_parent_thread_id=share_from_parent_thread_id,
            include_pending=include_pending,
            scope=scope,
            reranker=reranker,
        )
        return await self._recall.recall(checked)

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
        return context_provider(
            self._ctx,
            self.recall,
            self.get_working,
            working=working,
            semantic=semantic,
            top_k=top_k,
            max_tokens=max_tokens,
            token_counter=token_counter,
            include_pending=include_pending,
            scope=scope,
        )

    # ---- consent, correction, lineage --------------------------------------------------------

    @public_call("get_memory")
    async def get(self, entry_id: str) -> MemoryRecord:
        """One stored entry of this thread, whatever its state; :class:`NotFoundError` if absent."""
        return await self._governance.get(self.identity, entry_id)

    @public_call("get_memory")
    async def index_status(self, ids: Sequence[str]) -> dict[str, IndexStatus]:
        """``id -> pending | indexed | failed`` for the ids that exist in this thread.

        ``ids`` is a list, tuple or set (a bare string is refused), at most
        ``Limits.ids_per_call`` (65,536) of them, else :class:`CapExceededError`.
        """
        wanted = check_ids(ids, "ids", cap=self.limits.ids_per_call)
        return await self._governance.index_status(wanted)

    @public_call("update_memory")
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
        return await self._governance.set_consent(
            entry_id, visible=visible, source=source, consent_scope=scope
        )

    @public_call("update_memory")
    async def correct(self, entry_id: str, text: str) -> MemoryRecord:
        """Replace an entry's text and re-embed it, keeping its consent.

        Entries derived from it (its lineage dependents, transitively) written before the correction
        are invalidated in the same transaction as the new text; the corrected entry itself stays
        recallable. A rejected text or vector changes nothing and tells ``on_invalidate`` nothing.
        """
        return await self._governance.correct(entry_id, text)

    # ---- deletion ----------------------------------------------------------------------------

    @public_call("delete_memory")
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
        self.identity  # noqa: B018 - no thread, no semantic memory: refused before the ids
        wanted = None if ids is None else check_ids(ids, "ids", cap=self.limits.ids_per_call)
        return await self._governance.forget(wanted, hold=hold)

    @public_call("delete_memory")
    async def forget_before(self, occurred_before: datetime) -> int:
        """Delete entries that *occurred* before ``occurred_before`` (not when they were written).

        Entries under legal hold stay; dependents of deleted entries go too. Returns the count. An
        entry whose lineage is over the caps stays; after deleting everything else the call raises
        :class:`~prism_memory.errors.LineageCapError` naming those entries.
        """
        check_aware(occurred_before, "occurred_before")
        return await self._governance.forget_before(occurred_before)

    @public_call("delete_memory")
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
        days = check_retention_rule(max_age_days, max_entries, self._ctx.retention)
        batch = self.limits.resolve("retention_batch", batch_size)
        return await self._governance.apply_retention(days, max_entries, batch)

    # ---- sharing -----------------------------------------------------------------------------

    @public_call("update_memory")
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
        grant = check_grant(self._ctx, child_thread_id, source_ids, expires_at)
        return await self._sharing.share_with(grant)

    @public_call("update_memory")
    async def revoke_share(self, child_thread_id: str) -> int:
        """Withdraw this thread's grant to a child; return 1 if there was one, else 0."""
        self.identity  # noqa: B018 - no thread, nothing to revoke: refused before the argument
        return await self._sharing.revoke_share(check_key(child_thread_id, "child_thread_id"))

    # ---- export and re-index -----------------------------------------------------------------

    @public_call("export_memory")
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
        check_identity(self._ctx, identity)
        return await self._export.export_page(
            decode_cursor("export", cursor),
            self.limits.resolve("export_entries", limit),
            self.limits.resolve("export_bytes", max_bytes),
            self.limits.resolve("export_seconds", max_seconds),
        )

    @public_call("update_memory")
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
        self.identity  # noqa: B018 - no thread, nothing to rebuild: refused before the cursor
        after = decode_cursor("rebuild", cursor)
        return await self._export.rebuild_page(
            after, batch_size, max_seconds, switch_model=switch_model
        )


def create_memory(
    *,
    tenant_id: str,
    resource_id: str,
    thread_id: str | None = None,
    embedder: Embedder,
    vector_store: VectorStore | None = None,
    working_store: WorkingStore | None = None,
    backend: MemoryBackend | None = None,
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
    next_embedder: Embedder | None = None,
    reranker: Reranker | None = None,
) -> Memory:
    """Create the memory of one scope. Stores default to fresh in-memory reference adapters.

    ``schema`` is a JSON-Schema subset dict or a pydantic model class; ``validate_working_memory`` is
    an extra host check. ``working_scope="thread"`` keeps one working document per thread instead of
    per resource. ``retention_days`` turns on a retention window enforced on every read.

    ``next_embedder`` is the model of a model change in progress (docs/operations.md, "Switching
    models"): on a store with vector generations whose shadow generation is its model, the memory
    writes its new entries' (and corrections') vectors of that model too, and once the store
    switches, recall embeds its queries with it. Its ``model`` must be set and differ from
    ``embedder``'s; its width must be the shadow generation's
    (:class:`~prism_memory.errors.DimensionMismatchError` before any write).

    ``reranker`` (a :class:`~prism_memory.reranking.Reranker`) reorders every recall's best fused
    candidates before the cut to ``top_k`` (docs/reranking.md); ``None`` keeps the fusion's order.

    ``backend`` (a :class:`~prism_memory.stores.MemoryBackend`: one object per store role) is
    the storage instead of ``vector_store`` and ``working_store`` (docs/stores.md); a memory
    made on a vector store calls that store's role objects the same way.
    """
    tenant = check_key(tenant_id, "tenant_id")
    resource = check_key(resource_id, "resource_id")
    thread = None if thread_id is None else check_key(thread_id, "thread_id")
    width, model = check_embedder(embedder)
    if next_embedder is not None:
        _, next_model = check_embedder(next_embedder)
        if next_model is None or next_model == model:
            raise ConfigurationError(
                "next_embedder must name its model, and another model than embedder's"
            )
    store, roles = _storage(vector_store, working_store, backend)
    if roles.entries.dimension is not None and roles.entries.dimension != width:
        raise DimensionMismatchError(
            f"the vector store is pinned to width {roles.entries.dimension}, the embedder makes "
            f"{width}"
        )
    if working_scope not in ("resource", "thread"):
        raise ConfigurationError("working_scope must be 'resource' or 'thread'")
    if working_scope == "thread" and thread is None:
        raise ConfigurationError("working_scope='thread' needs a thread_id")
    if retention_days is not None:
        check_days(retention_days, "retention_days")
    if working_memory_template is not None and not isinstance(working_memory_template, str):
        raise ConfigurationError("working_memory_template must be a string")
    for name, hook in (("importance_from", importance_from), ("on_invalidate", on_invalidate)):
        if hook is not None and not callable(hook):
            raise ConfigurationError(f"{name} must be callable")
    checked_limits = parse(Limits, limits if limits is not None else {}, "limits")
    clock = clock or utcnow
    ctx = MemoryContext(
        tenant_id=tenant,
        resource_id=resource,
        thread_id=thread,
        embedder=embedder,
        embedding_model=model,
        backend=roles,
        store_id=otel.store_id(store),
        limits=checked_limits,
        scrubber=Scrubber(redactor, secrets),
        clock=clock,
        indexing=indexing or IndexingPolicy(),
        require_consent=bool(require_consent),
        retention=None if retention_days is None else timedelta(days=retention_days),
        working_thread=thread if working_scope == "thread" else None,
        validator=compile_validator(schema, validate_working_memory),
        template=working_memory_template,
        importance_from=importance_from,
        on_invalidate=on_invalidate,
        next_embedder=next_embedder,
        next_writer=None
        if next_embedder is None
        else NextModelWriter(
            roles.generations, next_embedder, batch_size=checked_limits.embed_batch, clock=clock
        ),
        reranker=None if reranker is None else check_reranker(reranker),
    )
    return Memory(ctx, vector_store=store)


def _storage(
    vector_store: VectorStore | None,
    working_store: WorkingStore | None,
    backend: MemoryBackend | None,
) -> tuple[VectorStore, MemoryBackend]:
    """The vector store and the role objects of a memory: ``backend``'s, or those of
    ``vector_store`` and ``working_store`` (fresh in-memory stores by default)."""
    if backend is not None:
        if vector_store is not None or working_store is not None:
            raise ConfigurationError("pass backend, or vector_store and working_store, not both")
        if not isinstance(backend, MemoryBackend):
            raise ConfigurationError("backend must be a prism_memory.stores.MemoryBackend")
        return backend.vector_store(), backend
    store = vector_store if vector_store is not None else InMemoryVectorStore()
    if not isinstance(store, VectorStore):
        raise ConfigurationError("vector_store must subclass prism_memory.stores.VectorStore")
    working = working_store if working_store is not None else InMemoryWorkingStore()
    if not isinstance(working, WorkingStore):
        raise ConfigurationError("working_store must subclass prism_memory.stores.WorkingStore")
    return store, backend_of(store, working)
