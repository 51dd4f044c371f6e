"""remember(): new rows are written leased to the memory's own worker, which embeds them without
claiming, and ``wait=True`` resolves from the worker's own completions."""

from __future__ import annotations

import gc
from datetime import UTC, datetime

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory
from prism_memory.models import MemoryEntry, MemoryIdentity
from prism_memory.stores.base import NewEntry

SCOPE = {"tenant_id": "t", "resource_id": "r", "thread_id": "th"}
NOW = datetime(2025, 1, 1, tzinfo=UTC)


class CountingStore(InMemoryVectorStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    async def claim_pending(self, *args, **kwargs):
        found = await super().claim_pending(*args, **kwargs)
        if found:
            self._count("claim_pending_found")
        return found

    async def index_status(self, *args, **kwargs):
        self._count("index_status")
        return await super().index_status(*args, **kwargs)


async def test_remember_wait_needs_no_claim_and_no_status_query():
    store = CountingStore()
    async with create_memory(
        **SCOPE, embedder=HashEmbedder(dimensions=16), vector_store=store
    ) as m:
        for round_ in range(3):
            result = await m.remember(
                [{"text": f"entry {round_} {i}"} for i in range(20)], wait=True
            )
            assert result.pending == ()
        hits = (await m.recall("entry 2 7", top_k=3)).hits
        assert hits[0].record.text == "entry 2 7"
    assert store.calls.get("claim_pending_found", 0) == 0
    assert store.calls.get("index_status", 0) == 0


async def test_rows_of_a_remember_are_leased_to_its_worker_only():
    store = InMemoryVectorStore()
    memory = create_memory(**SCOPE, embedder=HashEmbedder(dimensions=16), vector_store=store)
    async with memory:
        queue = memory._queue
        assert queue is not None
        await queue.aclose(drain=False)  # the worker stops: the rows stay pending and leased
        lease = queue.lease([f"e{i}" for i in range(200)])
        assert lease.ids is not None
        assert len(lease.ids) == 32 * 4  # one claim's worth
        scope = MemoryIdentity(**SCOPE)
        new = [
            NewEntry(
                id=f"e{i}", text=f"t {i}", role="user", metadata={}, consent=None,
                sequence=None, occurred_at=NOW, importance=1.0, lineage=None,
            )
            for i in range(200)
        ]  # fmt: skip
        await store.put_entries(scope, new, now=NOW, lease=lease)
        other = await store.claim_pending(
            scope, limit=1000, worker_id="someone-else", lease_seconds=60, now=NOW
        )
        assert {c.id for c in other} == {f"e{i}" for i in range(128, 200)}


def _parsed_inputs() -> int:
    # `type(o) is`, not isinstance: isinstance on every live object reads `__class__` off lazy
    # module attributes too (torch's deprecated `reduce_op` warns when touched)
    return sum(type(o) is MemoryEntry for o in gc.get_objects())


class LiveInputsStore(InMemoryVectorStore):
    """Counts the parsed inputs (:class:`MemoryEntry`) alive when the rows are written."""

    def __init__(self) -> None:
        super().__init__()
        self.alive: list[int] = []

    async def put_entries(self, *args, **kwargs):
        self.alive.append(_parsed_inputs())
        return await super().put_entries(*args, **kwargs)


async def test_a_batch_in_flight_holds_its_prepared_entries_not_its_parsed_inputs():
    # each input is parsed and prepared in turn and its parsed form dropped at once: 128 entries
    # in flight would otherwise be 3 more objects each for the garbage collector to walk, and 8
    # writers at once pay for that in full collections (benchmarks/import_speed.py)
    store = LiveInputsStore()
    async with create_memory(
        **SCOPE, embedder=HashEmbedder(dimensions=16), vector_store=store
    ) as m:
        before = _parsed_inputs()
        await m.remember([{"text": f"entry {i}"} for i in range(128)], wait=True)
        await m.remember([{"text": f"again {i}"} for i in range(128)])
    assert len(store.alive) == 2
    assert [count - before <= 1 for count in store.alive] == [True, True]
