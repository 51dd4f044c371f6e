"""``recall``: one search of the store, the one pure re-rank, neighbours by sequence; which
embedding model the query is embedded with (:class:`ActiveModel`); and the context provider built
on it."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from .._offload import profile_candidates
from ..context import ContextProvider, TokenCounter, approximate_tokens
from ..embedding import Embedder, embedder_model
from ..errors import CapExceededError, EmbeddingModelMismatchError, ValidationError
from ..lexical import query_terms
from ..models import (
    MemoryIdentity,
    MemoryRecord,
    RecallResult,
    RecallScoring,
    WorkingMemoryRecord,
    check_key,
    check_text,
    parse,
)
from ..ranking import chronological, rerank
from ..ranking import explain as explain_hits
from ..reranking import Reranker, check_reranker, explain_reranked, rerank_count, rerank_hits
from ..stores.base import SearchRequest
from .core import MemoryContext, ModelGuard
from .session import IndexingSession
from .sharing import shared_source

__all__ = [
    "MAX_MODEL_ROUNDS",
    "PENDING_WAIT_CEILING",
    "PENDING_WAIT_SECONDS",
    "ActiveModel",
    "RecallQuery",
    "RecallService",
    "check_scope",
    "context_provider",
    "pending_wait",
]

PENDING_WAIT_SECONDS = 5.0
"""How long ``recall(include_pending=True)`` waits for this memory's own pending writes."""
PENDING_WAIT_CEILING = 60.0
"""The longest wait ``include_pending`` may ask for."""


def pending_wait(include_pending: bool | float) -> float:
    """``include_pending`` checked, as the seconds to wait (0: do not wait)."""
    if include_pending is True:
        return PENDING_WAIT_SECONDS
    if include_pending is False:
        return 0.0
    if not isinstance(include_pending, int | float) or not math.isfinite(include_pending):
        raise ValidationError("include_pending must be a bool or a number of seconds")
    if include_pending < 0:
        raise ValidationError("include_pending must not be negative")
    if include_pending > PENDING_WAIT_CEILING:
        raise CapExceededError(f"include_pending is over the cap {PENDING_WAIT_CEILING} s")
    return float(include_pending)


def check_scope(scope: object) -> bool:
    """Whether a recall ``scope`` is ``"resource"``; :class:`ValidationError` if it is neither
    that nor ``"thread"``."""
    if scope not in ("thread", "resource"):
        raise ValidationError("scope must be 'thread' or 'resource'")
    return scope == "resource"


class Recall(Protocol):
    """:meth:`Memory.recall <prism_memory.memory.Memory.recall>`, as the context provider calls it."""

    def __call__(
        self,
        query: str,
        *,
        top_k: int | None = None,
        include_pending: bool | float = False,
        scope: Literal["thread", "resource"] = "thread",
    ) -> Awaitable[RecallResult]: ...


