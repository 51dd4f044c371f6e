"""What a transaction-pooled store leaves on a server connection it shares (issue 47): a real
PgBouncer in ``pool_mode = transaction`` with ONE server connection, so every client -- the store
and a plain asyncpg client beside it -- runs on the same PostgreSQL backend.

* a statement that would run alone runs in its own transaction, so its ``SET LOCAL`` applies to
  it (read back in the same statement);
* that setting ends with the transaction: the next client on the server connection sees the
  server's own value;
* nothing the store prepares outlives its transaction (no named statement piles up there).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from prism_memory import HashEmbedder, create_memory
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres._executor import Executor
from tests.topology_fixtures import PgBouncer, find_pgbouncer, start_pgbouncer

pytestmark = pytest.mark.postgres

WIDTH = 64
SETTING = "max_parallel_workers_per_gather"
PROBE = f"SELECT current_setting('{SETTING}') AS value, pg_backend_pid() AS pid"


@pytest.fixture(scope="module")
def one_server_connection(postgres_url: str) -> Iterator[PgBouncer]:
    """A PgBouncer (transaction mode) in front of ``postgres_url`` with a pool of one."""
    program = find_pgbouncer()
    if program is None:
        pytest.fail("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    bouncer = start_pgbouncer(postgres_url, program, pool_size=1)
    try:
        yield bouncer
    finally:
        bouncer.close()


@pytest.fixture
async def pooled(one_server_connection: PgBouncer) -> AsyncIterator[Executor]:
    executor = Executor(
        create_engine(one_server_connection.url, pooling="transaction"),
        owns_engine=True,
        sets_plans=True,
        pooling="transaction",
    )
    yield executor
    await executor.close()


async def _neighbour(bouncer: PgBouncer, query: str) -> asyncpg.Record:
    """``query``'s row as another client of the pooler (on the same server connection) sees it."""
    conn = await asyncpg.connect(bouncer.dsn, statement_cache_size=0)
    try:
        row = await conn.fetchrow(query)
        assert row is not None
        return row
    finally:
        await conn.close()


async def test_a_lone_statement_runs_with_its_settings_and_leaves_none_behind(
    one_server_connection: PgBouncer, pooled: Executor
) -> None:
    before = await _neighbour(one_server_connection, PROBE)
    assert before["value"] != "0"  # the server's default: the test can tell the two apart
    for run in (
        lambda: pooled.fetch("probe", PROBE),
        lambda: pooled.fetch("probe", PROBE, replica=True),
        lambda: pooled.write("probe", PROBE),
    ):
        [row] = await run()
        assert row["value"] == "0"  # SET LOCAL in the statement's own transaction
        assert row["pid"] == before["pid"]  # one server connection for everyone
        after = await _neighbour(one_server_connection, PROBE)
        assert after["pid"] == before["pid"]
        assert after["value"] == before["value"]  # ended with that transaction
    assert await pooled.fetchval("probe", PROBE) == "0"


async def test_nothing_prepared_stays_on_the_shared_server_connection(
    one_server_connection: PgBouncer, make_postgres_stores
) -> None:
    schema = f"pm_pool_{uuid.uuid4().hex[:12]}"
    await (await make_postgres_stores(schema=schema, dimension=WIDTH)).close()
    stores = await create_postgres_memory_stores(
        one_server_connection.url, schema=schema, dimension=WIDTH, pooling="transaction"
    )
    try:
        async with create_memory(
            tenant_id="t",
            resource_id="r",
            thread_id="prepared",
            embedder=HashEmbedder(dimensions=WIDTH),
            vector_store=stores.vector_store,
            working_store=stores.working_store,
        ) as memory:
            for round_ in range(3):  # each kind of unit, several times
                await memory.remember({"id": f"e{round_}", "text": f"oboes {round_}"}, wait=True)
                await memory.update_working({"round": round_})
                assert (await memory.get_working()) is not None
                await memory.set_consent(f"e{round_}", visible=False)
                await memory.correct(f"e{round_}", f"oboes and reeds {round_}")
                await memory.recall("oboes")
        prepared = await _neighbour(
            one_server_connection,
            "SELECT count(*) AS n, pg_backend_pid() AS pid FROM pg_prepared_statements",
        )
        assert prepared["n"] == 0
    finally:
        await stores.close()
