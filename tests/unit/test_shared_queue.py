"""The indexing queue shared by the memories of one store and embedder (in-memory store)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from prism_memory import HashEmbedder, IndexingPolicy, InMemoryVectorStore, create_memory
from prism_memory.indexing import IndexingQueue, join_queue
from prism_memory.indexing.claims import ThreadTurns
from prism_memory.models import MemoryIdentity
from prism_memory.stores.base import ClaimedEntry, NewEntry

DIM = 16


def utcnow() -> datetime:
    return datetime.now(UTC)


class RecordingEmbedder:
    """Records every batch it embeds."""

    def __init__(self, delay: float = 0.0) -> None:
        self._inner = HashEmbedder(DIM)
        self._delay = delay
        self.batches: list[list[str]] = []

    @property
    def dimensions(self) -> int:
        return DIM

    async def embed(self, texts: Sequence[str]):
        self.batches.append(list(texts))
        await asyncio.sleep(self._delay)
        return await self._inner.embed(texts)

    @property
    def texts(self) -> list[str]:
        return [text for batch in self.batches for text in batch]


class CountingStore(InMemoryVectorStore):
    """Counts claim statements: single-thread claims and many-thread claims (with their width)."""

    def __init__(self) -> None:
        super().__init__()
        self.single: list[MemoryIdentity | None] = []
        self.many: list[int] = []

    async def claim_pending(self, scope, **kwargs):
        self.single.append(scope)
        return await super().claim_pending(scope, **kwargs)

    async def claim_pending_in(self, scopes, **kwargs):
        self.many.append(len(scopes))
        return await super().claim_pending_in(scopes, **kwargs)


def scope(thread: str) -> MemoryIdentity:
    return MemoryIdentity(tenant_id="t", resource_id="r", thread_id=thread)


def memory(store, embedder, thread, **options):
    return create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id=thread,
        embedder=embedder,
        vector_store=store,
        **options,
    )


async def wait_until(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


async def test_join_shares_one_queue_per_store_embedder_and_settings():
    store, embedder = InMemoryVectorStore(), HashEmbedder(DIM)
    policy = IndexingPolicy()
    args = {"batch_size": 8, "clock": utcnow, "policy": policy}
    a = join_queue(store=store, embedder=embedder, scope=scope("a"), **args)
    b = join_queue(store=store, embedder=embedder, scope=scope("b"), **args)
    same_thread = join_queue(store=store, embedder=embedder, scope=scope("a"), **args)
    assert a.queue is b.queue is same_thread.queue
    assert a.queue.members == 3
    others = [
        join_queue(store=InMemoryVectorStore(), embedder=embedder, scope=scope("a"), **args),
        join_queue(store=store, embedder=HashEmbedder(DIM), scope=scope("a"), **args),
        join_queue(store=store, embedder=embedder, scope=scope("a"), **{**args, "batch_size": 4}),
        join_queue(
            store=store,
            embedder=embedder,
            scope=scope("a"),
            **{**args, "policy": IndexingPolicy(idle_poll_seconds=1)},
        ),
        join_queue(store=store, embedder=embedder, scope=scope("a"), **{**args, "clock": utcnow2}),
    ]
    assert len({id(m.queue) for m in others} | {id(a.queue)}) == 6
    for member in (a, b, same_thread, *others):
        await member.aclose()
    assert a.queue.members == 0
    again = join_queue(store=store, embedder=embedder, scope=scope("a"), **args)
    assert again.queue is not a.queue  # the last to leave retired it
    await again.aclose()


def utcnow2() -> datetime:
    return datetime.now(UTC)


async def test_threads_take_turns_one_embedder_batch_each():
    store, embedder = InMemoryVectorStore(), RecordingEmbedder()
    args = {"store": store, "embedder": embedder, "batch_size": 2, "clock": utcnow}
    members = [join_queue(scope=scope(t), **args) for t in ("a", "b")]
    queue = members[0].queue  # not started: run_until_idle below does the work
    now = utcnow()
    for member in members:
        thread = member.scope.thread_id
        ids = [f"{thread}{i}" for i in range(6)]
        lease = member.lease(ids)
        new = [
            NewEntry(
                id=i, text=i, role="user", metadata={}, consent=None, sequence=None,
                occurred_at=now, importance=1.0, lineage=None,
            )
            for i in ids
        ]  # fmt: skip
        records = await store.put_entries(member.scope, new, now=now, lease=lease)
        member.adopt(
            ClaimedEntry(scope=member.scope, id=r.id, revision=1, text=r.text, attempts=0)
            for r in records
        )
    assert await queue.run_until_idle() == 12
    # one claim's worth (4 batches of 2) per round, one embedder batch of each thread in turn
    assert embedder.batches[:4] == [["a0", "a1"], ["b0", "b1"], ["a2", "a3"], ["b2", "b3"]]
    assert embedder.batches[4:] == [["a4", "a5"], ["b4", "b5"]]
    for member in members:
        await member.aclose()


async def test_fifty_memories_sweep_with_one_claim_statement():
    store, embedder = CountingStore(), HashEmbedder(DIM)
    policy = IndexingPolicy(idle_poll_seconds=0.02, busy_poll_seconds=0.01)
    memories = [memory(store, embedder, f"thread-{i}", indexing=policy) for i in range(50)]
    for m in memories:
        await m.__aenter__()
    await wait_until(lambda: len(store.many) >= 3)  # a few idle sweeps
    assert store.single == []  # never one claim per thread
    assert set(store.many) == {50}  # each sweep covers every open thread in one call
    for i, m in enumerate(memories):
        result = await m.remember({"text": f"entry of thread {i}"}, wait=True)
        assert result.pending == ()
    assert store.single == []  # remember(wait=True) claims nothing: its rows come leased
    for m in memories:
        await m.aclose()


async def test_a_leaving_memory_drains_its_own_thread_while_the_queue_serves_others():
    store, embedder = InMemoryVectorStore(), RecordingEmbedder(delay=0.005)
    staying = memory(store, embedder, "staying", limits={"embed_batch": 2})
    leaving = memory(store, embedder, "leaving", limits={"embed_batch": 2})
    async with staying:
        result = await leaving.remember([{"text": f"note {i}"} for i in range(9)])
        await leaving.aclose()  # waits for its own rows, not for the queue to stop
        statuses = await leaving.index_status(list(result.pending))
        assert set(statuses.values()) == {"indexed"}
        assert sorted((await result.done).indexed) == sorted(result.pending)
        assert staying._queue is not None
        shared = staying._queue.queue
        assert shared.running  # the shared task goes on for the memory still open
        again = await staying.remember({"text": "after the other left"}, wait=True)
        assert again.pending == ()
    assert not shared.running  # the last to leave stopped it


async def test_a_memory_resumes_only_its_own_thread_on_a_shared_queue():
    store = InMemoryVectorStore()
    gated_texts = [f"parked {i}" for i in range(5)]
    stuck = memory(
        store, _NeverEmbeds(), "parked", indexing=IndexingPolicy(drain_seconds=0.05)
    )  # a different embedder: its own queue, which never finishes
    parked = await stuck.remember([{"text": t} for t in gated_texts])
    await stuck.aclose()
    embedder = RecordingEmbedder()
    other = memory(store, embedder, "other")
    mine = memory(store, embedder, "parked")
    assert await other.resume_indexing() == 0
    assert embedder.texts == []
    assert await mine.resume_indexing() == 5
    assert sorted(embedder.texts) == sorted(gated_texts)
    statuses = await mine.index_status(list(parked.pending))
    assert set(statuses.values()) == {"indexed"}
    await other.aclose()
    await mine.aclose()


class _NeverEmbeds:
    dimensions = DIM

    async def embed(self, texts):
        await asyncio.Event().wait()


class SlowStatusStore(InMemoryVectorStore):
    """index_status waits for ``gate`` while ``block`` is set (counts its calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.block = True
        self.calls = 0

    async def index_status(self, scope, ids):
        self.calls += 1
        if self.block:
            await self.gate.wait()
        return await super().index_status(scope, ids)


async def test_a_watcher_added_while_the_store_is_asked_is_not_resolved_as_gone():
    from prism_memory import IndexingError, IndexingQueue
    from prism_memory.stores.base import EntryLease

    store = SlowStatusStore()
    here = scope("th")
    now = utcnow()
    taken = EntryLease(worker_id="someone-else", until=datetime(2999, 1, 1, tzinfo=UTC))
    new = [
        NewEntry(
            id=i, text=i, role="user", metadata={}, consent=None, sequence=None,
            occurred_at=now, importance=1.0, lineage=None,
        )
        for i in ("a", "b")
    ]  # fmt: skip
    await store.put_entries(here, new, now=now, lease=taken)  # pending; no one here may claim them
    queue = IndexingQueue(store=store, embedder=HashEmbedder(DIM), scope=here, batch_size=2,
                          clock=utcnow, policy=IndexingPolicy(busy_poll_seconds=0.01))  # fmt: skip
    await queue.start()
    first = queue.watch(["a"])
    await wait_until(lambda: store.calls >= 1)  # the task is asking the store about "a"
    second = queue.watch(["b"])  # arrives meanwhile
    store.block = False
    store.gate.set()
    calls = store.calls
    await wait_until(lambda: store.calls >= calls + 2)  # the task has looked again, twice
    assert not first.done()
    assert not second.done()  # "b" is pending: not reported as gone
    await queue.aclose(drain=False)
    for future in (first, second):
        with pytest.raises(IndexingError):
            await future


class ConcurrencyEmbedder:
    """Blocks every call until released; records how many calls were in flight at once."""

    def __init__(self) -> None:
        self._inner = HashEmbedder(DIM)
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.most = 0

    @property
    def dimensions(self) -> int:
        return DIM

    async def embed(self, texts):
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await self.gate.wait()
            return await self._inner.embed(texts)
        finally:
            self.in_flight -= 1


async def test_a_shared_queue_embeds_several_threads_batches_at_once():
    from prism_memory.indexing import SHARED_LANES

    store, embedder = InMemoryVectorStore(), ConcurrencyEmbedder()
    memories = [memory(store, embedder, f"thread-{i}") for i in range(SHARED_LANES + 1)]
    results = []
    for i, m in enumerate(memories):
        results.append(await m.remember({"text": f"entry of thread {i}"}))
        await wait_until(lambda i=i: embedder.in_flight == min(i + 1, SHARED_LANES))
    assert embedder.most == SHARED_LANES  # one lane per batch, never more
    embedder.gate.set()
    reports = await asyncio.gather(*(r.done for r in results))
    assert all(len(report.indexed) == 1 for report in reports)  # the last waited for a lane
    for m in memories:
        await m.aclose()


class CountingTurns(ThreadTurns):
    """:class:`ThreadTurns` counting how often the queue's loop asks it for a claim."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def claim(self, queue, limit):
        self.asked += 1
        return await super().claim(queue, limit)


async def test_a_batch_finished_in_its_own_lane_does_not_wake_an_idle_loop():
    # issue 49: the batch a shared queue finished beside its loop woke the loop for an empty
    # claim round after `done` had resolved -- during the caller's next call (a recall)
    store, embedder, turns = InMemoryVectorStore(), HashEmbedder(DIM), CountingTurns()
    home = scope("a")
    queue = IndexingQueue(
        store=store, embedder=embedder, scope=home, batch_size=8, clock=utcnow, lanes=2,
        claims=turns,
    )  # fmt: skip
    await queue.start()
    await wait_until(lambda: turns.asked >= 1)  # the first sweep, then idle
    now = utcnow()
    lease = queue.lease(["x"])
    new = NewEntry(
        id="x", text="x", role="user", metadata={}, consent=None, sequence=None,
        occurred_at=now, importance=1.0, lineage=None,
    )  # fmt: skip
    records = await store.put_entries(home, [new], now=now, lease=lease)
    done = queue.watch(["x"])
    queue.adopt(
        ClaimedEntry(scope=home, id=r.id, revision=1, text=r.text, attempts=0) for r in records
    )
    assert (await done).indexed == ("x",)
    asked = turns.asked
    for _ in range(50):  # the loop gets every chance to run
        await asyncio.sleep(0)
    assert turns.asked == asked  # idle: nothing is pending, nobody waits
    await queue.aclose()
