"""Row-level security as a second wall between tenants (issue 51), on the real PostgreSQL, as a role
the test creates (neither SUPERUSER nor BYPASSRLS: the embedded server's default user is a
superuser, whom no policy holds).

With it enabled, a query on prism_memory's tables that names no tenant -- a host's raw query, or a
statement of ours with its tenant predicate removed -- sees only the current tenant's rows and
writes nothing into another tenant's; every tenant-keyed table the database holds has the policy;
the command, the factory option and ``doctor`` say what is on and what does not protect."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import text

from prism_memory import HashEmbedder, create_memory
from prism_memory.cli import main
from prism_memory.errors import ConfigurationError
from prism_memory.postgres import create_postgres_memory_stores, migrate
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres._executor import Executor
from prism_memory.postgres.ops import diagnose
from prism_memory.postgres.rls import (
    row_security_status,
    row_security_url,
    schema_tenant_tables,
    tenant_tables,
)
from prism_memory.postgres.statements.tenancy import POLICY_NAME
from prism_memory.postgres.tables import names_for
from tests.rls_support import create_role, drop_role, grant_schema, rls_stores, role_url

pytestmark = pytest.mark.postgres

TENANTS = ("acme", "globex")


@pytest.fixture
async def app_role(postgres_url):
    role = await create_role(postgres_url)
    yield role
    await drop_role(postgres_url, role)


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def _fill(stores) -> None:
    """Two tenants' entries and working documents, written through the stores."""
    for tenant in TENANTS:
        async with create_memory(
            tenant_id=tenant,
            resource_id="user-1",
            thread_id="t-1",
            embedder=HashEmbedder(dimensions=16),
            vector_store=stores.vector_store,
            working_store=stores.working_store,
        ) as memory:
            await memory.remember([{"text": f"{tenant} likes tea"}, {"text": "hello"}], wait=True)
            await memory.update_working({"note": tenant})


async def test_every_tenant_keyed_table_has_the_policy(make_postgres_stores, postgres_url):
    stores = await make_postgres_stores(dimension=16)
    names = stores.vector_store.tables.names
    executor = Executor(create_engine(postgres_url, pooled=False), owns_engine=True)
    try:
        async with executor.unit("test", writes=False) as unit:
            keyed = await schema_tenant_tables(unit, names.schema)
            status = await row_security_status(unit, names)
            registry = await unit.fetchval(
                "SELECT count(*) FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :s AND c.relname = :t",
                {"s": names.schema, "t": names.generations},
            )
    finally:
        await executor.close()
    # every table of the schema with a tenant_id column, found in the catalog, is a table the
    # policy list names, and has the policy
    assert sorted(keyed) == sorted(tenant_tables(names))
    assert len(keyed) == 8
    assert {t.name for t in status.tables if t.has_policy} == set(keyed)
    assert not status.missing
    assert registry == 0  # the store-wide registry stays as it is
    # the revision does not enable it: that is the deploy's choice
    assert not status.partly_enabled
    assert stores.vector_store.executor.sets_tenant is False


