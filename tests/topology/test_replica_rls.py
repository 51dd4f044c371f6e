"""Row-level security on a streaming replica (issue 51): the policies and the role replay with the
schema, and the stores' replica reads set their tenant in the statement as on the primary (a hot
standby allows ``set_config`` in its read-only transactions)."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy import text

from prism_memory import HashEmbedder, create_memory
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres.rls import row_security_url
from tests.rls_support import create_role, drop_role, grant_schema, role_url
from tests.topology.test_replica import WIDTH, schema

pytestmark = pytest.mark.postgres

__all__ = ["schema"]  # the fixture: a schema migrated on the primary, replayed by the replica


async def test_replica_reads_keep_to_their_tenant(replica_pair, schema):
    primary = replica_pair.primary_url
    role = await create_role(primary)
    try:
        await row_security_url(primary, schema=schema, enable=True)
        await grant_schema(primary, schema, role)
        await replica_pair.wait_caught_up()
        stores = await create_postgres_memory_stores(
            role_url(primary, role),
            schema=schema,
            dimension=WIDTH,
            read_url=role_url(replica_pair.replica_url, role),
            replica_wait_seconds=0.2,
            skip_migrations=True,
        )
        try:
            assert stores.vector_store.executor.sets_tenant
            memories = {
                tenant: create_memory(
                    tenant_id=tenant,
                    resource_id="r",
                    thread_id="t",
                    embedder=HashEmbedder(dimensions=WIDTH),
                    vector_store=stores.vector_store,
                    working_store=stores.working_store,
                )
                for tenant in ("a", "b")
            }
            for tenant, memory in memories.items():
                await memory.remember({"id": "x", "text": f"apples of {tenant}"}, wait=True)
            await replica_pair.wait_caught_up()
            for tenant, memory in memories.items():  # caught up: these read the replica
                hits = (await memory.recall("apples", top_k=5)).hits
                assert [hit.text for hit in hits] == [f"apples of {tenant}"]
            await replica_pair.pause_replay()
            # written on the primary by the owner: the paused replica lacks it, so a recall
            # that does not find it read the replica -- and found its own tenant's row there
            engine = create_engine(primary, pooled=False)
            try:
                async with engine.begin() as conn:
                    await conn.execute(
                        text(
                            f'UPDATE "{schema}".semantic_memory SET text = :t '
                            "WHERE tenant_id = 'a'"
                        ),
                        {"t": "changed on the primary"},
                    )
            finally:
                await engine.dispose()
            await replica_pair.wait_received()
            hits = (await memories["a"].recall("apples", top_k=5)).hits
            assert [hit.text for hit in hits] == ["apples of a"]
            await replica_pair.resume_replay()

            standby = role_url(replica_pair.replica_url, role).replace("+asyncpg", "", 1)
            connection = await asyncpg.connect(standby)
            try:
                everything = f'SELECT DISTINCT tenant_id FROM "{schema}".semantic_memory'
                assert await connection.fetch(everything) == []
                async with connection.transaction(readonly=True):
                    await connection.execute(
                        "SELECT set_config('prism_memory.tenant_id', 'b', true)"
                    )
                    assert [row[0] for row in await connection.fetch(everything)] == ["b"]
            finally:
                await connection.close()
            for memory in memories.values():
                await memory.aclose()
        finally:
            await stores.close()
    finally:
        if await replica_pair.replay_paused():
            await replica_pair.resume_replay()
        await drop_role(primary, role)
