"""Recall's search keeps one generic plan under ``plan_cache_mode = auto`` with its tenant written as
a plain ``tenant_id = $n`` equality (what a shard router prunes by), across tenants and threads of
very different sizes: only the resource and thread keys are init-plan parameters."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import text

from prism_memory.models import MemoryIdentity
from prism_memory.postgres.statements import EntrySql, search_statement, to_positional
from prism_memory.stores.base import RecallFilter, SearchRequest

pytestmark = pytest.mark.postgres

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SMALL = [f"tenant-{c}" for c in "bcdefghijk"]


async def test_search_keeps_the_generic_plan_across_tenant_sizes(make_postgres_stores):
    stores = await make_postgres_stores(dimension=8)
    names = stores.vector_store.tables.names
    entries = f'"{names.schema}"."{names.entries}"'
    rng = np.random.default_rng(1)
    async with stores.engine.begin() as conn:
        # one tenant of 36,000 rows (300 threads of 100, one of 6,000) beside ten of 200
        for tenant, count, thread in (
            ("tenant-a", 30000, "'thread-' || (g % 300)"),
            ("tenant-a", 6000, "'big'"),
            *[(small, 200, "'thread-' || (g % 4)") for small in SMALL],
        ):
            await conn.execute(
                text(
                    f"INSERT INTO {entries} (tenant_id, resource_id, thread_id, id, text, role, "
                    "metadata, consent_explicit, consent_source, consent_scope, consent_visible, "
                    "sequence, occurred_at, created_at, written_at, importance, legal_hold, status, "
                    "revision, attempts, embedding, text_tsv, term_count) "
                    f"SELECT :tenant, 'user-1', {thread}, 'e' || g, 'text ' || g, 'user', "
                    "'{}'::jsonb, false, 'user', 'thread', true, g, now(), now(), now(), 1.0, "
                    "false, 'indexed', 1, 0, CAST(:v AS vector), "
                    "to_tsvector('simple', 'text ' || g), 2 FROM generate_series(1, :n) g"
                ),
                {"tenant": tenant, "n": count, "v": rng.standard_normal(8).astype(np.float32)},
            )
        await conn.execute(text(f"ANALYZE {entries}"))
    sql = EntrySql.for_tables(stores.vector_store.tables).recall
    big_first = [("tenant-a", "big"), ("tenant-a", "thread-1"), *[(t, "thread-1") for t in SMALL]]
    small_first = [*[(t, "thread-2") for t in SMALL], ("tenant-a", "big"), ("tenant-a", "thread-3")]
    for lexical in (False, True):
        for calls in (big_first, small_first):
            request = SearchRequest(
                vector=np.ones(8, dtype=np.float32),
                terms=frozenset({"text"}) if lexical else frozenset(),
                limit=10,
                filter=RecallFilter(now=NOW),
            )
            async with stores.engine.connect() as conn:
                driver = (await conn.get_raw_connection()).driver_connection
                await driver.execute("SET plan_cache_mode = auto")
                prepared = None
                for tenant, thread in calls:
                    scope = MemoryIdentity(tenant_id=tenant, resource_id="user-1", thread_id=thread)
                    statement, params, _ = search_statement(sql, scope, request)
                    assert "tenant_id = :tenant" in statement
                    positional, order = to_positional(statement)
                    prepared = prepared or await driver.prepare(positional)
                    await prepared.fetch(*[params[name] for name in order])
                generic, custom = await driver.fetchrow(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                    "WHERE statement LIKE 'WITH dead%'"
                )
                await driver.execute("DEALLOCATE ALL")
                await conn.rollback()
            # PostgreSQL plans the first five runs for their values, then keeps the generic plan
            assert (generic, custom) == (len(calls) - 5, 5), (lexical, calls[0])
