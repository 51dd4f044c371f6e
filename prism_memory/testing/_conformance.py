"""The behaviour checks of :func:`run_memory_conformance`.

Each check builds memories on the stores a factory provides, under a fresh random tenant, and
asserts observable behaviour only: what recall, export, working memory and the typed errors show.
Expected values are computed independently of the code under test (plain numpy cosines, hand
arithmetic), never read back from it.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from ..embedding import Embedder, HashEmbedder
from ..errors import (
    AccessDeniedError,
    CapExceededError,
    ConflictError,
    IndexingError,
    InvalidVectorError,
    NotFoundError,
    PrismMemoryError,
    ValidationError,
)
from ..indexing import IndexingPolicy
from ..invariants import revoked_ids_absent
from ..memory import Memory, create_memory
from ..models import RetentionResult
from ..stores.base import VectorStore, WorkingStore
from ._fixtures import FlakyEmbedder, GatedEmbedder, ManualClock, NonFiniteEmbedder

__all__ = [
    "CONFORMANCE_CHECKS",
    "ConformanceError",
    "ConformanceKit",
    "KitFactory",
    "run_conformance_check",
    "run_memory_conformance",
]


@dataclass(frozen=True, slots=True)
class ConformanceKit:
    """What a factory hands the suite: an embedder and the two stores under test."""

    embedder: Embedder
    vector_store: VectorStore
    working_store: WorkingStore


KitFactory = Callable[
    [], "ConformanceKit | Mapping[str, Any] | Awaitable[ConformanceKit | Mapping[str, Any]]"
]
"""Returns a :class:`ConformanceKit` (or a mapping with the same keys), possibly awaitably."""


class ConformanceError(AssertionError):
    """One or more conformance checks failed; ``failures`` maps check names to what went wrong."""

    def __init__(self, failures: Mapping[str, str]) -> None:
        self.failures = dict(failures)
        lines = "\n".join(f"- {name}: {reason}" for name, reason in self.failures.items())
        super().__init__(f"{len(self.failures)} conformance checks failed:\n{lines}")


_FAST = IndexingPolicy(
    retry_base_seconds=0.02, retry_max_seconds=0.1, busy_poll_seconds=0.01, idle_poll_seconds=0.05
)


class _Case:
    """Per-check helpers: fresh scopes on the kit's stores."""

    def __init__(self, kit: ConformanceKit) -> None:
        self.kit = kit
        self.tenant = f"t-{uuid.uuid4().hex[:12]}"
        self.clock = ManualClock()

    def memory(self, thread: str | None = "thread-1", **options: Any) -> Memory:
        options.setdefault("embedder", self.kit.embedder)
        options.setdefault("indexing", _FAST)
        options.setdefault("clock", self.clock)
        return create_memory(
            tenant_id=options.pop("tenant_id", self.tenant),
            resource_id=options.pop("resource_id", "user-ada"),
            thread_id=thread,
            vector_store=self.kit.vector_store,
            working_store=self.kit.working_store,
            **options,
        )


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


