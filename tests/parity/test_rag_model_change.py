"""Changing the RAG embedding model on both backends: re-embed the current generation into a new
one while readers keep answering, switch, roll back, resume an interrupted re-embed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from prism_memory import HashEmbedder
from prism_memory.errors import (
    ConfigurationError,
    ConflictError,
    EmbeddingModelMismatchError,
    ValidationError,
)
from prism_memory.rag import (
    InMemoryRagStore,
    RagHit,
    RagScope,
    RagStore,
    ReembedReport,
    _reembed,
    hybrid_query,
    ingest,
    reembed_generation,
)
from prism_memory.testing._rag_support import _ModelEmbedder

WIDTH = 32
OLD, NEW = "acme-embed@1", "acme-embed@2"
TEXTS = {
    f"doc-{n:02d}": f"Pump {n} needs a pressure check every spring. Seal {n} is kept in cabinet {n}."
    for n in range(12)
}
QUESTION = TEXTS["doc-03"]


class _Yielding(_ModelEmbedder):
    """Suspends on every call, as a real embedder's network round trip does, so readers run."""

    async def embed(self, texts: Sequence[str]) -> Any:
        await asyncio.sleep(0)
        return await super().embed(texts)


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest) -> RagStore:
    if request.param == "memory":
        return InMemoryRagStore(dimension=WIDTH)
    make = request.getfixturevalue("make_postgres_stores")
    vector_store: RagStore = (await make(dimension=WIDTH)).vector_store
    return vector_store


def _old() -> _Yielding:
    return _Yielding(HashEmbedder(WIDTH), OLD)


def _new() -> _Yielding:
    return _Yielding(HashEmbedder(WIDTH), NEW, shift=5)


async def _corpus(store: RagStore, scope: RagScope) -> None:
    for source, text in TEXTS.items():
        await ingest(store, scope, source, text, embedder=_old())


def _answer(hits: list[RagHit]) -> list[tuple[Any, ...]]:
    return [(h.key, h.generation, h.embedding_model, h.score, h.semantic, h.lexical) for h in hits]


async def test_model_is_recorded_and_a_wrong_model_is_refused(store: RagStore) -> None:
    scope = RagScope("t", "docs")
    await _corpus(store, scope)
    chunks = await store.get_by_source(scope, "doc-03")
    assert chunks
    assert {c.embedding_model for c in chunks} == {OLD}
    with pytest.raises(EmbeddingModelMismatchError) as refused:
        await hybrid_query(store, scope, text=QUESTION, embedder=_new(), top_k=3)
    assert OLD not in str(refused.value)
    assert NEW not in str(refused.value)
    hits = await hybrid_query(
        store, scope, text=QUESTION, embedder=_new(), next_embedder=_old(), top_k=3
    )
    assert hits[0].source_id == "doc-03"
    assert hits[0].embedding_model == OLD
    assert hits[0].semantic == pytest.approx(1.0, abs=1e-5)
    # a raw embedding (no embedder) keeps today's behaviour: the store compares what it is given
    raw = (await _new().embed([QUESTION]))[0]
    assert len(await store.query(scope, embedding=raw, top_k=3)) == 3


