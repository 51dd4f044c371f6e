"""A store keeps one vector width: a write of another width fails at once, never waits for ever.

Two memories opened on one unpinned store while it held no vector, with embedders of widths 384
and 64: the 64-wide one wrote first, and the 384-wide one's ``remember(wait=True)`` never returned
(issue 34, item 1) -- its rows stayed pending, the queue retried a batch no store could accept, and
nothing answered the waiter. A gated embedder holds the wide memory's embedding until the narrow
memory has fixed the width, on both backends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from prism_memory import HashEmbedder, IndexingPolicy, InMemoryVectorStore, create_memory
from prism_memory.embedding import Embedder
from prism_memory.errors import DimensionMismatchError
from prism_memory.memory import Memory
from prism_memory.stores.base import VectorStore
from prism_memory.testing import GatedEmbedder

FAST = IndexingPolicy(
    retry_base_seconds=0.02, retry_max_seconds=0.1, busy_poll_seconds=0.01, idle_poll_seconds=0.05
)


@pytest.fixture(params=["memory", "postgres"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[VectorStore]:
    """An unpinned store holding no vector yet."""
    if request.param == "memory":
        yield InMemoryVectorStore()
        return
    made = await request.getfixturevalue("make_postgres_stores")(dimension=None)
    yield made.vector_store


def _memory(store: VectorStore, thread: str, embedder: Embedder) -> Memory:
    return create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id=thread,
        embedder=embedder,
        vector_store=store,
        indexing=FAST,
    )


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_queued_write_of_another_width_fails_instead_of_staying_pending(store):
    gated = GatedEmbedder(HashEmbedder(dimensions=384))
    async with (
        _memory(store, "wide", gated) as wide,
        _memory(store, "narrow", HashEmbedder(dimensions=64)) as narrow,
    ):  # both open while the store holds no vector: neither is refused yet
        result = await wide.remember({"id": "w", "text": "Ada keeps bees"})
        await _until(lambda: gated.calls > 0, "the queue to embed the wide row")
        await narrow.remember({"id": "n", "text": "Ada sails"}, wait=True)
        assert await store.vector_width() == 64
        gated.release()
        report = await asyncio.wait_for(result.done, timeout=30)
        assert report.indexed == ()
        assert list(report.failed) == ["w"]
        assert report.failed["w"].startswith("DimensionMismatchError")
        assert await wide.index_status(["w"]) == {"w": "failed"}
        with pytest.raises(DimensionMismatchError):  # asked again: the store holds 64 now
            await asyncio.wait_for(wide.remember({"id": "w2", "text": "bees"}, wait=True), 30)
        assert await wide.index_status(["w2"]) == {}


async def test_remember_wait_of_another_width_raises_and_writes_nothing(store):
    gated = GatedEmbedder(HashEmbedder(dimensions=384))
    async with (
        _memory(store, "wide", gated) as wide,
        _memory(store, "narrow", HashEmbedder(dimensions=64)) as narrow,
    ):
        waiting = asyncio.create_task(
            wide.remember({"id": "w", "text": "Ada keeps bees"}, wait=True)
        )
        await _until(lambda: gated.calls > 0, "remember(wait=True) to embed before its write")
        await narrow.remember({"id": "n", "text": "Ada sails"}, wait=True)
        gated.release()
        with pytest.raises(DimensionMismatchError, match="nothing was written"):
            await asyncio.wait_for(waiting, timeout=30)
        assert await wide.index_status(["w"]) == {}
        assert await narrow.index_status(["n"]) == {"n": "indexed"}


async def test_a_memory_opened_on_a_store_of_another_width_is_refused(store):
    async with _memory(store, "narrow", HashEmbedder(dimensions=64)) as narrow:
        await narrow.remember({"id": "n", "text": "Ada sails"}, wait=True)
    wide = _memory(store, "wide", HashEmbedder(dimensions=384))
    with pytest.raises(DimensionMismatchError, match="holds vectors of width 64"):
        await wide.__aenter__()
    await wide.aclose()
