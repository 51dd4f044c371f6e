"""Resource-wide recall on PostgreSQL: the travelling rows come through their partial index, and
the selection is exact (it never under-returns, whatever the filter)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import text

from prism_memory.lexical import CorpusStats
from prism_memory.models import MemoryIdentity
from prism_memory.postgres.statements import EntrySql
from prism_memory.stores.base import RecallFilter, SearchRequest

pytestmark = pytest.mark.postgres

WIDTH = 8
# Row g: thread 'thread-(g % 40)'; every 50th row travels ('user', or 'profile' when g % 100 = 0);
# a second resource and a second tenant get the same rows, which must never show up.
FILL = (
    "INSERT INTO {table} (tenant_id, resource_id, thread_id, id, text, role, metadata, "
    "consent_explicit, consent_source, consent_scope, consent_visible, sequence, occurred_at, "
    "created_at, written_at, importance, legal_hold, status, revision, attempts, embedding, "
    "text_tsv, term_count) "
    "SELECT t.tenant, t.resource, 'thread-' || (g % 40), 'e' || g, 'text ' || g, 'user', "
    "'{{}}'::jsonb, true, 'user', "
    "CASE WHEN g % 100 = 0 THEN 'profile' WHEN g % 50 = 0 THEN 'user' ELSE 'thread' END, "
    "g % 7 <> 3, g, now(), now(), now(), 1.0, false, 'indexed', 1, 0, "
    "CAST(ARRAY[sin(g), cos(g), sin(2 * g), cos(3 * g), sin(5 * g), cos(7 * g), sin(11 * g), "
    "cos(13 * g)] AS vector), array_to_tsvector(ARRAY['text', g::text]), 2 "
    "FROM generate_series(1, 4000) AS g, "
    "(VALUES ('tenant-a', 'user-1'), ('tenant-a', 'user-2'), ('tenant-b', 'user-1')) "
    "AS t(tenant, resource)"
)


async def _filled(make_postgres_stores):
    stores = await make_postgres_stores(dimension=WIDTH)
    names = stores.vector_store.tables.names
    table = f'"{names.schema}"."{names.entries}"'
    async with stores.engine.begin() as conn:
        await conn.execute(text(FILL.format(table=table)))
        await conn.execute(text(f"ANALYZE {table}"))
    return stores


def _expected(g: np.ndarray) -> np.ndarray:
    return np.stack(
        [
            np.sin(g),
            np.cos(g),
            np.sin(2 * g),
            np.cos(3 * g),
            np.sin(5 * g),
            np.cos(7 * g),
            np.sin(11 * g),
            np.cos(13 * g),
        ],
        axis=1,
    )


async def test_the_travelling_rows_are_read_through_their_partial_index(make_postgres_stores):
    stores = await _filled(make_postgres_stores)
    store = stores.vector_store
    names = store.tables.names
    sql = EntrySql.for_tables(store.tables).recall.search(
        require_consent=False,
        occurred_after=False,
        shared=False,
        lexical=False,
        resource_wide=True,
    )
    async with stores.engine.connect() as conn:
        plan = await conn.execute(
            text(f"EXPLAIN {sql}"),
            {
                "tenant": "tenant-a",
                "resource": "user-1",
                "thread": "thread-7",
                "query": np.ones(WIDTH, dtype=np.float32),
                "limit": 10,
            },
        )
        lines = "\n".join(row[0] for row in plan)
    assert names.ix_resource_shared in lines, lines
    assert names.ix_hnsw not in lines, lines


async def test_resource_wide_selection_is_exact(make_postgres_stores):
    stores = await _filled(make_postgres_stores)
    store = stores.vector_store
    query = np.array([0.3, -0.2, 0.9, 0.1, -0.5, 0.4, 0.2, -0.1], dtype=np.float32)
    scope = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-7")
    found = await store.search(
        scope,
        SearchRequest(
            vector=query,
            terms=frozenset(),
            limit=40,
            filter=RecallFilter(now=datetime.now(UTC)),
            resource_wide=True,
        ),
    )
    # the corpus, computed here independently: the thread's own visible rows plus every visible
    # travelling row of the resource's other threads
    g = np.arange(1, 4001)
    visible = g % 7 != 3
    own = (g % 40 == 7) & visible
    travelling = (g % 50 == 0) & (g % 40 != 7) & visible
    corpus = g[own | travelling]
    vectors = _expected(corpus.astype(np.float64))
    cosine = (
        vectors
        @ query.astype(np.float64)
        / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query.astype(np.float64)))
    )
    order = np.lexsort((corpus, -cosine))  # nearest first, ties by sequence (= g)
    expected = {f"e{n}" for n in corpus[order[:40]]}
    got = {c.record.id for c in found.candidates}
    assert got == expected
    assert found.stats == CorpusStats(int(corpus.shape[0]), 2 * int(corpus.shape[0]), {})
    assert {c.record.tenant_id for c in found.candidates} == {"tenant-a"}
    assert {c.record.resource_id for c in found.candidates} == {"user-1"}