async def test_a_raw_query_sees_only_its_tenant_and_writes_none_into_another(
    make_postgres_stores, postgres_url, app_role
):
    owner = await make_postgres_stores(dimension=16)
    names = owner.vector_store.tables.names
    async with rls_stores(postgres_url, owner, app_role) as stores:
        assert stores.vector_store.executor.sets_tenant
        await _fill(stores)
        connection = await asyncpg.connect(_dsn(role_url(postgres_url, app_role)))
        try:
            everything = f'SELECT DISTINCT tenant_id FROM "{names.schema}"."{names.entries}"'
            assert await connection.fetch(everything) == []  # no tenant set: no row at all
            async with connection.transaction():
                await connection.execute(
                    "SELECT set_config('prism_memory.tenant_id', 'acme', true)"
                )
                for table in tenant_tables(names):
                    rows = await connection.fetch(
                        f'SELECT DISTINCT tenant_id FROM "{names.schema}"."{table}"'
                    )
                    assert {row[0] for row in rows} <= {"acme"}, table
                assert [row[0] for row in await connection.fetch(everything)] == ["acme"]
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    async with connection.transaction():  # a savepoint
                        await connection.execute(
                            f'INSERT INTO "{names.schema}"."{names.working}" (tenant_id, '
                            "resource_id, thread_key, data, version, updated_at) "
                            "VALUES ('globex', 'user-1', 'x', '{}', 1, now())"
                        )
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    async with connection.transaction():
                        await connection.execute(
                            f'UPDATE "{names.schema}"."{names.entries}" SET tenant_id = \'globex\''
                        )
                # a blanket update names no tenant: it reaches the current tenant's rows only
                changed = await connection.execute(
                    f'UPDATE "{names.schema}"."{names.entries}" SET importance = importance'
                )
                assert changed == "UPDATE 2"
        finally:
            await connection.close()

        # a statement of ours with its tenant predicate removed, through the executor: the
        # tenant its parameters name is set in the same statement, and the policy holds it
        executor = stores.vector_store.executor
        probe = (
            f'SELECT tenant_id FROM "{names.schema}"."{names.entries}" '
            "WHERE CAST(:tenant AS text) IS NOT NULL"
        )
        for tenant in TENANTS:
            rows = await executor.fetch("probe", probe, {"tenant": tenant})
            assert {row[0] for row in rows} == {tenant}
            (count,) = await executor.write(
                "probe",
                f'UPDATE "{names.schema}"."{names.entries}" SET importance = importance '
                "WHERE CAST(:tenant AS text) IS NOT NULL",
                {"tenant": tenant},
                count=True,
            )
            assert count == 2
        # and the stores' own reads still find each tenant's rows, and only those
        for tenant in TENANTS:
            async with create_memory(
                tenant_id=tenant,
                resource_id="user-1",
                thread_id="t-1",
                embedder=HashEmbedder(dimensions=16),
                vector_store=stores.vector_store,
                working_store=stores.working_store,
            ) as memory:
                hits = (await memory.recall("likes tea")).hits
                assert {hit.text for hit in hits} == {f"{tenant} likes tea", "hello"}
                working = await memory.get_working()
                assert working is not None
                assert dict(working.data) == {"note": tenant}


async def test_the_factory_option_enables_it_and_refuses_what_would_read_nothing(
    make_postgres_stores, postgres_url, app_role
):
    owner = await make_postgres_stores(dimension=16)
    schema = owner.vector_store.tables.names.schema
    await grant_schema(postgres_url, schema, app_role)
    engine = create_engine(role_url(postgres_url, app_role), pooled=False)
    try:
        # the application role does not own the tables: it cannot enable it
        with pytest.raises(ConfigurationError, match="owner"):
            await create_postgres_memory_stores(
                engine=engine, schema=schema, skip_migrations=True, row_level_security=True
            )
        # the owner can; the stores then set the tenant
        stores = await create_postgres_memory_stores(
            engine=create_engine(postgres_url, pooled=False),
            schema=schema,
            skip_migrations=True,
            row_level_security=True,
        )
        assert stores.vector_store.executor.sets_tenant
        assert stores.working_store.executor.sets_tenant
        await stores.close()
        status = await row_security_url(postgres_url, schema=schema, enable=None)
        assert status.enabled
        # False on a role the policies hold would find nothing: refused
        with pytest.raises(ConfigurationError, match="row_level_security=False"):
            await create_postgres_memory_stores(
                engine=engine, schema=schema, skip_migrations=True, row_level_security=False
            )
        # None follows the database
        followed = await create_postgres_memory_stores(
            engine=engine, schema=schema, skip_migrations=True
        )
        assert followed.vector_store.executor.sets_tenant
        await followed.close()
    finally:
        await engine.dispose()