async def _raises(error: type[BaseException], call: Awaitable[Any], what: str) -> BaseException:
    try:
        await call
    except error as exc:
        return exc
    except BaseException as exc:
        raise AssertionError(
            f"{what}: expected {error.__name__}, got {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"{what}: expected {error.__name__}, nothing was raised")


async def _ids(memory: Memory, query: str, **options: Any) -> list[str]:
    return [hit.id for hit in (await memory.recall(query, **options)).hits]


# ---- working memory --------------------------------------------------------------------------


async def working_memory_versions_and_template(kit: ConformanceKit) -> None:
    """Versions start at 1 and increase by one; the template renders dotted paths."""
    case = _Case(kit)
    memory = case.memory(working_memory_template="Name: {{name}}; Format: {{prefs.format}}")
    _check(await memory.get_working() is None, "no document before the first write")
    first = await memory.update_working({"name": "Ada", "prefs": {"format": "concise"}})
    second = await memory.update_working({"name": "Ada L.", "prefs": {"format": "long"}})
    _check((first.version, second.version) == (1, 2), f"versions {first.version}, {second.version}")
    current = await memory.get_working()
    _check(current is not None and current.data["name"] == "Ada L.", "latest document is read back")
    text = await memory.context_provider(semantic=False).render()
    _check("Name: Ada L.; Format: long" in text, f"template rendered: {text!r}")
    other = case.memory(resource_id="user-bob")
    _check(await other.get_working() is None, "another resource does not see the document")


async def working_memory_rejects_bad_documents(kit: ConformanceKit) -> None:
    """Schema violations, byte-cap overruns and stale versions raise typed errors, change nothing."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    case = _Case(kit)
    memory = case.memory(schema=schema, limits={"working_memory_bytes": 200})
    await memory.update_working({"name": "Ada", "age": 36})
    for bad in ({"age": 3}, {"name": "Ada", "age": -1}, {"name": "Ada", "extra": 1}, {"name": 7}):
        await _raises(ValidationError, memory.update_working(bad), f"schema {bad}")
    await _raises(
        CapExceededError, memory.update_working({"name": "x" * 19, "age": 10**200}), "cap"
    )
    conflict = await _raises(
        ConflictError, memory.update_working({"name": "Bo"}, expected_version=0), "stale"
    )
    _check(not isinstance(conflict, ValidationError), "a conflict is not a validation error")
    current = await memory.get_working()
    _check(
        current is not None
        and current.version == 1
        and dict(current.data) == {"name": "Ada", "age": 36},
        "rejected writes changed nothing",
    )
    updated = await memory.update_working({"name": "Bo"}, expected_version=1)
    _check(updated.version == 2, "a matching expected_version writes")


async def working_memory_processor_and_thread_scope(kit: ConformanceKit) -> None:
    """The processor writes only what ``extract`` returns, against the version it read; with
    ``working_scope="thread"`` each thread keeps its own document."""
    case = _Case(kit)
    memory = case.memory()

    def extract(current: dict[str, Any], message: str) -> dict[str, Any] | None:
        prefix = "my name is "
        return {**current, "name": message[len(prefix) :]} if message.startswith(prefix) else None

    processor = memory.working_memory_processor(extract)
    _check(await processor.process("hello") is None, "no change, nothing written")
    _check(await memory.get_working() is None, "still no document")
    first = await processor.process("my name is Ada")
    _check(first is not None and (first.version, first.data["name"]) == (1, "Ada"), f"{first}")

    async def racing(current: dict[str, Any], message: str) -> dict[str, Any]:
        await memory.update_working({"name": "Written meanwhile"})
        return {**current, "name": message}

    await _raises(ConflictError, memory.working_memory_processor(racing).process("Bo"), "race")
    latest = await memory.get_working()
    _check(
        latest is not None and latest.data["name"] == "Written meanwhile", "the race lost nothing"
    )

    one = case.memory(thread="a", working_scope="thread")
    two = case.memory(thread="b", working_scope="thread")
    await one.update_working({"topic": "a"})
    await two.update_working({"topic": "b"})
    got = [await m.get_working() for m in (one, two)]
    _check([g.data["topic"] if g else None for g in got] == ["a", "b"], f"per thread: {got}")
    resource = await case.memory(thread="a").get_working()
    _check(
        resource is not None and resource.data["name"] == "Written meanwhile", "resource doc apart"
    )


# ---- remember and recall ---------------------------------------------------------------------


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


# ---- consent, lineage, deletion ----------------------------------------------------------------


async def consent_is_the_single_gate(kit: ConformanceKit) -> None:
    """Invisible, revoked and (in strict mode) consent-less entries are excluded everywhere."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember(
        [
            {"id": "legacy", "text": "apple pie recipe"},
            {"id": "explicit", "text": "apple tart recipe", "consent": {"source": "user"}},
            {"id": "hidden", "text": "apple crumble recipe", "consent": {"visible": False}},
        ],
        wait=True,
    )
    _check(sorted(await _ids(memory, "apple recipe")) == ["explicit", "legacy"], "hidden excluded")
    _check(await _ids(memory, "apple recipe", require_consent=True) == ["explicit"], "strict mode")
    strict = case.memory(require_consent=True)
    _check(await _ids(strict, "apple recipe") == ["explicit"], "strict memory")
    revoked = await memory.set_consent("explicit", visible=False)
    _check(
        revoked.consent is not None and revoked.consent.revoked_at is not None, "revocation stamped"
    )
    _check(await _ids(memory, "apple recipe") == ["legacy"], "revoked excluded")
    block = await memory.context_provider().render("apple recipe")
    _check("tart" not in block, "revoked never injected")
    _check(
        revoked_ids_absent(await memory.recall("apple tart"), ["explicit"]).score == 1.0,
        "invariant",
    )
    await memory.set_consent("explicit", visible=True)
    _check(sorted(await _ids(memory, "apple recipe")) == ["explicit", "legacy"], "granted again")
    await _raises(NotFoundError, memory.set_consent("missing", visible=False), "missing")
    await memory.aclose()


