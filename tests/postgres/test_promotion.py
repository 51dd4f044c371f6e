"""Retiring the old embedding model on PostgreSQL: ``promote_generation`` moves the active
generation's vectors into the entries' own column in batches -- here to another width, which an
unpinned column takes -- while recall answers the same, then ``drop_generation`` deletes the old
model's vectors. A pinned column of another width refuses; two promoters never move one entry
twice. (The rules every store meets are conformance checks: testing/_generations_promotion.py.)"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import text

from prism_memory.errors import ConflictError, DimensionMismatchError
from prism_memory.models import MemoryIdentity
from prism_memory.stores.base import NewEntry, RecallFilter, SearchRequest

pytestmark = pytest.mark.postgres

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-1")
OTHER = MemoryIdentity(tenant_id="tenant-b", resource_id="user-1", thread_id="thread-1")
OLD, NEW = "old-model", "new-model"
IDS = {SCOPE: ["a", "b", "c", "d", "e"], OTHER: ["f"]}


def _entry(entry_id: str) -> NewEntry:
    return NewEntry(
        id=entry_id,
        text=f"text of {entry_id}",
        role="user",
        metadata={},
        consent=None,
        sequence=None,
        occurred_at=NOW,
        importance=1.0,
        lineage=None,
    )


def _old(entry_id: str) -> np.ndarray:
    """The old model's (3-wide) vector of an entry: distinct directions, so ranks differ."""
    at = "abcdef".index(entry_id)
    return np.asarray([1.0, at, at * at % 5], np.float32)


def _new(entry_id: str) -> np.ndarray:
    """The new model's (4-wide) vector of an entry: another order than the old one's."""
    at = "fedcba".index(entry_id)
    return np.asarray([at % 3, 1.0, at, 2.0 - at % 2], np.float32)


def _request(vector: np.ndarray, model: str | None) -> SearchRequest:
    return SearchRequest(
        vector=vector, terms=frozenset(), limit=10, filter=RecallFilter(now=NOW), model=model
    )


def _distance(query: np.ndarray, vector: np.ndarray) -> float:
    cosine = float(query @ vector) / float(np.linalg.norm(query) * np.linalg.norm(vector))
    return round(1.0 - cosine, 6)


async def _answers(store, model: str, query: np.ndarray | None = None) -> list[tuple[str, float]]:
    """The thread's candidates for a query of ``model`` (ids and cosine distances, ranked);
    every candidate carries a vector of that model."""
    if query is None:
        query = _new("c") if model == NEW else _old("c")
    found = await store.search(SCOPE, _request(query, model))
    assert {c.embedding_model for c in found.candidates} == {model}
    return sorted(
        ((c.id, _distance(query, c.vector)) for c in found.candidates), key=lambda p: (p[1], p[0])
    )


async def _migrated(make_postgres_stores, *, dimension=None, width=4):
    """A store of the old model's entries, with the new model backfilled and switched to."""
    store = (await make_postgres_stores(dimension=dimension)).vector_store
    new = _new if width == 4 else (lambda entry_id: _new(entry_id)[:3])
    for scope, ids in IDS.items():
        await store.put_entries(
            scope, [_entry(i) for i in ids], now=NOW, vectors=[_old(i) for i in ids], model=OLD
        )
    await store.start_generation(primary=OLD, primary_width=3, model=NEW, width=width, now=NOW)
    claimed = await store.claim_generation(NEW, limit=100, worker_id="w", lease_seconds=60, now=NOW)
    await store.store_generation_vectors(NEW, [(c, new(c.id)) for c in claimed], now=NOW)
    await store.switch_generation(NEW, force=False, now=NOW)
    return store


async def _own(store) -> list[tuple[str, str, int]]:
    """Every entry's own vector: ``(id, model, width)``."""
    names = store.tables.names
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            text(
                f"SELECT id, embedding_model, vector_dims(embedding) "
                f'FROM "{names.schema}"."{names.entries}" ORDER BY id'
            )
        )
        return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]


async def _kept(store) -> dict[str, int]:
    names = store.tables.names
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            text(f'SELECT model, count(*) FROM "{names.schema}"."{names.vectors}" GROUP BY model')
        )
        return {str(r[0]): int(r[1]) for r in rows}