async def test_doctor_says_when_it_does_not_protect(make_postgres_stores, postgres_url, app_role):
    owner = await make_postgres_stores(dimension=16)
    names = owner.vector_store.tables.names
    off = await diagnose(postgres_url, schema=names.schema)
    assert off.facts["row-level security"].startswith("off")
    assert not any("row-level" in problem for problem in off.problems)

    await row_security_url(postgres_url, schema=names.schema, enable=True)
    await grant_schema(postgres_url, names.schema, app_role)
    as_superuser = await diagnose(postgres_url, schema=names.schema)
    assert as_superuser.facts["row-level security"] == "on"
    assert any("a superuser" in line for line in as_superuser.warnings)
    as_app = await diagnose(role_url(postgres_url, app_role), schema=names.schema)
    assert not any("superuser" in line or "BYPASSRLS" in line for line in as_app.warnings)
    assert not any("row-level" in problem for problem in as_app.problems)

    bypass = await create_role(postgres_url, bypass=True)
    try:
        await grant_schema(postgres_url, names.schema, bypass)
        as_bypass = await diagnose(role_url(postgres_url, bypass), schema=names.schema)
        assert any("BYPASSRLS" in line for line in as_bypass.warnings)
    finally:
        await drop_role(postgres_url, bypass)

    engine = create_engine(postgres_url, pooled=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(f'DROP POLICY {POLICY_NAME} ON "{names.schema}"."{names.working}"')
            )
            await conn.execute(
                text(f'ALTER TABLE "{names.schema}"."{names.vectors}" NO FORCE ROW LEVEL SECURITY')
            )
    finally:
        await engine.dispose()
    broken = await diagnose(postgres_url, schema=names.schema)
    assert any("no prism_memory_tenant policy" in p and names.working in p for p in broken.problems)
    assert any("not enabled and forced" in p and names.vectors in p for p in broken.problems)


async def _migrated(postgres_url: str, schema: str) -> None:
    engine = create_engine(postgres_url, pooled=False)
    try:
        await migrate.upgrade(engine, schema=schema, dimension=16)
    finally:
        await engine.dispose()


def test_the_rls_command_enables_reports_and_disables(postgres_url, schema, capsys):
    asyncio.run(_migrated(postgres_url, schema))
    args = ["--url", postgres_url, "--schema", schema]
    assert main(["rls", "status", *args]) == 1  # off: exit 1, as a check
    assert "disabled" in capsys.readouterr().out
    assert main(["rls", "enable", *args]) == 0
    out = capsys.readouterr().out
    assert "enabled, forced" in out
    assert "problem: connected as postgres, a superuser" in out
    assert main(["rls", "status", *args]) == 0
    capsys.readouterr()
    assert main(["rls", "disable", *args]) == 0
    status = asyncio.run(row_security_url(postgres_url, schema=schema, enable=None))
    assert not status.partly_enabled


async def _status(engine, names):
    async with Executor(engine, owns_engine=False).unit("test", writes=False) as unit:
        return await row_security_status(unit, names)


async def test_the_revision_downgrades_and_upgrades_again(engine, schema, postgres_url):
    await migrate.upgrade(engine, schema=schema, dimension=4)
    await row_security_url(postgres_url, schema=schema, enable=True)
    names = names_for(schema, "semantic_memory")
    await migrate.downgrade(engine, schema=schema, dimension=4, revision="prism_memory_0013")
    status = await _status(engine, names)
    assert not any(t.has_policy or t.enabled or t.forced for t in status.tables)
    await migrate.upgrade(engine, schema=schema, dimension=4)
    status = await _status(engine, names)
    assert all(t.has_policy and not t.enabled for t in status.tables)
    assert len(status.tables) == 8


async def test_a_tenant_with_quotes_and_backslashes_is_set_as_it_is(
    make_postgres_stores, postgres_url, app_role
):
    """The tenant a transaction sets in its ``BEGIN`` message is a literal (the simple protocol
    binds nothing): escaped, it arrives exactly, whatever ``standard_conforming_strings`` says."""
    owner = await make_postgres_stores(dimension=16)
    async with rls_stores(postgres_url, owner, app_role) as stores:
        executor = stores.vector_store.executor
        for tenant in ("o'brien", "back\\slash", "e'\\'x", "plain"):
            async with executor.transaction("probe", tenant=tenant) as unit:
                seen = await unit.fetchval("SELECT current_setting('prism_memory.tenant_id')")
            assert seen == tenant
            (row,) = await executor.write(
                "probe",
                "SELECT current_setting('prism_memory.tenant_id') = CAST(:tenant AS text)",
                {"tenant": tenant},
            )
            assert row[0] is True
