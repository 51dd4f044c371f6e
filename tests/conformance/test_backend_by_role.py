"""A backend given as a bundle of role objects (``MemoryBackend``) passes the conformance suite by
role -- in memory, on PostgreSQL, and as a host adapter whose roles are its own small classes --
and a memory made on it calls those role objects, not a store that forwards to them."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from prism_memory import (
    HashEmbedder,
    InMemoryVectorStore,
    InMemoryWorkingStore,
    MemoryBackend,
    create_memory,
)
from prism_memory.errors import ConfigurationError, ConflictError
from prism_memory.models import ShareGrant, WorkingMemoryRecord
from prism_memory.postgres import PostgresVectorStore
from prism_memory.stores._delegation import forwarded
from prism_memory.stores.base import ShareGrants, VectorGenerations, WorkingStore
from prism_memory.stores.memory import in_memory_backend
from prism_memory.testing import (
    CONFORMANCE_CHECKS,
    ROLE_CHECKS,
    ConformanceKit,
    run_memory_conformance,
)


class HostGrants(ShareGrants):
    """A host's share grants: one dictionary."""

    def __init__(self) -> None:
        self.grants: dict[tuple[str, str, str, str], ShareGrant] = {}

    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        stored = replace(grant, source_ids=tuple(grant.source_ids))
        self.grants[
            (grant.tenant_id, grant.resource_id, grant.parent_thread_id, grant.child_thread_id)
        ] = stored
        return stored

    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        return self.grants.get((tenant_id, resource_id, parent_thread_id, child_thread_id))

    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        key = (tenant_id, resource_id, parent_thread_id, child_thread_id)
        return 0 if self.grants.pop(key, None) is None else 1


class HostWorking(WorkingStore):
    """A host's working memory: versioned documents in a dictionary."""

    def __init__(self) -> None:
        self.documents: dict[tuple[str, str, str | None], WorkingMemoryRecord] = {}

    async def get_working(
        self, tenant_id: str, resource_id: str, thread_id: str | None
    ) -> WorkingMemoryRecord | None:
        found = self.documents.get((tenant_id, resource_id, thread_id))
        return None if found is None else replace(found, data=copy.deepcopy(dict(found.data)))

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
        key = (tenant_id, resource_id, thread_id)
        version = self.documents[key].version if key in self.documents else 0
        if expected_version is not None and expected_version != version:
            raise ConflictError(f"working memory is at version {version}")
        stored = WorkingMemoryRecord(version + 1, copy.deepcopy(dict(data)), now)
        self.documents[key] = stored
        return replace(stored, data=copy.deepcopy(dict(stored.data)))


def host_backend() -> MemoryBackend:
    """Entries, ledger and governance of the reference store's role objects; the host's own
    share grants and working memory; no vector generations."""
    reference = InMemoryVectorStore()
    return MemoryBackend(
        entries=reference.entries,
        ledger=reference.ledger,
        governance=reference.governance,
        grants=HostGrants(),
        working=HostWorking(),
    )


async def test_the_in_memory_backend_passes_by_role() -> None:
    await run_memory_conformance(
        lambda: ConformanceKit.of_backend(HashEmbedder(dimensions=64), in_memory_backend())
    )


async def test_a_host_adapter_of_role_objects_passes_by_role() -> None:
    """No generations role: its checks are not asked of it (the kit's store is no
    ``VectorGenerations``); every other check runs on the host's objects."""
    kit = ConformanceKit.of_backend(HashEmbedder(dimensions=64), host_backend())
    assert not isinstance(kit.vector_store, VectorGenerations)
    await run_memory_conformance(lambda: host_backend())


async def test_a_missing_role_object_fails_the_checks_of_its_role() -> None:
    """The suite really runs on the bundle's objects: grants that keep nothing fail the checks
    listed under ``shares``."""

    class Forgetful(HostGrants):
        async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
            return grant  # stores nothing

    def broken() -> MemoryBackend:
        return replace(host_backend(), grants=Forgetful())

    with pytest.raises(AssertionError) as failed:
        await run_memory_conformance(broken, only=list(ROLE_CHECKS["shares"]))
    assert "sharing_is_parent_to_child_only" in str(failed.value)


async def test_a_memory_calls_the_role_objects() -> None:
    backend = host_backend()
    calls: list[str] = []
    grants = backend.grants
    original = grants.put_share_grant

    async def counted(grant: ShareGrant) -> ShareGrant:
        calls.append(grant.child_thread_id)
        return await original(grant)

    grants.put_share_grant = counted  # type: ignore[method-assign]
    async with create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="parent",
        embedder=HashEmbedder(dimensions=64),
        backend=backend,
    ) as memory:
        await memory.remember([{"id": "a", "text": "Ada prefers tea"}], wait=True)
        await memory.share_with("child", ["a"])
        assert memory.working_store is backend.working
    assert calls == ["child"]


def test_backend_and_stores_are_one_choice() -> None:
    with pytest.raises(ConfigurationError):
        create_memory(
            tenant_id="t",
            resource_id="r",
            embedder=HashEmbedder(dimensions=64),
            backend=host_backend(),
            vector_store=InMemoryVectorStore(),
        )
    with pytest.raises(ConfigurationError):
        MemoryBackend(
            entries=InMemoryVectorStore().entries,
            ledger=InMemoryVectorStore().ledger,
            governance=InMemoryVectorStore().governance,
            grants=HostGrants(),
            working=InMemoryWorkingStore().get_working,  # type: ignore[arg-type]
        )


def test_a_compatibility_store_gives_its_role_objects() -> None:
    """``InMemoryVectorStore`` is its role objects; a subclass that overrides a role's method
    keeps serving that role itself (so its override is what a memory calls)."""
    store = InMemoryVectorStore()
    bundle = store.backend(InMemoryWorkingStore())
    assert bundle.entries is store.entries
    assert bundle.ledger is store.ledger
    assert bundle.generations is store.vector_generations

    class Counting(InMemoryVectorStore):
        async def claim_pending(self, *args: Any, **kwargs: Any) -> Any:
            return await super().claim_pending(*args, **kwargs)

    # PostgresVectorStore writes embedding_models itself (scope=None: every thread) and lists
    # it in _forwards: still its entries object's, so a memory calls that object directly
    assert forwarded(PostgresVectorStore, "embedding_models") == "entries"
    assert forwarded(PostgresVectorStore, "search") == "entries"
    assert store.search == store.entries.search

    counting = Counting()
    bundle = counting.backend(InMemoryWorkingStore())
    assert bundle.ledger is counting
    assert bundle.entries is counting.entries


@pytest.mark.parametrize(
    "check",
    [
        "sharing_is_parent_to_child_only",
        "forget_deletes_along_lineage_and_holds",
        "working_memory_versions_and_template",
        "remember_wait_embeds_before_the_write",
    ],
)
async def test_the_postgres_backend_passes_by_role(make_postgres_stores: Any, check: str) -> None:
    """PostgreSQL's role objects (``PostgresMemoryStores.backend``), a few checks of each role
    (the whole suite runs on the store in ``test_conformance.py``)."""
    assert check in CONFORMANCE_CHECKS
    stores = await make_postgres_stores(dimension=64)
    backend = stores.backend
    assert backend.generations is stores.vector_store.vector_generations
    assert backend.rag is stores.vector_store.rag
    await run_memory_conformance(
        lambda: ConformanceKit.of_backend(HashEmbedder(dimensions=64), backend), only=[check]
    )
