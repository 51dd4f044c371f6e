"""prism_memory behind a real PgBouncer in ``pool_mode = transaction`` (issue 36).

The pooler is Debian's ``pgbouncer`` with no ``ignore_startup_parameters`` beyond its defaults,
in front of the test database (``tests/topology_fixtures.py``). The migrations run on the direct
URL, the memories on the pooled one, as a managed database's "pooled connection string" is used.

The flows run twice (issue 51): ``rls-off`` as the server's superuser, and ``rls-on`` on a schema
with row-level security enabled and forced, as the least-privilege recipe of docs/postgres.md has
it -- the memories as an application role the policies hold (no SUPERUSER, no BYPASSRLS), the
service worker's turn over tenants as an operator role with BYPASSRLS, each through a PgBouncer of
its own that logs in to the server as that role.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from prism_memory import HashEmbedder, IndexingPolicy, create_memory
from prism_memory.errors import ConfigurationError, ValidationError
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres import migrate as prism_migrate
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres.rls import row_security_url
from prism_memory.postgres.worker import IndexingWorker
from tests.rls_support import grant_schema, open_schema_to, role_url, temporary_role
from tests.topology_fixtures import PgBouncer, find_pgbouncer, start_pgbouncer

pytestmark = pytest.mark.postgres

WIDTH = 64
TOPICS = ("apples", "bicycles", "cellos", "dinghies", "easels", "ferns", "gliders", "harps")
FAST = IndexingPolicy(
    retry_base_seconds=0.02, retry_max_seconds=0.1, busy_poll_seconds=0.01, idle_poll_seconds=0.05
)


@dataclass(frozen=True)
class Roles:
    """Who the flows connect as: ``app`` (the memories) and ``operator`` (the service worker),
    each through its ``*_pooled`` PgBouncer URL or its ``*_direct`` server URL."""

    rls: bool
    app_pooled: str
    app_direct: str
    operator_pooled: str
    operator_direct: str
    app_role: str | None = None
    operator_role: str | None = None


def _bouncer(postgres_url: str, role: str) -> Iterator[PgBouncer]:
    program = find_pgbouncer()
    if program is None:
        pytest.fail("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    bouncer = start_pgbouncer(role_url(postgres_url, role), program)
    try:
        yield bouncer
    finally:
        bouncer.close()


@pytest.fixture(scope="module")
def app_role(postgres_url: str) -> Iterator[str]:
    yield from temporary_role(postgres_url)


@pytest.fixture(scope="module")
def operator_role(postgres_url: str) -> Iterator[str]:
    yield from temporary_role(postgres_url, bypass=True)


@pytest.fixture(scope="module")
def app_bouncer(postgres_url: str, app_role: str) -> Iterator[PgBouncer]:
    yield from _bouncer(postgres_url, app_role)


@pytest.fixture(scope="module")
def operator_bouncer(postgres_url: str, operator_role: str) -> Iterator[PgBouncer]:
    yield from _bouncer(postgres_url, operator_role)


@pytest.fixture(params=["rls-off", "rls-on"])
def roles(request: pytest.FixtureRequest, postgres_url: str, pgbouncer_url: str) -> Roles:
    if request.param == "rls-off":
        return Roles(False, pgbouncer_url, postgres_url, pgbouncer_url, postgres_url)
    app, operator = request.getfixturevalue("app_role"), request.getfixturevalue("operator_role")
    return Roles(
        True,
        request.getfixturevalue("app_bouncer").url,
        role_url(postgres_url, app),
        request.getfixturevalue("operator_bouncer").url,
        role_url(postgres_url, operator),
        app_role=app,
        operator_role=operator,
    )


@pytest.fixture
async def schema(postgres_url: str, make_postgres_stores) -> str:
    """A schema migrated to head on the direct URL (dropped at teardown)."""
    name = f"pm_pool_{uuid.uuid4().hex[:12]}"
    stores = await make_postgres_stores(schema=name, dimension=WIDTH)
    await stores.close()
    return name


@pytest.fixture
async def rls_schema(postgres_url: str, schema: str, roles: Roles) -> str:
    """``schema``, with row-level security enabled and forced and the roles granted, or not."""
    if roles.app_role is not None and roles.operator_role is not None:
        await open_schema_to(postgres_url, schema, roles.app_role)
        await grant_schema(postgres_url, schema, roles.operator_role)  # the recipe grants both
    return schema


def _check_tenant_set(stores, roles: Roles) -> None:
    """The stores set each statement's tenant exactly when the policies hold their role."""
    assert stores.vector_store.executor.sets_tenant is roles.rls