def context_provider(
    ctx: MemoryContext,
    recall: Recall,
    get_working: Callable[[], Awaitable[WorkingMemoryRecord | None]],
    *,
    working: bool,
    semantic: bool,
    top_k: int | None,
    max_tokens: int | None,
    token_counter: TokenCounter | None,
    include_pending: bool | float,
    scope: Literal["thread", "resource"],
) -> ContextProvider:
    """The provider of :meth:`Memory.context_provider
    <prism_memory.memory.Memory.context_provider>`, its arguments checked now (not at the first
    ``provide()``); every ``recall`` it makes is given ``include_pending`` and ``scope``."""
    check_scope(scope)
    k = ctx.limits.resolve("top_k", top_k)
    budget = ctx.limits.resolve("injected_tokens", max_tokens)
    pending_wait(include_pending)

    async def recalled(query: str, limit: int) -> RecallResult:
        return await recall(query, top_k=limit, include_pending=include_pending, scope=scope)

    return ContextProvider(
        recall=recalled if semantic else None,
        get_working=get_working if working else None,
        template=ctx.template,
        scrub=ctx.scrubber.value,
        top_k=k,
        max_tokens=budget,
        token_counter=token_counter or approximate_tokens,
    )


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """A recall's arguments, checked by the facade."""

    identity: MemoryIdentity
    """The thread the recall reads (the memory's scope, resolved once by :meth:`check`)."""
    text: str
    terms: frozenset[str]
    top_k: int
    window: int
    """``message_range``: neighbours by sequence on each side of each hit (0: none)."""
    require_consent: bool
    scoring: RecallScoring | None
    explain: bool
    shared_thread: str | None
    """``share_from_parent_thread_id``: the parent thread whose granted entries join."""
    wait: float
    """How long to wait first for this memory's own pending writes (0: not at all)."""
    resource_wide: bool
    reranker: Reranker | None = None
    """The call's reranker, else the memory's (``None``: the fusion's order alone)."""

    @classmethod
    def check(
        cls,
        ctx: MemoryContext,
        query: str,
        *,
        top_k: int | None,
        message_range: int | None,
        require_consent: bool | None,
        scoring: RecallScoring | Mapping[str, Any] | None,
        explain: bool,
        share_from_parent_thread_id: str | None,
        include_pending: bool | float,
        scope: str,
        reranker: Reranker | None = None,
    ) -> RecallQuery:
        """The arguments of :meth:`Memory.recall <prism_memory.memory.Memory.recall>`, checked
        against ``ctx``'s scope and limits (typed errors that never repeat the query)."""
        resource_wide = check_scope(scope)
        identity = ctx.identity
        limits = ctx.limits
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("query must be a non-empty string")
        check_text(query, "query")
        if len(query.encode()) > limits.payload_bytes:
            raise CapExceededError("query is over the payload cap")
        terms = query_terms(query)
        if len(terms) > limits.query_terms:
            raise CapExceededError(
                f"query has {len(terms)} distinct terms, over the cap {limits.query_terms}"
            )
        k = limits.resolve("top_k", top_k)
        window = limits.resolve("message_range", message_range or 0, minimum=0)
        rules = None if scoring is None else parse(RecallScoring, scoring, "recall scoring")
        consent = ctx.require_consent if require_consent is None else bool(require_consent)
        shared_thread = None
        if share_from_parent_thread_id is not None:
            shared_thread = check_key(share_from_parent_thread_id, "share_from_parent_thread_id")
            if shared_thread == identity.thread_id:
                raise ValidationError("a thread cannot share from itself")
        return cls(
            identity=identity,
            text=query,
            terms=terms,
            top_k=k,
            window=window,
            require_consent=consent,
            scoring=rules,
            explain=explain,
            shared_thread=shared_thread,
            wait=pending_wait(include_pending),
            resource_wide=resource_wide,
            reranker=ctx.reranker if reranker is None else check_reranker(reranker),
        )


MAX_MODEL_ROUNDS = 3
"""At most this many searches per recall while the store reports another active model."""


class ActiveModel:
    """The model this memory believes the store answers recall from (at first its own
    embedder's; then whatever a search last reported), and the embedder of each model."""

    __slots__ = ("_ctx", "_next_model", "model")

    def __init__(self, ctx: MemoryContext) -> None:
        self._ctx = ctx
        self._next_model = None if ctx.next_embedder is None else embedder_model(ctx.next_embedder)
        self.model: str | None = ctx.embedding_model
        """The model the next recall embeds its query with."""

    def embedder(self) -> Embedder:
        """The embedder of :attr:`model`."""
        ctx = self._ctx
        if self.model != ctx.embedding_model and ctx.next_embedder is not None:
            return ctx.next_embedder
        return ctx.embedder

    def follow(self, active: str | None) -> bool:
        """Take the store's reported ``active`` model; whether the query must be embedded again
        (it was embedded with another model). :class:`EmbeddingModelMismatchError` when neither
        of this memory's embedders makes that model."""
        if active is None or active == self.model:
            return False
        ctx = self._ctx
        if ctx.next_writer is not None:
            ctx.next_writer.forget()  # the store changed: ask it again which generation is next
        if active in (ctx.embedding_model, self._next_model):
            self.model = active
            return True
        if ctx.embedding_model is None and self.model is None:
            return False  # an embedder without a model: recall as before generations existed
        raise EmbeddingModelMismatchError(
            "the vector store answers recall from another embedding model than this memory's "
            "embedder and next_embedder make: give the memory an embedder of the active model "
            "(docs/operations.md, 'Switching models')"
        )


