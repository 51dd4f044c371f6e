"""``reembed_generation``: copy a RAG scope's generation into another with a new model's vectors.

The RAG side of a model change (docs/rag.md, "Changing the embedding model"): readers keep the
current generation while the target is built, then one ``set_current_generation`` switches the
scope, and setting it back rolls the switch back.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .. import _telemetry as otel
from ..embedding import Embedder, embed_batched, embedder_model
from ..errors import ConfigurationError, ConflictError, DimensionMismatchError, ValidationError
from ..models import Vector
from ..rag_types import Chunk, RagScope, check_generation, chunk_digest
from ..stores.rag_base import RagStore, resolve_generation

__all__ = ["ReembedReport", "reembed_generation"]

SOURCES_PER_PAGE = 64
"""How many sources one step of :func:`reembed_generation` reads, embeds and writes."""


@dataclass(frozen=True, slots=True)
class ReembedReport:
    """What :func:`reembed_generation` did (so far, when handed to ``on_progress``).

    ``sources`` counts the sources of the source generation visited, ``copied`` those written to
    the target and ``unchanged`` those the target already held exactly (text, metadata and
    digests by index, every chunk of the embedder's model); ``chunks`` counts the chunks of the
    visited sources and ``embedded`` the chunk texts sent to the embedder (a chunk whose digest
    the target already holds with the embedder's model reuses that vector).
    """

    scope: RagScope
    source_generation: int
    target_generation: int
    model: str
    sources: int = 0
    copied: int = 0
    unchanged: int = 0
    chunks: int = 0
    embedded: int = 0


ProgressCallback = Callable[[ReembedReport], "Awaitable[None] | None"]
"""Called with the report after each page of sources (may be a coroutine function)."""


@otel.traced("update_memory", "rag.reembed_generation", count=lambda report: report.chunks)
async def reembed_generation(
    store: RagStore,
    scope: RagScope | Mapping[str, Any],
    *,
    embedder: Embedder,
    target_generation: int,
    source_generation: int | None = None,
    batch_size: int = 32,
    on_progress: ProgressCallback | None = None,
) -> ReembedReport:
    """Copy every source of ``source_generation`` (default: the scope's current generation) into
    ``target_generation`` with ``embedder``'s vectors; resumable.

    Text, metadata, digests and indexes are kept; each chunk records the embedder's ``model``
    (required). Only chunks whose ``(digest, model)`` the target does not hold yet are embedded
    (in batches of ``batch_size`` ≤ 128), so running it again after an interruption embeds
    nothing already done; each source is replaced in the target in one transaction. The target
    must not be the source (:class:`~prism_memory.errors.ValidationError`) nor the scope's
    current generation (:class:`~prism_memory.errors.ConflictError`): readers must never see a
    half-built generation. Switch with ``store.set_current_generation(scope, target)`` once it
    returns; sources of the target that the source generation does not hold are left alone.
    """
    scope = RagScope.of(scope)
    model = embedder_model(embedder)
    if model is None:
        raise ConfigurationError("reembed_generation needs an embedder with a model identifier")
    pinned = store.dimension
    if pinned is not None and embedder.dimensions != pinned:
        raise DimensionMismatchError(
            f"embedder width {embedder.dimensions} differs from the store's pinned {pinned}"
        )
    target = check_generation(target_generation, "target_generation")
    current = await store.get_current_generation(scope)
    source = resolve_generation(source_generation)
    source = current if source is None else source
    if target == source:
        raise ValidationError("target_generation must differ from the source generation")
    if target == current:
        raise ConflictError("target_generation is the scope's current generation")
    report = ReembedReport(scope, source, target, model)
    after: str | None = None
    while page := await store.list_sources(
        scope, generation=source, after=after, limit=SOURCES_PER_PAGE
    ):
        report = await _copy_page(store, report, page, embedder, batch_size)
        after = page[-1]
        if on_progress is not None:
            outcome = on_progress(report)
            if inspect.isawaitable(outcome):
                await outcome
    return report


async def _copy_page(
    store: RagStore,
    report: ReembedReport,
    page: list[str],
    embedder: Embedder,
    batch_size: int,
) -> ReembedReport:
    """Copy one page of sources: embed what the target lacks, then write each changed source."""
    scope, model = report.scope, report.model
    plans: list[tuple[str, list[Chunk], list[Chunk]]] = []
    done: dict[str, Vector] = {}
    for source_id in page:
        chunks = await store.get_by_source(scope, source_id, generation=report.source_generation)
        held = await store.get_by_source(scope, source_id, generation=report.target_generation)
        done.update((c.digest, c.embedding) for c in held if c.embedding_model == model)
        plans.append((source_id, chunks, held))
    missing = list(
        dict.fromkeys(c.text for _, chunks, _ in plans for c in chunks if c.digest not in done)
    )
    if missing:
        vectors = await embed_batched(embedder, missing, batch_size=batch_size)
        for text, vector in zip(missing, vectors, strict=True):
            done[chunk_digest(text)] = vector
    copied = unchanged = chunk_count = 0
    for source_id, chunks, held in plans:
        chunk_count += len(chunks)
        copies = [replace(c, embedding=done[c.digest], embedding_model=model) for c in chunks]
        if _same(copies, held):
            unchanged += 1
            continue
        async with store.transaction() as tx:
            if await tx.get_current_generation(scope) == report.target_generation:
                raise ConflictError("target_generation became the scope's current generation")
            await tx.delete_source(scope, source_id, generation=report.target_generation)
            if copies:
                await tx.upsert(scope, copies, generation=report.target_generation)
        copied += 1
    return replace(
        report,
        sources=report.sources + len(page),
        copied=report.copied + copied,
        unchanged=report.unchanged + unchanged,
        chunks=report.chunks + chunk_count,
        embedded=report.embedded + len(missing),
    )


def _same(copies: list[Chunk], held: list[Chunk]) -> bool:
    """Whether the target already holds exactly these chunks, of the same model."""
    return len(copies) == len(held) and all(
        (c.index, c.digest, c.metadata, c.embedding_model)
        == (h.index, h.digest, h.metadata, h.embedding_model)
        for c, h in zip(copies, held, strict=True)
    )