async def test_a_promotion_to_another_width_retires_the_old_model(make_postgres_stores):
    store = await _migrated(make_postgres_stores)
    await store.switch_generation(OLD, force=False, now=NOW)
    before_old = await _answers(store, OLD)
    await store.switch_generation(NEW, force=False, now=NOW)
    before_new = await _answers(store, NEW)
    assert [i for i, _ in before_new] != [i for i, _ in before_old]  # two real rankings
    assert before_new[0] == ("c", 0.0)

    steps = []
    while True:
        step = await store.promote_generation(NEW, limit=2, now=NOW)
        steps.append((step.moved, step.left, step.promoted))
        assert await _answers(store, NEW) == before_new  # the same, batch after batch
        if len(steps) == 1:  # a rollback half-way answers as the old model did
            await store.switch_generation(OLD, force=False, now=NOW)
            assert await _answers(store, OLD) == before_old
            # a search naming no model ranks the primary's vectors by the same rule
            query = _old("c")
            found = await store.search(SCOPE, _request(query, None))
            assert {c.embedding_model for c in found.candidates} == {OLD}
            unnamed = sorted((c.id, _distance(query, c.vector)) for c in found.candidates)
            assert unnamed == sorted(before_old)
            await store.switch_generation(NEW, force=False, now=NOW)
        if step.promoted:
            break
    assert steps == [(2, None, False), (2, None, False), (2, None, False), (0, 0, True)]
    assert await _own(store) == [(i, NEW, 4) for i in "abcdef"]
    assert await _kept(store) == {OLD: 6}
    assert [(g.model, g.role, g.active) for g in await store.generations()] == [
        (NEW, "primary", True),
        (OLD, "shadow", False),
    ]
    again = await store.promote_generation(NEW, limit=2, now=NOW)
    assert (again.moved, again.left, again.promoted) == (0, 0, True)

    # still one switch away from the old model, until it is dropped
    await store.switch_generation(OLD, force=False, now=NOW)
    assert await _answers(store, OLD) == before_old
    with pytest.raises(ConflictError):
        await store.drop_generation(OLD)  # the active one
    await store.switch_generation(NEW, force=False, now=NOW)
    assert await store.drop_generation(OLD) == 6
    assert [(g.model, g.role) for g in await store.generations()] == [(NEW, "primary")]
    assert await _kept(store) == {}
    assert await _answers(store, NEW) == before_new

    # writes now take the new width and refuse the old one, in this process too (it stored
    # 3-wide vectors before)
    await store.put_entries(SCOPE, [_entry("g")], now=NOW, vectors=[_new("a")], model=NEW)
    with pytest.raises(DimensionMismatchError):
        await store.put_entries(SCOPE, [_entry("h")], now=NOW, vectors=[_old("a")], model=OLD)
    nearest = await _answers(store, NEW, _new("a"))
    assert nearest[:2] == [("a", 0.0), ("g", 0.0)]


async def test_a_pinned_column_of_another_width_refuses_the_promotion(make_postgres_stores):
    store = await _migrated(make_postgres_stores, dimension=3)
    registered = await store.generations()
    with pytest.raises(DimensionMismatchError) as refused:
        await store.promote_generation(NEW, limit=10, now=NOW)
    assert NEW not in str(refused.value)
    assert await store.generations() == registered
    assert {model for _, model, _ in await _own(store)} == {OLD}

    same_width = await _migrated(make_postgres_stores, dimension=3, width=3)
    step = await same_width.promote_generation(NEW, limit=10, now=NOW)
    assert (step.moved, step.left, step.promoted) == (6, 0, True)
    assert await _own(same_width) == [(i, NEW, 3) for i in "abcdef"]


async def test_two_promoters_never_move_an_entry_twice(make_postgres_stores):
    store = await _migrated(make_postgres_stores)
    before = await _answers(store, NEW)
    names = store.tables.names
    twin = (await make_postgres_stores(schema=names.schema)).vector_store

    async def promote(on) -> list[int]:
        moved = []
        while True:
            step = await on.promote_generation(NEW, limit=1, now=NOW)
            moved.append(step.moved)
            if step.promoted:
                return moved
            if not step.moved:
                await asyncio.sleep(0.01)  # the other one holds the last rows

    first, second = await asyncio.gather(promote(store), promote(twin))
    assert sum(first) + sum(second) == 6
    assert await _own(store) == [(i, NEW, 4) for i in "abcdef"]
    assert await _kept(store) == {OLD: 6}
    assert await _answers(store, NEW) == before
