"""The in-memory store keeps each thread's search index up to date write by write: searches after
any mix of writes equal searches over a freshly built index, and a write never rebuilds it."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np

from prism_memory import InMemoryVectorStore
from prism_memory.models import Lineage, MemoryConsent, MemoryIdentity
from prism_memory.stores.base import NewEntry, RecallFilter, SearchRequest, Tombstone

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="th")
WIDTH = 6


def _entry(i: int, text: str, *, seq: int | None = None, lineage: str | None = None) -> NewEntry:
    return NewEntry(
        id=f"e{i}",
        text=text,
        role="user",
        metadata={},
        consent=MemoryConsent() if i % 3 == 0 else None,
        sequence=seq,
        occurred_at=NOW - timedelta(days=i % 7),
        importance=1.0,
        lineage=None if lineage is None else Lineage(source_ids=(lineage,)),
    )


async def _index_pending(store: InMemoryVectorStore, rng: np.random.Generator) -> None:
    claimed = await store.claim_pending(SCOPE, limit=1000, worker_id="w", lease_seconds=60, now=NOW)
    vectors = []
    for item in claimed:
        v = rng.standard_normal(WIDTH).astype(np.float32)
        if item.id.endswith("7"):
            v = np.round(v)  # some exact ties between rows
        vectors.append((item, v))
    await store.complete_indexing(vectors, worker_id="w", now=NOW)


def _fresh_search(store: InMemoryVectorStore) -> None:
    thread = store._state.threads[(SCOPE.tenant_id, SCOPE.resource_id, SCOPE.thread_id)]
    thread.index = None


async def _both(store: InMemoryVectorStore, request: SearchRequest) -> tuple[object, object]:
    found = await store.search(SCOPE, request)
    incremental = ([(c.record.id, c.record.revision) for c in found.candidates], found.stats)
    _fresh_search(store)
    again = await store.search(SCOPE, request)
    rebuilt = ([(c.record.id, c.record.revision) for c in again.candidates], again.stats)
    return incremental, rebuilt


async def test_incremental_index_equals_a_rebuilt_one_after_any_writes():
    rng = np.random.default_rng(7)
    pick = random.Random(7)
    store = InMemoryVectorStore(dimension=WIDTH)
    await store.put_entries(SCOPE, [_entry(i, f"word{i % 4} common") for i in range(30)], now=NOW)
    await _index_pending(store, rng)
    words = ["word0", "word1", "word2", "word3", "common", "absent"]
    for step in range(120):
        action = pick.choice(["put", "retext", "delete", "consent", "hold", "tombstone", "seq"])
        i = pick.randrange(40)
        if action == "put":
            source = f"e{pick.randrange(30)}" if pick.random() < 0.3 else None
            if source == f"e{i}" or (source is not None and source.removeprefix("e") == str(i)):
                source = None
            if source is not None and not await store.known_ids(SCOPE, [source]):
                source = None  # lineage may only name an entry the thread holds
            await store.put_entries(
                SCOPE, [_entry(i, f"word{i % 4} new{step}", lineage=source)], now=NOW
            )
        elif action == "retext":
            await store.put_entries(SCOPE, [_entry(i, f"changed {step} word{step % 4}")], now=NOW)
        elif action == "delete":
            await store.delete_entries(SCOPE, [f"e{i}"])
        elif action == "consent" and f"e{i}" in (await store.known_ids(SCOPE, [f"e{i}"])):
            await store.set_consent(
                SCOPE, f"e{i}", MemoryConsent(visible=pick.random() < 0.5), now=NOW
            )
        elif action == "hold":
            await store.set_legal_hold(SCOPE, [f"e{i}"], pick.random() < 0.5)
        elif action == "tombstone":
            await store.add_tombstones(SCOPE, [Tombstone(f"e{i}", f"e{i}", "forgotten", NOW)])
        elif action == "seq":
            await store.put_entries(
                SCOPE, [_entry(i, f"word{i % 4} common", seq=pick.randrange(5))], now=NOW
            )
        if step % 3 == 0:
            await _index_pending(store, rng)
        query = rng.standard_normal(WIDTH).astype(np.float32)
        terms = frozenset(pick.sample(words, 2))
        for flt in (
            RecallFilter(now=NOW),
            RecallFilter(now=NOW, require_consent=True, occurred_after=NOW - timedelta(days=3)),
        ):
            for limit in (1, 5, 50):
                request = SearchRequest(vector=query, terms=terms, limit=limit, filter=flt)
                incremental, rebuilt = await _both(store, request)
                assert incremental == rebuilt, (step, action, limit)


async def test_a_write_updates_the_index_in_place():
    rng = np.random.default_rng(1)
    store = InMemoryVectorStore(dimension=WIDTH)
    await store.put_entries(SCOPE, [_entry(i, f"text {i}") for i in range(20)], now=NOW)
    await _index_pending(store, rng)
    request = SearchRequest(
        vector=rng.standard_normal(WIDTH).astype(np.float32),
        terms=frozenset(),
        limit=100,
        filter=RecallFilter(now=NOW),
    )
    assert len((await store.search(SCOPE, request)).candidates) == 20
    thread = store._state.threads[(SCOPE.tenant_id, SCOPE.resource_id, SCOPE.thread_id)]
    built = thread.index
    assert built is not None
    await store.put_entries(SCOPE, [_entry(20, "text 20")], now=NOW)
    await _index_pending(store, rng)
    await store.delete_entries(SCOPE, ["e3"])
    found = {c.record.id for c in (await store.search(SCOPE, request)).candidates}
    assert thread.index is built  # the same arrays, appended to, not rebuilt
    assert "e20" in found
    assert "e3" not in found
    assert len(found) == 20


async def test_tombstones_come_and_go_without_a_rebuild():
    rng = np.random.default_rng(3)
    store = InMemoryVectorStore(dimension=WIDTH)
    await store.put_entries(SCOPE, [_entry(i, f"text {i}") for i in range(10)], now=NOW)
    await store.put_entries(SCOPE, [_entry(10, "derived", lineage="e2")], now=NOW)
    await _index_pending(store, rng)
    request = SearchRequest(
        vector=rng.standard_normal(WIDTH).astype(np.float32),
        terms=frozenset({"text", "deriv"}),
        limit=100,
        filter=RecallFilter(now=NOW),
    )
    everyone = {f"e{i}" for i in range(11)}
    assert {c.record.id for c in (await store.search(SCOPE, request)).candidates} == everyone
    thread = store._state.threads[(SCOPE.tenant_id, SCOPE.resource_id, SCOPE.thread_id)]
    built = thread.index

    await store.add_tombstones(SCOPE, [Tombstone("e2", "hold-1", "held", NOW)])
    found = await store.search(SCOPE, request)
    assert {c.record.id for c in found.candidates} == everyone - {"e2", "e10"}  # e10 derives
    assert (found.stats.documents, found.stats.document_frequency) == (9, {"text": 9})
    assert thread.index is built
    incremental, rebuilt = await _both(store, request)
    assert incremental == rebuilt
    built = thread.index

    assert await store.remove_tombstones(SCOPE, "hold-1", "held") == 1
    found = await store.search(SCOPE, request)
    assert {c.record.id for c in found.candidates} == everyone
    assert found.stats.document_frequency == {"text": 10, "deriv": 1}
    assert thread.index is built
    incremental, rebuilt = await _both(store, request)
    assert incremental == rebuilt
