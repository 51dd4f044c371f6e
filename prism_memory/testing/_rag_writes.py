"""RAG conformance checks of writes: generation switches, transactions, idempotent re-ingest, bad vectors.

They run on every RAG store through :data:`~prism_memory.testing.RAG_CONFORMANCE_CHECKS`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import numpy as np

from ..embedding import Embedder
from ..errors import InvalidVectorError
from ..lexical import CorpusStats
from ..rag_types import (
    Chunk,
    IngestResult,
    RagHit,
    RagScope,
    SourceAccess,
)
from ..stores.rag_base import RagOperations, RagStore
from ._fixtures import NonFiniteEmbedder
from ._rag_support import RagConformanceKit, _Case, _toward, _unit
from ._support import _check, _raises

__all__ = ["RAG_WRITE_CHECKS"]


async def generation_switch_never_mixes(kit: RagConformanceKit) -> None:
    """20 concurrent queries while the generation flips: each sees exactly one generation."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    size = 6
    for generation, word in ((1, "old"), (2, "new")):
        await store.upsert(
            scope,
            [
                case.chunk("doc", i, f"{word} edition part {i}", _toward(w, 1 + i, 0.1 * (i + 1)))
                for i in range(size)
            ],
            generation=generation,
        )
    await store.set_current_generation(scope, 1)
    q = _unit(w, 0)
    stop = asyncio.Event()

    async def flip() -> int:
        flips = 0
        while not stop.is_set():
            flips += 1
            await store.set_current_generation(scope, 2 if flips % 2 else 1)
            await asyncio.sleep(0)
        return flips

    async def reader(n: int) -> list[list[RagHit]]:
        results = []
        for _ in range(3):
            if n % 2:
                results.append(await store.query(scope, embedding=q, top_k=size))
            else:
                results.append(await store.lexical_query(scope, text="edition", top_k=size))
        return results

    flipper = asyncio.ensure_future(flip())
    try:
        batches = await asyncio.gather(*(reader(n) for n in range(20)))
    finally:
        stop.set()
        await flipper
    for batch in batches:
        for hits in batch:
            generations = {hit.generation for hit in hits}
            words = {hit.text.split()[0] for hit in hits}
            _check(len(hits) == size, f"a query returned {len(hits)} of {size} chunks")
            _check(
                len(generations) == 1 and len(words) == 1,
                f"a query mixed generations: {sorted(generations)} {sorted(words)}",
            )
            _check(
                words == {"old" if generations == {1} else "new"},
                "hit.generation does not name the generation it came from",
            )


