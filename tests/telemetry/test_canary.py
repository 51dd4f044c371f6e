"""No content by default, never a secret: canaries in every input, none in what the in-memory
span exporter and metric reader hold -- with content capture off and on, on both backends.

Capture on lets scrubbed queries and recalled or remembered texts through; a configured secret is
never among them, and nothing about an entry is emitted once it is forgotten or revoked."""

from __future__ import annotations

import asyncio

import pytest

from prism_memory import HashEmbedder, IndexingPolicy, create_memory
from prism_memory.errors import PrismMemoryError
from prism_memory.redaction import REDACTED
from prism_memory.stores.base import VectorStore

from .conftest import Telemetry

SECRET = "sk-CANARY-5ec4e7"
TENANT, RESOURCE, THREAD = "tenant-canary-71", "resource-canary-72", "thread-canary-73"
FORGOTTEN = "forgotten-canary-bees"
REVOKED = "revoked-canary-hives"
WORKING = "working-canary-value"
META = "metadata-canary-value"
ID_KEPT = "id-canary-kept"


@pytest.mark.parametrize("capture", [False, True], ids=["capture-off", "capture-on"])
async def test_no_secret_and_nothing_forgotten_leaves(
    otel: Telemetry, store: VectorStore, capture: bool
) -> None:
    otel.capture(capture)
    memory = create_memory(
        tenant_id=TENANT,
        resource_id=RESOURCE,
        thread_id=THREAD,
        embedder=HashEmbedder(dimensions=64),
        vector_store=store,
        secrets=[SECRET],
        indexing=IndexingPolicy(busy_poll_seconds=0.01, idle_poll_seconds=0.05),
    )
    async with memory:
        await memory.update_working({"note": f"{WORKING} {SECRET}"})
        await memory.get_working()
        kept = await memory.remember(
            {
                "id": ID_KEPT,
                "text": f"Ada keeps bees, password {SECRET}",
                "metadata": {"m": f"{META} {SECRET}"},
            }
        )
        gone = await memory.remember({"id": "id-forgotten", "text": f"{FORGOTTEN} {SECRET}"})
        revoked = await memory.remember({"id": "id-revoked", "text": f"{REVOKED} {SECRET}"})
        for result in (kept, gone, revoked):
            await asyncio.wait_for(result.done, 30)
        with pytest.raises(PrismMemoryError):  # a refusal whose input holds the secret
            await memory.remember({"id": SECRET, "text": "x" * 10_000_000})
        before = otel.everything()
        await memory.forget(ids=["id-forgotten"])
        await memory.set_consent("id-revoked", visible=False)
        otel.spans.clear()  # from here on nothing may mention the forgotten or revoked entry
        hits = await memory.recall(f"bees hives {SECRET}", top_k=5)
        assert [h.record.id for h in hits.hits] == [ID_KEPT]
        await memory.recall("canary bees")  # would match the forgotten entry
        await memory.get(ID_KEPT)
        await memory.export_memory(identity=memory.identity)
        await memory.index_status([ID_KEPT, "id-forgotten"])
        await memory.forget_before(memory._ctx.clock())
    after = otel.everything()
    emitted = before + after

    assert otel.finished(), "nothing was traced"
    for canary in (SECRET, TENANT, RESOURCE, THREAD, WORKING, META):
        assert canary not in emitted, canary
    for canary in (FORGOTTEN, REVOKED, "id-forgotten", "id-revoked"):
        assert canary not in after, canary
    if capture:
        assert "Ada keeps bees" in emitted  # the remembered and recalled text, scrubbed
        assert REDACTED in emitted
        assert ID_KEPT in after
    else:
        for canary in ("Ada keeps bees", "bees hives", ID_KEPT, FORGOTTEN, REVOKED):
            assert canary not in emitted, canary