async def test_a_pooler_refusing_a_startup_parameter_is_named(pgbouncer_url, schema):
    with pytest.raises(ConfigurationError) as caught:
        await create_postgres_memory_stores(pgbouncer_url, schema=schema, dimension=WIDTH)
    message = str(caught.value)
    assert "refused the startup parameter" in message
    assert "pooling='transaction'" in message
    assert "terminated" not in message


async def test_migrations_through_a_transaction_pooler_are_refused(pgbouncer_url):
    fresh = f"pm_pool_{uuid.uuid4().hex[:12]}"
    with pytest.raises(ConfigurationError, match="direct_url="):
        await create_postgres_memory_stores(
            pgbouncer_url, schema=fresh, dimension=WIDTH, pooling="transaction"
        )


async def _default_privileges(postgres_url: str, schema: str, roles: Roles) -> None:
    """docs/postgres.md's recipe before the first migration: the schema, made by its owner, and
    what the roles may do on the tables the migrations will create in it."""
    engine = create_engine(postgres_url, pooled=False)
    grantees = f"{roles.app_role}, {roles.operator_role}"
    try:
        async with engine.begin() as conn:
            for statement in (
                f'CREATE SCHEMA "{schema}"',
                f'GRANT USAGE ON SCHEMA "{schema}" TO {grantees}',
                f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{schema}" '
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {grantees}",
            ):
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


async def test_direct_url_runs_the_migrations(postgres_url, make_postgres_stores, roles: Roles):
    """The migrations run as the owner on the direct URL; with row-level security, the
    application role opens the stores through the pooler on the privileges granted by default,
    and once the owner enables it, the reopened stores set the tenant of their statements."""
    fresh = f"pm_pool_{uuid.uuid4().hex[:12]}"
    if roles.rls:
        await _default_privileges(postgres_url, fresh, roles)
    options = {"schema": fresh, "dimension": WIDTH, "pooling": "transaction"}
    stores = await create_postgres_memory_stores(
        roles.app_pooled, direct_url=postgres_url, **options
    )
    try:
        assert await prism_migrate.current_revision(postgres_url, schema=fresh) == (
            prism_migrate.head_revision()
        )
        assert not stores.vector_store.executor.sets_tenant  # not enabled yet
        if roles.rls:
            await row_security_url(postgres_url, schema=fresh, enable=True)
            reopened = await create_postgres_memory_stores(
                roles.app_pooled, direct_url=postgres_url, **options
            )
            try:
                assert reopened.vector_store.executor.sets_tenant
                async with create_memory(
                    tenant_id="t",
                    resource_id="r",
                    thread_id="fresh",
                    embedder=HashEmbedder(dimensions=WIDTH),
                    vector_store=reopened.vector_store,
                    working_store=reopened.working_store,
                    indexing=FAST,
                ) as memory:
                    await memory.remember({"id": "e", "text": TOPICS[0]}, wait=True)
                    assert [hit.id for hit in (await memory.recall(TOPICS[0])).hits] == ["e"]
            finally:
                await reopened.close()
    finally:
        await stores.close()
        # dropped with the fixture's schemas
        (await make_postgres_stores(schema=fresh, dimension=WIDTH)).vector_store  # noqa: B018


