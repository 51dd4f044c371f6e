"""What every service of a memory shares: one frozen :class:`MemoryContext`, the
embedding-model guard (the only per-memory state besides the indexing session), and the
scrubbing of a public call's errors."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar, cast

from .._columns import CandidateColumns
from ..embedding import Embedder
from ..errors import (
    ConfigurationError,
    DimensionMismatchError,
    EmbedderError,
    EmbeddingModelMismatchError,
    PrismMemoryError,
    ValidationError,
)
from ..indexing import IndexingPolicy
from ..indexing.generations import NextModelWriter
from ..limits import Limits
from ..models import Candidate, MemoryIdentity, MemoryRecord, Vector
from ..redaction import Scrubber
from ..reranking import Reranker
from ..stores.backend import MemoryBackend
from ..stores.base import RecallFilter
from ..windows import WindowedVector, embed_entries, embed_whole

__all__ = [
    "ImportanceFrom",
    "MemoryContext",
    "ModelGuard",
    "OnInvalidate",
    "check_aware",
    "maybe_await",
]

ImportanceFrom = Callable[[Mapping[str, Any]], float | Awaitable[float]]
OnInvalidate = Callable[[Sequence[str]], Awaitable[None] | None]

T = TypeVar("T")

_OWN_MODEL: Any = object()
"""``check_candidates``' default: this memory's own model."""


async def maybe_await(value: T | Awaitable[T]) -> T:
    """``value``, awaited first when a host's hook returned an awaitable."""
    if inspect.isawaitable(value):
        return await value
    return value


def check_aware(value: object, name: str) -> None:
    """:class:`ValidationError` unless ``value`` is a timezone-aware datetime."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValidationError(f"{name} must be a timezone-aware datetime")


@dataclass(frozen=True, slots=True)
class MemoryContext:
    """One memory's scope, stores, embedder (and a migration's next one), reranker, limits,
    scrubber, clock, policy and hooks."""

    tenant_id: str
    resource_id: str
    thread_id: str | None
    embedder: Embedder
    embedding_model: str | None
    backend: MemoryBackend
    """The role objects this memory calls: entries, ledger, governance, grants, working..."""
    store_id: str
    """``gen_ai.memory.store.id`` of the store (telemetry)."""
    limits: Limits
    scrubber: Scrubber
    clock: Callable[[], datetime]
    indexing: IndexingPolicy
    require_consent: bool
    retention: timedelta | None
    working_thread: str | None
    """The thread of the working document: ``None`` when it is kept per resource."""
    validator: Callable[[Any], dict[str, Any]]
    template: str | None
    importance_from: ImportanceFrom | None
    on_invalidate: OnInvalidate | None
    next_embedder: Embedder | None = None
    """The model of a migration in progress (``create_memory(next_embedder=...)``)."""
    next_writer: NextModelWriter | None = None
    """Writes ``next_embedder``'s vectors into the store's shadow generation of its model."""
    reranker: Reranker | None = None
    """Reorders recall's best fused candidates (``create_memory(reranker=...)``), or ``None``."""
    scope: MemoryIdentity | None = field(init=False)

    def __post_init__(self) -> None:
        scope = None
        if self.thread_id is not None:
            scope = MemoryIdentity(
                tenant_id=self.tenant_id, resource_id=self.resource_id, thread_id=self.thread_id
            )
        object.__setattr__(self, "scope", scope)

    @property
    def identity(self) -> MemoryIdentity:
        """The exact scope of semantic memory; :class:`ConfigurationError` without a thread."""
        if self.scope is None:
            raise ConfigurationError("semantic memory needs a thread_id")
        return self.scope

    def recall_filter(self, now: datetime, *, require_consent: bool) -> RecallFilter:
        """The exclusion rules of a read at ``now`` (retention included)."""
        cutoff = None if self.retention is None else now - self.retention
        return RecallFilter(now=now, require_consent=require_consent, occurred_after=cutoff)

    def scrub_error(self, exc: PrismMemoryError) -> None:
        """Scrub ``exc``'s message in place (its type and attributes stay)."""
        if self.scrubber.active and exc.args and isinstance(exc.args[0], str):
            exc.args = (self.scrubber.text(exc.args[0]), *exc.args[1:])

    def scrubbed(self, record: MemoryRecord) -> MemoryRecord:
        """``record`` as it leaves the memory: text, role, metadata and reason scrubbed."""
        if not self.scrubber.active:
            return record
        lineage = record.lineage
        if lineage is not None and lineage.reason is not None:
            lineage = lineage.model_copy(update={"reason": self.scrubber.text(lineage.reason)})
        return replace(
            record,
            text=self.scrubber.text(record.text),
            role=self.scrubber.text(record.role),
            metadata=self.scrubber.value(record.metadata),
            lineage=lineage,
        )

    async def embed_one(self, text: str, label: str, embedder: Embedder | None = None) -> Vector:
        """One vector for ``text`` (by ``embedder``, default this memory's: its first window's,
        :func:`~prism_memory.windows.embed_whole`); :class:`ValidationError` (named ``label``) if
        none came, and :class:`EmbedderError` (the embedder's own error as its cause) if the
        embedder failed."""
        vectors = await self._embedding(embed_whole(embedder or self.embedder, [text]), label)
        if vectors.shape[0] != 1:
            raise ValidationError(f"{label}: embedder returned no vector")
        return cast("Vector", vectors[0])

    async def embed_entry(self, text: str, label: str) -> Vector | WindowedVector:
        """An entry's own vectors for ``text`` by this memory's embedder (its later windows' too
        when it is longer than the embedder's window: :func:`~prism_memory.windows.
        embed_entries`); errors as :meth:`embed_one`'s."""
        made = await self._embedding(embed_entries(self.embedder, [text]), label)
        if len(made) != 1:
            raise ValidationError(f"{label}: embedder returned no vector")
        return made[0]

    @staticmethod
    async def _embedding(pending: Awaitable[T], label: str) -> T:
        try:
            return await pending
        except PrismMemoryError:
            raise
        except Exception as exc:
            # the embedder's own message may quote the text: name only the error's type
            raise EmbedderError(
                f"{label}: the embedder failed ({type(exc).__name__}); its error is the cause",
                transient=True,
            ) from exc


