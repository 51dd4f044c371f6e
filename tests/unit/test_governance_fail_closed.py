"""Invariant 3: an adapter without transactions still fails closed (its own tombstone excludes)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, StorageError, create_memory
from prism_memory.models import MemoryIdentity
from prism_memory.stores.base import GovernanceChange, GovernanceResult
from prism_memory.stores.primitives import GovernancePrimitives


class NoTransactions(InMemoryVectorStore):
    """Uses the step-by-step ``apply_governance`` of the primitives; deletes and consent fail."""

    async def apply_governance(self, scope, change: GovernanceChange, *, now) -> GovernanceResult:  # type: ignore[no-untyped-def]
        return await GovernancePrimitives.apply_governance(self, scope, change, now=now)

    async def delete_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        raise StorageError("the delete was lost")

    async def set_consent(self, scope, entry_id, consent, *, now):  # type: ignore[no-untyped-def]
        raise StorageError("the consent write was lost")


async def test_a_failure_after_the_tombstones_leaves_entries_excluded() -> None:
    store = NoTransactions()
    memory = create_memory(
        tenant_id="t", resource_id="r", thread_id="th", embedder=HashEmbedder(), vector_store=store
    )
    await memory.remember(
        [
            {"id": "x", "text": "Ada keeps a red kayak"},
            {"id": "y", "text": "Ada keeps a blue canoe"},
            {"id": "z", "text": "Ada keeps a green raft"},
        ],
        wait=True,
    )
    with pytest.raises(StorageError):
        await memory.forget(ids=["x"])
    with pytest.raises(StorageError):
        await memory.set_consent("y", visible=False)
    assert (await memory.get("x")).id == "x"  # the body is still there ...
    hits = await memory.recall("Ada keeps kayak canoe raft", top_k=10)
    assert [hit.id for hit in hits.hits] == ["z"]  # ... but x and y are excluded
    blocks = await memory.context_provider().provide("Ada kayak canoe raft")
    assert {i for block in blocks for i in block.entry_ids} == {"z"}
    await memory.aclose()
