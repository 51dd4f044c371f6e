"""The telemetry shim's contract at its edges (``prism_memory._telemetry``; issue 47's mutation run):
nothing is started and every call still answers when no provider records, a failed span names the
error's type and never its message, a store's own ``telemetry_id``, and the records attribute keeps
non-ASCII text as it is."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from opentelemetry import metrics, trace
from opentelemetry.trace import StatusCode

from prism_memory import HashEmbedder, create_memory, telemetry
from prism_memory import _telemetry as otel_shim
from prism_memory.rag import ingest
from prism_memory.rag_types import RagScope
from prism_memory.stores.base import VectorStore
from prism_memory.stores.rag_memory import InMemoryRagStore

from .conftest import Telemetry


def _no_op_providers() -> None:
    telemetry.configure(
        tracer_provider=trace.NoOpTracerProvider(), meter_provider=metrics.NoOpMeterProvider()
    )


def test_no_provider_starts_nothing(otel: Telemetry) -> None:
    _no_op_providers()
    with otel_shim.start("update_memory", {"a": 1}) as span:
        assert span is None
    with otel_shim.operation_span("retrieval", InMemoryRagStore(), "rag.query") as span:
        assert span is None
    with otel_shim.db_span("recall") as span:
        assert span is None
    assert otel_shim.link_for([]) == []
    assert otel.finished() == ()


async def test_every_call_answers_without_a_provider(otel: Telemetry, store: VectorStore) -> None:
    """Both backends (the database spans around every statement), and a traced RAG call."""
    _no_op_providers()
    before = otel.finished()  # the PostgreSQL store's set-up, traced while the fixture ran
    async with create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=HashEmbedder(dimensions=16),
        vector_store=store,
    ) as memory:
        result = await memory.remember([{"id": "a", "text": "Ada keeps bees on the roof"}])
        await asyncio.wait_for(result.done, 30)
        hits = await memory.recall("bees", top_k=3)
    assert [hit.record.id for hit in hits.hits] == ["a"]
    rag = InMemoryRagStore()
    scope = {"tenant_id": "t", "resource_id": "r"}
    ingested = await ingest(
        rag, scope, "doc", "Ada keeps bees.", embedder=HashEmbedder(dimensions=16)
    )
    assert (ingested.source_id, ingested.chunks) == ("doc", 1)
    assert await rag.list_sources(RagScope.of(scope), limit=5) == ["doc"]
    assert otel.finished() == before


def test_a_failed_span_names_the_type_only(otel: Telemetry) -> None:
    class Store:
        telemetry_id = "pg-main"

    with (
        pytest.raises(ValueError, match="canary-7f3a"),
        otel_shim.operation_span("retrieval", Store(), "recall", extra=1),
    ):
        raise ValueError("canary-7f3a")
    (span,) = otel.finished()
    assert span.name == "retrieval pg-main"
    assert dict(span.attributes or {}) == {
        "extra": 1,
        "gen_ai.operation.name": "retrieval",
        "gen_ai.memory.store.id": "pg-main",
        "gen_ai.data_source.id": "pg-main",
        "code.function.name": "recall",
        "error.type": "ValueError",
    }
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError"
    assert span.events == ()  # no exception event: its message may quote a caller's value
    assert "canary-7f3a" not in span.to_json()


def test_store_id_is_the_telemetry_id_when_a_string() -> None:
    class Named:
        telemetry_id = "pg-main"

    class Numbered:
        telemetry_id = 7

    assert otel_shim.store_id(Named()) == "pg-main"
    assert otel_shim.store_id(Numbered()) == "Numbered"
    assert otel_shim.store_id(object()) == "object"


def test_records_keep_non_ascii_text() -> None:
    found = otel_shim.records_json([("id-1", "café ☕", 0.5), ("id-2", "x", None)], str.upper)
    assert (
        found
        == '[{"id": "ID-1", "content": "CAFÉ ☕", "score": 0.5}, {"id": "ID-2", "content": "X"}]'
    )


def test_the_instruments_are_fixed(otel: Telemetry) -> None:
    found = otel_shim.instruments()
    assert found is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.pending = None  # type: ignore[misc]
