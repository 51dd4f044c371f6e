"""A partial adapter is a supported thing: an adapter that leaves a role out passes the checks of
the roles it keeps (``run_memory_conformance(..., roles=...)``), and the checks left out are the
ones that really need the missing role."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, NoReturn, cast

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, InMemoryWorkingStore
from prism_memory.errors import ConfigurationError
from prism_memory.models import MemoryIdentity, ShareGrant, WorkingMemoryRecord
from prism_memory.stores.base import (
    Generation,
    GovernanceChange,
    GovernanceResult,
    VectorStore,
    WorkingStore,
)
from prism_memory.testing import (
    MEMORY_ROLES,
    ROLE_CHECKS,
    ConformanceError,
    ConformanceKit,
    run_memory_conformance,
)


def _missing(role: str) -> NoReturn:
    raise ConfigurationError(f"this adapter keeps no {role}")


class NoShareGrants(InMemoryVectorStore):
    """Entries, indexing and governance; no share grants."""

    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        _missing("share grants")

    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        _missing("share grants")

    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        _missing("share grants")


class NoGovernance(InMemoryVectorStore):
    """Entries, indexing and share grants; no governance."""

    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        _missing("governance")


class NoGenerations(InMemoryVectorStore):
    """Every role of ``VectorStore``; its vector generations refuse (the optional role left out:
    still a ``VectorGenerations`` by type, so the runner asks it and the checks fail)."""

    async def start_generation(
        self, *, primary: str, primary_width: int, model: str, width: int, now: datetime
    ) -> Generation:
        _missing("vector generations")

    async def generations(self) -> list[Generation]:
        _missing("vector generations")


class NoWorkingStore(WorkingStore):
    """A working store that keeps nothing: the adapter brings no working memory."""

    async def get_working(
        self, tenant_id: str, resource_id: str, thread_id: str | None
    ) -> WorkingMemoryRecord | None:
        _missing("working memory")

    async def put_working(
        self,
        tenant_id: str,
        resource_id: str,
        thread_id: str | None,
        data: Mapping[str, Any],
        *,
        expected_version: int | None,
        now: datetime,
    ) -> WorkingMemoryRecord:
        _missing("working memory")


def _kit(missing: str) -> ConformanceKit:
    vectors = {
        "shares": NoShareGrants,
        "governance": NoGovernance,
        "generations": NoGenerations,
    }.get(missing, InMemoryVectorStore)()
    working = NoWorkingStore() if missing == "working" else InMemoryWorkingStore()
    return ConformanceKit(HashEmbedder(dimensions=64), vectors, working)


@pytest.mark.parametrize("missing", sorted(ROLE_CHECKS))
async def test_an_adapter_without_a_role_passes_the_checks_of_the_roles_it_keeps(
    missing: str,
) -> None:
    kept = [role for role in MEMORY_ROLES if role != missing]
    await run_memory_conformance(lambda: _kit(missing), roles=kept)


@pytest.mark.parametrize("missing", sorted(ROLE_CHECKS))
async def test_the_checks_left_out_fail_without_the_role(missing: str) -> None:
    with pytest.raises(ConformanceError) as failed:
        await run_memory_conformance(lambda: _kit(missing), only=list(ROLE_CHECKS[missing]))
    assert set(failed.value.failures) == set(ROLE_CHECKS[missing])


async def test_a_store_without_vector_generations_is_not_asked_for_them() -> None:
    """The role is optional: its checks pass without running against a store that is not a
    ``VectorGenerations`` (a host adapter that never implemented it still passes the suite)."""
    from prism_memory.testing import run_conformance_check

    store = cast("VectorStore", object())  # not a VectorGenerations; never called
    kit = ConformanceKit(HashEmbedder(dimensions=64), store, InMemoryWorkingStore())
    for name in ROLE_CHECKS["generations"]:
        await run_conformance_check(name, lambda: kit)
