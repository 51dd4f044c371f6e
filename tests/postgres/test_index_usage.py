"""Every index on the entries table is read by some query: an index nothing reads is a cost on every
write, not a feature (the HNSW graph revision 0002 built was one, and 0010 drops it).

The statements are the ones the store runs (:class:`~prism_memory.postgres.statements.EntrySql`), planned
with ``EXPLAIN`` on a table of 20 threads × 1,000 rows whose statistics are gathered, so the planner
chooses as it would in production -- nothing is forced.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from prism_memory.models import MemoryIdentity
from prism_memory.postgres.statements import EntrySql, claim_statement, search_statement
from prism_memory.stores.base import RecallFilter, SearchRequest

pytestmark = pytest.mark.postgres

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-7")


def _index_names(plan: Any) -> set[str]:
    tree = json.loads(plan) if isinstance(plan, str) else plan

    def walk(node: dict[str, Any]) -> set[str]:
        found = {node["Index Name"]} if "Index Name" in node else set()
        for child in node.get("Plans", []):
            found |= walk(child)
        return found

    return walk(tree[0]["Plan"])


async def test_every_index_on_the_entries_table_is_read_by_some_query(make_postgres_stores):
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    names = store.tables.names
    entries = f'"{names.schema}"."{names.entries}"'
    sql = EntrySql.for_tables(store.tables)
    async with stores.engine.begin() as conn:
        # 20,000 rows in 20 threads; one in 500 pending (some leased), one in 50 travelling
        # (consent scope user), one in 100 with lineage naming the row before it
        await conn.execute(
            text(
                f"INSERT INTO {entries} (tenant_id, resource_id, thread_id, id, text, role, "
                "metadata, consent_explicit, consent_source, consent_scope, consent_visible, "
                "sequence, occurred_at, created_at, written_at, importance, legal_hold, status, "
                "revision, attempts, embedding, term_count, text_tsv, claimed_by, claimed_until) "
                "SELECT 'tenant-a', 'user-1', 'thread-' || (g % 20), 'e' || g, 'text ' || g, "
                "'user', CASE WHEN g % 100 = 0 THEN jsonb_build_object('_lineage', "
                "jsonb_build_object('sourceIds', jsonb_build_array('e' || (g - 200)))) "
                "ELSE '{}'::jsonb END, g % 50 = 0, 'user', "
                "CASE WHEN g % 50 = 0 THEN 'user' ELSE 'thread' END, true, g, now(), now(), "
                "now(), 1.0, false, CASE WHEN g % 500 = 0 THEN 'pending' ELSE 'indexed' END, 1, "
                "0, CASE WHEN g % 500 = 0 THEN NULL ELSE CAST('[1,0,0,0]' AS vector) END, 2, "
                "array_to_tsvector(ARRAY['text', g::text]), "
                "CASE WHEN g % 1000 = 0 THEN 'worker-1' END, "
                "CASE WHEN g % 1000 = 0 THEN now() END "
                "FROM generate_series(1, 20000) AS g"
            )
        )
        await conn.execute(text(f"ANALYZE {entries}"))
        rows = await conn.execute(
            text("SELECT indexname FROM pg_indexes WHERE schemaname = :s AND tablename = :t"),
            {"s": names.schema, "t": names.entries},
        )
        indexes = set(rows.scalars())

    request = SearchRequest(
        vector=np.ones(4, np.float32),
        terms=frozenset({"text", "7"}),
        limit=10,
        filter=RecallFilter(now=NOW),
    )
    wide = SearchRequest(
        vector=np.ones(4, np.float32),
        terms=frozenset(),
        limit=10,
        filter=RecallFilter(now=NOW),
        resource_wide=True,
    )
    scope = {"tenant": "tenant-a", "resource": "user-1", "thread": "thread-7"}
    statements: list[tuple[str, str, dict[str, Any]]] = [
        ("search", *search_statement(sql.recall, SCOPE, request)[:2]),
        ("resource-wide search", *search_statement(sql.recall, SCOPE, wide)[:2]),
        ("records", sql.rows.records, {**scope, "ids": ["e7", "e207"]}),
        ("dependents", sql.lineage.dependents, {**scope, "ids": ["e7"], "limit": 100}),
        ("release", sql.indexing.release, {"worker": "worker-1"}),
    ]
    for label, where in (("claim", None), ("thread claim", SCOPE)):
        claim, params = claim_statement(
            sql.indexing, where, limit=10, worker_id="w", lease_seconds=30, now=NOW
        )
        statements.append((label, claim, params))
    claim, params = claim_statement(
        sql.indexing, None, limit=10, worker_id="w", lease_seconds=30, now=NOW, tenant_id="tenant-a"
    )
    statements.append(("tenant claim", claim, params))

    used: dict[str, set[str]] = {}
    async with stores.engine.connect() as conn:
        for label, statement, params in statements:
            plan = (
                await conn.execute(text(f"EXPLAIN (FORMAT JSON) {statement}"), params)
            ).scalar_one()
            used[label] = _index_names(plan)
        await conn.rollback()
    read = set().union(*used.values())
    # each index, by the query that is there to read it
    assert names.ix_scope in used["search"], used
    assert names.ix_resource_shared in used["resource-wide search"], used
    assert f"{names.entries}_pkey" in used["records"], used
    assert names.ix_lineage in used["dependents"], used
    assert names.ix_claimed in used["release"], used
    assert names.ix_pending in used["claim"], used
    assert names.ix_pending_scope in used["thread claim"], used
    assert names.ix_pending_tenant in used["tenant claim"], used
    # and nothing else is left unread -- but the ``text_tsv`` GIN, which SPEC §5 names for the
    # lexical leg; the leg tests ``@@`` on the rows of the thread's range instead of probing it
    assert indexes - read == {names.ix_tsv}, (indexes, used)
    assert names.ix_hnsw not in indexes