@pytest.mark.parametrize("how", ["argument", "url", "unpooled"])
async def test_twelve_memories_at_once_remember_and_recall(roles: Roles, rls_schema: str, how):
    """The flow that failed 34 times in 36: 12 memories at once, remember(wait=True) then recall,
    three rounds, each memory on its own pooled engine -- through the pooler with the mode named
    by argument or in the URL, and in that mode on the unpooled URL too; with row-level security
    on, as the application role, the memories in two tenants."""
    schema = rls_schema
    base = roles.app_direct if how == "unpooled" else roles.app_pooled
    url = base + ("&" if "?" in base else "?") + "prism_pooling=transaction"
    options = {"pooling": "transaction"} if how == "argument" else {}
    opened = [
        await create_postgres_memory_stores(
            base if how == "argument" else url, schema=schema, dimension=WIDTH, **options
        )
        for _ in range(12)
    ]
    assert {stores.vector_store.pooling for stores in opened} == {"transaction"}
    for stores in opened:
        _check_tenant_set(stores, roles)
    try:

        async def one(i: int, stores, round_: int) -> list[str]:
            async with create_memory(
                tenant_id=f"t{i % 2}",
                resource_id=f"r{i}",
                thread_id=f"thread-{i}",
                embedder=HashEmbedder(dimensions=WIDTH),
                vector_store=stores.vector_store,
                working_store=stores.working_store,
                indexing=FAST,
            ) as memory:
                await memory.remember(
                    [
                        {"id": f"e{round_}-{k}", "text": f"{member} {round_}"}
                        for k, member in enumerate(TOPICS)
                    ],
                    wait=True,
                )
                await memory.update_working({"round": round_})
                hits = (await memory.recall(TOPICS[3], top_k=3)).hits
                return [hit.id for hit in hits]

        for round_ in range(3):
            results = await asyncio.gather(
                *(one(i, stores, round_) for i, stores in enumerate(opened))
            )
            for found in results:
                assert found[0].endswith("-3"), found
    finally:
        for stores in opened:
            await stores.close()


@pytest.mark.parametrize("listen", [False, True], ids=["polling", "listen-url"])
async def test_the_worker_embeds_behind_the_pooler(roles: Roles, rls_schema: str, listen):
    """The all-scopes worker on a pooled store: it cannot LISTEN through the pooler, so it polls
    -- or, given a direct ``listen_url``, wakes on NOTIFY -- and embeds what worker-only memories
    write through the pooler. With row-level security on, the worker runs as the operator role
    (BYPASSRLS: its turn reads every tenant's rows) and the memory as the application role."""
    schema = rls_schema
    stores = await create_postgres_memory_stores(
        roles.app_pooled, schema=schema, dimension=WIDTH, pooling="transaction"
    )
    operator = await create_postgres_memory_stores(
        roles.operator_pooled, schema=schema, dimension=WIDTH, pooling="transaction"
    )
    _check_tenant_set(stores, roles)
    assert not operator.vector_store.executor.sets_tenant
    worker = IndexingWorker(
        operator.vector_store,
        HashEmbedder(dimensions=WIDTH),
        policy=FAST,
        listen_url=roles.operator_direct if listen else None,
        poll_seconds=None if not listen else 60.0,  # listening: only a NOTIFY can wake it in time
    )
    assert worker.listening is listen
    await worker.start()
    try:
        async with create_memory(
            tenant_id="t",
            resource_id="r",
            thread_id="worker",
            embedder=HashEmbedder(dimensions=WIDTH),
            vector_store=stores.vector_store,
            working_store=stores.working_store,
            indexing=IndexingPolicy(in_process=False, busy_poll_seconds=0.05),
        ) as memory:
            await asyncio.sleep(0.2)  # the worker's first look found nothing: now it waits
            result = await memory.remember([{"id": t, "text": t} for t in TOPICS])
            report = await asyncio.wait_for(result.done, timeout=20)
            assert sorted(report.indexed) == sorted(TOPICS)
            assert (await memory.recall(TOPICS[2], top_k=1)).hits[0].id == TOPICS[2]
        assert (worker.counts.wakeups > 0) is listen
    finally:
        await worker.stop()
        await operator.close()
        await stores.close()


# ---- reads in one flight (issue 50, item 3) ------------------------------------------------


@pytest.fixture
def bouncer(request: pytest.FixtureRequest, roles: Roles) -> PgBouncer:
    """The PgBouncer the application role's pooled URL goes through."""
    return request.getfixturevalue("app_bouncer" if roles.rls else "pgbouncer")


def _admin(bouncer: PgBouncer, command: str) -> list[tuple[object, ...]]:
    """Rows of one command on PgBouncer's admin console (simple query protocol)."""
    with psycopg.connect(bouncer.admin_dsn, autocommit=True, connect_timeout=10) as admin:
        cursor = admin.execute(command)
        return cursor.fetchall() if cursor.description else []


def _database_stats(bouncer: PgBouncer) -> dict[str, int]:
    """PgBouncer's ``SHOW STATS`` totals for the pooled database: transactions, and queries --
    each a message flight the pooler forwarded up to the server's ReadyForQuery."""
    database = make_url(bouncer.url).database
    with psycopg.connect(bouncer.admin_dsn, autocommit=True, connect_timeout=10) as admin:
        cursor = admin.execute("SHOW STATS")
        names = [column.name for column in cursor.description or ()]
        for row in cursor.fetchall():
            stats = dict(zip(names, row, strict=True))
            if stats["database"] == database:
                return {key: int(stats[key]) for key in ("total_xact_count", "total_query_count")}
    raise AssertionError("no SHOW STATS row for the pooled database")


