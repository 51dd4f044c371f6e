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

import pytest
from sqlalchemy import text

from prism_memory import HashEmbedder, IndexingPolicy, create_memory
from prism_memory.errors import ConfigurationError
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
