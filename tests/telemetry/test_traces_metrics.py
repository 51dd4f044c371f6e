"""remember -> queue -> recall -> forget as OpenTelemetry sees it, on both backends: the GenAI
memory spans, the embed and database child spans, the link from the indexing batch to the
remember that handed its rows over, and the metrics."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from prism_memory import HashEmbedder, IndexingPolicy, create_memory
from prism_memory.errors import CapExceededError
from prism_memory.stores.base import VectorStore
from prism_memory.stores.rag_base import RagStore

from .conftest import Telemetry

FAST = IndexingPolicy(busy_poll_seconds=0.01, idle_poll_seconds=0.05)
SQL_WORDS = ("select ", "insert ", "update ", "delete from", "$1", "where ")


def _points_sum(points: list[object]) -> float:
    return sum(getattr(p, "value", 0) for p in points)


async def test_remember_worker_recall_forget(otel: Telemetry, store: VectorStore) -> None:
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=HashEmbedder(dimensions=64),
        vector_store=store,
        indexing=FAST,
    )
    async with memory:
        result = await memory.remember(
            [{"id": "a", "text": "Ada keeps bees"}, {"id": "b", "text": "Ada sails boats"}]
        )
        await asyncio.wait_for(result.done, 30)
        hits = await memory.recall("bees", top_k=3)
        assert hits.hits
        assert await memory.forget(ids=["a"]) >= 1
        with pytest.raises(CapExceededError):
            await memory.recall("bees", top_k=10_000)

    (remember,) = otel.exactly("create_memory")
    assert remember.attributes["gen_ai.operation.name"] == "create_memory"
    assert remember.attributes["gen_ai.memory.store.id"] == type(store).__name__
    assert remember.attributes["gen_ai.memory.record.count"] == 2
    assert remember.attributes["code.function.name"] == "Memory.remember"

    batches = otel.by_function("indexing.index_batch")
    assert batches, "the queue's batch was not traced"
    assert {b.name for b in batches} == {"update_memory"}
    linked = [link for batch in batches for link in batch.links]
    assert any(link.context.span_id == remember.context.span_id for link in linked)
    assert sum(b.attributes["prism_memory.indexed"] for b in batches) == 2

    embeds = otel.named("embeddings")
    assert embeds
    for embed in embeds:  # the GenAI embeddings span: `embeddings {model}`, its provider required
        assert embed.name == "embeddings hash-v1-64"
        assert embed.attributes["gen_ai.operation.name"] == "embeddings"
        assert embed.attributes["gen_ai.request.model"] == "hash-v1-64"
        assert embed.attributes["gen_ai.provider.name"] == "prism_memory"
    under_batch = {b.context.span_id for b in batches}
    assert any(e.parent is not None and e.parent.span_id in under_batch for e in embeds)

    searches = otel.exactly("search_memory")
    assert len(searches) == 2
    ok, refused = searches
    assert ok.attributes["gen_ai.request.top_k"] == 3
    assert ok.attributes["gen_ai.memory.record.count"] == len(hits.hits)
    assert refused.attributes["error.type"] == "CapExceededError"
    assert refused.status.description == "CapExceededError"  # the type, never the message
    assert any(e.parent and e.parent.span_id == ok.context.span_id for e in embeds)

    (forget,) = otel.exactly("delete_memory")
    for span in otel.finished():  # memory spans are named by the operation, never the store
        assert type(store).__name__ not in span.name or span.name.startswith("retrieval ")
    assert forget.attributes["gen_ai.memory.record.count"] >= 1

    # this test's traces only: a background task another test left running (its memory never
    # closed) may still be tracing its own claims in this process
    ours = {span.context.trace_id for span in [remember, *batches, *searches, forget]}
    db = [
        s
        for s in otel.finished()
        if s.attributes.get("db.system.name") == "postgresql" and s.context.trace_id in ours
    ]
    if type(store).__name__ == "InMemoryVectorStore":
        assert db == []
    else:
        assert db, "no database span on PostgreSQL"
        for span in db:
            assert span.name == span.attributes["db.operation.name"]
            assert not any(word in span.to_json().lower() for word in SQL_WORDS)
        parents = {s.context.span_id for s in (*searches, forget, remember, *batches)}
        assert any(s.parent is not None and s.parent.span_id in parents for s in db)

    metrics = otel.metrics()
    assert sum(p.count for p in metrics["prism_memory.recall.duration"]) == 2
    assert sum(p.count for p in metrics["prism_memory.embed.duration"]) >= 2
    assert _points_sum(metrics["prism_memory.indexing.pending"]) == 0  # 2 handed over, 2 indexed
    (refusal,) = metrics["prism_memory.refusals"]
    assert refusal.value == 1
    assert refusal.attributes["prism_memory.refusal"] == "cap"
    for points in metrics.values():
        for point in points:
            assert set(point.attributes) <= {
                "gen_ai.memory.store.id",
                "gen_ai.operation.name",
                "error.type",
                "code.function.name",
                "prism_memory.refusal",
                "prism_memory.outcome",
            }


async def test_failures_and_retries_are_counted(otel: Telemetry, store: VectorStore) -> None:
    from prism_memory.testing import FlakyEmbedder

    flaky = FlakyEmbedder(HashEmbedder(dimensions=64), failures=1)
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=flaky,
        vector_store=store,
        indexing=IndexingPolicy(
            busy_poll_seconds=0.01,
            idle_poll_seconds=0.05,
            retry_base_seconds=0.01,
            retry_max_seconds=0.02,
        ),
    )
    async with memory:
        result = await memory.remember({"id": "a", "text": "Ada keeps bees"})
        await asyncio.wait_for(result.done, 30)
    metrics = otel.metrics()
    assert _points_sum(metrics["prism_memory.indexing.retries"]) == 1
    assert _points_sum(metrics["prism_memory.indexing.pending"]) == 0


def test_no_provider_records_nothing_and_no_api_still_works() -> None:
    """Without opentelemetry installed the package imports and a memory works (no-op shim)."""
    script = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
        from prism_memory import HashEmbedder, create_memory, _telemetry
        assert _telemetry.tracer() is None and _telemetry.instruments() is None

        async def main():
            async with create_memory(tenant_id="t", resource_id="r", thread_id="th",
                                     embedder=HashEmbedder(dimensions=8)) as memory:
                await memory.remember({"text": "Ada keeps bees"}, wait=True)
                assert (await memory.recall("bees")).hits

        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def test_global_default_provider_is_not_used() -> None:
    from prism_memory import _telemetry, telemetry

    telemetry.configure()
    assert _telemetry.tracer() is None  # the API's proxy: nothing set globally in this session
    assert _telemetry.instruments() is None


@pytest.mark.postgres
async def test_worker_batches_are_traced_and_settle_pending(
    otel: Telemetry, make_postgres_stores: Any
) -> None:
    """Worker-only mode: remember stores pending, ``prism-memory worker``'s loop claims it (a
    ``claim_pending`` database span) and embeds it (a batch span), recall finds it; the backlog
    metric nets to zero."""
    from prism_memory.postgres.worker import IndexingWorker

    stores = await make_postgres_stores(dimension=64)
    embedder = HashEmbedder(dimensions=64)
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=embedder,
        vector_store=stores.vector_store,
        indexing=IndexingPolicy(in_process=False),
    )
    worker = IndexingWorker(stores.vector_store, embedder, batch_size=4, poll_seconds=600)
    await worker.start()
    try:
        async with memory:
            result = await memory.remember({"id": "a", "text": "Ada keeps bees"})
            await asyncio.wait_for(result.done, 30)
            assert (await memory.recall("bees")).hits
    finally:
        await worker.stop()
    batches = otel.by_function("indexing.index_batch")
    assert batches
    assert sum(b.attributes["prism_memory.indexed"] for b in batches) == 1
    claims = [
        s for s in otel.finished() if s.attributes.get("db.operation.name") == "claim_pending"
    ]
    assert claims
    assert _points_sum(otel.metrics()["prism_memory.indexing.pending"]) == 0


async def test_import_and_rag_are_traced(otel: Telemetry, store: VectorStore) -> None:
    from prism_memory.importing import import_entries
    from prism_memory.rag import hybrid_query, ingest
    from prism_memory.stores.rag_memory import InMemoryRagStore

    embedder = HashEmbedder(dimensions=64)
    rows = [
        {"tenant_id": "t", "resource_id": "r", "thread_id": "th", "text": f"Ada keeps bees {n}"}
        for n in range(3)
    ]
    report = await import_entries(store, rows, embedder=embedder)
    assert report.inserted == 3
    (imported,) = otel.exactly("create_memory")
    assert imported.attributes["code.function.name"] == "import_entries"
    assert imported.attributes["gen_ai.memory.record.count"] == 3
    (row_points,) = otel.metrics()["prism_memory.import.rows"]
    assert row_points.value == 3
    assert row_points.attributes["prism_memory.outcome"] == "inserted"

    # the PostgreSQL vector store is also its RAG store; in memory the RAG store is its own
    rag = store if isinstance(store, RagStore) else InMemoryRagStore()
    scope = {"tenant_id": "t", "resource_id": "r"}
    await ingest(rag, scope, "doc", "Ada keeps bees. Bees make honey.", embedder=embedder)
    hits = await hybrid_query(rag, scope, text="bees", top_k=2, embedder=embedder)

    def by_function(name: str) -> list[Any]:
        return [s for s in otel.finished() if s.attributes.get("code.function.name") == name]

    (query,) = by_function("rag.hybrid_query")
    assert query.name == f"retrieval {type(rag).__name__}"  # {operation} {gen_ai.data_source.id}
    assert query.attributes["gen_ai.data_source.id"] == type(rag).__name__
    assert query.attributes["gen_ai.request.top_k"] == 2
    assert query.attributes["gen_ai.memory.record.count"] == len(hits)
    # every public call of the RAG store is a span of its own, under the service's
    await rag.set_source_access(scope, "doc", group_ids=["staff"], access_version=1)
    (granted,) = by_function("rag.set_source_access")
    assert granted.attributes["gen_ai.operation.name"] == "update_memory"
    legs = by_function("rag.query") + by_function("rag.lexical_query")
    assert len(legs) == 2
    assert all(
        leg.parent is not None and leg.parent.span_id == query.context.span_id for leg in legs
    )
    await rag.delete_source(scope, "doc")
    (deleted,) = by_function("rag.delete_source")
    assert deleted.attributes["gen_ai.operation.name"] == "delete_memory"
    assert deleted.attributes["gen_ai.memory.record.count"] >= 1
    assert "Ada" not in "".join(span.to_json() for span in otel.finished())


async def test_a_model_changes_backfill_and_promotion_are_traced(
    otel: Telemetry, store: VectorStore
) -> None:
    from prism_memory._clock import utcnow
    from prism_memory.generations import backfill_generation, promote_to_primary
    from prism_memory.stores.base import VectorGenerations

    assert isinstance(store, VectorGenerations)
    old, new = HashEmbedder(dimensions=16), HashEmbedder(dimensions=8)
    async with create_memory(
        tenant_id="t", resource_id="r", thread_id="th", embedder=old, vector_store=store
    ) as memory:
        await memory.remember([{"text": f"Ada keeps bees {n}"} for n in range(3)], wait=True)
    await store.start_generation(
        primary=old.model, primary_width=16, model=new.model, width=8, now=utcnow()
    )
    filled = await backfill_generation(store, new.model, new)
    await store.switch_generation(new.model, force=False, now=utcnow())
    promoted = await promote_to_primary(store, new.model, batch_size=2)
    assert (filled.stored, promoted.moved, promoted.promoted) == (3, 3, True)

    def by_function(name: str) -> Any:
        (span,) = [s for s in otel.finished() if s.attributes.get("code.function.name") == name]
        return span

    backfill = by_function("generations.backfill_generation")
    promotion = by_function("generations.promote_to_primary")
    for span, count in ((backfill, 3), (promotion, 3)):
        assert span.name == "update_memory"
        assert span.attributes["gen_ai.memory.record.count"] == count
    assert "Ada" not in "".join(span.to_json() for span in otel.finished())


async def test_update_memory_spans_count_records_and_recall_names_its_query(
    otel: Telemetry, store: VectorStore
) -> None:
    """Issue 46 (10): ``update_memory`` spans carried no record count, and the captured query was
    ``gen_ai.retrieval.query.text`` instead of the memory convention's ``gen_ai.memory.query.text``."""
    otel.capture(True)
    async with create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=HashEmbedder(dimensions=64),
        vector_store=store,
    ) as memory:
        [entry_id] = (await memory.remember({"text": "Ada keeps bees"}, wait=True)).accepted
        await memory.update_working({"name": "Ada"})
        await memory.set_consent(entry_id, visible=False)
        await memory.set_consent(entry_id, visible=True)
        await memory.correct(entry_id, "Ada keeps many bees")
        await memory.share_with("child", [entry_id])
        await memory.recall("bees")
    updates = [
        s
        for s in otel.exactly("update_memory")
        if "Memory." in str(s.attributes.get("code.function.name"))
    ]
    counted = {
        s.attributes["code.function.name"]: s.attributes.get("gen_ai.memory.record.count")
        for s in updates
    }
    assert counted == {
        "Memory.update_working": 1,
        "Memory.set_consent": 1,
        "Memory.correct": 1,
        "Memory.share_with": 1,
    }
    (search,) = otel.exactly("search_memory")
    assert search.attributes["gen_ai.memory.query.text"] == "bees"
    assert "gen_ai.retrieval.query.text" not in search.attributes


@pytest.mark.postgres
async def test_every_database_span_is_named_by_an_operation(
    otel: Telemetry, make_postgres_stores: Any
) -> None:
    """Issue 46 (10): opening the stores traced ``inspecting the prism_memory schema`` as a
    ``db.operation.name``; every name is now an identifier (the statement's)."""
    stores = await make_postgres_stores(dimension=64)  # opening inspects the schema
    async with create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=HashEmbedder(dimensions=64),
        vector_store=stores.vector_store,
    ) as memory:
        await memory.remember({"text": "Ada keeps bees"}, wait=True)
        await memory.recall("bees")
    names = {
        str(s.attributes["db.operation.name"])
        for s in otel.finished()
        if s.attributes.get("db.system.name") == "postgresql"
    }
    assert "inspect_schema" in names
    assert all(name.isidentifier() for name in names), sorted(names)
