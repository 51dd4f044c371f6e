"""A model change without downtime (issue 38), on both backends, under load.

A store whose entries hold 64-wide vectors of one model migrates to a 32-wide model while four
writers remember and four readers recall without pause: a backfill fills the new generation, the
switch is refused until it is complete, then lands in one step, and a rollback goes back. What must
hold throughout:

* no recall fails (a reader whose query was embedded with the model that was active a moment ago
  embeds it again: the store reports the active model in the same read as the candidates);
* no recall ranks a query of one model against another model's vectors (an exact-text query scores
  cosine 1.0 against its own entry, which only the same model's vector gives);
* no recall misses an entry that was recallable before the recall began;
* a rollback restores the old answers exactly (ids and scores, on a thread nobody writes to).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from prism_memory import (
    GenerationNotReadyError,
    HashEmbedder,
    InMemoryVectorStore,
    InMemoryWorkingStore,
    create_memory,
)
from prism_memory._clock import utcnow
from prism_memory.memory import Memory
from prism_memory.stores.backend import role_object
from prism_memory.stores.base import (
    SearchRequest,
    SearchResult,
    VectorGenerations,
    VectorStore,
    WorkingStore,
)

OLD, NEW = HashEmbedder(dimensions=64), HashEmbedder(dimensions=32)
TENANT, RESOURCE = "t-switch", "r"
WRITERS = READERS = 4
WORDS = [
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kelp",
    "lumen",
]


@pytest.fixture(params=["memory", "postgres"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[VectorStore, WorkingStore]]:
    if request.param == "memory":
        yield InMemoryVectorStore(), InMemoryWorkingStore()
        return
    made = await request.getfixturevalue("make_postgres_stores")(dimension=64)
    yield made.vector_store, made.working_store


def _memory(stores: tuple[VectorStore, WorkingStore], thread: str, *, migrating: bool) -> Memory:
    return create_memory(
        tenant_id=TENANT,
        resource_id=RESOURCE,
        thread_id=thread,
        embedder=HashEmbedder(dimensions=64),
        next_embedder=HashEmbedder(dimensions=32) if migrating else None,
        vector_store=stores[0],
        working_store=stores[1],
    )


def _text(n: int) -> str:
    """A text no other entry has, so its own entry is its one exact match."""
    rng = random.Random(n)
    return f"note {n}: " + " ".join(rng.sample(WORDS, 5))


class SearchLog:
    """Records, per task, the model each search ranked with and the active model it reported."""

    def __init__(self, store: VectorStore) -> None:
        self.store = role_object(store, "search")  # what a memory on ``store`` calls
        self.calls: dict[str, list[tuple[str | None, str | None]]] = {}
        self.original = store.search

    async def search(self, scope: Any, request: SearchRequest) -> SearchResult:
        found = await self.original(scope, request)
        task = asyncio.current_task()
        name = task.get_name() if task is not None else "?"
        self.calls.setdefault(name, []).append((request.model, found.active_model))
        return found

    def __enter__(self) -> SearchLog:
        self.store.search = self.search  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.store.search


async def _backfill(store: VectorGenerations, stop: asyncio.Event) -> int:
    """A backfill worker (the role's calls, as ``backfill_generation`` makes them) until ``stop``."""
    stored = 0
    while not stop.is_set():
        claimed = await store.claim_generation(
            NEW.model, limit=16, worker_id="backfill", lease_seconds=30, now=utcnow()
        )
        if not claimed:
            await asyncio.sleep(0.01)
            continue
        vectors = [NEW.embed_one(c.text) for c in claimed]
        stored += await store.store_generation_vectors(
            NEW.model, list(zip(claimed, vectors, strict=True)), now=utcnow()
        )
    return stored


async def _answers(memory: Memory, queries: list[str]) -> list[list[tuple[str, float]]]:
    results = [await memory.recall(q, top_k=5) for q in queries]
    return [[(hit.id, hit.score) for hit in result.hits] for result in results]


async def test_switch_and_rollback_under_writers_and_readers(
    stores: tuple[VectorStore, WorkingStore],
) -> None:
    store = stores[0]
    assert isinstance(store, VectorGenerations)
    counter = itertools.count()
    recallable: dict[str, list[tuple[str, str]]] = {}  # thread -> [(id, text)] stored indexed

    # before the migration: a quiet thread and the writers' threads, embedded with the old model
    threads = ["quiet", *(f"w{i}" for i in range(WRITERS))]
    for thread in threads:
        async with _memory(stores, thread, migrating=False) as memory:
            texts = [_text(next(counter)) for _ in range(12)]
            done = await memory.remember([{"text": t} for t in texts], wait=True)
            recallable[thread] = list(zip(done.accepted, texts, strict=True))
    quiet_queries = [text for _, text in recallable["quiet"][:6]] + ["amber cedar", "kelp"]
    async with _memory(stores, "quiet", migrating=False) as memory:
        before = await _answers(memory, quiet_queries)

    await store.start_generation(
        primary=OLD.model, primary_width=64, model=NEW.model, width=32, now=utcnow()
    )
    with pytest.raises(GenerationNotReadyError) as refused:  # nothing backfilled yet
        await store.switch_generation(NEW.model, force=False, now=utcnow())
    assert refused.value.missing == sum(len(entries) for entries in recallable.values())

    stop_writers, stop_readers, stop_backfill = asyncio.Event(), asyncio.Event(), asyncio.Event()
    failures: list[str] = []
    recalls = {"before": 0, "after": 0}
    switched = asyncio.Event()

    async def writer(i: int) -> None:
        async with _memory(stores, f"w{i}", migrating=True) as memory:
            while not stop_writers.is_set():
                await asyncio.sleep(0)
                text = _text(next(counter))
                done = await memory.remember({"text": text}, wait=True)
                recallable[f"w{i}"].append((done.accepted[0], text))

    async def reader(i: int) -> None:
        rng = random.Random(i)
        memories = {t: _memory(stores, t, migrating=True) for t in threads}
        try:
            while not stop_readers.is_set():
                await asyncio.sleep(0)  # an in-memory recall never suspends: let the others run
                thread = rng.choice(threads)
                entry_id, text = rng.choice(recallable[thread])  # recallable before this recall
                phase = "after" if switched.is_set() else "before"
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
                recalls[phase] += 1
        finally:
            for memory in memories.values():
                await memory.aclose()

    with SearchLog(store) as log:
        tasks = [asyncio.create_task(writer(i), name=f"writer{i}") for i in range(WRITERS)]
        tasks += [asyncio.create_task(reader(i), name=f"reader{i}") for i in range(READERS)]
        backfill = asyncio.create_task(_backfill(store, stop_backfill), name="backfill")
        await asyncio.sleep(0.5)

        # the switch is refused until every indexed entry has a vector of the new model
        missing: list[int] = []
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            try:
                generation = await store.switch_generation(NEW.model, force=False, now=utcnow())
                break
            except GenerationNotReadyError as exc:
                missing.append(exc.missing)
                assert asyncio.get_running_loop().time() < deadline, missing[-20:]
                await asyncio.sleep(0.05)
        assert all(n > 0 for n in missing)
        assert generation.active
        assert generation.model == NEW.model
        switched.set()
        await asyncio.sleep(1.0)  # writers and readers go on under the new model
        stop_writers.set()
        await asyncio.gather(*tasks[:WRITERS])
        await asyncio.sleep(0.2)
        stop_readers.set()
        await asyncio.gather(*tasks[WRITERS:])
        stop_backfill.set()
        await backfill

    assert failures == []
    assert recalls["before"] > 0
    assert recalls["after"] > 0
    # every search whose model was not the active one was followed, in its task, by another search
    for name, calls in log.calls.items():
        if not name.startswith("reader"):
            continue
        for position, (model, active) in enumerate(calls):
            used = model or OLD.model
            if active is not None and active != used:
                assert position + 1 < len(calls), f"{name}: a stale search ended a recall"
    # the writes made during the migration are all in the new generation
    progress = await store.generation_progress(NEW.model, now=utcnow())
    assert progress.complete, progress
    async with _memory(stores, "quiet", migrating=True) as memory:
        under_new = await memory.recall(quiet_queries[0], top_k=5)
    assert under_new.hits[0].id == recallable["quiet"][0][0]

    # rollback: one call back to the old model, and the quiet thread answers exactly as before
    rolled = await store.switch_generation(OLD.model, force=False, now=utcnow())
    assert rolled.active
    assert rolled.role == "primary"
    async with _memory(stores, "quiet", migrating=False) as memory:
        assert await _answers(memory, quiet_queries) == before
