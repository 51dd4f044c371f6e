"""What a transaction-pooled store leaves on a server connection it shares (issue 47): a real
PgBouncer in ``pool_mode = transaction`` with ONE server connection, so every client -- the store
and a plain asyncpg client beside it -- runs on the same PostgreSQL backend.

* a statement that would run alone runs in its own transaction, so its ``SET LOCAL`` applies to
  it (read back in the same statement);
* that setting ends with the transaction: the next client on the server connection sees the
  server's own value;
* nothing the store prepares outlives its transaction but its reads' content-named statements
  (``prism_memory_<hash>``: one per read text, its plan reused by the next read on that server
  connection; issue 50) -- no statement named per client piles up there;
* with row-level security on (issue 51), through a pool of one logging in as an application role
  the policies hold: the tenant a memory's statements set is transaction-local, so the next
  client on the server connection sees none (and no tenant's rows); and a statement through the
  pooler that names no tenant predicate sees only the rows of the tenant its transaction set.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from prism_memory import HashEmbedder, create_memory
from prism_memory.postgres import PostgresMemoryStores, create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres._executor import Executor
from prism_memory.postgres.statements.tenancy import TENANT_SETTING
from tests.rls_support import open_schema_to, role_url, temporary_role
from tests.topology_fixtures import PgBouncer, find_pgbouncer, start_pgbouncer

pytestmark = pytest.mark.postgres

WIDTH = 64
SETTING = "max_parallel_workers_per_gather"
PROBE = f"SELECT current_setting('{SETTING}') AS value, pg_backend_pid() AS pid"


TENANT_PROBE = f"SELECT current_setting('{TENANT_SETTING}', true) AS value, pg_backend_pid() AS pid"


def _pool_of_one(server_url: str) -> Iterator[PgBouncer]:
    program = find_pgbouncer()
    if program is None:
        pytest.fail("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    bouncer = start_pgbouncer(server_url, program, pool_size=1)
    try:
        yield bouncer
    finally:
        bouncer.close()


@pytest.fixture(scope="module")
def one_server_connection(postgres_url: str) -> Iterator[PgBouncer]:
    """A PgBouncer (transaction mode) in front of ``postgres_url`` with a pool of one."""
    yield from _pool_of_one(postgres_url)


@pytest.fixture(scope="module")
def app_role(postgres_url: str) -> Iterator[str]:
    """An application role the policies hold (no SUPERUSER, no BYPASSRLS)."""
    yield from temporary_role(postgres_url)


@pytest.fixture(scope="module")
def app_connection(postgres_url: str, app_role: str) -> Iterator[PgBouncer]:
    """A pool of one logging in to the server as ``app_role``."""
    yield from _pool_of_one(role_url(postgres_url, app_role))


@pytest.fixture
async def app_stores(
    app_connection: PgBouncer, app_role: str, postgres_url: str, make_postgres_stores
) -> AsyncIterator[PostgresMemoryStores]:
    """Stores through ``app_connection`` on a schema with row-level security on."""
    schema = f"pm_pool_{uuid.uuid4().hex[:12]}"
    await (await make_postgres_stores(schema=schema, dimension=WIDTH)).close()
    await open_schema_to(postgres_url, schema, app_role)
    stores = await create_postgres_memory_stores(
        app_connection.url, schema=schema, dimension=WIDTH, pooling="transaction"
    )
    assert stores.vector_store.executor.sets_tenant
    try:
        yield stores
    finally:
        await stores.close()


async def _remember_and_recall(stores: PostgresMemoryStores, tenant: str) -> None:
    async with create_memory(
        tenant_id=tenant,
        resource_id="r",
        thread_id="rls",
        embedder=HashEmbedder(dimensions=WIDTH),
        vector_store=stores.vector_store,
        working_store=stores.working_store,
    ) as memory:
        await memory.remember({"id": f"{tenant}-1", "text": f"oboes of {tenant}"}, wait=True)
        await memory.update_working({"tenant": tenant})
        [hit] = (await memory.recall("oboes", top_k=1)).hits
        assert hit.id == f"{tenant}-1"


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


async def test_only_content_named_reads_stay_on_the_shared_server_connection(
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
            "SELECT count(*) FILTER (WHERE name NOT LIKE 'prism\\_memory\\_%') AS other, "
            "count(*) FILTER (WHERE statement LIKE '%oboes%') AS literal, "
            "count(*) AS n, pg_backend_pid() AS pid FROM pg_prepared_statements",
        )
        assert prepared["other"] == 0  # asyncpg's and SQLAlchemy's: all unnamed
        assert prepared["literal"] == 0  # values are bound, never part of a statement's text
        assert 1 <= prepared["n"] <= 8  # the recall's reads, each text once
    finally:
        await stores.close()


async def test_no_tenant_setting_reaches_another_client_of_the_pooler(
    app_connection: PgBouncer, app_stores: PostgresMemoryStores
) -> None:
    before = await _neighbour(app_connection, TENANT_PROBE)
    await _remember_and_recall(app_stores, "acme")
    after = await _neighbour(app_connection, TENANT_PROBE)
    assert after["pid"] == before["pid"]  # the server connection acme's statements ran on
    assert after["value"] in (None, "")  # set_config(..., true): ended with its transaction
    names = app_stores.vector_store.tables.names
    count = f'SELECT count(*) AS n, pg_backend_pid() AS pid FROM "{names.schema}"."{names.entries}"'
    seen = await _neighbour(app_connection, count)
    assert seen["pid"] == before["pid"]
    assert seen["n"] == 0  # no tenant set: the policies show no one's rows


async def test_a_statement_through_the_pooler_sees_only_its_tenants_rows(
    app_connection: PgBouncer, app_stores: PostgresMemoryStores
) -> None:
    for tenant in ("acme", "globex"):
        await _remember_and_recall(app_stores, tenant)
    names = app_stores.vector_store.tables.names
    everyone = f'SELECT DISTINCT tenant_id FROM "{names.schema}"."{names.entries}"'
    # a statement double with its tenant predicate removed, run by the store's executor
    for tenant in ("acme", "globex"):
        rows = await app_stores.vector_store.executor.fetch("double", everyone, {"tenant": tenant})
        assert [row["tenant_id"] for row in rows] == [tenant]
    # a host's own query through the pooler, in a transaction that set its tenant
    conn = await asyncpg.connect(app_connection.dsn, statement_cache_size=0)
    try:
        async with conn.transaction():
            await conn.execute(f"SELECT set_config('{TENANT_SETTING}', 'globex', true)")
            assert [row["tenant_id"] for row in await conn.fetch(everyone)] == ["globex"]
        assert await conn.fetch(everyone) == []  # its transaction over: none set, no rows
    finally:
        await conn.close()
