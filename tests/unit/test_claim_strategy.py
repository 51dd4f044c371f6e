"""The indexing queue's extension points: a claim strategy and an observer passed in (in-memory)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, MemoryIdentity, PrismMemoryError
from prism_memory.errors import EmbedderError
from prism_memory.indexing import (
    BatchReport,
    ClaimContext,
    ClaimStrategy,
    IndexingQueue,
    QueueObserver,
)
from prism_memory.stores.base import ClaimedEntry, NewEntry

DIM = 16
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def scope(thread: str) -> MemoryIdentity:
    return MemoryIdentity(tenant_id="t", resource_id="r", thread_id=thread)


def utcnow() -> datetime:
    return datetime.now(UTC)


async def park(store: InMemoryVectorStore, thread: str, texts: Sequence[str]) -> list[str]:
    """Store ``texts`` pending in ``thread`` (nobody leases them)."""
    new = [
        NewEntry(
            id=f"{thread}-{i}", text=text, role="user", metadata={}, consent=None,
            sequence=None, occurred_at=NOW, importance=1.0, lineage=None,
        )
        for i, text in enumerate(texts)
    ]  # fmt: skip
    await store.put_entries(scope(thread), new, now=NOW)
    return [entry.id for entry in new]


async def states(store: InMemoryVectorStore, thread: str, ids: Sequence[str]) -> set[str]:
    return {state for state, _ in (await store.index_status(scope(thread), ids)).values()}


class OneThread(ClaimStrategy):
    """Claims only from one thread, and counts its calls."""

    def __init__(self, only: MemoryIdentity) -> None:
        self.only = only
        self.calls = 0

    async def claim(self, queue: ClaimContext, limit: int) -> list[ClaimedEntry]:
        self.calls += 1
        return await queue.store.claim_pending(
            self.only,
            limit=limit,
            worker_id=queue.worker_id,
            lease_seconds=queue.policy.lease_seconds,
            now=queue.clock(),
        )


class Recorder(QueueObserver):
    def __init__(self) -> None:
        self.failed: list[str] = []
        self.batches: list[BatchReport] = []

    def row_failed(self, item: ClaimedEntry) -> None:
        self.failed.append(item.id)

    def batch_done(self, report: BatchReport) -> None:
        self.batches.append(report)


class RefusesPoison:
    """Embeds with a HashEmbedder, but refuses (for good) any batch holding the word ``poison``."""

    def __init__(self) -> None:
        self._inner = HashEmbedder(DIM)

    @property
    def dimensions(self) -> int:
        return DIM

    async def embed(self, texts: Sequence[str]):
        if any("poison" in text for text in texts):
            raise EmbedderError("refused", transient=False)
        return await self._inner.embed(texts)


async def wait_until(predicate, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


async def test_a_queue_claims_only_what_the_strategy_passed_in_claims():
    store = InMemoryVectorStore()
    mine = await park(store, "a", ["a one", "a two", "a three"])
    theirs = await park(store, "b", ["b one", "b two"])
    strategy = OneThread(scope("a"))
    queue = IndexingQueue(
        store=store,
        embedder=HashEmbedder(DIM),
        scope=None,
        batch_size=2,
        clock=utcnow,
        claims=strategy,
    )
    assert await queue.run_until_idle() == 3
    await queue.aclose()
    assert strategy.calls >= 1
    assert await states(store, "a", mine) == {"indexed"}
    assert await states(store, "b", theirs) == {"pending"}  # the default would claim these too


async def test_the_observer_hears_of_every_batch_and_every_recorded_failure():
    store = InMemoryVectorStore()
    ids = await park(store, "a", ["fine one", "poison", "fine two"])
    recorder = Recorder()
    queue = IndexingQueue(
        store=store,
        embedder=RefusesPoison(),
        scope=None,
        batch_size=8,
        clock=utcnow,
        observer=recorder,
    )
    async with queue:
        await wait_until(lambda: _settled(store, ids))
        await wait_until(_true_when(lambda: bool(recorder.batches)))
    assert recorder.failed == ["a-1"]
    assert sum(report.claimed for report in recorder.batches) == 3
    assert sum(report.indexed for report in recorder.batches) == 2
    assert sum(report.failed for report in recorder.batches) == 1
    assert all(report.seconds >= 0 for report in recorder.batches)


async def test_a_queue_without_a_lane_is_refused():
    with pytest.raises(PrismMemoryError, match="lane"):
        IndexingQueue(
            store=InMemoryVectorStore(),
            embedder=HashEmbedder(DIM),
            scope=None,
            batch_size=2,
            clock=utcnow,
            lanes=0,
        )


async def _settled(store: InMemoryVectorStore, ids: Sequence[str]) -> bool:
    return "pending" not in await states(store, "a", ids)


def _true_when(check):
    async def predicate() -> bool:
        return check()

    return predicate
