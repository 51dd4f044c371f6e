"""A partial adapter is a supported thing: an adapter that leaves a role out passes the checks of
the roles it keeps (``run_memory_conformance(..., roles=...)``), and the checks left out are the
ones that really need the missing role."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, NoReturn

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, InMemoryWorkingStore
from prism_memory.errors import ConfigurationError
from prism_memory.models import MemoryIdentity, ShareGrant, WorkingMemoryRecord
from prism_memory.stores.base import GovernanceChange, GovernanceResult, WorkingStore
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
    vectors = {"shares": NoShareGrants, "governance": NoGovernance}.get(
        missing, InMemoryVectorStore
    )()
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
