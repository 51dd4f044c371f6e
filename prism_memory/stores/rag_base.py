"""The RAG store contract, and the rules both adapters state once.

:class:`RagOperations` is what a caller can do with chunks, generations and grants;
:class:`RagStore` adds :meth:`RagStore.transaction` (the same operations, applied all or nothing)
and :meth:`RagStore.close`; :class:`RagStoreByCall` makes each store call one call of those
operations, on what the adapter opens for it. The in-memory adapter
(:mod:`prism_memory.stores.rag_memory`) and the PostgreSQL adapter
(:func:`prism_memory.postgres.create_postgres_vector_store`) subclass them, and
:func:`prism_memory.testing.run_rag_conformance` proves they behave alike.

Rules every adapter follows
---------------------------
* **Scope.** Every call names a :class:`~prism_memory.rag_types.RagScope`; no row of another
  tenant, resource or collection is read, written or deleted.
* **Generations.** Each scope has a current generation (0 until set). Reads and writes that name
  no ``generation`` use the current one; a query resolves it *in the same snapshot* it reads
  chunks from, so a concurrent :meth:`~RagOperations.set_current_generation` never shows a mix.
* **Authorisation inside the query.** With ``authorization=AccessConstraint(...)`` a chunk is a
  candidate only if its source is granted (same tenant and scope) to the principal or one of its
  groups, at the constraint's ``access_version`` when one is set -- decided *before* ordering and
  the ``top_k`` cut, on the vector and the lexical leg alike, so unauthorised chunks can neither be
  returned nor crowd authorised ones out. ``authorization="acl"`` denies everything;
  ``authorization=None`` applies no ACL (the host chose not to). ``filter`` is metadata only.
* **Vectors.** Every embedding is checked (finite, non-empty, the store's width) before anything
  is written; one bad vector rejects the whole call.
* **Ordering** (every backend, by construction): cosine similarity (float64, unclamped) for the
  vector leg and BM25 (:func:`lexical_score`, :mod:`prism_memory.lexical`'s tokenizer) against
  :meth:`RagOperations.lexical_stats` for the lexical leg, ties by ``(source_id, chunk_index)``.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from .. import _telemetry as otel
from ..errors import CapExceededError, ValidationError
from ..lexical import CorpusStats, bm25, query_terms, term_counts
from ..limits import CEILINGS
from ..models import Vector, check_key
from ..rag_types import (
    ACL,
    MAX_CHUNKS_PER_CALL,
    AccessConstraint,
    Authorization,
    Chunk,
    JsonScalar,
    RagHit,
    RagScope,
    SourceAccess,
    check_filter,
    check_generation,
    check_text,
)
from ..ranking import cosine as vector_score

__all__ = [
    "RagOperations",
    "RagStore",
    "RagStoreByCall",
    "check_authorization",
    "check_chunks",
    "check_sources_page",
    "check_top_k",
    "lexical_score",
    "lexical_terms",
    "matches_filter",
    "vector_score",
]

MAX_QUERY_TERMS = 64
"""Most distinct terms one lexical query may hold."""
MAX_SOURCES_PAGE = 1000
"""Most source ids one :meth:`RagOperations.list_sources` call returns."""


def check_top_k(top_k: object) -> int:
    """``top_k`` must be an integer in ``[1, 32]`` (the recall cap)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValidationError("top_k must be a positive integer")
    if top_k > CEILINGS["top_k"]:
        raise CapExceededError(f"top_k is over the cap {CEILINGS['top_k']}")
    return top_k


def check_authorization(value: object) -> Authorization:
    """``None``, ``"acl"`` or an :class:`AccessConstraint`; anything else is rejected."""
    if value is None or value == ACL or isinstance(value, AccessConstraint):
        return value
    raise ValidationError('authorization must be an AccessConstraint, "acl" or None')