class ModelGuard:
    """Keeps vectors of two embedding models apart: on every write, and in what recall ranks."""

    __slots__ = ("_checked", "_ctx", "_width_checked")

    def __init__(self, ctx: MemoryContext) -> None:
        self._ctx = ctx
        self._checked = False
        """Whether this memory's thread was seen to hold no other model's vectors; a memory
        checks once, not on every write."""
        self._width_checked = False
        """Whether the store was seen to hold vectors of this memory's width (a store keeps the
        width it holds, so once is enough)."""

    def forget_check(self) -> None:
        """Ask the store again at the next :meth:`check_write` (a rebuild does)."""
        self._checked = False

    def check_candidates(
        self, candidates: Sequence[Candidate], model: str | None = _OWN_MODEL
    ) -> None:
        """Refuse to rank vectors another (known) embedding model made than ``model`` (the one
        the query was embedded with; default: this memory's own), or vectors of two models
        together (whatever the model is)."""
        if model is _OWN_MODEL:
            model = self._ctx.embedding_model
        models = (
            candidates.embedding_models
            if isinstance(candidates, CandidateColumns)  # read as a column, no object each
            else [c.embedding_model for c in candidates]
        )
        known = {found for found in models if found is not None}
        if model is not None:
            foreign = sorted(known - {model})
        else:
            foreign = sorted(known) if len(known) > 1 else []
        if foreign:
            raise EmbeddingModelMismatchError(
                f"stored vectors were made by {foreign}, this memory embeds with "
                f"{model!r}; use that model, or re-embed the thread with "
                "rebuild_index(switch_model=True) (docs/operations.md, 'Switching models')"
            )

    async def _registered(self) -> dict[str, int]:
        """The store's vector generations, model -> width (empty: it has none, or leaves the
        role out -- its methods raise :class:`ConfigurationError` -- and the refusal stands)."""
        store = self._ctx.backend.generations
        if store is None:
            return {}
        try:
            return {g.model: g.width for g in await store.generations()}
        except ConfigurationError:
            return {}

    async def check_width(self) -> None:
        """Refuse an embedder whose width differs from the vectors the store already holds (a
        store keeps one width: its vectors could never be stored, and would wait for ever),
        unless its model is a vector generation of the store registered with its width (a
        model change to another width: the store holds both until the old one is dropped)."""
        if self._width_checked:
            return
        width, held = self._ctx.embedder.dimensions, await self._ctx.backend.entries.vector_width()
        model = self._ctx.embedding_model
        if (
            held is not None
            and held != width
            and (model is None or (await self._registered()).get(model) != width)
        ):
            raise DimensionMismatchError(
                f"the vector store holds vectors of width {held}, this memory's embedder makes "
                f"{width}: nothing was written. A store (one table) keeps one width: use an "
                "embedder of that width, or another store"
            )
        if self._ctx.next_writer is not None:
            await self._ctx.next_writer.active()  # next_embedder's width against its generation
        self._width_checked = held is not None  # an empty store is asked again next time

    async def check_write(self, scope: MemoryIdentity, *, switch_model: bool = False) -> None:
        """Refuse to add vectors of another width than the store's (:meth:`check_width`), or of
        this memory's model to a thread whose rows hold another model's (rows without a recorded
        model do not count); ``switch_model`` allows the latter."""
        await self.check_width()
        model = self._ctx.embedding_model
        if model is None or switch_model or self._checked:
            return
        held = await self._ctx.backend.entries.embedding_models(scope)
        foreign = sorted(held - {model})
        if foreign:  # a store's generations are one model change, not foreign to each other
            registered = await self._registered()
            if model in registered:
                foreign = [other for other in foreign if other not in registered]
        if foreign:
            raise EmbeddingModelMismatchError(
                f"the thread's vectors were made by {foreign}, this memory embeds with "
                f"{model!r}: nothing was written. Use that model, or re-embed the "
                "thread with rebuild_index(switch_model=True) (docs/operations.md, "
                "'Switching models')"
            )
        self._checked = True


class _Scrubbing(Protocol):
    """What :func:`~.observed.public_call` needs of the object whose method it wraps."""

    _ctx: MemoryContext


S = TypeVar("S", bound=_Scrubbing)
