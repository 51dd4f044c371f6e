"""The shape of remember's insert on PostgreSQL: its cost per batch must not grow with the thread.

The exact insert (:attr:`EntrySql.insert`) looks the batch's ids up first, in a probe whose plan
the planner picks; on a table without statistics -- a new install, or a thread far above the
average size -- it walked the thread's whole ``(scope, sequence)`` range, filtering every row
against the batch (measured: 8 ms for the second 128-row batch of a thread, 36 ms for the
twenty-third). :attr:`EntrySql.insert_new`, the form the store runs first, probes the primary key
once per row, whatever the statistics.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from prism_memory.models import MemoryIdentity
from prism_memory.postgres.rows import insert_params
from prism_memory.postgres.statements import EntrySql, to_positional
from prism_memory.stores.base import NewEntry

pytestmark = pytest.mark.postgres

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-1")


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found += _nodes(child)
    return found


def _new(entry_id: str) -> NewEntry:
    return NewEntry(
        id=entry_id,
        text=f"note {entry_id}",
        role="user",
        metadata={},
        consent=None,
        sequence=None,
        occurred_at=NOW,
        importance=1.0,
        lineage=None,
    )


async def test_a_batch_into_a_big_thread_of_an_unanalysed_table_reads_no_range(
    make_postgres_stores,
):
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    names = store.tables.names
    entries = f'"{names.schema}"."{names.entries}"'
    async with stores.engine.begin() as conn:
        # one 3,000-row thread, and no ANALYZE: the planner has no statistics of the table
        await conn.execute(
            text(
                f"INSERT INTO {entries} (tenant_id, resource_id, thread_id, id, text, role, "
                "metadata, consent_explicit, consent_source, consent_scope, consent_visible, "
                "sequence, occurred_at, created_at, written_at, importance, legal_hold, status, "
                "revision, attempts, term_count) "
                "SELECT 'tenant-a', 'user-1', 'thread-1', 'e' || g, 'text ' || g, 'user', "
                "'{}'::jsonb, false, 'user', 'thread', true, g, now(), now(), now(), 1.0, false, "
                "'pending', 1, 0, 2 FROM generate_series(0, 2999) AS g"
            )
        )
    batch = [_new(f"n{k}") for k in range(128)]
    vectors = list(np.eye(4, dtype=np.float32)[np.arange(128) % 4])
    params = insert_params(SCOPE, batch, now=NOW, lease=None, vectors=vectors, model="m")
    positional, order = to_positional(EntrySql.for_tables(store.tables).insert_new)
    async with stores.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        await driver.execute("BEGIN")
        try:  # EXPLAIN ANALYZE runs the insert: rolled back afterwards
            plan = await driver.fetchval(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {positional}", *(params[n] for n in order)
            )
            inserted = await driver.fetchval(
                f"SELECT count(*) FROM {entries} WHERE sequence >= 3000 AND id LIKE 'n%'"
            )
        finally:
            await driver.execute("ROLLBACK")
    nodes = _nodes((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    assert inserted == 128, "the batch went in, numbered after the thread's rows"
    on_entries = [n for n in nodes if n.get("Relation Name") == names.entries]
    filtered = sum(int(n.get("Rows Removed by Filter", 0)) for n in nodes)
    read = sum(int(n.get("Actual Rows", 0)) * int(n.get("Actual Loops", 1)) for n in on_entries)
    assert filtered == 0, f"no row of the thread is filtered: {filtered}"
    # the insert node itself, and one row for the thread's largest sequence
    assert read <= len(batch) + 1, f"rows read from the entries table: {read}"