def check_chunks(chunks: Sequence[Chunk]) -> list[Chunk]:
    """A non-oversized list of :class:`Chunk` with distinct ``(source_id, index)`` keys."""
    if isinstance(chunks, str | bytes) or not isinstance(chunks, Sequence):
        raise ValidationError("chunks must be a sequence of Chunk")
    if len(chunks) > MAX_CHUNKS_PER_CALL:
        raise CapExceededError(
            f"{len(chunks)} chunks in one call; the cap is {MAX_CHUNKS_PER_CALL}"
        )
    seen: set[tuple[str, int]] = set()
    for position, chunk in enumerate(chunks):
        if not isinstance(chunk, Chunk):
            raise ValidationError(f"chunks[{position}] is not a Chunk")
        key = (chunk.source_id, chunk.index)
        if key in seen:
            raise ValidationError(f"chunks[{position}] repeats the key of an earlier chunk")
        seen.add(key)
    return list(chunks)


def check_sources_page(after: object, limit: object) -> None:
    """``after`` is ``None`` or a source id; ``limit`` an integer in ``[1, 1000]``."""
    if after is not None:
        check_key(after, "after")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError("limit must be a positive integer")
    if limit > MAX_SOURCES_PAGE:
        raise CapExceededError(f"limit is over the cap {MAX_SOURCES_PAGE}")


def lexical_terms(text: object) -> tuple[str, ...]:
    """The distinct terms of a lexical query (:func:`prism_memory.lexical.query_terms`), sorted;
    at most 64."""
    check_text(text, "text")
    assert isinstance(text, str)
    terms = tuple(sorted(query_terms(text)))
    if len(terms) > MAX_QUERY_TERMS:
        raise CapExceededError(
            f"query has {len(terms)} distinct terms; the cap is {MAX_QUERY_TERMS}"
        )
    return terms


def lexical_score(terms: Sequence[str], text: str, stats: CorpusStats) -> float:
    """BM25 of ``text`` for ``terms`` against ``stats`` (:func:`prism_memory.lexical.bm25`)."""
    counts = term_counts(text)
    return bm25(terms, counts, sum(counts.values()), stats)


def _same_scalar(expected: JsonScalar, actual: object) -> bool:
    if expected is None or isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, int | float):
        return isinstance(actual, int | float) and float(expected) == float(actual)
    return isinstance(actual, str) and expected == actual


def matches_filter(metadata: Mapping[str, Any], filter: Mapping[str, JsonScalar] | None) -> bool:
    """Whether ``metadata`` has every key of ``filter`` with an equal JSON scalar value."""
    if not filter:
        return True
    return all(key in metadata and _same_scalar(v, metadata[key]) for key, v in filter.items())


