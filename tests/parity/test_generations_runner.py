"""The backfill runner and the quality gate of ``prism_memory.generations``, on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import numpy as np
import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory
from prism_memory._clock import utcnow
from prism_memory.errors import EmbeddingModelMismatchError, QualityGateError, ValidationError
from prism_memory.generations import (
    BackfillProgress,
    GateQuery,
    backfill_generation,
    compare_generations,
    promote_to_primary,
    read_gate_queries,
)
from prism_memory.models import MemoryIdentity, Vector
from prism_memory.stores.base import VectorGenerations, VectorStore

OLD = HashEmbedder(dimensions=32)
SCOPE = MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="t1")


class Renamed:
    """An embedder's vectors under another model name (the same model, renamed)."""

    def __init__(self, inner: HashEmbedder, model: str) -> None:
        self.inner, self.model, self.dimensions = inner, model, inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Vector:
        return await self.inner.embed(texts)


class Noise:
    """A model that retrieves nothing: a random direction per text."""

    model = "noise-v1"
    dimensions = 24

    async def embed(self, texts: Sequence[str]) -> Vector:
        rng = np.random.default_rng(len(texts))
        return rng.standard_normal((len(texts), self.dimensions)).astype(np.float32)


NEW = Renamed(HashEmbedder(dimensions=48), "hash-renamed-48")

FACTS = [
    "Ada keeps three beehives behind the old barn",
    "The quarterly budget review moved to Thursday afternoon",
    "Grace prefers green tea without sugar in the morning",
    "The staging database password rotates every ninety days",
    "Linus rides a red bicycle to the office on Mondays",
    "The cat named Pixel sleeps on the warm laptop keyboard",
    "Our Lisbon offsite is booked for the second week of May",
    "Margaret collects vintage fountain pens from Japan",
    "The heating in meeting room four is broken again",
    "Alan bakes sourdough bread every Sunday evening",
    "The invoice for the cloud bill was paid late in March",
    "Barbara plays the cello in a community orchestra",
]
QUERIES = [  # (query, the fact it should find)
    ("who has beehives near the barn", 0),
    ("when is the budget review", 1),
    ("what tea does Grace drink", 2),
    ("how often does the database password rotate", 3),
    ("how does Linus get to the office", 4),
    ("where does Pixel the cat sleep", 5),
    ("when is the Lisbon offsite", 6),
    ("what does Margaret collect", 7),
    ("which meeting room has broken heating", 8),
    ("who bakes sourdough bread", 9),
    ("was the cloud invoice paid on time", 10),
    ("what instrument does Barbara play", 11),
]