async def transaction_that_raises_leaves_nothing(kit: RagConformanceKit) -> None:
    """Every write in a failed transaction is undone; a committed one applies entirely."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    await store.upsert(scope, [case.chunk("keep", 0, "kept text", _unit(w, 1))])
    await store.set_source_access(scope, "keep", principal_ids=["ann"], access_version=1)
    before = (
        _keys_of(await store.get_by_source(scope, "keep")),
        await store.get_source_access(scope, "keep"),
        await store.get_current_generation(scope),
    )

    class BoomError(Exception):
        pass

    try:
        async with store.transaction() as tx:
            await tx.upsert(scope, [case.chunk("new", 0, "fresh text", _unit(w, 2))])
            await tx.delete_source(scope, "keep")
            await tx.set_source_access(scope, "keep", principal_ids=["mallory"], access_version=2)
            await tx.set_current_generation(scope, 7)
            _check(
                len(await tx.get_by_source(scope, "new", generation=0)) == 1, "tx reads its writes"
            )
            _check(await tx.get_current_generation(scope) == 7, "tx reads its own generation")
            _check(await store.get_by_source(scope, "new") == [], "others see no uncommitted write")
            raise BoomError
    except BoomError:
        pass
    after = (
        _keys_of(await store.get_by_source(scope, "keep")),
        await store.get_source_access(scope, "keep"),
        await store.get_current_generation(scope),
    )
    _check(after == before, f"a raising transaction left traces: {before} -> {after}")
    _check(await store.get_by_source(scope, "new") == [], "a raising transaction wrote a chunk")

    bad = case.chunk("new", 0, "fresh text", _unit(w, 2))
    object.__setattr__(bad, "embedding", np.full(w, np.nan, dtype=np.float32))
    await _raises(InvalidVectorError, _bad_transaction(store, scope, case, bad), "NaN in a tx")
    _check(await store.get_by_source(scope, "new", generation=0) == [], "a failed tx wrote a chunk")
    _check(len(await store.get_by_source(scope, "keep")) == 1, "a failed tx deleted a chunk")

    async with store.transaction() as tx:
        await tx.upsert(scope, [case.chunk("new", 0, "fresh text", _unit(w, 2))], generation=3)
        await tx.set_current_generation(scope, 3)
    _check(await store.get_current_generation(scope) == 3, "a committed tx applies")
    _check(len(await store.get_by_source(scope, "new")) == 1, "a committed tx applies its chunks")


def _keys_of(chunks: Sequence[Chunk]) -> list[tuple[str, int, str]]:
    return [(c.source_id, c.index, c.digest) for c in chunks]


async def _bad_transaction(store: RagStore, scope: RagScope, case: _Case, bad: Chunk) -> None:
    async with store.transaction() as tx:
        await tx.delete_source(scope, "keep")
        await tx.upsert(scope, [bad])


class _CountingStore(RagStore):
    """Delegates to a store and counts the calls that write."""

    def __init__(self, inner: RagStore) -> None:
        self.inner = inner
        self.writes = 0

    @property
    def dimension(self) -> int | None:
        return self.inner.dimension

    def transaction(self) -> AbstractAsyncContextManager[RagOperations]:
        self.writes += 1
        return self.inner.transaction()

    async def upsert(self, *args: Any, **kwargs: Any) -> int:
        self.writes += 1
        return await self.inner.upsert(*args, **kwargs)

    async def delete_source(self, *args: Any, **kwargs: Any) -> int:
        self.writes += 1
        return await self.inner.delete_source(*args, **kwargs)

    async def delete_generation(self, *args: Any, **kwargs: Any) -> int:
        self.writes += 1
        return await self.inner.delete_generation(*args, **kwargs)

    async def set_current_generation(self, *args: Any, **kwargs: Any) -> None:
        self.writes += 1
        await self.inner.set_current_generation(*args, **kwargs)

    async def set_source_access(self, *args: Any, **kwargs: Any) -> None:
        self.writes += 1
        await self.inner.set_source_access(*args, **kwargs)

    async def get_by_source(self, *args: Any, **kwargs: Any) -> list[Chunk]:
        return await self.inner.get_by_source(*args, **kwargs)

    async def list_sources(self, *args: Any, **kwargs: Any) -> list[str]:
        return await self.inner.list_sources(*args, **kwargs)

    async def query(self, *args: Any, **kwargs: Any) -> list[RagHit]:
        return await self.inner.query(*args, **kwargs)

    async def lexical_query(self, *args: Any, **kwargs: Any) -> list[RagHit]:
        return await self.inner.lexical_query(*args, **kwargs)

    async def lexical_stats(self, *args: Any, **kwargs: Any) -> CorpusStats:
        return await self.inner.lexical_stats(*args, **kwargs)

    async def get_current_generation(self, *args: Any, **kwargs: Any) -> int:
        return await self.inner.get_current_generation(*args, **kwargs)

    async def get_source_access(self, *args: Any, **kwargs: Any) -> SourceAccess | None:
        return await self.inner.get_source_access(*args, **kwargs)


class _CountingEmbedder:
    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.texts: list[str] = []

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        return await self.inner.embed(texts)


_DOCUMENT = "\n\n".join(
    f"Pump {n} must be inspected every spring. Inspectors log its pressure readings in book {n}. "
    f"A reading above the red line stops line {n} at once. Spare seals for pump {n} are kept in "
    f"the {colour} cabinet."
    for n, colour in ((1, "blue"), (2, "grey"), (3, "white"))
)


async def reingesting_unchanged_text_writes_nothing(kit: RagConformanceKit) -> None:
    """Unchanged text and metadata: no embedding, no write; one changed chunk: one embedding."""
    from ..rag import ingest

    case = _Case(kit)
    counter = _CountingStore(case.store)
    embedder = _CountingEmbedder(case.embedder)

    async def handbook(text: str, version: int = 1) -> IngestResult:
        return await ingest(
            counter,
            case.scope,
            "handbook",
            text,
            embedder=embedder,
            metadata={"v": version},
            chunk_size=160,
            chunk_overlap=40,
        )

    first = await handbook(_DOCUMENT)
    _check(first.chunks > 2 and first.embedded == first.chunks, f"first ingest: {first}")
    stored = _keys_of(await case.store.get_by_source(case.scope, "handbook"))
    counter.writes, embedder.texts = 0, []
    again = await handbook(_DOCUMENT)
    _check(again.unchanged and again.embedded == 0, f"unchanged text re-ingested: {again}")
    _check(counter.writes == 0, f"unchanged text caused {counter.writes} writes")
    _check(embedder.texts == [], "unchanged text was embedded again")
    _check(_keys_of(await case.store.get_by_source(case.scope, "handbook")) == stored, "changed")
    edited = _DOCUMENT.replace("blue cabinet", "green cabinet", 1)
    third = await handbook(edited)
    _check(not third.unchanged and third.embedded == 1, f"one edited chunk: {third}")
    _check(embedder.texts == [t for t in embedder.texts if "green cabinet" in t], "re-embedded")
    chunks = await case.store.get_by_source(case.scope, "handbook")
    _check([c.index for c in chunks] == list(range(third.chunks)), "indexes must be 0..n-1")
    _check(any("green cabinet" in c.text for c in chunks), "the edit was not stored")
    retagged = await handbook(edited, version=2)
    _check(not retagged.unchanged and retagged.embedded == 0, "new metadata rewrites, no embed")
    shorter = await ingest(counter, case.scope, "handbook", "Only one line now.", embedder=embedder)
    _check(shorter.chunks == 1, "a shorter text replaces the source")
    _check(len(await case.store.get_by_source(case.scope, "handbook")) == 1, "old chunks remain")


async def bad_vectors_write_nothing(kit: RagConformanceKit) -> None:
    """NaN, ±inf, wrong widths, empty and non-numeric vectors: rejected, nothing written."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    await store.upsert(scope, [case.chunk("base", 0, "base text", _unit(w, 1))])
    good = case.chunk("new", 0, "good text", _unit(w, 2))
    poison: dict[str, Any] = {
        "NaN": np.full(w, np.nan),
        "+inf": np.full(w, np.inf),
        "-inf": np.full(w, -np.inf),
        "too wide": np.ones(w + 1),
        "too narrow": np.ones(w - 1),
        "empty": np.zeros(0),
        "float32 overflow": np.full(w, 1e300),
        "text": ["x"] * w,
    }
    for label, vector in poison.items():
        bad = case.chunk("new", 1, "bad text", _unit(w, 3))
        object.__setattr__(bad, "embedding", vector)
        await _raises(InvalidVectorError, store.upsert(scope, [good, bad]), f"upsert {label}")
        _check(
            await store.get_by_source(scope, "new") == [], f"{label}: the good chunk was written"
        )
        await _raises(
            InvalidVectorError,
            store.query(scope, embedding=vector, top_k=1),
            f"query with {label}",
        )
    poisoned = NonFiniteEmbedder(case.embedder, poison="second")
    from ..rag import ingest

    await _raises(
        InvalidVectorError,
        ingest(
            store,
            scope,
            "base",
            "A first sentence here. A second sentence here.",
            embedder=poisoned,
            chunk_size=24,
            chunk_overlap=0,
        ),
        "ingest with a NaN embedding",
    )
    kept = await store.get_by_source(scope, "base")
    _check([c.text for c in kept] == ["base text"], "a failed ingest changed the source")


RAG_WRITE_CHECKS: dict[str, Callable[[RagConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        generation_switch_never_mixes,
        transaction_that_raises_leaves_nothing,
        reingesting_unchanged_text_writes_nothing,
        bad_vectors_write_nothing,
    )
}
"""The checks of this module by name, in :data:`~prism_memory.testing.RAG_CONFORMANCE_CHECKS` order."""