async def lineage_invalidation_and_correction(kit: ConformanceKit) -> None:
    """Revoking or correcting a source invalidates what was derived from it, transitively."""
    case = _Case(kit)
    invalidated: list[str] = []
    memory = case.memory(on_invalidate=lambda ids: invalidated.extend(ids))
    await memory.remember(
        [
            {"id": "src", "text": "Ada works at Acme"},
            {"id": "other", "text": "Ada likes tea"},
            {
                "id": "sum",
                "text": "Summary: Ada, Acme employee",
                "lineage": {"source_ids": ["src"]},
            },
            {
                "id": "both",
                "text": "Ada at Acme likes tea",
                "lineage": {"source_ids": ["src", "other"]},
            },
            {
                "id": "deep",
                "text": "Deep insight about Ada Acme",
                "lineage": {"source_ids": ["sum"]},
            },
        ],
        wait=True,
    )
    all_ids = ["both", "deep", "other", "src", "sum"]
    _check(sorted(await _ids(memory, "Ada Acme tea", top_k=10)) == all_ids, "all recallable first")
    await memory.correct("src", "Ada works at Initech")
    ids = sorted(await _ids(memory, "Ada Acme Initech tea", top_k=10))
    _check(ids == ["other", "src"], f"dependents of a corrected source drop out: {ids}")
    _check((await memory.get("src")).text == "Ada works at Initech", "corrected text stored")
    _check(sorted(invalidated) == ["both", "deep", "sum"], f"on_invalidate told: {invalidated}")
    # a replayed write changes nothing; correcting the dependent regenerates it
    await memory.remember(
        {"id": "sum", "text": "Summary: Ada, Initech employee", "lineage": {"source_ids": ["src"]}},
        wait=True,
    )
    ids = sorted(await _ids(memory, "Ada Acme Initech tea", top_k=10))
    _check(ids == ["other", "src"], f"a re-remembered dependent stays invalid: {ids}")
    await memory.correct("sum", "Summary: Ada, Initech employee")
    ids = sorted(await _ids(memory, "Ada Acme Initech tea", top_k=10))
    _check(ids == ["other", "src", "sum"], f"a regenerated dependent is valid again: {ids}")
    await memory.set_consent("other", visible=False)
    ids = sorted(await _ids(memory, "Ada Acme Initech tea", top_k=10))
    _check(ids == ["src", "sum"], f"revoking excludes the source: {ids}")
    await memory.aclose()