async def _remembered(stores, thread: str) -> None:
    async with _memory(stores, thread, FAST) as memory:
        await memory.remember(
            [{"id": f"e{k}", "text": f"{member} in the shed"} for k, member in enumerate(TOPICS)],
            wait=True,
        )


def _reader(stores, thread: str):
    """A memory that only reads (no indexing task of its own, so no statement but its reads)."""
    return _memory(stores, thread, IndexingPolicy(in_process=False))


def _memory(stores, thread: str, indexing: IndexingPolicy):
    return create_memory(
        tenant_id="t0",
        resource_id="r",
        thread_id=thread,
        embedder=HashEmbedder(dimensions=WIDTH),
        vector_store=stores.vector_store,
        working_store=stores.working_store,
        indexing=indexing,
    )


async def test_a_recall_is_one_round_trip_through_the_pooler(roles: Roles, rls_schema, bouncer):
    """Behind PgBouncer in transaction mode a recall is one flight: one transaction and one
    query (one ReadyForQuery) on the pooler per recall, where asyncpg took four (``BEGIN; SET
    LOCAL``, the parse, the execute, ``COMMIT``); with row-level security on too (the tenant is
    set inside the read)."""
    stores = await create_postgres_memory_stores(
        roles.app_pooled, schema=rls_schema, dimension=WIDTH, pooling="transaction"
    )
    try:
        await _remembered(stores, "one-flight")
        async with _reader(stores, "one-flight") as memory:
            assert (await memory.recall(TOPICS[3], top_k=3)).hits  # warm: connections open
            before = await asyncio.to_thread(_database_stats, bouncer)
            for topic in TOPICS[:5]:
                assert (await memory.recall(topic, top_k=3)).hits
            after = await asyncio.to_thread(_database_stats, bouncer)
    finally:
        await stores.close()
    assert after["total_xact_count"] - before["total_xact_count"] == 5
    assert after["total_query_count"] - before["total_query_count"] == 5


async def test_pooled_recall_answers_as_direct(roles: Roles, rls_schema: str):
    """The same recalls through the pooler (psycopg, one flight) and direct (asyncpg, cached
    statements) give the same hits, scores and records, with row-level security on and off."""
    direct = await create_postgres_memory_stores(
        roles.app_direct, schema=rls_schema, dimension=WIDTH, skip_migrations=True
    )
    pooled = await create_postgres_memory_stores(
        roles.app_pooled, schema=rls_schema, dimension=WIDTH, pooling="transaction"
    )
    try:
        await _remembered(direct, "same")
        for topic in (*TOPICS, "harps and apples", "nothing like it"):
            answers = []
            for stores in (direct, pooled):
                async with _reader(stores, "same") as memory:
                    result = await memory.recall(topic, top_k=4)
                    answers.append(
                        [(h.id, h.score, h.record.text, h.record.metadata) for h in result.hits]
                    )
            assert answers[0] == answers[1], topic
            assert answers[0] or topic == "nothing like it"
    finally:
        await direct.close()
        await pooled.close()


async def test_a_read_on_a_killed_connection_is_retried(roles: Roles, rls_schema, bouncer):
    """Every connection to the pooled database killed (PgBouncer's ``KILL``) between two recalls:
    the next read finds its kept connection dead and is retried once on a new one."""
    stores = await create_postgres_memory_stores(
        roles.app_pooled, schema=rls_schema, dimension=WIDTH, pooling="transaction"
    )
    database = make_url(bouncer.url).database
    try:
        await _remembered(stores, "killed")
        async with _reader(stores, "killed") as memory:
            assert (await memory.recall(TOPICS[2], top_k=3)).hits[0].id == "e2"
            await asyncio.to_thread(_admin, bouncer, f"KILL {database}")
            await asyncio.to_thread(_admin, bouncer, f"RESUME {database}")
            assert (await memory.recall(TOPICS[2], top_k=3)).hits[0].id == "e2"
    finally:
        await stores.close()


