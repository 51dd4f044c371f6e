"""The deferred-indexing queue through the facade, on the in-memory store."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence

import pytest

from prism_memory import (
    HashEmbedder,
    IndexingError,
    IndexingPolicy,
    InMemoryVectorStore,
    MemoryIdentity,
    create_memory,
)
from prism_memory.testing import GatedEmbedder

DIM = 16
SCOPE = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="th")


class CountingEmbedder:
    """Delegates to a HashEmbedder, records every text it embeds and yields to the loop."""

    def __init__(self, delay: float = 0.0) -> None:
        self._inner = HashEmbedder(DIM)
        self._delay = delay
        self.texts: list[str] = []
        self.batches: list[int] = []

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]):
        self.batches.append(len(texts))
        await asyncio.sleep(self._delay)
        self.texts.extend(texts)
        return await self._inner.embed(texts)


def memory(store, embedder, *, thread="th", **kwargs):
    return create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id=thread,
        embedder=embedder,
        vector_store=store,
        **kwargs,
    )


async def statuses(store, ids, scope=SCOPE):
    return {
        entry_id: state for entry_id, (state, _) in (await store.index_status(scope, ids)).items()
    }


async def wait_until(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


async def park_pending(store, texts):
    """Write rows with an embedder that never answers, close with a short drain: rows stay pending."""
    gated = GatedEmbedder(HashEmbedder(DIM))
    writer = memory(store, gated, indexing=IndexingPolicy(drain_seconds=0.2))
    result = await writer.remember([{"text": text} for text in texts])
    await writer.aclose()
    with pytest.raises(IndexingError):
        await result.done
    assert gated.texts == []
    assert set((await statuses(store, result.pending)).values()) == {"pending"}
    return list(result.pending)


async def test_two_workers_on_one_scope_embed_each_row_exactly_once():
    store = InMemoryVectorStore()
    first, second = CountingEmbedder(delay=0.005), CountingEmbedder(delay=0.005)
    policy = IndexingPolicy(idle_poll_seconds=0.02, busy_poll_seconds=0.01)
    one = memory(store, first, limits={"embed_batch": 2}, indexing=policy)
    two = memory(store, second, limits={"embed_batch": 2}, indexing=policy)
    texts_one = [f"first worker wrote entry {i}" for i in range(15)]
    texts_two = [f"second worker wrote entry {i}" for i in range(15)]
    async with one, two:
        r1, r2 = await asyncio.gather(
            one.remember([{"text": t} for t in texts_one]),
            two.remember([{"text": t} for t in texts_two]),
        )
        rep1, rep2 = await asyncio.wait_for(asyncio.gather(r1.done, r2.done), timeout=10)
    embedded = first.texts + second.texts
    assert Counter(embedded) == Counter(texts_one + texts_two)  # every row once, none twice
    assert first.texts
    assert second.texts  # both workers really took part
    assert max(first.batches + second.batches) <= 2
    assert sorted(rep1.indexed) == sorted(r1.pending)
    assert sorted(rep2.indexed) == sorted(r2.pending)
    assert set((await statuses(store, [*r1.pending, *r2.pending])).values()) == {"indexed"}


async def test_aclose_drains_pending_work():
    store = InMemoryVectorStore()
    embedder = CountingEmbedder(delay=0.01)
    mem = memory(store, embedder, limits={"embed_batch": 2})
    texts = [f"note number {i}" for i in range(9)]
    result = await mem.remember([{"text": t} for t in texts])
    assert len(result.pending) == 9
    assert set((await statuses(store, result.pending)).values()) == {"pending"}
    await mem.aclose()
    assert set((await statuses(store, result.pending)).values()) == {"indexed"}
    report = await result.done
    assert sorted(report.indexed) == sorted(result.pending)
    assert dict(report.failed) == {}
    assert Counter(embedder.texts) == Counter(texts)


async def test_done_after_aclose_with_a_stuck_embedder_raises_indexing_error():
    store = InMemoryVectorStore()
    gated = GatedEmbedder(HashEmbedder(DIM))
    mem = memory(store, gated, indexing=IndexingPolicy(drain_seconds=0.2))
    result = await mem.remember([{"text": "alpha"}, {"text": "beta"}, {"text": "gamma"}])
    started = time.monotonic()
    await mem.aclose()
    assert time.monotonic() - started < 3.0  # bounded by the drain, not by the embedder
    with pytest.raises(IndexingError) as info:
        await result.done
    assert set(info.value.failures) == set(result.pending)
    assert set((await statuses(store, result.pending)).values()) == {"pending"}  # kept, not dropped
    assert gated.calls >= 1
    assert gated.texts == []


async def test_a_closed_memory_refuses_new_writes():
    mem = memory(InMemoryVectorStore(), HashEmbedder(DIM))
    await mem.aclose()
    with pytest.raises(Exception):  # noqa: B017,PT011 - any prism error; the point is "not silently"
        await mem.remember({"text": "late"})


async def test_resume_indexing_on_a_fresh_memory_indexes_parked_rows():
    store = InMemoryVectorStore()
    texts = ["the cat sleeps", "the dog barks", "rain tomorrow", "tax day", "blue sky"]
    ids = await park_pending(store, texts)

    embedder = CountingEmbedder()
    fresh = memory(store, embedder, limits={"embed_batch": 2})
    query = "dog barks"  # not an entry text, so its embedding is told apart below
    assert (await fresh.recall(query)).hits == ()  # pending rows are not recallable
    await fresh.resume_indexing()
    assert set((await statuses(store, ids)).values()) == {"indexed"}
    hits = (await fresh.recall(query)).hits
    assert hits
    assert hits[0].text == "the dog barks"
    assert await fresh.resume_indexing() == 0  # nothing left; nothing embedded twice
    assert Counter(t for t in embedder.texts if t != query) == Counter(texts)
    await fresh.aclose()


async def test_resume_indexing_returns_how_many_rows_it_indexed():
    # Memory.resume_indexing() documents "return how many"; with more rows than one embed batch the
    # count must still be all of them, not only the batches this call happened to process itself.
    store = InMemoryVectorStore()
    texts = [f"parked {i}" for i in range(5)]
    ids = await park_pending(store, texts)
    fresh = memory(store, CountingEmbedder(), limits={"embed_batch": 2})
    indexed = await fresh.resume_indexing()
    await fresh.aclose()
    assert set((await statuses(store, ids)).values()) == {"indexed"}
    assert indexed == len(texts)


async def test_resume_indexing_stays_in_its_own_thread():
    store = InMemoryVectorStore()
    ids = await park_pending(store, ["only in th"])
    embedder = CountingEmbedder()
    other = memory(store, embedder, thread="another-thread")
    assert await other.resume_indexing() == 0
    await other.aclose()
    assert embedder.texts == []
    assert set((await statuses(store, ids)).values()) == {"pending"}


async def test_async_with_starts_the_queue_and_picks_up_pending_rows_by_itself():
    store = InMemoryVectorStore()
    texts = [f"parked entry {i}" for i in range(5)]
    ids = await park_pending(store, texts)
    embedder = CountingEmbedder()

    async def all_indexed():
        return set((await statuses(store, ids)).values()) == {"indexed"}

    async with memory(store, embedder, limits={"embed_batch": 2}):
        await wait_until(all_indexed)  # no remember(), no resume_indexing()
    assert Counter(embedder.texts) == Counter(texts)


async def test_remember_wait_returns_once_indexed():
    store = InMemoryVectorStore()
    embedder = CountingEmbedder(delay=0.01)
    async with memory(store, embedder) as mem:
        result = await mem.remember([{"text": "one"}, {"text": "two"}], wait=True)
        assert result.pending == ()  # nothing it waited for is still pending
        assert set((await statuses(store, result.accepted)).values()) == {"indexed"}
    assert Counter(embedder.texts) == Counter(["one", "two"])


async def test_an_all_scopes_worker_indexes_every_thread():
    from datetime import UTC, datetime

    from prism_memory import IndexingQueue, PrismMemoryError

    store = InMemoryVectorStore()
    parked = {}
    for thread in ("a", "b"):
        gated = GatedEmbedder(HashEmbedder(DIM))
        writer = memory(store, gated, thread=thread, indexing=IndexingPolicy(drain_seconds=0.05))
        result = await writer.remember([{"text": f"{thread} entry {i}"} for i in range(3)])
        await writer.aclose()
        with pytest.raises(IndexingError):
            await result.done
        parked[thread] = list(result.pending)
    embedder = CountingEmbedder()
    queue = IndexingQueue(
        store=store, embedder=embedder, scope=None, batch_size=2, clock=lambda: datetime.now(UTC)
    )
    with pytest.raises(PrismMemoryError, match="cannot watch"):
        queue.watch(["x"])
    assert await queue.run_until_idle() == 6
    for thread, ids in parked.items():
        scope = MemoryIdentity(tenant_id="t", resource_id="r", thread_id=thread)
        assert set((await statuses(store, ids, scope)).values()) == {"indexed"}
    assert Counter(embedder.texts) == Counter(f"{t} entry {i}" for t in "ab" for i in range(3))