class RecallService:
    """The read path of :meth:`Memory.recall <prism_memory.memory.Memory.recall>`."""

    __slots__ = ("_ctx", "_models", "_route", "_session")

    def __init__(self, ctx: MemoryContext, session: IndexingSession, models: ModelGuard) -> None:
        self._ctx = ctx
        self._session = session
        self._models = models
        self._route = ActiveModel(ctx)

    async def recall(self, query: RecallQuery) -> RecallResult:
        """See :meth:`Memory.recall <prism_memory.memory.Memory.recall>`."""
        ctx = self._ctx
        identity = query.identity
        store = ctx.backend.entries
        if query.wait:  # include_pending: this memory's own writes first
            await self._session.wait_own(query.wait)
        route = self._route
        now = ctx.clock()
        recall_filter = ctx.recall_filter(now, require_consent=query.require_consent)
        shared = None
        if query.shared_thread is not None:  # share_from_parent_thread_id: its live grant
            shared = await shared_source(ctx.backend.grants, identity, query.shared_thread, now)
        for round_ in range(MAX_MODEL_ROUNDS):
            # the query in the model the store answers from: a search names the active model,
            # and a query of another model is embedded again with it (never ranked across)
            model = route.model
            vector = await ctx.embed_one(query.text, "query embedding", route.embedder())
            found = await store.search(
                identity,
                SearchRequest(
                    vector=vector,
                    terms=query.terms,
                    limit=query.top_k * 4,
                    filter=recall_filter,
                    shared=shared,
                    resource_wide=query.resource_wide,
                    model=model,
                ),
            )
            if round_ == MAX_MODEL_ROUNDS - 1 or not route.follow(found.active_model):
                break
        self._models.check_candidates(found.candidates, model)
        await profile_candidates(found.candidates)
        reranker = query.reranker  # shown the fused best (rerank_count of them), then the cut
        cut = (
            query.top_k
            if reranker is None
            else rerank_count(reranker, query.top_k, 4 * query.top_k)
        )
        hits = rerank(
            found.candidates,
            query_vector=vector,
            query_text=query.text,
            top_k=cut,
            now=now,
            stats=found.stats,
            scoring=query.scoring,
            shared_thread_id=query.shared_thread if shared else None,
            terms=query.terms,
        )
        if query.resource_wide:  # hits owned by another thread are marked, like granted ones
            hits = [
                replace(hit, shared=True) if hit.record.thread_id != identity.thread_id else hit
                for hit in hits
            ]
        if ctx.scrubber.active:
            hits = [replace(hit, record=ctx.scrubbed(hit.record)) for hit in hits]
        reranked = None
        if reranker is not None:  # the texts as they would leave the memory: scrubbed
            reranked = await rerank_hits(reranker, query.text, hits, query.top_k)
            hits = reranked.hits
        adjacent: tuple[MemoryRecord, ...] = ()
        own = [hit.record for hit in hits if not hit.shared]
        window = query.window
        if window and own:
            hit_ids = {record.id for record in own}
            ranges = [(r.sequence - window, r.sequence + window) for r in own]
            neighbours = await store.neighbors(identity, ranges, recall_filter)
            adjacent = tuple(
                ctx.scrubbed(r) for r in chronological(neighbours) if r.id not in hit_ids
            )
        pending = found.pending  # counted by the search itself when the store can (one round trip)
        if pending is None:
            pending = await store.count_pending(identity)
        explanations = explain_hits(hits, query.scoring) if query.explain else None
        if explanations is not None and reranked is not None:
            explanations = explain_reranked(explanations, reranked)
        return RecallResult(
            hits=tuple(hits),
            adjacent=adjacent,
            explanations=explanations,
            pending=pending,
        )