async def test_a_statement_error_through_the_pooler_is_typed(roles: Roles, rls_schema: str):
    """A read the server refuses reaches the caller as a typed error (by SQLSTATE), and leaves
    nothing behind: the next read on the same connections answers."""
    stores = await create_postgres_memory_stores(
        roles.app_pooled, schema=rls_schema, dimension=WIDTH, pooling="transaction"
    )
    executor = stores.vector_store.executor
    try:
        with pytest.raises(ValidationError, match="probe failed: division by zero"):
            await executor.fetch("probe", "SELECT 1 / 0 AS x")
        with pytest.raises(ConfigurationError, match="is the schema migrated"):
            await executor.fetch("probe", "SELECT x FROM no_such_table")
        rows = await executor.fetch("probe", "SELECT :a::int + 1 AS x, :b AS y", {"a": 1, "b": "y"})
        assert rows[0]["x"] == rows[0][0] == 2
        assert rows[0]["y"] == "y"
    finally:
        await stores.close()


async def test_doctor_says_how_pooled_reads_go(
    roles: Roles, rls_schema: str, bouncer, postgres_url
):
    """``doctor`` reports whether the role or database carries the planner setting; once the
    deploy sets it (``ALTER ROLE … SET max_parallel_workers_per_gather = 0``) a pooled read is
    sent alone -- still one query per recall on the pooler, the same hits."""
    from prism_memory.postgres.ops import diagnose

    found = await diagnose(roles.app_direct, schema=rls_schema)
    assert found.facts["pooled reads"].startswith("each with set_config")
    role = roles.app_role or "postgres"
    engine = create_engine(postgres_url, pooled=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f'ALTER ROLE "{role}" SET max_parallel_workers_per_gather = 0'))
        found = await diagnose(roles.app_direct, schema=rls_schema)
        assert found.facts["pooled reads"].startswith("one statement each")
        # a role's settings apply to server connections opened after it: the pooler's reopen
        database = make_url(bouncer.url).database
        await asyncio.to_thread(_admin, bouncer, f"KILL {database}")
        await asyncio.to_thread(_admin, bouncer, f"RESUME {database}")
        stores = await create_postgres_memory_stores(
            roles.app_pooled, schema=rls_schema, dimension=WIDTH, pooling="transaction"
        )
        try:
            await _remembered(stores, "alone")
            async with _reader(stores, "alone") as memory:
                assert (await memory.recall(TOPICS[4], top_k=3)).hits[0].id == "e4"
                assert stores.vector_store.executor._pipelined.role_sets_planner is True
                before = await asyncio.to_thread(_database_stats, bouncer)
                for topic in TOPICS[:3]:
                    assert (await memory.recall(topic, top_k=3)).hits
                after = await asyncio.to_thread(_database_stats, bouncer)
        finally:
            await stores.close()
    finally:
        async with engine.begin() as conn:
            await conn.execute(text(f'ALTER ROLE "{role}" RESET max_parallel_workers_per_gather'))
        await engine.dispose()
    assert after["total_query_count"] - before["total_query_count"] == 3


async def test_clients_sharing_one_server_connection_share_its_statements(postgres_url, schema):
    """Two stores behind a PgBouncer with one server connection: each prepares the recall's
    content-named statement on it in turn (a ``Close`` before its ``Parse``, so the name the
    other prepared is no refusal) and then binds it; interleaved, both answer every time, with
    one query on the pooler per recall once warm."""
    program = find_pgbouncer()
    if program is None:
        pytest.fail("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    single = await asyncio.to_thread(start_pgbouncer, postgres_url, program, pool_size=1)
    opened = []
    try:
        for _ in range(2):
            opened.append(
                await create_postgres_memory_stores(
                    single.url, schema=schema, dimension=WIDTH, pooling="transaction"
                )
            )
        await _remembered(opened[0], "shared")
        memories = [_reader(stores, "shared") for stores in opened]
        for topic in TOPICS:
            for memory in memories:
                assert (await memory.recall(topic, top_k=3)).hits[0].id == f"e{TOPICS.index(topic)}"
        before = await asyncio.to_thread(_database_stats, single)
        for memory in memories:
            assert (await memory.recall(TOPICS[1], top_k=3)).hits
        after = await asyncio.to_thread(_database_stats, single)
        assert after["total_query_count"] - before["total_query_count"] == 2
        for memory in memories:
            await memory.aclose()
    finally:
        for stores in opened:
            await stores.close()
        single.close()
