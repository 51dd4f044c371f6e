"""``ingest`` and ``hybrid_query``: plain async functions over the RAG store contract."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _telemetry as otel
from ..embedding import Embedder, assert_finite_vector, embed_batched, embedder_model
from ..errors import DimensionMismatchError, EmbeddingModelMismatchError, ValidationError
from ..limits import CEILINGS
from ..models import DEFAULT_LEXICAL_WEIGHT, Vector, check_key
from ..rag_types import (
    Authorization,
    Chunk,
    IngestResult,
    JsonScalar,
    RagHit,
    RagScope,
    check_metadata,
    chunk_digest,
)
from ..stores.rag_base import RagStore, check_top_k, resolve_generation
from ._fusion import fuse_legs
from .chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, chunk_text

__all__ = ["hybrid_query", "ingest"]


@otel.traced("create_memory", "rag.ingest", count=lambda result: result.chunks)
async def ingest(
    store: RagStore,
    scope: RagScope | Mapping[str, Any],
    source_id: str,
    text: str,
    *,
    embedder: Embedder,
    metadata: Mapping[str, Any] | None = None,
    generation: int | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    batch_size: int = 32,
) -> IngestResult:
    """Chunk ``text``, embed what changed, and replace ``source_id``'s chunks in one transaction.

    * Chunking is :func:`~prism_memory.rag.chunking.chunk_text` (``chunk_size``/``chunk_overlap``).
    * Each chunk's content digest is compared with what the store holds for the source in
      ``generation`` (default: the scope's current generation): when every digest and the metadata
      are unchanged nothing is embedded or written (``unchanged=True``); otherwise only chunks whose
      digest is new go to the embedder, in batches of ``batch_size`` (≤ 128), and the source's old
      chunks are replaced atomically -- a reader sees the old version or the new one, never both.
    * Every vector is checked (finite, the store's width) before anything is written.
    * Every chunk records the embedder's ``model`` (:func:`~prism_memory.embedding.embedder_model`)
      as its ``embedding_model``. A stored vector of another model is never kept: re-ingesting a
      source with another model embeds every chunk again.

    To rebuild a whole corpus without readers seeing a mix, ingest every source with
    ``generation=g`` (a generation nobody reads yet), then
    ``await store.set_current_generation(scope, g)``.
    """
    scope = RagScope.of(scope)
    check_key(source_id, "source_id")
    clean_metadata = check_metadata(metadata)
    pieces = chunk_text(text, size=chunk_size, overlap=chunk_overlap)
    pinned = store.dimension
    if pinned is not None and embedder.dimensions != pinned:
        raise DimensionMismatchError(
            f"embedder width {embedder.dimensions} differs from the store's pinned {pinned}"
        )
    gen = resolve_generation(generation)
    if gen is None:
        gen = await store.get_current_generation(scope)
    model = embedder_model(embedder)
    digests = [chunk_digest(piece) for piece in pieces]
    existing = await store.get_by_source(scope, source_id, generation=gen)
    if [(c.index, c.digest) for c in existing] == list(enumerate(digests)) and all(
        c.metadata == clean_metadata and (model is None or c.embedding_model == model)
        for c in existing
    ):
        return IngestResult(source_id, gen, len(pieces), 0, unchanged=True)

    # A stored vector is reused only when it is of the embedder's model (or either side does not
    # say: trusted, as queries trust it); another model's chunks are all embedded again.
    reuse: dict[str, tuple[Vector, str | None]] = {
        chunk.digest: (chunk.embedding, chunk.embedding_model if model is None else model)
        for chunk in existing
        if model is None or chunk.embedding_model in (None, model)
    }
    missing = list(dict.fromkeys(p for p, d in zip(pieces, digests, strict=True) if d not in reuse))
    if missing:
        vectors = await embed_batched(embedder, missing, batch_size=batch_size)
        for piece, vector in zip(missing, vectors, strict=True):
            reuse[chunk_digest(piece)] = (vector, model)
    chunks = [
        Chunk(
            source_id=source_id,
            index=index,
            text=piece,
            embedding=reuse[digest][0],
            metadata=clean_metadata,
            digest=digest,
            embedding_model=reuse[digest][1],
        )
        for index, (piece, digest) in enumerate(zip(pieces, digests, strict=True))
    ]
    async with store.transaction() as tx:
        await tx.delete_source(scope, source_id, generation=gen)
        await tx.upsert(scope, chunks, generation=gen)
    return IngestResult(source_id, gen, len(chunks), len(missing), unchanged=False)


@otel.traced("retrieval", "rag.hybrid_query", count=len)
async def hybrid_query(
    store: RagStore,
    scope: RagScope | Mapping[str, Any],
    *,
    text: str,
    top_k: int,
    embedding: Vector | Sequence[float] | None = None,
    embedder: Embedder | None = None,
    filter: Mapping[str, JsonScalar] | None = None,
    authorization: Authorization = None,
    generation: int | None = None,
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT,
    next_embedder: Embedder | None = None,
) -> list[RagHit]:
    """Vector and lexical legs over one generation, fused by recall's own fusion function.

    Give the query's ``embedding`` or an ``embedder`` to compute it from ``text``. Both legs fetch
    ``min(32, 4 × top_k)`` candidates with the same ``filter`` and ``authorization`` (applied
    inside each query, before ranking) from the same generation (resolved once: the current one
    unless ``generation`` is given); :func:`prism_memory.ranking.fuse` -- the fusion recall uses --
    orders their union against the BM25 statistics of that same authorised, filtered selection
    (:meth:`~prism_memory.rag.RagStore.lexical_stats`), and the best ``top_k`` are returned. Each hit
    carries the fused ``score``, the true cosine ``semantic`` and the raw BM25 ``lexical``;
    ``lexical_weight`` is the fusion's λ (recall's default unless given).

    Vectors of two models are never compared. When the hits were made by another model than
    ``embedder``'s (chunks that record none are trusted as the query's),
    :class:`~prism_memory.errors.EmbeddingModelMismatchError` is raised -- unless
    ``next_embedder`` is of exactly their model: the query is then embedded with it and the
    generation queried again, once (during a model change, a host that already runs the new
    model answers from either generation). Hits of two models in one generation raise the same
    error.
    """
    scope = RagScope.of(scope)
    check_top_k(top_k)
    weight = _check_weight(lexical_weight)
    if embedding is None:
        if embedder is None:
            raise ValidationError("hybrid_query needs an embedding or an embedder")
        embedding = (await embed_batched(embedder, [text], batch_size=1))[0]
    query_model = None if embedder is None else embedder_model(embedder)
    query_vector = assert_finite_vector(embedding, "query embedding")
    gen = resolve_generation(generation)
    if gen is None:
        gen = await store.get_current_generation(scope)
    pool = min(CEILINGS["top_k"], 4 * top_k)
    legs: dict[str, Any] = {"filter": filter, "authorization": authorization, "generation": gen}
    vector_hits = await store.query(scope, embedding=query_vector, top_k=pool, **legs)
    lexical_hits = await store.lexical_query(scope, text=text, top_k=pool, **legs)
    stats = await store.lexical_stats(scope, text=text, **legs)
    stored = _hits_model(vector_hits, lexical_hits)
    if query_model is not None and stored is not None and stored != query_model:
        if next_embedder is None or embedder_model(next_embedder) != stored:
            raise EmbeddingModelMismatchError(
                "the generation's chunks were embedded by another model than the query's "
                "embedder; pass next_embedder= of their model, or query a generation of yours"
            )
        embedding = (await embed_batched(next_embedder, [text], batch_size=1))[0]
        query_vector = assert_finite_vector(embedding, "query embedding")
        vector_hits = await store.query(scope, embedding=query_vector, top_k=pool, **legs)
        if _hits_model(vector_hits, lexical_hits) not in (None, stored):
            raise EmbeddingModelMismatchError(
                "the generation's chunks changed model while it was queried; query it again"
            )
    return fuse_legs(
        vector_hits,
        lexical_hits,
        query_vector=query_vector,
        query_text=text,
        stats=stats,
        top_k=top_k,
        lexical_weight=weight,
    )


def _hits_model(*legs: Sequence[RagHit]) -> str | None:
    """The one model the hits record (``None``: none records one); two models raise."""
    models = {hit.embedding_model for leg in legs for hit in leg} - {None}
    if len(models) > 1:
        raise EmbeddingModelMismatchError(
            "the generation holds chunks of two embedding models; re-embed it into one model "
            "(prism_memory.rag.reembed_generation) before querying it"
        )
    return next(iter(models), None)


def _check_weight(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0.0 <= value <= 1.0
    ):
        raise ValidationError("lexical_weight must be a finite number in [0, 1]")
    return float(value)
