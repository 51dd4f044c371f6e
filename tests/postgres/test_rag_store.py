"""PostgreSQL-only behaviour of the RAG store: its migration, its SQL paths, its ACL inside the plan."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import text

from prism_memory.postgres import create_postgres_vector_store, migrate
from prism_memory.postgres.rag_store import RagSql, ef_search_for, exact_scan_max_rows
from prism_memory.rag import AccessConstraint, Chunk, RagScope

pytestmark = pytest.mark.postgres


async def test_upgrading_a_pinned_schema_pins_the_chunks_too(engine, schema):
    """A host at 0002 with vector(8) that upgrades without naming the dimension keeps 8 for chunks."""
    await migrate.upgrade(engine, schema=schema, dimension=8, revision="prism_memory_0002")
    await migrate.upgrade(engine, schema=schema, dimension=None)
    async with engine.connect() as conn:
        width = await conn.execute(
            text(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass(:rel) AND attname = 'embedding'"
            ),
            {"rel": f'"{schema}".semantic_memory_rag_chunks'},
        )
        assert width.scalar_one() == "vector(8)"
        hnsw = await conn.execute(
            text(
                "SELECT indexname FROM pg_indexes WHERE schemaname = :s AND indexdef LIKE '%hnsw%'"
            ),
            {"s": schema},
        )
        # the entries table has none since prism_memory_0010 (no memory query read it)
        assert set(hnsw.scalars()) == {
            "semantic_memory_rag_chunks_hnsw",
        }
    store = await create_postgres_vector_store(engine=engine, schema=schema)
    assert store.dimension == 8


def _near(width: int, axis: int, amount: float) -> np.ndarray:
    vector = np.zeros(width, dtype=np.float32)
    vector[0] = 1.0
    vector[axis] += amount
    return vector


async def test_the_hnsw_path_filters_inside_the_scan_and_never_under_returns(engine, schema):
    """With the HNSW index forced to serve the order, the ACL filters inside the same plan and
    admits only authorised rows; the store's fallback makes up for what the graph cannot reach."""
    store = await create_postgres_vector_store(engine=engine, schema=schema, dimension=16)
    scope = RagScope("t", "docs")
    crowd = [Chunk(f"secret-{i:03d}", 0, "secret", _near(16, 1 + i % 15, 0.02)) for i in range(300)]
    mine = [Chunk(f"open-{i}", 0, "open", _near(16, 1 + i, 1.0 + i)) for i in range(3)]
    await store.upsert(scope, crowd + mine)
    for chunk in mine:
        await store.set_source_access(scope, chunk.source_id, group_ids=["g"], access_version=1)
    sql = RagSql.for_tables(store.tables).nearest(
        exact=False, acl=True, versioned=False, filtered=False
    )
    params = {
        "tenant": "t",
        "scope": scope.key,
        "generation": None,
        "principal": "p",
        "groups": ["g"],
        "query": _near(16, 1, 0.0),
        "limit": 3,
    }
    async with engine.connect() as conn, conn.begin():
        for name, value in (
            ("hnsw.iterative_scan", "strict_order"),
            ("hnsw.ef_search", str(ef_search_for(3, restricted=True))),
            ("enable_sort", "off"),  # the ORDER BY must come from the HNSW index
        ):
            await conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
        plan = "\n".join((await conn.execute(text("EXPLAIN " + sql), params)).scalars())
        rows = list(await conn.execute(text(sql), params))
    assert "semantic_memory_rag_chunks_hnsw" in plan
    assert "semantic_memory_rag_source_acl" in plan  # the ACL is part of the same plan
    # Never an unauthorised row. (Here the graph may even miss the three: near-duplicate crowd
    # vectors prune every edge towards them, so they are unreachable from the entry point and the
    # iterative scan ends short -- which is why the store falls back to the exact statement.)
    # What it does return comes in true distance order (strict_order), though not necessarily as
    # a prefix: the graph can reach a farther authorised row and miss a nearer one.
    nearest_first = ["open-0", "open-1", "open-2"]
    returned = [row.source_id for row in rows]
    assert set(returned) <= set(nearest_first)
    assert returned == sorted(returned, key=nearest_first.index)
    store.rag_exact_scan_max_rows = 0  # the store's HNSW path, then its exact fallback if short
    hits = await store.query(
        scope, embedding=_near(16, 1, 0.0), top_k=3, authorization=AccessConstraint("p", ("g",))
    )
    assert [hit.source_id for hit in hits] == ["open-0", "open-1", "open-2"]


def test_thresholds_and_ef_search_follow_the_measured_rule():
    assert exact_scan_max_rows(restricted=True) == 2000
    assert exact_scan_max_rows(restricted=False) == 600
    assert ef_search_for(10) == 80
    assert ef_search_for(1) == 40
    assert ef_search_for(10, restricted=True) == 400
    assert ef_search_for(32, restricted=True) == 1000