async def test_reembed_switch_and_rollback_under_concurrent_readers(
    store: RagStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_reembed, "SOURCES_PER_PAGE", 3)
    scope = RagScope("t", "docs", "handbook")
    await _corpus(store, scope)
    before = await hybrid_query(store, scope, text=QUESTION, embedder=_old(), top_k=5)
    assert {h.embedding_model for h in before} == {OLD}

    stop, tick = asyncio.Event(), asyncio.Event()
    seen: list[tuple[str | None, int]] = []

    async def old_configuration_reader() -> None:
        # the old hosts: their embedder, and the next model's for after the switch
        while not stop.is_set():
            hits = await hybrid_query(
                store, scope, text=QUESTION, embedder=_old(), next_embedder=_new(), top_k=5
            )
            models = {h.embedding_model for h in hits}
            assert len(models) == 1, "an answer mixed two models"
            assert {h.generation for h in hits} == {hits[0].generation}
            assert hits[0].source_id == "doc-03"
            assert hits[0].semantic == pytest.approx(1.0, abs=1e-5)
            seen.append((hits[0].embedding_model, hits[0].generation))
            tick.set()
            await asyncio.sleep(0)

    readers = [asyncio.create_task(old_configuration_reader()) for _ in range(3)]
    progress: list[ReembedReport] = []

    async def on_progress(report: ReembedReport) -> None:
        progress.append(report)
        await asyncio.sleep(0)

    report = await reembed_generation(
        store, scope, embedder=_new(), target_generation=1, batch_size=2, on_progress=on_progress
    )
    during = list(seen)
    assert during
    assert set(during) == {(OLD, 0)}
    assert (report.sources, report.copied, report.unchanged) == (12, 12, 0)
    assert report.embedded == report.chunks >= 12
    assert [p.sources for p in progress] == [3, 6, 9, 12]
    assert await store.get_current_generation(scope) == 0

    # compare on your queries before switching: the target answers with the new model
    target = await hybrid_query(store, scope, text=QUESTION, embedder=_new(), generation=1, top_k=5)
    assert {h.embedding_model for h in target} == {NEW}
    assert target[0].source_id == "doc-03"
    assert target[0].semantic == pytest.approx(1.0, abs=1e-5)
    copied = await store.get_by_source(scope, "doc-03", generation=1)
    original = await store.get_by_source(scope, "doc-03", generation=0)
    assert [(c.index, c.text, c.digest, c.metadata) for c in copied] == [
        (c.index, c.text, c.digest, c.metadata) for c in original
    ]

    await store.set_current_generation(scope, 1)  # the switch: one statement for the scope
    mark = len(seen)
    while len(seen) < mark + 6:
        tick.clear()
        await tick.wait()
    assert set(seen[mark + 3 :]) == {(NEW, 1)}  # the old hosts now answer with the new model
    after = await hybrid_query(store, scope, text=QUESTION, embedder=_new(), top_k=5)
    assert {h.embedding_model for h in after} == {NEW}
    assert after[0].source_id == "doc-03"
    assert after[0].semantic == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(EmbeddingModelMismatchError):
        await hybrid_query(store, scope, text=QUESTION, embedder=_old(), top_k=5)

    await store.set_current_generation(scope, 0)  # rollback
    again = await hybrid_query(store, scope, text=QUESTION, embedder=_old(), top_k=5)
    assert _answer(again) == _answer(before)
    stop.set()
    await asyncio.gather(*readers)

    await store.set_current_generation(scope, 1)
    assert await store.delete_generation(scope, 0) == report.chunks
    final = await hybrid_query(store, scope, text=QUESTION, embedder=_new(), top_k=5)
    assert {h.embedding_model for h in final} == {NEW}


async def test_an_interrupted_reembed_resumes_without_embedding_again(
    store: RagStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_reembed, "SOURCES_PER_PAGE", 4)
    scope = RagScope("t", "docs")
    await _corpus(store, scope)

    class StopRunError(Exception):
        pass

    def stop_after_first_page(report: ReembedReport) -> None:
        raise StopRunError

    first = _new()
    with pytest.raises(StopRunError):
        await reembed_generation(
            store, scope, embedder=first, target_generation=5, on_progress=stop_after_first_page
        )
    assert await store.list_sources(scope, generation=5, limit=100) == sorted(TEXTS)[:4]
    second = _new()
    resumed = await reembed_generation(store, scope, embedder=second, target_generation=5)
    assert (resumed.sources, resumed.unchanged, resumed.copied) == (12, 4, 8)
    assert not set(first.texts) & set(second.texts)  # nothing done was embedded again
    assert resumed.embedded == len(second.texts)
    third = _new()
    done = await reembed_generation(store, scope, embedder=third, target_generation=5)
    assert (done.embedded, done.copied, done.unchanged) == (0, 0, 12)
    assert third.texts == []
    for source in TEXTS:
        chunks = await store.get_by_source(scope, source, generation=5)
        assert chunks
        assert {c.embedding_model for c in chunks} == {NEW}


async def test_reembed_refuses_a_target_readers_could_see(store: RagStore) -> None:
    scope = RagScope("t", "docs")
    await _corpus(store, scope)
    with pytest.raises(ValidationError):
        await reembed_generation(store, scope, embedder=_new(), target_generation=0)
    with pytest.raises(ValidationError):
        await reembed_generation(
            store, scope, embedder=_new(), source_generation=2, target_generation=2
        )
    with pytest.raises(ConflictError):
        await reembed_generation(
            store, scope, embedder=_new(), source_generation=3, target_generation=0
        )
    with pytest.raises(ConfigurationError):
        await reembed_generation(
            store, scope, embedder=_ModelEmbedder(HashEmbedder(WIDTH), None), target_generation=1
        )
    for generation in (1, 2, 3):
        assert await store.list_sources(scope, generation=generation, limit=10) == []
