"""Retiring the old model without downtime, on both backends, under load.

After a switch from a 64-wide model to a 32-wide one, ``promote_to_primary`` moves the new
model's vectors into the entries' own (an unpinned column on PostgreSQL) while four writers of the
old configuration (embedder: the old model, next_embedder: the new one) remember and four readers
recall without pause; then the writers stop, the promotion finishes, a host of the new model alone
writes, the old model is dropped. What must hold throughout:

* no recall fails, and an exact-text query always finds its entry at cosine 1.0 (no model mix);
* no writer is refused (a thread holds own vectors of both models mid-promotion);
* once promoted, a host of the new model alone writes and recalls the same answers;
* a rollback after the promotion, before the drop, restores the old model's answers exactly.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, InMemoryWorkingStore, create_memory
from prism_memory._clock import utcnow
from prism_memory.generations import backfill_generation, promote_to_primary
from prism_memory.memory import Memory
from prism_memory.stores.base import VectorGenerations, VectorStore, WorkingStore

OLD, NEW = HashEmbedder(dimensions=64), HashEmbedder(dimensions=32)
TENANT, RESOURCE = "t-promote", "r"
WRITERS = READERS = 4
WORDS = ["amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo"]


@pytest.fixture(params=["memory", "postgres"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[VectorStore, WorkingStore]]:
    if request.param == "memory":
        yield InMemoryVectorStore(), InMemoryWorkingStore()
        return
    made = await request.getfixturevalue("make_postgres_stores")(dimension=None)
    yield made.vector_store, made.working_store


def _memory(stores: tuple[VectorStore, WorkingStore], thread: str, *, config: str) -> Memory:
    """A host of the ``old`` configuration (the old model, no next one), of the ``migrating``
    one (the old model and the new one next), or of the ``new`` one (the new model alone)."""
    return create_memory(
        tenant_id=TENANT,
        resource_id=RESOURCE,
        thread_id=thread,
        embedder=HashEmbedder(dimensions=32 if config == "new" else 64),
        next_embedder=HashEmbedder(dimensions=32) if config == "migrating" else None,
        vector_store=stores[0],
        working_store=stores[1],
    )


def _text(n: int) -> str:
    rng = random.Random(n)
    return f"note {n}: " + " ".join(rng.sample(WORDS, 4))


async def _answers(memory: Memory, queries: list[str]) -> list[list[tuple[str, float]]]:
    results = [await memory.recall(q, top_k=5) for q in queries]
    return [[(hit.id, hit.score) for hit in result.hits] for result in results]


async def test_promotion_and_drop_under_writers_and_readers(
    stores: tuple[VectorStore, WorkingStore],
) -> None:
    store = stores[0]
    assert isinstance(store, VectorGenerations)
    counter = itertools.count()
    recallable: dict[str, list[tuple[str, str]]] = {}
    threads = ["quiet", *(f"w{i}" for i in range(WRITERS))]
    for thread in threads:
        async with _memory(stores, thread, config="old") as memory:
            texts = [_text(next(counter)) for _ in range(10)]
            done = await memory.remember([{"text": t} for t in texts], wait=True)
            recallable[thread] = list(zip(done.accepted, texts, strict=True))
    queries = [text for _, text in recallable["quiet"][:5]] + ["amber cedar", "fjord"]
    async with _memory(stores, "quiet", config="old") as memory:
        before_old = await _answers(memory, queries)

    await store.start_generation(
        primary=OLD.model, primary_width=64, model=NEW.model, width=32, now=utcnow()
    )
    await backfill_generation(store, NEW.model, NEW, batch_size=16)
    await store.switch_generation(NEW.model, force=False, now=utcnow())
    async with _memory(stores, "quiet", config="new") as memory:
        before_new = await _answers(memory, queries)
    assert before_new != before_old

    stop_writers, stop_readers = asyncio.Event(), asyncio.Event()
    failures: list[str] = []
    recalls = 0

    async def writer(i: int) -> None:
        async with _memory(stores, f"w{i}", config="migrating") as memory:
            while not stop_writers.is_set():
                await asyncio.sleep(0)
                text = _text(next(counter))
                try:
                    done = await memory.remember({"text": text}, wait=True)
                except Exception as exc:  # noqa: BLE001 - every failure is the finding
                    failures.append(f"remember failed: {type(exc).__name__}: {exc}")
                    return
                recallable[f"w{i}"].append((done.accepted[0], text))

    async def reader(i: int) -> None:
        nonlocal recalls
        rng = random.Random(i)
        memories = {t: _memory(stores, t, config="migrating") for t in threads}
        try:
            while not stop_readers.is_set():
                await asyncio.sleep(0)
                thread = rng.choice(threads)
                entry_id, text = rng.choice(recallable[thread])
                try:
                    result = await memories[thread].recall(text, top_k=5)
                except Exception as exc:  # noqa: BLE001 - every failure is the finding
                    failures.append(f"recall failed: {type(exc).__name__}: {exc}")
                    continue
                hits = {hit.id: hit for hit in result.hits}
                if entry_id not in hits:
                    failures.append(f"{thread}: an entry recallable before was missed")
                elif abs(hits[entry_id].semantic - 1.0) > 1e-4:
                    failures.append(f"{thread}: exact text scored {hits[entry_id].semantic}")
                recalls += 1
        finally:
            for memory in memories.values():
                await memory.aclose()

    writers = [asyncio.create_task(writer(i)) for i in range(WRITERS)]
    readers = [asyncio.create_task(reader(i)) for i in range(READERS)]
    moved = 0
    for _ in range(40):  # batches interleaved with the writes and the recalls
        step = await store.promote_generation(NEW.model, limit=4, now=utcnow())
        moved += step.moved
        await asyncio.sleep(0.01)
    stop_writers.set()
    await asyncio.gather(*writers)
    report = await promote_to_primary(store, NEW.model, batch_size=8)
    assert report.promoted, report
    assert moved + report.moved == sum(len(entries) for entries in recallable.values())

    # the new configuration writes beside the readers (of the migrating one)
    async with _memory(stores, "w0", config="new") as memory:
        for _ in range(5):
            text = _text(next(counter))
            done = await memory.remember({"text": text}, wait=True)
            recallable["w0"].append((done.accepted[0], text))
    async with _memory(stores, "quiet", config="new") as memory:
        assert await _answers(memory, queries) == before_new
    await asyncio.sleep(0.2)
    stop_readers.set()
    await asyncio.gather(*readers)

    # a rollback is still one call, until the old model is dropped (forced: the new host's
    # entries have no vector of the old model)
    await store.switch_generation(OLD.model, force=True, now=utcnow())
    async with _memory(stores, "quiet", config="old") as memory:
        assert await _answers(memory, queries) == before_old
    await store.switch_generation(NEW.model, force=False, now=utcnow())
    assert await store.drop_generation(OLD.model) > 0

    assert failures == []
    assert recalls > 0
    assert [(g.model, g.role, g.active) for g in await store.generations()] == [
        (NEW.model, "primary", True)
    ]
    async with _memory(stores, "quiet", config="new") as memory:
        assert await _answers(memory, queries) == before_new
