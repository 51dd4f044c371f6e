"""Content capture's two edges (issue 47), on both backends: with capture on, an id is scrubbed
like a text (a secret inside an accepted entry's id never leaves); and ``configure`` decides over
the environment variable, which only speaks when ``configure`` left the choice open."""

from __future__ import annotations

import asyncio

import pytest

from prism_memory import HashEmbedder, IndexingPolicy, InMemoryVectorStore, create_memory, telemetry
from prism_memory._telemetry import capture_content
from prism_memory.redaction import REDACTED
from prism_memory.stores.base import VectorStore

from .conftest import Telemetry

# the GenAI conventions' name, written out here (never the package's constant), and built at run
# time: a literal here would be the very (interned) string object the package holds, which the
# mutation tool rebinds along with the package's constant when it mutates the name
CAPTURE_ENV = "".join(["OTEL_INSTRUMENTATION_GENAI_", "CAPTURE_MESSAGE_CONTENT"])
SECRET = "sk-IDCANARY-9d41"
TEXT = "Ada keeps bees on the roof"


async def _remember_and_recall(store: VectorStore, entry_id: str) -> None:
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="thread",
        embedder=HashEmbedder(dimensions=64),
        vector_store=store,
        secrets=[SECRET],
        indexing=IndexingPolicy(busy_poll_seconds=0.01, idle_poll_seconds=0.05),
    )
    async with memory:
        result = await memory.remember({"id": entry_id, "text": TEXT})
        await asyncio.wait_for(result.done, 30)
        hits = await memory.recall("bees roof", top_k=3)
        assert [hit.id for hit in hits.hits] == [entry_id]


async def test_capture_on_scrubs_the_ids_of_remembered_and_recalled_records(
    otel: Telemetry, store: VectorStore
) -> None:
    otel.capture(True)
    await _remember_and_recall(store, f"note-{SECRET}")
    emitted = otel.everything()
    assert TEXT in emitted  # capture is on: the texts go out...
    assert SECRET not in emitted  # ...but never the secret inside an id
    assert f"note-{REDACTED}" in emitted
    carrying = [s for s in otel.finished() if f"note-{REDACTED}" in str(dict(s.attributes or {}))]
    assert len(carrying) >= 2  # remember's records and recall's records


@pytest.mark.parametrize("variable", ["true", "TRUE", " true "])
async def test_configure_off_beats_the_environment(
    otel: Telemetry, store: VectorStore, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(CAPTURE_ENV, variable)
    otel.capture(False)
    assert not capture_content()
    await _remember_and_recall(store, "note-1")
    emitted = otel.everything()
    assert otel.finished(), "nothing was traced"
    assert "Ada keeps bees" not in emitted
    assert "bees roof" not in emitted
    assert "note-1" not in emitted


@pytest.mark.parametrize(("variable", "captured"), [("true", True), ("false", False), ("", False)])
async def test_the_environment_decides_when_configure_leaves_it_open(
    otel: Telemetry, monkeypatch: pytest.MonkeyPatch, variable: str, captured: bool
) -> None:
    monkeypatch.setenv(CAPTURE_ENV, variable)
    telemetry.configure(
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
        capture_content=None,
    )
    assert capture_content() is captured
    await _remember_and_recall(InMemoryVectorStore(), "note-2")
    assert ("Ada keeps bees" in otel.everything()) is captured
    otel.capture(True)  # configure(True) wins over a "false" environment too
    assert capture_content()
