"""The conformance suite with row-level security on (issue 51). The stores open on a schema whose
tenant-keyed tables have it enabled and forced, as a role the test creates:

* ``rls`` and ``rls-pgbouncer`` (through a real PgBouncer in transaction mode): an application
  role the policies hold (no SUPERUSER, no BYPASSRLS) runs every check but the ``generations``
  role's -- a generation's backfill, progress, switch and promotion read every tenant's rows and
  are refused to such a role (``ConfigurationError``; ``test_store_wide_work_is_refused...``);
* ``rls-operator``: a worker/operator role with BYPASSRLS runs those ``generations`` checks.

A check passes under ``rls`` only because the library set each statement's tenant: one that named
no tenant would find no rows (the policies hold the role)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest

from prism_memory import HashEmbedder
from prism_memory.errors import ConfigurationError
from prism_memory.postgres.worker import IndexingWorker
from prism_memory.testing import CONFORMANCE_CHECKS, ConformanceKit, run_conformance_check
from prism_memory.testing._roles import ROLE_CHECKS
from tests.rls_support import rls_stores, role_url, temporary_role
from tests.topology_fixtures import _unavailable, find_pgbouncer, start_pgbouncer

pytestmark = pytest.mark.postgres

STORE_WIDE = set(ROLE_CHECKS["generations"])
TENANT_CHECKS = [check for check in CONFORMANCE_CHECKS if check not in STORE_WIDE]
OPERATOR_CHECKS = [check for check in CONFORMANCE_CHECKS if check in STORE_WIDE]


@pytest.fixture(scope="module")
def app_role(postgres_url: str) -> Iterator[str]:
    yield from temporary_role(postgres_url, bypass=False)


@pytest.fixture(scope="module")
def operator_role(postgres_url: str) -> Iterator[str]:
    yield from temporary_role(postgres_url, bypass=True)


@pytest.fixture(scope="module")
def rls_pgbouncer_url(postgres_url: str, app_role: str) -> Iterator[str]:
    """A PgBouncer in transaction mode logging in to the server as the application role."""
    program = find_pgbouncer()
    if program is None:
        _unavailable("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        return
    bouncer = start_pgbouncer(role_url(postgres_url, app_role), program)
    try:
        yield bouncer.url
    finally:
        bouncer.close()


@pytest.fixture(params=["rls", "rls-pgbouncer"])
async def kit(request: pytest.FixtureRequest, postgres_url: str) -> AsyncIterator[ConformanceKit]:
    owner = await request.getfixturevalue("make_postgres_stores")(dimension=64)
    role = request.getfixturevalue("app_role")
    url, pooling = None, "session"
    if request.param == "rls-pgbouncer":
        url, pooling = request.getfixturevalue("rls_pgbouncer_url"), "transaction"
    async with rls_stores(postgres_url, owner, role, url=url, pooling=pooling) as stores:
        assert stores.vector_store.executor.sets_tenant
        yield ConformanceKit(HashEmbedder(dimensions=64), stores.vector_store, stores.working_store)


@pytest.fixture
async def operator_kit(
    request: pytest.FixtureRequest, postgres_url: str, operator_role: str
) -> AsyncIterator[ConformanceKit]:
    owner = await request.getfixturevalue("make_postgres_stores")(dimension=64)
    async with rls_stores(postgres_url, owner, operator_role) as stores:
        assert not stores.vector_store.executor.sets_tenant  # BYPASSRLS: nothing to set
        yield ConformanceKit(HashEmbedder(dimensions=64), stores.vector_store, stores.working_store)


@pytest.mark.parametrize("check", TENANT_CHECKS)
async def test_conformance_with_row_level_security(kit: ConformanceKit, check: str) -> None:
    await run_conformance_check(check, lambda: kit)


@pytest.mark.parametrize("check", OPERATOR_CHECKS)
async def test_store_wide_checks_as_a_bypassrls_role(operator_kit: ConformanceKit, check: str):
    await run_conformance_check(check, lambda: operator_kit)


async def test_store_wide_work_is_refused_to_a_role_the_policies_hold(
    make_postgres_stores, postgres_url, app_role
):
    """Run blind to every tenant, a switch would count no entry without the new model's vector
    and flip recall to a generation that has none: refused instead, naming the fix."""
    owner = await make_postgres_stores(dimension=64)
    async with rls_stores(postgres_url, owner, app_role) as stores:
        store = stores.vector_store
        now = datetime.now(UTC)
        await store.start_generation(
            primary="m@1", primary_width=64, model="m@2", width=64, now=now
        )
        for refused in (
            store.claim_generation("m@2", limit=10, worker_id="w", lease_seconds=60.0, now=now),
            store.generation_progress("m@2", now=now),
            store.switch_generation("m@2", force=False, now=now),
            store.promote_generation("m@2", limit=10, now=now),
        ):
            with pytest.raises(ConfigurationError, match="BYPASSRLS"):
                await refused
        # the service worker's turn over tenants too (it would find no tenant with work)
        worker = IndexingWorker(store, HashEmbedder(dimensions=64))
        with pytest.raises(ConfigurationError, match="BYPASSRLS"):
            await worker.due_tenants()
