"""Conformance checks of remember and recall: deferred embedding, digest ids, ordering, scoring, caps,
bad vectors, retries, importance and redaction.

They run on every backend through :data:`~prism_memory.testing.CONFORMANCE_CHECKS`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

import numpy as np

from ..errors import (
    CapExceededError,
    IndexingError,
    InvalidVectorError,
    NotFoundError,
    ValidationError,
)
from ._fixtures import FlakyEmbedder, GatedEmbedder, NonFiniteEmbedder
from ._support import ConformanceKit, _Case, _check, _ids, _raises

__all__ = ["RECALL_CHECKS"]


async def remember_is_deferred_until_embedded(kit: ConformanceKit) -> None:
    """remember() returns before embedding; the entry is unrecallable until its vector exists."""
    case = _Case(kit)
    gated = GatedEmbedder(kit.embedder)
    writer = case.memory(embedder=gated)
    reader = case.memory()
    result = await writer.remember([{"id": "m1", "text": "Ada prefers concise answers"}])
    _check(result.accepted == ("m1",) and result.pending == ("m1",), f"pending: {result}")
    _check(await _ids(reader, "concise answers") == [], "not recallable before embedding")
    gated.release()
    report = await asyncio.wait_for(result.done, timeout=10)
    _check(report.indexed == ("m1",) and not report.failed, f"report: {report}")
    _check(await _ids(reader, "concise answers") == ["m1"], "recallable once embedded")
    waited = await writer.remember([{"id": "m2", "text": "Ada lives in London"}], wait=True)
    _check(await _ids(reader, "London", top_k=1) == ["m2"], "wait=True returns indexed")
    _check(waited.done is not None, "done is always awaitable")
    await writer.aclose()


async def remember_ids_are_idempotent_digests(kit: ConformanceKit) -> None:
    """An id-less entry gets a digest of role and text: retries do not duplicate; roles differ."""
    case = _Case(kit)
    memory = case.memory()
    first = await memory.remember([{"text": "The deploy is on Friday"}], wait=True)
    again = await memory.remember([{"text": "The deploy is on Friday"}], wait=True)
    echoed = await memory.remember(
        [{"text": "The deploy is on Friday", "role": "assistant"}], wait=True
    )
    _check(first.accepted == again.accepted, "a retried write keeps its id")
    _check(again.pending == (), "an identical retry needs no re-embedding")
    _check(first.accepted != echoed.accepted, "the same text from another role is another entry")
    ids = await _ids(memory, "deploy Friday")
    _check(sorted(ids) == sorted([*first.accepted, *echoed.accepted]), f"two entries, got {ids}")
    await memory.aclose()


async def recall_orders_by_independent_similarity(kit: ConformanceKit) -> None:
    """Default order equals the cosine + BM25 fusion computed here; ties by sequence; repeatable.

    similarity = 0.5·cosine / max|cosine| + 0.5·BM25 / max BM25 over the candidates (here: every
    entry), BM25 with k1 = 0.9, b = 0.4 and Lucene's idf over the thread's entries.
    """
    case = _Case(kit)
    memory = case.memory()
    texts = [
        "coffee beans from Ethiopia",
        "the cat sleeps on the sofa",
        "espresso coffee with milk",
        "train timetable for Monday",
        "coffee coffee coffee",
        "a quiet sofa for reading",
        "espresso coffee with milk",  # same text, other id: a tie broken by sequence
    ]
    await memory.remember([{"id": f"e{i}", "text": t} for i, t in enumerate(texts)], wait=True)
    query = "coffee with milk"
    vectors = np.asarray(await kit.embedder.embed([query, *texts]), dtype=np.float64)
    terms = set(query.split())
    docs = [text.lower().split() for text in texts]  # plain words: stemming changes no match here
    average = sum(len(doc) for doc in docs) / len(docs)
    df = {t: sum(t in doc for doc in docs) for t in terms}

    def bm25(i: int) -> float:
        total = 0.0
        for t in terms:
            tf = docs[i].count(t)
            if tf:
                idf = math.log(1 + (len(docs) - df[t] + 0.5) / (df[t] + 0.5))
                total += idf * tf * 1.9 / (tf + 0.9 * (1 - 0.4 + 0.4 * len(docs[i]) / average))
        return total

    def cosine(i: int) -> float:
        x, y = vectors[0], vectors[i + 1]
        return float(x @ y) / float(np.linalg.norm(x) * np.linalg.norm(y))

    best_cosine = max(abs(cosine(i)) for i in range(len(texts)))
    best_bm25 = max(bm25(i) for i in range(len(texts)))

    def expected_score(i: int) -> float:
        return 0.5 * cosine(i) / best_cosine + 0.5 * bm25(i) / best_bm25

    expected = sorted(range(len(texts)), key=lambda i: (-expected_score(i), i))
    expected_ids = [f"e{i}" for i in expected[:5]]
    results = [await _ids(memory, query, top_k=5) for _ in range(3)]
    _check(results[0] == expected_ids, f"order {results[0]} != {expected_ids}")
    _check(results[0] == results[1] == results[2], "repeated recalls agree")
    hit = (await memory.recall(query, top_k=1, explain=True)).hits[0]
    _check(math.isclose(hit.score, expected_score(expected[0]), abs_tol=1e-6), "score exposed")
    await memory.aclose()


async def recall_scoring_blends_recency_and_importance(kit: ConformanceKit) -> None:
    """Opt-in scoring follows (1−r−i)·similarity + r·recency + i·importance; bad weights raise."""
    case = _Case(kit)
    memory = case.memory()
    now = case.clock()
    await memory.remember(
        [
            {
                "id": "old",
                "text": "notes about the garden",
                "occurred_at": now - timedelta(days=30),
                "importance": 0.2,
            },
            {"id": "new", "text": "notes about the garden", "occurred_at": now, "importance": 0.9},
        ],
        wait=True,
    )
    plain = await memory.recall("garden notes", top_k=2)
    _check([h.id for h in plain.hits] == ["old", "new"], "equal similarity ties by sequence")
    scoring = {"recency_weight": 0.5, "importance_weight": 0.5, "half_life_ms": 86_400_000}
    blended = await memory.recall("garden notes", top_k=2, scoring=scoring)
    _check([h.id for h in blended.hits] == ["new", "old"], "recency and importance reorder")
    old = next(h for h in blended.hits if h.id == "old")
    _check(
        math.isclose(old.recency, 0.5**30, rel_tol=1e-3),
        f"30 days at a 1-day half-life: {old.recency}",
    )
    _check(
        math.isclose(old.score, 0.5 * old.recency + 0.5 * 0.2, rel_tol=1e-6), "similarity weight 0"
    )
    for bad in (
        {"recency_weight": 1.5, "half_life_ms": 1},
        {"recency_weight": math.nan, "half_life_ms": 1},
        {"recency_weight": 0.2},
        {"recency_weight": 0.2, "half_life_ms": -5},
    ):
        await _raises(ValidationError, memory.recall("garden", scoring=bad), f"{bad}")
    await memory.aclose()


async def recall_caps_raise_and_change_nothing(kit: ConformanceKit) -> None:
    """Over-cap top_k, message_range, batch, payload and lineage raise CapExceededError."""
    case = _Case(kit)
    memory = case.memory(limits={"remember_batch": 3, "payload_bytes": 256})
    await memory.remember([{"id": "a", "text": "alpha"}], wait=True)
    await _raises(CapExceededError, memory.recall("alpha", top_k=33), "top_k")
    await _raises(CapExceededError, memory.recall("alpha", message_range=5), "message_range")
    await _raises(
        CapExceededError,
        memory.remember([{"id": f"b{i}", "text": f"beta {i}"} for i in range(4)]),
        "batch",
    )
    await _raises(CapExceededError, memory.remember([{"id": "c", "text": "x" * 300}]), "payload")
    sources = [f"s{i}" for i in range(33)]
    await _raises(
        CapExceededError,
        memory.remember([{"id": "d", "text": "d", "lineage": {"source_ids": sources}}]),
        "lineage ids",
    )
    await _raises(ValidationError, memory.recall("   "), "blank query")
    await _raises(ValidationError, memory.remember([{"id": "e", "text": "  "}]), "blank text")
    await _raises(
        ValidationError,
        memory.remember([{"id": "f", "text": "f", "lineage": {"source_ids": ["nope"]}}]),
        "unknown lineage source",
    )
    export = await memory.export_memory(identity=memory.identity, limit=10)
    _check(export.entries == () or [e["id"] for e in export.entries] == [], "nothing exported yet")
    ids = await _ids(memory, "alpha beta x d e f", top_k=10)
    _check(ids == ["a"], f"only the valid entry is stored, got {ids}")
    _check(await memory.vector_store.count_by_thread(memory.identity) == 1, "store unchanged")
    await memory.aclose()


async def bad_vectors_are_rejected(kit: ConformanceKit) -> None:
    """NaN/inf and wrong-width vectors never reach the store; rows stay unrecallable, reported."""
    case = _Case(kit)
    good = case.memory()
    await good.remember([{"id": "x", "text": "original text"}], wait=True)
    # Stop its worker: any worker of this thread may embed the rows written below, and this one
    # would embed the poisoned row with a sound embedder.
    await good.aclose()
    for value in (math.nan, math.inf):
        bad = case.memory(embedder=NonFiniteEmbedder(kit.embedder, value=value))
        await _raises(InvalidVectorError, bad.correct("x", "changed text"), "correct")
        await _raises(InvalidVectorError, bad.recall("original"), "recall")
        await _raises(InvalidVectorError, bad.rebuild_index(), "rebuild")
    _check((await good.get("x")).text == "original text", "a failed correction changed nothing")
    _check(await _ids(good, "original text") == ["x"], "the old vector still serves")
    poisoned = case.memory(embedder=NonFiniteEmbedder(kit.embedder, poison="POISON"))
    result = await poisoned.remember(
        [{"id": "p", "text": "POISON pill"}, {"id": "q", "text": "quiet entry"}]
    )
    report = await asyncio.wait_for(result.done, timeout=10)
    _check(
        report.indexed == ("q",) and set(report.failed) == {"p"}, f"poisoned row isolated: {report}"
    )
    _check(
        await poisoned.index_status(["p", "q"]) == {"p": "failed", "q": "indexed"},
        "failure recorded",
    )
    _check(
        "p" not in await _ids(good, "POISON pill quiet", top_k=5), "a failed row is never recalled"
    )
    await _raises(
        IndexingError,
        poisoned.remember([{"id": "p2", "text": "POISON again"}], wait=True),
        "wait",
    )

    class Wide:
        dimensions = kit.embedder.dimensions

        async def embed(self, texts: Any) -> Any:
            return np.ones((len(texts), self.dimensions + 1))

    await _raises(InvalidVectorError, case.memory(embedder=Wide()).recall("x"), "width")
    await poisoned.aclose()


async def failed_embeddings_are_retried(kit: ConformanceKit) -> None:
    """A transient embedder failure is recorded and retried with backoff until it succeeds."""
    case = _Case(kit)
    flaky = FlakyEmbedder(kit.embedder, failures=2)
    memory = case.memory(embedder=flaky)
    result = await memory.remember([{"id": "r", "text": "retry me"}])
    report = await asyncio.wait_for(result.done, timeout=10)
    _check(report.indexed == ("r",), f"indexed after retries: {report}")
    _check(flaky.calls == 3, f"two failures then success, got {flaky.calls} calls")
    record = await memory.get("r")
    _check(record.attempts == 2 and record.status == "indexed", f"attempts recorded: {record}")
    await memory.aclose()


async def importance_from_runs_on_redacted_reflection(kit: ConformanceKit) -> None:
    """importance_from sees redacted reflections once at write; non-finite output fails the write."""
    seen: list[Any] = []

    def derive(reflection: Mapping[str, Any]) -> float:
        seen.append(reflection)
        return float(reflection["mentions"]) / 10

    case = _Case(kit)
    memory = case.memory(importance_from=derive, secrets=["hunter2"])
    await memory.remember(
        [
            {"id": "a", "text": "fact a", "reflection": {"mentions": 4, "note": "pw hunter2"}},
            {"id": "b", "text": "fact b", "reflection": {"mentions": 40}},
            {"id": "c", "text": "fact c", "importance": 0.3, "reflection": {"mentions": 9}},
            {"id": "d", "text": "fact d"},
        ],
        wait=True,
    )
    _check(
        len(seen) == 2 and "hunter2" not in repr(seen),
        f"hook runs only when needed, redacted: {seen}",
    )
    got = {i: (await memory.get(i)).importance for i in "abcd"}
    _check(got == {"a": 0.4, "b": 1.0, "c": 0.3, "d": 1.0}, f"clamped importances: {got}")
    broken = case.memory(importance_from=lambda _: math.nan)
    await _raises(
        ValidationError,
        broken.remember([{"id": "z", "text": "zeta", "reflection": {"x": 1}}]),
        "non-finite importance",
    )
    await _raises(NotFoundError, memory.get("z"), "nothing written")
    await memory.aclose()


async def redaction_scrubs_before_persist_and_inject(kit: ConformanceKit) -> None:
    """Secrets and the redactor's output never persist or reach a prompt."""
    case = _Case(kit)
    memory = case.memory(
        secrets=["sk-live-123"], redactor=lambda text: text.replace("555-0100", "[PHONE]")
    )
    await memory.remember(
        [{"id": "s", "text": "key sk-live-123 phone 555-0100", "metadata": {"k": "sk-live-123"}}],
        wait=True,
    )
    stored = await memory.get("s")
    _check("sk-live-123" not in stored.text and "555-0100" not in stored.text, stored.text)
    _check("sk-live-123" not in repr(dict(stored.metadata)), "metadata scrubbed")
    block = await memory.context_provider().render("key phone")
    _check("[PHONE]" in block and "sk-live-123" not in block, block)
    await memory.aclose()


RECALL_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        remember_is_deferred_until_embedded,
        remember_ids_are_idempotent_digests,
        recall_orders_by_independent_similarity,
        recall_scoring_blends_recency_and_importance,
        recall_caps_raise_and_change_nothing,
        bad_vectors_are_rejected,
        failed_embeddings_are_retried,
        importance_from_runs_on_redacted_reflection,
        redaction_scrubs_before_persist_and_inject,
    )
}
"""The checks of this module by name, in :data:`~prism_memory.testing.CONFORMANCE_CHECKS` order."""
