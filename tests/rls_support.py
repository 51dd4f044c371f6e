"""Row-level security in tests: a login role the suite creates (no SUPERUSER, no BYPASSRLS: the
embedded server's default user is a superuser, whom no policy ever holds), its grants on a test
schema, and its URL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.engine import make_url

from prism_memory.postgres import PostgresMemoryStores, create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres.rls import row_security_url


def role_url(postgres_url: str, role: str) -> str:
    """``postgres_url`` logged in as ``role`` (the test server trusts its local connections)."""
    return make_url(postgres_url).set(username=role, password=None).render_as_string(False)


async def create_role(postgres_url: str, *, bypass: bool = False) -> str:
    """A new login role, held by row-level security unless ``bypass``."""
    role = f"pm_rls_{uuid.uuid4().hex[:10]}"
    engine = create_engine(postgres_url, pooled=False)
    try:
        async with engine.begin() as conn:
            attribute = "BYPASSRLS" if bypass else "NOBYPASSRLS"
            await conn.execute(text(f"CREATE ROLE {role} LOGIN NOSUPERUSER {attribute}"))
    finally:
        await engine.dispose()
    return role


async def grant_schema(postgres_url: str, schema: str, role: str) -> None:
    """The application role's grants: use the schema, read and write its tables."""
    engine = create_engine(postgres_url, pooled=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}'))
            await conn.execute(
                text(
                    f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" '
                    f"TO {role}"
                )
            )
            await conn.execute(
                text(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "{schema}" TO {role}')
            )
    finally:
        await engine.dispose()


async def drop_role(postgres_url: str, role: str) -> None:
    """Drop ``role`` and what it was granted."""
    engine = create_engine(postgres_url, pooled=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f"DROP OWNED BY {role}"))
            await conn.execute(text(f"DROP ROLE {role}"))
    finally:
        await engine.dispose()


def temporary_role(postgres_url: str, *, bypass: bool = False) -> Iterator[str]:
    """A module fixture's body: a role (:func:`create_role`), dropped when the fixture ends."""
    from tests.conftest import _run_in_thread

    made: list[str] = []

    async def create() -> None:
        made.append(await create_role(postgres_url, bypass=bypass))

    _run_in_thread(create())
    try:
        yield made[0]
    finally:
        _run_in_thread(drop_role(postgres_url, made[0]))


async def open_schema_to(postgres_url: str, schema: str, role: str) -> None:
    """Enable row-level security on ``schema`` (as its owner, ``postgres_url``) and grant
    ``role`` the application's privileges on it."""
    await row_security_url(postgres_url, schema=schema, enable=True)
    await grant_schema(postgres_url, schema, role)


@asynccontextmanager
async def rls_stores(
    postgres_url: str,
    owner_stores: PostgresMemoryStores,
    role: str,
    *,
    url: str | None = None,
    pooling: str = "session",
) -> AsyncIterator[PostgresMemoryStores]:
    """``owner_stores``' schema with row-level security enabled (as its owner), opened as
    ``role`` -- through ``url`` when given (a pooler's) -- on a ``NullPool`` engine, or a pooled
    one behind a pooler."""
    schema = owner_stores.vector_store.tables.names.schema
    await open_schema_to(postgres_url, schema, role)
    engine = (
        create_engine(url, pooling="transaction")
        if pooling == "transaction" and url is not None
        else create_engine(role_url(postgres_url, role), pooled=False)
    )
    stores = await create_postgres_memory_stores(
        engine=engine,
        schema=schema,
        dimension=owner_stores.vector_store.dimension,
        skip_migrations=True,
        pooling="transaction" if pooling == "transaction" else None,
    )
    try:
        yield stores
    finally:
        await stores.close()
        await engine.dispose()