async def forget_deletes_along_lineage_and_holds(kit: ConformanceKit) -> None:
    """forget() really deletes a source and its dependents; hold=True keeps bodies but excludes."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember(
        [
            {"id": "a", "text": "alpha fact", "consent": {"source": "user"}},
            {"id": "b", "text": "beta fact", "consent": {"source": "user"}},
            {"id": "a2", "text": "alpha derived", "lineage": {"source_ids": ["a"]}},
            {"id": "a3", "text": "alpha derived twice", "lineage": {"source_ids": ["a2", "b"]}},
            {"id": "h", "text": "held fact", "consent": {"source": "user"}},
        ],
        wait=True,
    )
    _check(await memory.forget(ids=["a"]) == 3, "source and two generations of dependents")
    for gone in ("a", "a2", "a3"):
        await _raises(NotFoundError, memory.get(gone), f"{gone} deleted")
    _check(await memory.forget(ids=["h"], hold=True) == 0, "a hold deletes nothing")
    _check((await memory.get("h")).legal_hold, "body kept under hold")
    _check(await _ids(memory, "held fact alpha beta") == ["b"], "held entry excluded")
    exported = await memory.export_memory(identity=memory.identity)
    _check([e["id"] for e in exported.entries] == ["b"], "held entry not exported")
    _check(
        await memory.apply_retention(max_entries=0) == RetentionResult(deleted=1, scanned=2),
        "retention skips held",
    )
    _check(await memory.forget() == 0, "nothing left but the held entry")
    _check(await memory.forget(ids=["h"]) == 1, "naming a held entry lifts the hold")
    with_missing = await memory.forget(ids=["missing"])
    _check(with_missing == 0, "unknown ids delete nothing")
    await memory.aclose()


async def lineage_caps_fail_closed(kit: ConformanceKit) -> None:
    """A lineage walk over the depth or edge cap raises and writes nothing."""
    case = _Case(kit)
    memory = case.memory(limits={"lineage_depth": 2, "lineage_edges": 3})
    await memory.remember([{"id": "n0", "text": "chain start"}], wait=True)
    for i in range(1, 4):
        await memory.remember(
            [{"id": f"n{i}", "text": f"chain link {i}", "lineage": {"source_ids": [f"n{i - 1}"]}}],
            wait=True,
        )
    await _raises(CapExceededError, memory.forget(ids=["n0"]), "depth")
    await _raises(CapExceededError, memory.set_consent("n0", visible=False), "depth on revoke")
    _check(len(await _ids(memory, "chain start link", top_k=10)) == 4, "nothing changed")
    _check(await memory.forget(ids=["n1"]) == 3, "within the cap it works")
    await memory.aclose()


async def forget_before_cuts_on_occurrence(kit: ConformanceKit) -> None:
    """forget_before() deletes what occurred before the cut, regardless of when it was written."""
    case = _Case(kit)
    memory = case.memory()
    now = case.clock()
    await memory.remember(
        [
            {"id": "old", "text": "old event", "occurred_at": now - timedelta(days=10)},
            {"id": "new", "text": "new event", "occurred_at": now - timedelta(days=1)},
        ],
        wait=True,
    )
    _check(await memory.forget_before(now - timedelta(days=5)) == 1, "one occurred before the cut")
    _check(await _ids(memory, "event", top_k=5) == ["new"], "the recent one stays")
    await _raises(ValidationError, memory.forget_before(now.replace(tzinfo=None)), "naive")
    await memory.aclose()


async def retention_is_enforced_on_read(kit: ConformanceKit) -> None:
    """Past the retention window an entry is never recalled or exported, swept or not."""
    case = _Case(kit)
    memory = case.memory(retention_days=7)
    now = case.clock()
    await memory.remember(
        [
            {
                "id": "stale",
                "text": "ancient news",
                "occurred_at": now - timedelta(days=8),
                "consent": {},
            },
            {
                "id": "fresh",
                "text": "recent news",
                "occurred_at": now - timedelta(days=2),
                "consent": {},
            },
        ],
        wait=True,
    )
    _check(await _ids(memory, "news", top_k=5) == ["fresh"], "expired entry excluded on read")
    page = await memory.export_memory(identity=memory.identity)
    _check([e["id"] for e in page.entries] == ["fresh"], "expired entry not exported")
    result = await memory.apply_retention()
    _check((result.deleted, result.scanned) == (1, 2), f"sweep uses the window: {result}")
    await _raises(NotFoundError, memory.get("stale"), "really deleted")
    case.clock.advance(days=6)
    _check(await _ids(memory, "news") == [], "the window moves with the clock")
    await _raises(ValidationError, case.memory().apply_retention(), "no rule")
    await memory.aclose()


# ---- isolation, sharing, export, rebuild --------------------------------------------------------


async def scopes_are_isolated(kit: ConformanceKit) -> None:
    """Other tenants, resources and threads never see an entry, by recall, id, lineage or export."""
    case = _Case(kit)
    owner = case.memory()
    await owner.remember([{"id": "secret", "text": "the vault code is blue"}], wait=True)
    others = [
        case.memory(tenant_id=f"{case.tenant}-x"),
        case.memory(resource_id="user-eve"),
        case.memory(thread="thread-2"),
    ]
    for other in others:
        _check(await _ids(other, "vault code blue") == [], "no cross-scope recall")
        await _raises(NotFoundError, other.get("secret"), "no cross-scope get")
        _check(await other.forget(ids=["secret"]) == 0, "no cross-scope delete")
        await _raises(
            ValidationError,
            other.remember([{"id": "d", "text": "derived", "lineage": {"source_ids": ["secret"]}}]),
            "no cross-scope lineage",
        )
        await _raises(
            AccessDeniedError,
            other.export_memory(identity=owner.identity),
            "export needs the exact identity",
        )
    _check(await _ids(owner, "vault code blue") == ["secret"], "owner unaffected")
    await owner.aclose()


async def sharing_is_parent_to_child_only(kit: ConformanceKit) -> None:
    """A grant lets one child recall named parent entries; siblings, expiry and revocation deny."""
    case = _Case(kit)
    parent = case.memory(thread="parent")
    child = case.memory(thread="child")
    sibling = case.memory(thread="sibling")
    await parent.remember(
        [{"id": "p1", "text": "project codename Falcon"}, {"id": "p2", "text": "Falcon budget"}],
        wait=True,
    )
    _check(await _ids(child, "Falcon", share_from_parent_thread_id="parent") == [], "no grant")
    expires = case.clock() + timedelta(hours=1)
    await parent.share_with("child", ["p1"], expires_at=expires)
    got = await child.recall("Falcon", share_from_parent_thread_id="parent")
    _check([h.id for h in got.hits] == ["p1"] and got.hits[0].shared, "only the granted entry")
    _check(
        await _ids(sibling, "Falcon", share_from_parent_thread_id="parent") == [], "sibling denied"
    )
    await _raises(NotFoundError, parent.share_with("child", ["nope"]), "unknown ids")
    case.clock.advance(hours=2)
    _check(await _ids(child, "Falcon", share_from_parent_thread_id="parent") == [], "expired")
    await parent.share_with("child", ["p1", "p2"])
    _check(len(await _ids(child, "Falcon", share_from_parent_thread_id="parent")) == 2, "replaced")
    await parent.share_with("child", [])
    _check(await _ids(child, "Falcon", share_from_parent_thread_id="parent") == [], "empty revokes")
    await parent.share_with("child", ["p1"])
    _check(await parent.revoke_share("child") == 1, "revoke_share counts")
    _check(await _ids(child, "Falcon", share_from_parent_thread_id="parent") == [], "revoked")
    foreign = case.memory(thread="child", tenant_id=f"{case.tenant}-other")
    await parent.share_with("child", ["p1"])
    _check(
        await _ids(foreign, "Falcon", share_from_parent_thread_id="parent") == [],
        "tenant-bound grant",
    )
    await parent.aclose()


async def export_pages_are_identity_bound(kit: ConformanceKit) -> None:
    """Export pages with a stable cursor, only explicitly consented visible entries, redacted."""
    case = _Case(kit)
    memory = case.memory(secrets=["s3cr3t"])
    entries = [
        {"id": f"e{i:02d}", "text": f"entry {i} s3cr3t", "consent": {"source": "user"}}
        for i in range(7)
    ]
    entries.append({"id": "legacy", "text": "no consent given"})
    entries.append({"id": "invisible", "text": "hidden", "consent": {"visible": False}})
    await memory.remember(entries, wait=True)
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page = await memory.export_memory(identity=memory.identity, cursor=cursor, limit=3)
        seen.extend(e["id"] for e in page.entries)
        _check(all("s3cr3t" not in e["text"] for e in page.entries), "redacted")
        _check(page.bytes > 0 or not page.entries, "bytes counted")
        cursor = page.next_cursor
        if cursor is None:
            break
    _check(seen == [f"e{i:02d}" for i in range(7)], f"all consented entries once, in order: {seen}")
    await _raises(
        CapExceededError, memory.export_memory(identity=memory.identity, limit=201), "cap"
    )
    await _raises(
        ValidationError,
        memory.export_memory(identity=memory.identity, cursor="junk"),
        "cursor",
    )
    await _raises(
        CapExceededError,
        memory.export_memory(identity=memory.identity, max_bytes=10),
        "tiny",
    )
    identity = {"tenant_id": case.tenant, "resource_id": "user-ada", "thread_id": "thread-2"}
    await _raises(AccessDeniedError, memory.export_memory(identity=identity), "identity")
    await memory.aclose()


async def rebuild_index_resumes_by_cursor(kit: ConformanceKit) -> None:
    """rebuild_index() re-embeds bounded pages and resumes from the cursor it returns."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember(
        [{"id": f"r{i}", "text": f"rebuild item {i}"} for i in range(5)], wait=True
    )
    counting = GatedEmbedder(kit.embedder)
    counting.release()
    rebuilder = case.memory(embedder=counting)
    total, cursor, pages = 0, None, 0
    while True:
        page = await rebuilder.rebuild_index(cursor=cursor, batch_size=2)
        total, cursor, pages = total + page.rebuilt, page.next_cursor, pages + 1
        if cursor is None:
            break
    _check((total, pages) == (5, 3), f"5 entries over 3 pages, got {total} over {pages}")
    _check(sorted(counting.texts) == sorted(f"rebuild item {i}" for i in range(5)), "each once")
    _check(len(await _ids(memory, "rebuild item", top_k=10)) == 5, "still recallable")
    await _raises(CapExceededError, memory.rebuild_index(batch_size=129), "cap")
    await memory.aclose()