@pytest.fixture(params=["memory", "postgres"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[VectorStore]:
    """A store holding :data:`FACTS` in acme/ada/t1, embedded by :data:`OLD`, with the shadow
    generation :data:`NEW` started (nothing backfilled)."""
    if request.param == "memory":
        made: VectorStore = InMemoryVectorStore()
    else:
        made = (await request.getfixturevalue("make_postgres_stores")()).vector_store
    await _remember(made, [(f"f{i:02d}", text) for i, text in enumerate(FACTS)])
    assert isinstance(made, VectorGenerations)
    await made.start_generation(
        primary=OLD.model, primary_width=32, model=NEW.model, width=48, now=utcnow()
    )
    return made


async def _remember(store: VectorStore, items: list[tuple[str, str]], thread: str = "t1") -> None:
    async with create_memory(
        tenant_id="acme", resource_id="ada", thread_id=thread, embedder=OLD, vector_store=store
    ) as memory:
        await memory.remember(
            [{"id": i, "text": t, "consent": {"source": "user"}} for i, t in items], wait=True
        )


def _labelled() -> list[GateQuery]:
    return [GateQuery(SCOPE, q, frozenset({f"f{i:02d}"})) for q, i in QUERIES]


async def test_a_backfill_covers_every_entry_reports_progress_and_allows_the_switch(store):
    await _remember(store, [("g1", "Another thread's note about kayaks")], thread="t2")
    seen: list[BackfillProgress] = []
    report = await backfill_generation(store, NEW.model, NEW, batch_size=5, on_progress=seen.append)
    assert report.stored == report.claimed == len(FACTS) + 1
    assert report.remaining == 0
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    assert seen[0].done == 0
    assert seen[-1].done == seen[-1].total == len(FACTS) + 1
    assert seen[-1].eta == 0.0
    assert seen[-1].rate > 0
    assert (await store.generation_progress(NEW.model, now=utcnow())).complete
    assert (await store.switch_generation(NEW.model, force=False, now=utcnow())).active
    again = await backfill_generation(store, NEW.model, NEW)  # nothing left: one empty pass
    assert (again.claimed, again.passes) == (0, 1)


async def test_promoting_the_primary_again_moves_every_late_old_model_entry(store):
    """After the promotion, entries a host of the old model wrote (with the new model's vector
    beside them) are all moved by the next run, however many batches they take."""
    await backfill_generation(store, NEW.model, NEW)
    await store.switch_generation(NEW.model, force=False, now=utcnow())
    first = await promote_to_primary(store, NEW.model, batch_size=4)
    assert (first.moved, first.promoted, first.left) == (len(FACTS), True, 0)
    await _remember(store, [(f"late{i}", f"a late note number {i}") for i in range(5)])
    await backfill_generation(store, NEW.model, NEW)  # their vectors of the new model
    again = await promote_to_primary(store, NEW.model, batch_size=2)
    assert (again.moved, again.promoted, again.left) == (5, True, 0)
    assert await store.embedding_models(SCOPE) == {NEW.model}


async def test_a_backfill_walks_again_for_entries_written_meanwhile(store):
    written: list[int] = []

    def write_once(progress: BackfillProgress) -> None:
        if progress.done and not written:  # after the first batch: a write behind the cursor
            written.append(progress.done)
            asyncio.get_running_loop().create_task(_remember(store, [("a00", "An early note")]))

    report = await backfill_generation(store, NEW.model, NEW, batch_size=4, on_progress=write_once)
    await asyncio.sleep(0)
    progress = await store.generation_progress(NEW.model, now=utcnow())
    assert progress.entries == len(FACTS) + 1
    assert progress.complete, report
    assert report.passes >= 2


async def test_a_backfill_refuses_an_embedder_of_another_model_and_leases_nothing(store):
    with pytest.raises(EmbeddingModelMismatchError) as caught:
        await backfill_generation(store, NEW.model, OLD)
    assert NEW.model not in str(caught.value)
    assert OLD.model not in str(caught.value)
    assert (await store.generation_progress(NEW.model, now=utcnow())).leased == 0
    with pytest.raises(ValidationError):
        await backfill_generation(store, NEW.model, NEW, batch_size=0)


async def test_a_cancelled_backfill_stores_the_batch_it_embedded(store):
    entered, release = asyncio.Event(), asyncio.Event()
    original = store.store_generation_vectors

    async def held(model, items, *, now):
        entered.set()
        await release.wait()
        return await original(model, items, now=now)

    store.store_generation_vectors = held  # type: ignore[method-assign]
    task = asyncio.create_task(backfill_generation(store, NEW.model, NEW, batch_size=5))
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()  # it waits for the batch it embedded to be stored
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    store.store_generation_vectors = original  # type: ignore[method-assign]
    assert (await store.generation_progress(NEW.model, now=utcnow())).current == 5


async def test_a_backfill_cancelled_while_embedding_leaves_leases_that_expire(store):
    class Stuck(Renamed):
        async def embed(self, texts: Sequence[str]) -> Vector:
            await asyncio.Event().wait()
            raise AssertionError

    task = asyncio.create_task(
        backfill_generation(store, NEW.model, Stuck(HashEmbedder(48), NEW.model), batch_size=5)
    )
    for _ in range(200):
        if (await store.generation_progress(NEW.model, now=utcnow())).leased:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await store.generation_progress(NEW.model, now=utcnow())).leased == 5
    later = utcnow() + timedelta(seconds=120)  # past the leases: another worker takes them
    report = await backfill_generation(store, NEW.model, NEW, clock=lambda: later)
    assert report.stored == len(FACTS)


async def test_the_gate_accepts_the_same_model_renamed_and_refuses_a_worse_one(store):
    await backfill_generation(store, NEW.model, NEW)
    same = Renamed(HashEmbedder(dimensions=32), "hash-same-32")
    await store.switch_generation(OLD.model, force=False, now=utcnow())
    report = await compare_generations(store, OLD, NEW, k=3, queries=_labelled())
    assert report.labelled_queries == len(QUERIES)
    assert report.sampled_queries == 5
    assert report.threads == 1
    assert report.missing == 0
    assert report.old_recall is not None
    assert report.old_recall >= 0.9
    assert "recall@3" in report.table()
    assert NEW.model in report.table()
    await store.drop_generation(NEW.model)
    await store.start_generation(
        primary=OLD.model, primary_width=32, model=same.model, width=32, now=utcnow()
    )
    await backfill_generation(store, same.model, same)
    renamed = await compare_generations(store, OLD, same, k=3, queries=_labelled())
    assert renamed.drop == 0.0
    assert renamed.overlap == 1.0
    renamed.check(max_drop=0.0, min_overlap=1.0)

    await store.drop_generation(same.model)
    noise = Noise()
    await store.start_generation(
        primary=OLD.model, primary_width=32, model=noise.model, width=24, now=utcnow()
    )
    await backfill_generation(store, noise.model, noise)
    worse = await compare_generations(store, OLD, noise, k=3, queries=_labelled())
    assert worse.overlap is not None
    assert worse.overlap < 0.8
    worse.check(max_drop=0.02)
    with pytest.raises(QualityGateError) as caught:
        worse.check(max_drop=0.02, min_overlap=0.8)
    message = str(caught.value)
    assert "overlap@3 is below 0.800" in message
    assert "recall@3" in message.splitlines()[2]
    assert noise.model not in message
    assert OLD.model not in message
    assert not any(fact in message or query in message for fact in FACTS for query, _ in QUERIES)


async def test_the_gate_counts_entries_without_a_new_vector(store):
    report = await compare_generations(store, OLD, NEW, k=3, queries=_labelled())
    assert report.missing == len(FACTS)
    assert report.new_recall == 0.0  # no entry is in the new model's corpus yet
    with pytest.raises(QualityGateError) as caught:
        report.check()
    assert "recall@3 drops by" in str(caught.value)


def test_gate_queries_are_read_and_a_bad_line_is_named_without_its_content():
    good = '{"tenant_id": "a", "resource_id": "r", "thread_id": "t", "query": "q", "expected_ids": ["x"]}'
    assert read_gate_queries([good, "", good])[1].expected_ids == frozenset({"x"})
    for bad in (
        "not json secret",
        '["secret"]',
        good.replace('"q"', '""'),
        good.replace('["x"]', "[]"),
        good.replace('"a"', '"bad key secret\\u0000"'),
    ):
        with pytest.raises(ValidationError) as caught:
            read_gate_queries([good, bad])
        assert str(caught.value).startswith("queries line 2:")
        assert "secret" not in str(caught.value)
