"""Which consent scopes travel to a resource-wide recall (``stores.rules.travels``)."""

from __future__ import annotations

import pytest

from prism_memory import HashEmbedder, create_memory
from prism_memory.stores.rules import travels


@pytest.mark.parametrize(
    ("scope", "expected"), [("user", True), ("profile", True), ("thread", False)]
)
async def test_only_user_and_profile_entries_travel_to_a_resource_wide_recall(scope, expected):
    async with create_memory(
        tenant_id="t", resource_id="r", thread_id="th", embedder=HashEmbedder(16)
    ) as mem:
        await mem.remember([{"text": "red", "consent": {"scope": scope}}], wait=True)
        (entry,) = (await mem.recall("red")).hits
        assert travels(entry.record) is expected