class RagOperations(abc.ABC):
    """Chunks, generations and source grants of RAG scopes (see the module docstring)."""

    @property
    @abc.abstractmethod
    def dimension(self) -> int | None:
        """The pinned vector width, or ``None`` when the store accepts any consistent width."""

    # ---- chunks ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def upsert(
        self, scope: RagScope, chunks: Sequence[Chunk], *, generation: int | None = None
    ) -> int:
        """Insert or replace ``chunks`` by ``(source_id, index)`` in ``generation`` (default: the
        current one), atomically; return how many were written. Every vector is checked first."""

    @abc.abstractmethod
    async def get_by_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> list[Chunk]:
        """The chunks of ``source_id`` in ``generation`` (default: current), by index."""

    @abc.abstractmethod
    async def list_sources(
        self,
        scope: RagScope,
        *,
        generation: int | None = None,
        after: str | None = None,
        limit: int,
    ) -> list[str]:
        """The ids of the sources holding chunks in ``generation`` (default: current), in
        code-point order (Python's ``sorted``): the first ``limit`` (at most 1,000) after
        ``after`` (``None``: from the first). Page through a generation by passing the last id
        returned as the next ``after``."""

    @abc.abstractmethod
    async def delete_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> int:
        """Delete the chunks of ``source_id`` in ``generation`` (default: current); count them.

        The source's grants stay: they belong to the scope, not to one generation.
        """

    @abc.abstractmethod
    async def delete_generation(self, scope: RagScope, generation: int) -> int:
        """Delete every chunk of ``generation`` (e.g. the one a switch retired); count them."""

    # ---- reads -------------------------------------------------------------------------------

    @abc.abstractmethod
    async def query(
        self,
        scope: RagScope,
        *,
        embedding: Vector | Sequence[float],
        top_k: int,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> list[RagHit]:
        """The ``top_k`` chunks nearest to ``embedding`` (cosine), authorised and filtered inside
        the query; ``score`` = ``semantic`` = cosine similarity."""

    @abc.abstractmethod
    async def lexical_query(
        self,
        scope: RagScope,
        *,
        text: str,
        top_k: int,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> list[RagHit]:
        """The ``top_k`` chunks with the best BM25 for ``text`` (only chunks holding a query term),
        against :meth:`lexical_stats` of the same selection; authorised and filtered inside the
        query. ``score`` = ``lexical`` = BM25."""

    @abc.abstractmethod
    async def lexical_stats(
        self,
        scope: RagScope,
        *,
        text: str,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> CorpusStats:
        """BM25 statistics of the chunks a query with these arguments may see: how many there are,
        their total term count, and the document frequency of each query term."""

    # ---- generations -------------------------------------------------------------------------

    @abc.abstractmethod
    async def get_current_generation(self, scope: RagScope) -> int:
        """The scope's current generation (0 until one is set)."""

    @abc.abstractmethod
    async def set_current_generation(self, scope: RagScope, generation: int) -> None:
        """Make ``generation`` current: every later read sees it, none sees a mix."""

    # ---- access ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def set_source_access(
        self,
        scope: RagScope,
        source_id: str,
        *,
        principal_ids: Sequence[str] = (),
        group_ids: Sequence[str] = (),
        access_version: int,
    ) -> None:
        """Replace the grants of ``source_id`` in ``scope`` (empty lists revoke them all)."""

    @abc.abstractmethod
    async def get_source_access(self, scope: RagScope, source_id: str) -> SourceAccess | None:
        """The grants of ``source_id`` in ``scope``, or ``None`` when it has none."""

    async def check_source_access(
        self, scope: RagScope, source_id: str, authorization: AccessConstraint
    ) -> bool:
        """Whether ``authorization`` may read ``source_id`` in ``scope`` (the query's own rule)."""
        if not isinstance(authorization, AccessConstraint):
            raise ValidationError("authorization must be an AccessConstraint")
        grants = await self.get_source_access(scope, source_id)
        return grants is not None and grants.allows(authorization)


class RagStore(RagOperations):
    """A RAG store: :class:`RagOperations` plus all-or-nothing transactions and ``close``."""

    @abc.abstractmethod
    def transaction(self) -> AbstractAsyncContextManager[RagOperations]:
        """``async with store.transaction() as tx:`` -- every write through ``tx`` applies when
        the block exits normally and none does if it raises. Reads through ``tx`` see its own
        writes; other callers see none of them until the block exits."""

    async def close(self) -> None:
        """Release resources the store owns."""


class RagStoreByCall(RagStore):
    """A :class:`RagStore` whose every call is one :class:`RagOperations` call on the object
    :meth:`_operations` opens for it -- the adapter's unit of work, or a view of its committed
    state -- so the two adapters state once how a store call reaches its operations.
    """

    @abc.abstractmethod
    def _operations(
        self, action: str, *, write: bool, ranked: bool = False
    ) -> AbstractAsyncContextManager[RagOperations]:
        """The operations one call named ``action`` runs on, applied when the block exits
        (``write``: it changes chunks, generations or grants, atomically; ``ranked``: a query or
        its statistics)."""

    @otel.traced("update_memory", "rag.upsert", count=lambda written: written)
    async def upsert(
        self, scope: RagScope, chunks: Sequence[Chunk], *, generation: int | None = None
    ) -> int:
        """Insert or replace ``chunks``, atomically (see :meth:`RagOperations.upsert`)."""
        async with self._operations("upsert", write=True) as ops:
            return await ops.upsert(scope, chunks, generation=generation)

    @otel.traced("get_memory", "rag.get_by_source", count=len)
    async def get_by_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> list[Chunk]:
        """The chunks of ``source_id`` by index."""
        async with self._operations("get_by_source", write=False) as ops:
            return await ops.get_by_source(scope, source_id, generation=generation)

    @otel.traced("get_memory", "rag.list_sources", count=len)
    async def list_sources(
        self,
        scope: RagScope,
        *,
        generation: int | None = None,
        after: str | None = None,
        limit: int,
    ) -> list[str]:
        """The next ``limit`` source ids of the generation after ``after``."""
        async with self._operations("list_sources", write=False) as ops:
            return await ops.list_sources(scope, generation=generation, after=after, limit=limit)

    @otel.traced("delete_memory", "rag.delete_source", count=lambda deleted: deleted)
    async def delete_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> int:
        """Delete the chunks of ``source_id``, atomically; count them."""
        async with self._operations("delete_source", write=True) as ops:
            return await ops.delete_source(scope, source_id, generation=generation)

    @otel.traced("delete_memory", "rag.delete_generation", count=lambda deleted: deleted)
    async def delete_generation(self, scope: RagScope, generation: int) -> int:
        """Delete every chunk of ``generation``, atomically; count them."""
        async with self._operations("delete_generation", write=True) as ops:
            return await ops.delete_generation(scope, generation)

    @otel.traced("retrieval", "rag.query", count=len)
    async def query(
        self,
        scope: RagScope,
        *,
        embedding: Vector | Sequence[float],
        top_k: int,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> list[RagHit]:
        """The ``top_k`` nearest authorised chunks, from one snapshot."""
        async with self._operations("query", write=False, ranked=True) as ops:
            return await ops.query(
                scope,
                embedding=embedding,
                top_k=top_k,
                filter=filter,
                authorization=authorization,
                generation=generation,
            )

    @otel.traced("retrieval", "rag.lexical_query", count=len)
    async def lexical_query(
        self,
        scope: RagScope,
        *,
        text: str,
        top_k: int,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> list[RagHit]:
        """The best lexical matches among authorised chunks, from one snapshot."""
        async with self._operations("lexical_query", write=False, ranked=True) as ops:
            return await ops.lexical_query(
                scope,
                text=text,
                top_k=top_k,
                filter=filter,
                authorization=authorization,
                generation=generation,
            )

    @otel.traced("retrieval", "rag.lexical_stats")
    async def lexical_stats(
        self,
        scope: RagScope,
        *,
        text: str,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> CorpusStats:
        """BM25 statistics of the chunks such a query may see."""
        async with self._operations("lexical_stats", write=False, ranked=True) as ops:
            return await ops.lexical_stats(
                scope, text=text, filter=filter, authorization=authorization, generation=generation
            )

    @otel.traced("get_memory", "rag.get_current_generation")
    async def get_current_generation(self, scope: RagScope) -> int:
        """The scope's current generation (0 until set)."""
        async with self._operations("get_current_generation", write=False) as ops:
            return await ops.get_current_generation(scope)

    @otel.traced("update_memory", "rag.set_current_generation")
    async def set_current_generation(self, scope: RagScope, generation: int) -> None:
        """Make ``generation`` current, atomically."""
        async with self._operations("set_current_generation", write=True) as ops:
            await ops.set_current_generation(scope, generation)

    @otel.traced("update_memory", "rag.set_source_access")
    async def set_source_access(
        self,
        scope: RagScope,
        source_id: str,
        *,
        principal_ids: Sequence[str] = (),
        group_ids: Sequence[str] = (),
        access_version: int,
    ) -> None:
        """Replace the grants of ``source_id``, atomically."""
        async with self._operations("set_source_access", write=True) as ops:
            await ops.set_source_access(
                scope,
                source_id,
                principal_ids=principal_ids,
                group_ids=group_ids,
                access_version=access_version,
            )

    @otel.traced("get_memory", "rag.get_source_access")
    async def get_source_access(self, scope: RagScope, source_id: str) -> SourceAccess | None:
        """The grants of ``source_id``, or ``None``."""
        async with self._operations("get_source_access", write=False) as ops:
            return await ops.get_source_access(scope, source_id)


def resolve_scope(scope: object) -> RagScope:
    """``scope`` as a :class:`RagScope` (mappings accepted)."""
    return RagScope.of(scope)  # type: ignore[arg-type]  # RagScope.of validates


def resolve_generation(generation: object | None) -> int | None:
    """``None`` or a checked generation number."""
    return None if generation is None else check_generation(generation)


def resolve_filter(filter: object) -> dict[str, JsonScalar] | None:
    """A checked metadata filter."""
    return check_filter(filter)