# ---- prompt form ---------------------------------------------------------------------------------


async def context_block_is_chronological_and_stable(kit: ConformanceKit) -> None:
    """The semantic block lists memories oldest first and is byte-identical when an unrelated,
    lower-scored memory arrives (the prompt-cache property)."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember(
        [
            {"id": "m1", "text": "Ada enjoys hiking in the Alps"},
            {"id": "m2", "text": "Ada drinks green tea daily"},
            {"id": "m3", "text": "Ada hiking boots are size 38"},
            {"id": "m4", "text": "Ada bought hiking poles"},
        ],
        wait=True,
    )
    provider = memory.context_provider(semantic=True, working=False, top_k=3)
    before = await provider.render("hiking with Ada")
    lines = before.splitlines()[1:]
    _check(len(lines) == 3, f"three memories: {before!r}")
    order = [
        next(t for t in ("Alps", "size 38", "poles", "green tea") if t in line) for line in lines
    ]
    _check(
        order == sorted(order, key=["Alps", "green tea", "size 38", "poles"].index),
        f"chronological {order}",
    )
    await memory.remember([{"id": "m5", "text": "The weather report for Tuesday"}], wait=True)
    after = await provider.render("hiking with Ada")
    _check(before == after, "an unrelated memory leaves the block byte-identical")
    blocks = await provider.provide("hiking with Ada")
    _check(len(blocks) == 1 and blocks[0].role == "system", "one system block")
    await _raises(
        CapExceededError, _as_coro(lambda: memory.context_provider(max_tokens=8001)), "cap"
    )
    await memory.aclose()


async def _as_coro(call: Callable[[], Any]) -> Any:
    return call()


async def message_range_returns_neighbours(kit: ConformanceKit) -> None:
    """message_range adds same-thread neighbours by sequence, under the same exclusion rules."""
    case = _Case(kit)
    memory = case.memory()
    texts = ["we met at noon", "talked about rockets", "lunch was pasta", "then a walk", "bus home"]
    await memory.remember([{"id": f"n{i}", "text": t} for i, t in enumerate(texts)], wait=True)
    await memory.set_consent("n1", visible=False)
    result = await memory.recall("pasta lunch", top_k=1, message_range=2)
    _check([h.id for h in result.hits] == ["n2"], "the hit")
    _check(
        [r.id for r in result.adjacent] == ["n0", "n3", "n4"],
        f"neighbours: {[r.id for r in result.adjacent]}",
    )
    await memory.aclose()


async def bad_scopes_are_rejected(kit: ConformanceKit) -> None:
    """Empty tenant, resource or thread ids raise a typed error before anything happens."""
    case = _Case(kit)
    for bad in ({"tenant_id": ""}, {"resource_id": "  "}, {"thread": ""}):
        try:
            case.memory(**bad)
        except ValidationError:
            continue
        raise AssertionError(f"{bad} accepted")
    working_only = case.memory(thread=None)
    await working_only.update_working({"a": 1})
    await _raises(PrismMemoryError, working_only.recall("a"), "semantic call without thread")


# ---- the runner ----------------------------------------------------------------------------------

CONFORMANCE_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        working_memory_versions_and_template,
        working_memory_rejects_bad_documents,
        working_memory_processor_and_thread_scope,
        remember_is_deferred_until_embedded,
        remember_ids_are_idempotent_digests,
        recall_orders_by_independent_similarity,
        recall_scoring_blends_recency_and_importance,
        recall_caps_raise_and_change_nothing,
        bad_vectors_are_rejected,
        failed_embeddings_are_retried,
        importance_from_runs_on_redacted_reflection,
        redaction_scrubs_before_persist_and_inject,
        consent_is_the_single_gate,
        lineage_invalidation_and_correction,
        forget_deletes_along_lineage_and_holds,
        lineage_caps_fail_closed,
        forget_before_cuts_on_occurrence,
        retention_is_enforced_on_read,
        scopes_are_isolated,
        sharing_is_parent_to_child_only,
        export_pages_are_identity_bound,
        rebuild_index_resumes_by_cursor,
        context_block_is_chronological_and_stable,
        message_range_returns_neighbours,
        bad_scopes_are_rejected,
    )
}
"""Every conformance check by name, in a sensible order."""

# the governance checks live in their own module, which imports this one's helpers
from ._governance import GOVERNANCE_CHECKS  # noqa: E402

CONFORMANCE_CHECKS.update(GOVERNANCE_CHECKS)

from ._ranking import RANKING_CHECKS  # noqa: E402

CONFORMANCE_CHECKS.update(RANKING_CHECKS)

# shared indexing: one task per store and embedder, members, turns, the many-thread claim
from ._conformance_indexing import INDEXING_CHECKS  # noqa: E402

CONFORMANCE_CHECKS.update(INDEXING_CHECKS)

# the agent-facing checks (embedding model, read-after-write, resource-wide recall) likewise
from ._conformance_agents import AGENT_CHECKS  # noqa: E402

CONFORMANCE_CHECKS.update(AGENT_CHECKS)

# the write path: rows stored with their vectors in one write
from ._writes import WRITE_CHECKS  # noqa: E402

CONFORMANCE_CHECKS.update(WRITE_CHECKS)

# the bulk import: remember()'s rules for streams of many scopes
from ._importing import IMPORT_CHECKS  # noqa: E402

CONFORMANCE_CHECKS.update(IMPORT_CHECKS)


async def _kit(factory: KitFactory) -> ConformanceKit:
    made = factory()
    if inspect.isawaitable(made):
        made = await made
    if isinstance(made, ConformanceKit):
        return made
    if isinstance(made, Mapping):
        return ConformanceKit(
            embedder=made.get("embedder") or HashEmbedder(),
            vector_store=made["vector_store"],
            working_store=made["working_store"],
        )
    raise TypeError("the factory must return a ConformanceKit or a mapping")


async def run_conformance_check(name: str, factory: KitFactory) -> None:
    """Run one check by name; raises ``AssertionError`` (or the unexpected error) on failure."""
    await CONFORMANCE_CHECKS[name](await _kit(factory))


async def run_memory_conformance(factory: KitFactory, *, only: list[str] | None = None) -> None:
    """Run every check (or ``only`` those) and raise :class:`ConformanceError` if any fails."""
    failures: dict[str, str] = {}
    for name in only or list(CONFORMANCE_CHECKS):
        try:
            await run_conformance_check(name, factory)
        except Exception as exc:  # noqa: BLE001 - every failure is collected and reported
            failures[name] = f"{type(exc).__name__}: {exc}"
    if failures:
        raise ConformanceError(failures)
