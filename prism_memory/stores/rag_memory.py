"""The in-memory reference RAG store.

Each store is an instance (no class-level state). Committed state is three dictionaries; a
transaction copies, on first write, only the per-scope dictionaries it touches and swaps them in
when it commits -- synchronously, so a reader never observes half of a commit. Transactions are
serialised by one lock (one writer at a time), reads never wait.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Literal

from ..embedding import assert_finite_vector
from ..lexical import CorpusStats, term_counts
from ..models import Vector, check_key
from ..rag_types import (
    ACL,
    AccessConstraint,
    Authorization,
    Chunk,
    JsonScalar,
    RagHit,
    RagScope,
    SourceAccess,
    check_generation,
)
from ..stores.base import check_limit
from .rag_base import (
    RagOperations,
    RagStoreByCall,
    check_authorization,
    check_chunks,
    check_sources_page,
    check_top_k,
    lexical_score,
    lexical_terms,
    matches_filter,
    resolve_filter,
    resolve_generation,
    resolve_scope,
    vector_score,
)

__all__ = ["InMemoryRagStore"]

_ScopeKey = tuple[str, str]
"""``(tenant_id, scope.key)``."""
_Corpus = dict[tuple[str, int], Chunk]


@dataclass(slots=True)
class _State:
    chunks: dict[tuple[_ScopeKey, int], _Corpus] = field(default_factory=dict)
    generations: dict[_ScopeKey, int] = field(default_factory=dict)
    access: dict[tuple[_ScopeKey, str], SourceAccess] = field(default_factory=dict)


@functools.lru_cache(maxsize=65_536)
def _cached_counts(text: str) -> Counter[str]:
    return term_counts(text)


def _cached_terms(text: str) -> frozenset[str]:
    return frozenset(_cached_counts(text))


def _stats(chunks: Sequence[Chunk], terms: Sequence[str]) -> CorpusStats:
    """N, total term count and per-term document frequency of ``chunks`` (cached tokenization)."""
    frequency: Counter[str] = Counter()
    total = 0
    for chunk in chunks:
        counts = _cached_counts(chunk.text)
        total += sum(counts.values())
        frequency.update(term for term in terms if term in counts)
    return CorpusStats(len(chunks), total, dict(frequency))


def _key(scope: RagScope) -> _ScopeKey:
    return (scope.tenant_id, scope.key)


class _View(RagOperations):
    """Reads and writes against a state; the store reads committed state, a transaction its own."""

    def __init__(self, store: InMemoryRagStore, state: _State) -> None:
        self._store = store
        self._state = state
        self._copied: set[tuple[_ScopeKey, int]] = set()

    @property
    def dimension(self) -> int | None:
        """The store's pinned width, or ``None``."""
        return self._store.dimension

    def _generation(self, scope: RagScope, generation: int | None) -> int:
        resolved = resolve_generation(generation)
        if resolved is not None:
            return resolved
        return self._state.generations.get(_key(scope), 0)

    def _writable(self, key: tuple[_ScopeKey, int]) -> _Corpus:
        corpus = self._state.chunks.get(key)
        if key not in self._copied:
            corpus = dict(corpus or {})
            self._state.chunks[key] = corpus
            self._copied.add(key)
        assert corpus is not None
        return corpus

    # ---- chunks ------------------------------------------------------------------------------

    async def upsert(
        self, scope: RagScope, chunks: Sequence[Chunk], *, generation: int | None = None
    ) -> int:
        """Insert or replace ``chunks`` (see :meth:`RagOperations.upsert`)."""
        scope = resolve_scope(scope)
        checked = check_chunks(chunks)
        gen = self._generation(scope, generation)
        if not checked:
            return 0
        width = self._store.width
        vectors: list[Vector] = []
        for chunk in checked:
            vector = assert_finite_vector(
                chunk.embedding, f"embedding of {chunk.source_id}#{chunk.index}", width
            )
            width = vector.shape[0]
            vectors.append(vector)
        corpus = self._writable((_key(scope), gen))
        for chunk, vector in zip(checked, vectors, strict=True):
            stored = Chunk(
                source_id=chunk.source_id,
                index=chunk.index,
                text=chunk.text,
                embedding=vector,
                metadata=chunk.metadata,
                digest=chunk.digest,
                embedding_model=chunk.embedding_model,
            )
            corpus[(chunk.source_id, chunk.index)] = stored
        self._store.learn_width(width)
        return len(checked)

    async def get_by_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> list[Chunk]:
        """The chunks of ``source_id`` by index."""
        scope = resolve_scope(scope)
        check_key(source_id, "source_id")
        corpus = self._state.chunks.get((_key(scope), self._generation(scope, generation)), {})
        return sorted(
            (chunk for (source, _), chunk in corpus.items() if source == source_id),
            key=lambda chunk: chunk.index,
        )

    async def list_sources(
        self,
        scope: RagScope,
        *,
        generation: int | None = None,
        after: str | None = None,
        limit: int,
    ) -> list[str]:
        """The next ``limit`` source ids of the generation after ``after``, in code-point order."""
        scope = resolve_scope(scope)
        check_sources_page(after, limit)
        corpus = self._state.chunks.get((_key(scope), self._generation(scope, generation)), {})
        sources = {source for source, _ in corpus if after is None or source > after}
        return sorted(sources)[:limit]

    async def delete_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> int:
        """Delete the chunks of ``source_id``; count them."""
        scope = resolve_scope(scope)
        check_key(source_id, "source_id")
        key = (_key(scope), self._generation(scope, generation))
        if not any(source == source_id for source, _ in self._state.chunks.get(key, {})):
            return 0
        corpus = self._writable(key)
        doomed = [k for k in corpus if k[0] == source_id]
        for k in doomed:
            del corpus[k]
        return len(doomed)

    async def delete_generation(self, scope: RagScope, generation: int) -> int:
        """Delete every chunk of ``generation``; count them."""
        scope = resolve_scope(scope)
        key = (_key(scope), check_generation(generation))
        count = len(self._state.chunks.get(key, {}))
        if count:
            self._writable(key).clear()
        return count

    # ---- reads -------------------------------------------------------------------------------

    def _candidates(
        self,
        scope: RagScope,
        generation: int | None,
        filter: Mapping[str, JsonScalar] | None,
        authorization: Authorization,
    ) -> tuple[int, list[Chunk]]:
        scope = resolve_scope(scope)
        checked_filter = resolve_filter(filter)
        auth = check_authorization(authorization)
        gen = self._generation(scope, generation)
        if auth == ACL:
            return gen, []
        corpus = self._state.chunks.get((_key(scope), gen), {})
        granted: dict[str, bool] = {}

        def allowed(source_id: str) -> bool:
            if not isinstance(auth, AccessConstraint):
                return True
            if source_id not in granted:
                grants = self._state.access.get((_key(scope), source_id))
                granted[source_id] = grants is not None and grants.allows(auth)
            return granted[source_id]

        return gen, [
            chunk
            for chunk in corpus.values()
            if allowed(chunk.source_id) and matches_filter(chunk.metadata, checked_filter)
        ]

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
        """Exact cosine search over the authorised, filtered chunks of the generation."""
        check_top_k(top_k)
        query = assert_finite_vector(embedding, "query embedding", self._store.width)
        gen, candidates = self._candidates(scope, generation, filter, authorization)
        scored = [(vector_score(query, chunk.embedding), chunk) for chunk in candidates]
        return _best(scored, gen, top_k, leg="semantic")

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
        """The best BM25 matches among the authorised, filtered chunks of the generation."""
        check_top_k(top_k)
        terms = lexical_terms(text)
        gen, candidates = self._candidates(scope, generation, filter, authorization)
        if not terms:
            return []
        stats = _stats(candidates, terms)
        scored = [
            (lexical_score(terms, chunk.text, stats), chunk)
            for chunk in candidates
            if not _cached_terms(chunk.text).isdisjoint(terms)
        ]
        return _best(scored, gen, top_k, leg="lexical")

    async def lexical_stats(
        self,
        scope: RagScope,
        *,
        text: str,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> CorpusStats:
        """BM25 statistics of the authorised, filtered chunks of the generation."""
        terms = lexical_terms(text)
        _, candidates = self._candidates(scope, generation, filter, authorization)
        return _stats(candidates, terms)

    # ---- generations -------------------------------------------------------------------------

    async def get_current_generation(self, scope: RagScope) -> int:
        """The scope's current generation (0 until set)."""
        return self._state.generations.get(_key(resolve_scope(scope)), 0)

    async def set_current_generation(self, scope: RagScope, generation: int) -> None:
        """Make ``generation`` current."""
        self._state.generations[_key(resolve_scope(scope))] = check_generation(generation)

    # ---- access ------------------------------------------------------------------------------

    async def set_source_access(
        self,
        scope: RagScope,
        source_id: str,
        *,
        principal_ids: Sequence[str] = (),
        group_ids: Sequence[str] = (),
        access_version: int,
    ) -> None:
        """Replace the grants of ``source_id`` (empty lists revoke)."""
        scope = resolve_scope(scope)
        grants = SourceAccess.of(principal_ids, group_ids, access_version)
        check_key(source_id, "source_id")
        key = (_key(scope), source_id)
        if grants.principal_ids or grants.group_ids:
            self._state.access[key] = grants
        else:
            self._state.access.pop(key, None)

    async def get_source_access(self, scope: RagScope, source_id: str) -> SourceAccess | None:
        """The grants of ``source_id``, or ``None``."""
        check_key(source_id, "source_id")
        return self._state.access.get((_key(resolve_scope(scope)), source_id))


class InMemoryRagStore(RagStoreByCall):
    """:class:`~prism_memory.stores.rag_base.RagStore` in process memory (exact search).

    ``dimension`` pins the vector width; unpinned, the first vector written fixes it. A read
    runs on a view of the committed state, a write in its own transaction.
    """

    def __init__(self, *, dimension: int | None = None) -> None:
        if dimension is not None:
            check_limit(dimension, "dimension")
        self._dimension = dimension
        self._width = dimension
        self._lock = asyncio.Lock()
        self._state = _State()

    def __repr__(self) -> str:
        return f"InMemoryRagStore(dimension={self._dimension})"

    @property
    def dimension(self) -> int | None:
        """The pinned width, or ``None``."""
        return self._dimension

    @property
    def width(self) -> int | None:
        """The width every vector must have: pinned, or learned from the first write."""
        return self._width

    def learn_width(self, width: int | None) -> None:
        """Remember the width of the first vectors written to an unpinned store."""
        if self._width is None:
            self._width = width

    def transaction(self) -> AbstractAsyncContextManager[RagOperations]:
        """All-or-nothing writes (see :meth:`RagStore.transaction`)."""
        return self._transaction()

    def _operations(
        self, action: str, *, write: bool, ranked: bool = False
    ) -> AbstractAsyncContextManager[RagOperations]:
        """A write's transaction, or a view of the committed state (reads never wait)."""
        return self._transaction() if write else nullcontext(_View(self, self._state))

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[RagOperations]:
        async with self._lock:
            committed = self._state
            staged = _State(
                chunks=dict(committed.chunks),
                generations=dict(committed.generations),
                access=dict(committed.access),
            )
            width = self._width
            view = _View(self, staged)
            try:
                yield view
            except BaseException:
                self._width = width
                raise
            # Commit: swap the staged dictionaries in, with no await in between.
            self._state = staged


def _best(
    scored: list[tuple[float, Chunk]],
    generation: int,
    top_k: int,
    *,
    leg: Literal["semantic", "lexical"],
) -> list[RagHit]:
    """The ``top_k`` best of ``scored`` as hits of one leg: score desc, source id, chunk index."""
    scored.sort(key=lambda pair: (-pair[0], pair[1].source_id, pair[1].index))
    return [
        RagHit(
            source_id=chunk.source_id,
            chunk_index=chunk.index,
            text=chunk.text,
            metadata=chunk.metadata,
            generation=generation,
            score=score,
            semantic=score if leg == "semantic" else None,
            lexical=score if leg == "lexical" else None,
            embedding=chunk.embedding,
            embedding_model=chunk.embedding_model,
        )
        for score, chunk in scored[:top_k]
    ]
