"""One public call as telemetry sees it (``prism_memory/_memory/observed.py``; issue 47's mutation
run): errors scrubbed with or without a provider, the record count of each kind of result, the
resolved ``top_k``, the recall-only latency metric, which refusals are counted, and -- capture on
-- the records of a remember given in each shape. In memory: the module is the same for every
backend (``test_traces_metrics.py`` and ``test_canary.py`` run both)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from prism_memory import HashEmbedder, IndexingPolicy, MemoryEntry, create_memory, telemetry
from prism_memory.errors import ConflictError, NotFoundError, PrismMemoryError
from prism_memory.memory import Memory
from prism_memory.redaction import REDACTED

from .conftest import Telemetry

# the attribute and metric names, in one place
COUNT = "gen_ai.memory.record.count"
TOP_K = "gen_ai.request.top_k"
RECORDS = "gen_ai.memory.records"
QUERY = "gen_ai.memory.query.text"
FUNCTION = "code.function.name"
OPERATION = "gen_ai.operation.name"
REFUSALS = "prism_memory.refusals"
DURATION = "prism_memory.recall.duration"


def _memory(**options: Any) -> Memory:
    return create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=HashEmbedder(dimensions=32),
        indexing=IndexingPolicy(busy_poll_seconds=0.01, idle_poll_seconds=0.05),
        **options,
    )


def _span(otel: Telemetry, function: str, first: bool = False) -> Any:
    found = [s for s in otel.finished() if (s.attributes or {}).get(FUNCTION) == function]
    assert len(found) == 1 or (first and found), (function, [s.name for s in otel.finished()])
    return found[0]


@pytest.mark.parametrize("provider", [False, True], ids=["no-provider", "provider"])
async def test_an_errors_message_is_scrubbed_with_or_without_telemetry(
    otel: Telemetry, provider: bool
) -> None:
    if not provider:
        telemetry.configure()
    async with _memory(secrets=["working memory", "no such entry"]) as memory:
        with pytest.raises(ConflictError) as conflict:
            await memory.update_working({"a": 1}, expected_version=5)
        assert str(conflict.value) == f"{REDACTED} is at version 0, expected 5"
        with pytest.raises(NotFoundError) as missing:
            await memory.get("m-1")
        assert str(missing.value).startswith(REDACTED)
    async with _memory() as plain:  # no secret: the message as it was
        with pytest.raises(ConflictError, match=r"^working memory is at version 0, expected 5$"):
            await plain.update_working({"a": 1}, expected_version=5)
    if provider:
        failed = [s for s in otel.finished() if s.status.status_code == StatusCode.ERROR]
        assert {s.attributes[FUNCTION] for s in failed} == {
            "Memory.update_working",
            "Memory.get",
        }
        assert all(s.attributes["error.type"] in ("ConflictError", "NotFoundError") for s in failed)
    else:
        assert otel.finished() == ()


async def test_the_record_count_of_each_kind_of_result(otel: Telemetry) -> None:
    async with _memory() as memory:
        accepted = await memory.remember(
            [{"id": "a", "text": "bees"}, {"id": "b", "text": "hives"}], wait=True
        )
        assert len(accepted.accepted) == 2
        await memory.index_status(["a", "b", "zz"])
        hits = await memory.recall("bees", top_k=1)
        await memory.get("a")
        await memory.update_working({"k": 1})
        await memory.forget(ids=["b"])
        await memory.set_consent("a", scope="thread")  # explicit consent: exportable
        await memory.export_memory(identity=memory.identity)
        await memory.rebuild_index()
        await memory.remember({"id": "c", "text": "wasps"}, wait=True)
        await memory.apply_retention(max_entries=1)
    assert _span(otel, "Memory.remember", first=True).attributes[COUNT] == 2  # accepted
    assert _span(otel, "Memory.index_status").attributes[COUNT] == 2  # a mapping: its length
    assert _span(otel, "Memory.recall").attributes[COUNT] == len(hits.hits) == 1
    assert _span(otel, "Memory.forget").attributes[COUNT] == 1  # an int: itself
    for function in ("Memory.get", "Memory.update_working"):  # one record: counts 1
        assert _span(otel, function).attributes[COUNT] == 1
    assert _span(otel, "Memory.export_memory").attributes[COUNT] == 1  # its entries
    assert _span(otel, "Memory.rebuild_index").attributes[COUNT] == 1  # rebuilt
    assert _span(otel, "Memory.apply_retention").attributes[COUNT] == 1  # deleted
    recall = _span(otel, "Memory.recall")
    assert recall.attributes[TOP_K] == 1
    assert recall.attributes[OPERATION] == "search_memory"
    assert _span(otel, "Memory.remember", first=True).attributes[OPERATION] == "create_memory"


async def test_recall_names_the_top_k_it_used(otel: Telemetry) -> None:
    async with _memory() as memory:
        await memory.recall("bees")
    default = _span(otel, "Memory.recall").attributes[TOP_K]
    assert isinstance(default, int)
    assert default == memory._ctx.limits.resolve("top_k", None)
    assert default > 1


async def test_the_latency_metric_is_recall_only_and_names_a_failure(otel: Telemetry) -> None:
    async with _memory() as memory:
        await memory.remember({"id": "a", "text": "bees"}, wait=True)
        started = time.perf_counter()
        await memory.recall("bees")
        with pytest.raises(PrismMemoryError):
            await memory.recall("bees", top_k=10_000_000)
        elapsed = time.perf_counter() - started
        await memory.get("a")
    points = otel.metrics()[DURATION]
    assert sum(p.count for p in points) == 2
    assert 0 <= sum(p.sum for p in points) <= elapsed
    errors = sorted(str(dict(p.attributes).get("error.type")) for p in points)
    assert errors == ["CapExceededError", "None"]
    assert all(p.sum >= 0 for p in points)


async def test_which_refusals_are_counted(otel: Telemetry) -> None:
    async with _memory() as memory:
        with pytest.raises(PrismMemoryError):  # a cap
            await memory.recall("bees", top_k=10_000_000)
        with pytest.raises(PrismMemoryError):  # a validation rule
            await memory.remember({"id": "", "text": "x"})
        with pytest.raises(NotFoundError):  # not a refusal
            await memory.get("nope")
        with pytest.raises(ConflictError):  # nor this
            await memory.update_working({"a": 1}, expected_version=3)
    counted = {
        (
            p.attributes["prism_memory.refusal"],
            p.attributes["error.type"],
            p.attributes[FUNCTION],
        ): p.value
        for p in otel.metrics()[REFUSALS]
    }
    assert counted == {
        ("cap", "CapExceededError", "Memory.recall"): 1,
        ("validation", "ValidationError", "Memory.remember"): 1,
    }


def _records(span: Any) -> list[dict[str, Any]]:
    return list(json.loads(span.attributes[RECORDS]))


@pytest.mark.parametrize("shape", ["mapping", "model", "list-of-models", "keyword"])
async def test_capture_on_a_remember_of_each_shape_has_its_records(
    otel: Telemetry, shape: str
) -> None:
    otel.capture(True)
    entry = {"id": "e1", "text": "bees in the garden"}
    async with _memory() as memory:
        if shape == "mapping":
            await memory.remember(entry, wait=True)
        elif shape == "model":
            await memory.remember(MemoryEntry(**entry), wait=True)
        elif shape == "list-of-models":
            await memory.remember([MemoryEntry(**entry)], wait=True)
        else:
            await memory.remember(entries=[entry], wait=True)
        await memory.recall(query="garden bees", top_k=2)
    assert _records(_span(otel, "Memory.remember")) == [
        {"id": "e1", "content": "bees in the garden"}
    ]
    recall = _span(otel, "Memory.recall")
    assert recall.attributes[QUERY] == "garden bees"
    [hit] = _records(recall)
    assert (hit["id"], hit["content"]) == ("e1", "bees in the garden")
    assert isinstance(hit["score"], float)


async def test_capture_on_other_calls_carry_no_content(otel: Telemetry) -> None:
    otel.capture(True)
    async with _memory() as memory:
        await memory.remember({"id": "e1", "text": "bees in the garden"}, wait=True)
        await memory.get("e1")
        await memory.correct("e1", "wasps in the garden")
        await memory.export_memory(identity=memory.identity)
        await asyncio.sleep(0)
    for function in ("Memory.get", "Memory.correct", "Memory.export_memory"):
        attributes = dict(_span(otel, function).attributes)
        assert RECORDS not in attributes
        assert QUERY not in attributes
        assert "garden" not in json.dumps(attributes)


async def test_metrics_without_a_tracer(otel: Telemetry) -> None:
    """A meter provider and no tracer provider: the call is observed (its latency, its refusal)
    with no span to describe."""
    telemetry.configure(meter_provider=otel.meter_provider)
    async with _memory() as memory:
        await memory.remember({"id": "a", "text": "bees"}, wait=True)
        assert [hit.id for hit in (await memory.recall("bees")).hits] == ["a"]
        with pytest.raises(PrismMemoryError):
            await memory.recall("bees", top_k=10_000_000)
    assert otel.finished() == ()
    assert sum(p.count for p in otel.metrics()[DURATION]) == 2
    assert sum(p.value for p in otel.metrics()[REFUSALS]) == 1


async def test_a_remember_whose_ids_repeat_still_has_its_records(otel: Telemetry) -> None:
    """The same id twice in one call keeps one entry: the records pair what was accepted with
    the texts given, never failing the call."""
    otel.capture(True)
    async with _memory() as memory:
        result = await memory.remember(
            [{"id": "d", "text": "bees"}, {"id": "d", "text": "bees"}], wait=True
        )
    records = _records(_span(otel, "Memory.remember"))
    assert [r["id"] for r in records] == list(result.accepted)


class _FailsOnce(HashEmbedder):
    """Fails its first embedding call only."""

    def __init__(self) -> None:
        super().__init__(dimensions=32)
        self.calls = 0

    async def embed(self, texts: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the embedding service hiccuped")
        return await super().embed(texts)


@pytest.mark.parametrize("provider", [False, True], ids=["no-provider", "provider"])
async def test_a_failed_call_is_run_once(otel: Telemetry, provider: bool) -> None:
    """A call that fails raises, and is never run again behind the caller's back (a second run
    here would succeed)."""
    if not provider:
        telemetry.configure()
    embedder = _FailsOnce()
    async with create_memory(
        tenant_id="t", resource_id="r", thread_id="th", embedder=embedder
    ) as memory:
        with pytest.raises(PrismMemoryError):
            await memory.recall("bees")
        assert embedder.calls == 1
        assert (await memory.recall("bees")).hits == ()


async def test_a_tracer_without_a_meter_still_traces(otel: Telemetry) -> None:
    telemetry.configure(tracer_provider=otel.tracer_provider)
    async with _memory() as memory:
        await memory.recall("bees")
    assert _span(otel, "Memory.recall").attributes[TOP_K] > 0
    assert DURATION not in otel.metrics()
