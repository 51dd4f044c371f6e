"""Bulk loads on PostgreSQL: no HNSW index on the entries to maintain, the table analysed after a
load, recall exact throughout."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import text

from prism_memory.models import MemoryIdentity
from prism_memory.postgres.statements import EntrySql, search_statement
from prism_memory.stores.base import NewEntry, RecallFilter, SearchRequest, SharedSource

pytestmark = pytest.mark.postgres

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-1")


async def _hnsw_defs(stores) -> list[str]:
    names = stores.vector_store.tables.names
    async with stores.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = :s AND tablename = :t "
                "AND indexdef ILIKE '%hnsw%'"
            ),
            {"s": names.schema, "t": names.entries},
        )
        return [row[0] for row in rows]


def _entry(i: int) -> NewEntry:
    return NewEntry(
        id=f"e{i}",
        text=f"text {i}",
        role="user",
        metadata={},
        consent=None,
        sequence=None,
        occurred_at=NOW,
        importance=1.0,
        lineage=None,
    )


async def test_the_entries_table_has_no_hnsw_index_to_maintain(make_postgres_stores):
    """No query reads an ANN index on the entries (recall is exact per scope), so none exists --
    pinned or not -- and a bulk load inside ``deferred_vector_index()`` recalls exactly."""
    for dimension in (None, 4):
        stores = await make_postgres_stores(dimension=dimension)
        assert await _hnsw_defs(stores) == []
    store = stores.vector_store
    rng = np.random.default_rng(5)
    vectors = {f"e{i}": rng.standard_normal(4).astype(np.float32) for i in range(50)}
    async with store.deferred_vector_index():
        await store.put_entries(SCOPE, [_entry(i) for i in range(50)], now=NOW)
        await store.store_vectors(SCOPE, [(k, 1, v) for k, v in vectors.items()], now=NOW)
    assert await _hnsw_defs(stores) == []
    query = rng.standard_normal(4).astype(np.float32)
    found = (
        await store.search(
            SCOPE,
            SearchRequest(vector=query, terms=frozenset(), limit=5, filter=RecallFilter(now=NOW)),
        )
    ).candidates
    # exact: the five nearest by cosine, computed here
    m = np.stack(list(vectors.values())).astype(np.float64)
    cos = (m @ query) / (np.linalg.norm(m, axis=1) * np.linalg.norm(query))
    want = {list(vectors)[i] for i in np.argsort(-cos)[:5]}
    assert {c.record.id for c in found} == want


async def test_the_loaded_table_is_analysed_on_exit(make_postgres_stores):
    """Recalls right after a bulk load are planned on statistics: without them (autovacuum
    gathers them a minute or more later) a recall sharing a parent thread's entries read the
    parent's whole scope range and filtered it for the granted ids; with them it reads the
    granted rows by primary key."""
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    names = store.tables.names
    parent = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="parent")
    rng = np.random.default_rng(9)
    async with store.deferred_vector_index():
        for start in range(0, 4000, 128):
            batch = [_entry(i) for i in range(start, min(4000, start + 128))]
            await store.put_entries(
                parent, batch, now=NOW, vectors=rng.standard_normal((len(batch), 4))
            )
    async with stores.engine.connect() as conn:
        analysed = await conn.scalar(
            text("SELECT count(*) FROM pg_stats WHERE schemaname = :s AND tablename = :t"),
            {"s": names.schema, "t": names.entries},
        )
    assert analysed > 0
    granted = tuple(f"e{i}" for i in range(7, 4000, 150))
    request = SearchRequest(
        vector=rng.standard_normal(4),
        terms=frozenset(),
        limit=10,
        filter=RecallFilter(now=NOW),
        shared=SharedSource(thread_id="parent", ids=granted),
    )
    sql, params, _ = search_statement(EntrySql.for_tables(store.tables).recall, SCOPE, request)
    async with stores.engine.connect() as conn:
        plan = "\n".join((await conn.execute(text(f"EXPLAIN {sql}"), params)).scalars())
    # the granted ids are an index condition (primary key), not a filter over the parent's range
    assert any("Index Cond" in line and "(id = ANY" in line for line in plan.splitlines()), plan
