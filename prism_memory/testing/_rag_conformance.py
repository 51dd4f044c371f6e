"""The behaviour checks of :func:`run_rag_conformance`: what every RAG store must do.

Each check works under a fresh random tenant, so one store can serve every check. Expected values
are computed independently of the store (plain numpy cosines, hand-built vectors, the lexical
module's reference statistics over the texts the check wrote), never read back from it.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..embedding import Embedder, HashEmbedder
from ..errors import CapExceededError, InvalidVectorError, PrismMemoryError, ValidationError
from ..lexical import CorpusStats, bm25, corpus_stats, query_terms, term_counts
from ..models import Vector
from ..rag_types import (
    AccessConstraint,
    Authorization,
    Chunk,
    JsonScalar,
    RagHit,
    RagScope,
    SourceAccess,
)
from ..stores.rag_base import RagOperations, RagStore
from ._fixtures import NonFiniteEmbedder

__all__ = [
    "RAG_CONFORMANCE_CHECKS",
    "RagConformanceKit",
    "RagKitFactory",
    "run_rag_conformance",
    "run_rag_conformance_check",
]


@dataclass(frozen=True, slots=True)
class RagConformanceKit:
    """What a factory hands the RAG suite: the store under test and an embedder of its width."""

    store: RagStore
    embedder: Embedder


RagKitFactory = Callable[
    [], "RagConformanceKit | Mapping[str, Any] | Awaitable[RagConformanceKit | Mapping[str, Any]]"
]
"""Returns a :class:`RagConformanceKit` (or a mapping with the same keys), possibly awaitably."""


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


async def _raises(error: type[BaseException], call: Awaitable[Any], what: str) -> None:
    try:
        await call
    except error:
        return
    except BaseException as exc:
        raise AssertionError(
            f"{what}: expected {error.__name__}, got {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"{what}: expected {error.__name__}, nothing was raised")


def _unit(width: int, axis: int) -> Vector:
    vector = np.zeros(width, dtype=np.float32)
    vector[axis % width] = 1.0
    return vector


def _toward(width: int, away: int, amount: float) -> Vector:
    """``e0 + amount · e_away``: its cosine to ``e0`` is ``1 / sqrt(1 + amount²)``."""
    vector = _unit(width, 0)
    vector[away % width] += amount
    return vector


def _cos(a: Vector, b: Vector) -> float:
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


class _Case:
    def __init__(self, kit: RagConformanceKit) -> None:
        self.store = kit.store
        self.embedder = kit.embedder
        self.width = kit.embedder.dimensions
        _check(self.width >= 8, "the RAG conformance suite needs vectors at least 8 wide")
        self.tenant = f"t-{uuid.uuid4().hex[:12]}"
        self.scope = RagScope(self.tenant, "docs")

    def chunk(
        self,
        source: str,
        index: int,
        text: str,
        vector: Vector | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Chunk:
        return Chunk(
            source_id=source,
            index=index,
            text=text,
            embedding=_unit(self.width, 0) if vector is None else vector,
            metadata=dict(metadata or {}),
        )


def _keys(hits: Sequence[RagHit]) -> list[tuple[str, int]]:
    return [hit.key for hit in hits]


# ---- checks ------------------------------------------------------------------------------------


async def acl_denies_by_default(kit: RagConformanceKit) -> None:
    """No grant, a stale version, another tenant's or scope's grant: denied. ``None``: no ACL."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    await store.upsert(
        scope,
        [
            case.chunk("manual", 0, "the pump manual", _unit(w, 0)),
            case.chunk("memo", 0, "the pump memo", _toward(w, 1, 0.5)),
        ],
    )
    q = _unit(w, 0)
    alice = AccessConstraint("alice", ("staff",))

    async def seen(auth: Authorization, sc: RagScope = scope) -> list[tuple[str, int]]:
        vector = await store.query(sc, embedding=q, top_k=5, authorization=auth)
        lexical = await store.lexical_query(sc, text="pump", top_k=5, authorization=auth)
        _check(
            sorted(_keys(vector)) == sorted(_keys(lexical)),
            f"the legs disagree on what {auth!r} may see: {_keys(vector)} vs {_keys(lexical)}",
        )
        return sorted(_keys(vector))

    _check(await seen(None) == [("manual", 0), ("memo", 0)], "without authorization no ACL")
    _check(await seen(alice) == [], "no grant must deny")
    _check(await seen("acl") == [], 'authorization="acl" must deny everything')
    await store.set_source_access(scope, "manual", principal_ids=["alice"], access_version=3)
    _check(await seen(alice) == [("manual", 0)], "a principal grant admits its source only")
    _check(await seen(AccessConstraint("bob")) == [], "a grant to alice must not admit bob")
    _check(
        await seen(AccessConstraint("alice", access_version=3)) == [("manual", 0)],
        "the granted access version admits",
    )
    _check(
        await seen(AccessConstraint("alice", access_version=2)) == [],
        "a stale access version must deny",
    )
    await store.set_source_access(scope, "memo", group_ids=["staff"], access_version=1)
    _check(await seen(alice) == [("manual", 0), ("memo", 0)], "a group grant admits members")
    _check(await seen(AccessConstraint("carol", ("guests",))) == [], "other groups are denied")
    # the same source id in another tenant or collection is another source: grants do not cross
    for other in (RagScope(f"{case.tenant}-x", "docs"), RagScope(case.tenant, "docs", "archive")):
        await store.upsert(other, [case.chunk("manual", 0, "the pump manual", _unit(w, 0))])
        _check(await seen(alice, other) == [], f"a grant in {scope} must not admit in {other}")
        _check(
            not await store.check_source_access(other, "manual", alice),
            "check_source_access must agree with the query",
        )
    _check(await store.check_source_access(scope, "manual", alice), "check_source_access: granted")
    _check(
        not await store.check_source_access(scope, "manual", AccessConstraint("alice", (), 9)),
        "check_source_access: a stale version denies",
    )
    await store.set_source_access(scope, "manual", access_version=4)  # empty: revoke
    _check(await store.get_source_access(scope, "manual") is None, "empty grants revoke")
    _check(await seen(AccessConstraint("alice")) == [], "a revoked grant must deny")


async def authorised_chunk_survives_crowding(kit: RagConformanceKit) -> None:
    """Authorised chunks ranked below 100 more similar unauthorised ones are still the top-K."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    crowd = [
        case.chunk(f"secret-{i:03d}", 0, f"classified {i}", _toward(w, 1 + i % (w - 1), 0.02))
        for i in range(100)
    ]
    mine = {
        ("open-a", 0): _toward(w, 1, 1.0),
        ("open-b", 0): _toward(w, 2, 2.0),
        ("open-c", 0): _toward(w, 3, 3.0),
    }
    await store.upsert(
        scope, crowd + [case.chunk(s, i, f"{s} text", v) for (s, i), v in mine.items()]
    )
    for source, _ in mine:
        await store.set_source_access(scope, source, group_ids=["readers"], access_version=1)
    q = _unit(w, 0)
    least_crowd = min(_cos(q, c.embedding) for c in crowd)
    best_mine = max(_cos(q, v) for v in mine.values())
    _check(least_crowd > best_mine, "setup: every unauthorised chunk must be more similar")
    reader = AccessConstraint("dana", ("readers",))
    for top_k in (1, 2, 3, 10):
        hits = await store.query(scope, embedding=q, top_k=top_k, authorization=reader)
        expected = sorted(mine, key=lambda key: -_cos(q, mine[key]))[:top_k]
        _check(
            _keys(hits) == expected,
            f"top_k={top_k}: expected the authorised {expected}, got {_keys(hits)}",
        )
        for hit in hits:
            _check(
                abs(hit.score - _cos(q, mine[hit.key])) < 1e-6 and hit.semantic == hit.score,
                f"score of {hit.key} is not its cosine",
            )
    unfiltered = await store.query(scope, embedding=q, top_k=3)
    _check(all(key[0].startswith("secret") for key in _keys(unfiltered)), "setup: crowd on top")


async def lexical_leg_honours_acl(kit: RagConformanceKit) -> None:
    """The lexical leg filters by ACL before ranking; ``filter`` never authorises."""
    case = _Case(kit)
    store, scope = case.store, case.scope
    crowd = [
        case.chunk(f"secret-{i:03d}", 0, "turbine turbine turbine blade", metadata={"kind": "spec"})
        for i in range(100)
    ]
    texts = {
        ("open-a", 0): "the turbine blade inspection",
        ("open-b", 0): "a turbine overview for new staff members and visitors alike",
        ("open-c", 0): "cafeteria menu",
    }
    await store.upsert(
        scope,
        crowd + [case.chunk(s, i, t, metadata={"kind": "spec"}) for (s, i), t in texts.items()],
    )
    for source, _ in texts:
        await store.set_source_access(scope, source, principal_ids=["erin"], access_version=1)
    erin = AccessConstraint("erin")
    query = "turbine blade"
    hits = await store.lexical_query(scope, text=query, top_k=5, authorization=erin)
    terms = query_terms(query)
    visible = list(texts.values())
    reference = corpus_stats(visible, terms)
    stats = await store.lexical_stats(scope, text=query, authorization=erin)
    _check(
        (stats.documents, stats.total_length, dict(stats.document_frequency))
        == (reference.documents, reference.total_length, dict(reference.document_frequency)),
        f"statistics must cover the authorised chunks only: {stats} vs {reference}",
    )

    def score(text: str) -> float:
        counts = term_counts(text)
        return bm25(terms, counts, sum(counts.values()), reference)

    matching = [key for key, text in texts.items() if terms & set(term_counts(text))]
    expected = sorted(matching, key=lambda key: (-score(texts[key]), key))
    _check(_keys(hits) == expected, f"expected {expected}, got {_keys(hits)}")
    for hit in hits:
        _check(abs(hit.score - score(texts[hit.key])) < 1e-9, f"BM25 of {hit.key} differs")
    filtered = await store.lexical_query(
        scope, text=query, top_k=5, filter={"kind": "spec"}, authorization=AccessConstraint("zed")
    )
    _check(filtered == [], "a metadata filter must never authorise")
    _check(
        await store.lexical_stats(scope, text=query, authorization="acl") == CorpusStats(),
        'statistics under authorization="acl" must be empty',
    )


async def lexical_leg_ranks_by_bm25(kit: RagConformanceKit) -> None:
    """With more matches than ``top_k``, the lexical leg returns the best BM25 (k1, b and length
    normalisation included), not the first matches by id."""
    case = _Case(kit)
    store, scope = case.store, case.scope
    rng = np.random.default_rng(11)
    words = ["valve", "pump", "seal", "gasket", "pressure", "flow", "pipe", "meter"]
    texts: dict[tuple[str, int], str] = {}
    for n in range(40):
        count = int(rng.integers(3, 30))
        texts[(f"doc-{n:02d}", 0)] = " ".join(rng.choice(words, size=count))
    await store.upsert(scope, [case.chunk(s, i, t) for (s, i), t in texts.items()])
    for query in ("pump pressure", "gasket", "seal valve meter"):
        terms = query_terms(query)
        reference = corpus_stats(texts.values(), terms)

        def score(text: str, terms: frozenset[str] = terms, ref: CorpusStats = reference) -> float:
            counts = term_counts(text)
            return bm25(terms, counts, sum(counts.values()), ref)

        matching = [key for key, text in texts.items() if terms & set(term_counts(text))]
        _check(len(matching) > 10, "setup: more matches than top_k")
        expected = sorted(matching, key=lambda key: (-score(texts[key]), key))[:5]
        hits = await store.lexical_query(scope, text=query, top_k=5)
        _check(_keys(hits) == expected, f"{query!r}: expected {expected}, got {_keys(hits)}")


async def generation_switch_never_mixes(kit: RagConformanceKit) -> None:
    """20 concurrent queries while the generation flips: each sees exactly one generation."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    size = 6
    for generation, word in ((1, "old"), (2, "new")):
        await store.upsert(
            scope,
            [
                case.chunk("doc", i, f"{word} edition part {i}", _toward(w, 1 + i, 0.1 * (i + 1)))
                for i in range(size)
            ],
            generation=generation,
        )
    await store.set_current_generation(scope, 1)
    q = _unit(w, 0)
    stop = asyncio.Event()

    async def flip() -> int:
        flips = 0
        while not stop.is_set():
            flips += 1
            await store.set_current_generation(scope, 2 if flips % 2 else 1)
            await asyncio.sleep(0)
        return flips

    async def reader(n: int) -> list[list[RagHit]]:
        results = []
        for _ in range(3):
            if n % 2:
                results.append(await store.query(scope, embedding=q, top_k=size))
            else:
                results.append(await store.lexical_query(scope, text="edition", top_k=size))
        return results

    flipper = asyncio.ensure_future(flip())
    try:
        batches = await asyncio.gather(*(reader(n) for n in range(20)))
    finally:
        stop.set()
        await flipper
    for batch in batches:
        for hits in batch:
            generations = {hit.generation for hit in hits}
            words = {hit.text.split()[0] for hit in hits}
            _check(len(hits) == size, f"a query returned {len(hits)} of {size} chunks")
            _check(
                len(generations) == 1 and len(words) == 1,
                f"a query mixed generations: {sorted(generations)} {sorted(words)}",
            )
            _check(
                words == {"old" if generations == {1} else "new"},
                "hit.generation does not name the generation it came from",
            )


async def transaction_that_raises_leaves_nothing(kit: RagConformanceKit) -> None:
    """Every write in a failed transaction is undone; a committed one applies entirely."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    await store.upsert(scope, [case.chunk("keep", 0, "kept text", _unit(w, 1))])
    await store.set_source_access(scope, "keep", principal_ids=["ann"], access_version=1)
    before = (
        _keys_of(await store.get_by_source(scope, "keep")),
        await store.get_source_access(scope, "keep"),
        await store.get_current_generation(scope),
    )

    class BoomError(Exception):
        pass

    try:
        async with store.transaction() as tx:
            await tx.upsert(scope, [case.chunk("new", 0, "fresh text", _unit(w, 2))])
            await tx.delete_source(scope, "keep")
            await tx.set_source_access(scope, "keep", principal_ids=["mallory"], access_version=2)
            await tx.set_current_generation(scope, 7)
            _check(
                len(await tx.get_by_source(scope, "new", generation=0)) == 1, "tx reads its writes"
            )
            _check(await tx.get_current_generation(scope) == 7, "tx reads its own generation")
            _check(await store.get_by_source(scope, "new") == [], "others see no uncommitted write")
            raise BoomError
    except BoomError:
        pass
    after = (
        _keys_of(await store.get_by_source(scope, "keep")),
        await store.get_source_access(scope, "keep"),
        await store.get_current_generation(scope),
    )
    _check(after == before, f"a raising transaction left traces: {before} -> {after}")
    _check(await store.get_by_source(scope, "new") == [], "a raising transaction wrote a chunk")

    bad = case.chunk("new", 0, "fresh text", _unit(w, 2))
    object.__setattr__(bad, "embedding", np.full(w, np.nan, dtype=np.float32))
    await _raises(InvalidVectorError, _bad_transaction(store, scope, case, bad), "NaN in a tx")
    _check(await store.get_by_source(scope, "new", generation=0) == [], "a failed tx wrote a chunk")
    _check(len(await store.get_by_source(scope, "keep")) == 1, "a failed tx deleted a chunk")

    async with store.transaction() as tx:
        await tx.upsert(scope, [case.chunk("new", 0, "fresh text", _unit(w, 2))], generation=3)
        await tx.set_current_generation(scope, 3)
    _check(await store.get_current_generation(scope) == 3, "a committed tx applies")
    _check(len(await store.get_by_source(scope, "new")) == 1, "a committed tx applies its chunks")


def _keys_of(chunks: Sequence[Chunk]) -> list[tuple[str, int, str]]:
    return [(c.source_id, c.index, c.digest) for c in chunks]


async def _bad_transaction(store: RagStore, scope: RagScope, case: _Case, bad: Chunk) -> None:
    async with store.transaction() as tx:
        await tx.delete_source(scope, "keep")
        await tx.upsert(scope, [bad])


class _CountingStore(RagStore):
    """Delegates to a store and counts the calls that write."""

    def __init__(self, inner: RagStore) -> None:
        self.inner = inner
        self.writes = 0

    @property
    def dimension(self) -> int | None:
        return self.inner.dimension

    def transaction(self) -> AbstractAsyncContextManager[RagOperations]:
        self.writes += 1
        return self.inner.transaction()

    async def upsert(self, *args: Any, **kwargs: Any) -> int:
        self.writes += 1
        return await self.inner.upsert(*args, **kwargs)

    async def delete_source(self, *args: Any, **kwargs: Any) -> int:
        self.writes += 1
        return await self.inner.delete_source(*args, **kwargs)

    async def delete_generation(self, *args: Any, **kwargs: Any) -> int:
        self.writes += 1
        return await self.inner.delete_generation(*args, **kwargs)

    async def set_current_generation(self, *args: Any, **kwargs: Any) -> None:
        self.writes += 1
        await self.inner.set_current_generation(*args, **kwargs)

    async def set_source_access(self, *args: Any, **kwargs: Any) -> None:
        self.writes += 1
        await self.inner.set_source_access(*args, **kwargs)

    async def get_by_source(self, *args: Any, **kwargs: Any) -> list[Chunk]:
        return await self.inner.get_by_source(*args, **kwargs)

    async def query(self, *args: Any, **kwargs: Any) -> list[RagHit]:
        return await self.inner.query(*args, **kwargs)

    async def lexical_query(self, *args: Any, **kwargs: Any) -> list[RagHit]:
        return await self.inner.lexical_query(*args, **kwargs)

    async def lexical_stats(self, *args: Any, **kwargs: Any) -> CorpusStats:
        return await self.inner.lexical_stats(*args, **kwargs)

    async def get_current_generation(self, *args: Any, **kwargs: Any) -> int:
        return await self.inner.get_current_generation(*args, **kwargs)

    async def get_source_access(self, *args: Any, **kwargs: Any) -> SourceAccess | None:
        return await self.inner.get_source_access(*args, **kwargs)


class _CountingEmbedder:
    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.texts: list[str] = []

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        return await self.inner.embed(texts)


_DOCUMENT = "\n\n".join(
    f"Pump {n} must be inspected every spring. Inspectors log its pressure readings in book {n}. "
    f"A reading above the red line stops line {n} at once. Spare seals for pump {n} are kept in "
    f"the {colour} cabinet."
    for n, colour in ((1, "blue"), (2, "grey"), (3, "white"))
)


async def reingesting_unchanged_text_writes_nothing(kit: RagConformanceKit) -> None:
    """Unchanged text and metadata: no embedding, no write; one changed chunk: one embedding."""
    from ..rag import ingest

    case = _Case(kit)
    counter = _CountingStore(case.store)
    embedder = _CountingEmbedder(case.embedder)
    first = await ingest(
        counter,
        case.scope,
        "handbook",
        _DOCUMENT,
        embedder=embedder,
        metadata={"v": 1},
        chunk_size=160,
        chunk_overlap=40,
    )
    _check(first.chunks > 2 and first.embedded == first.chunks, f"first ingest: {first}")
    stored = _keys_of(await case.store.get_by_source(case.scope, "handbook"))
    counter.writes, embedder.texts = 0, []
    again = await ingest(
        counter,
        case.scope,
        "handbook",
        _DOCUMENT,
        embedder=embedder,
        metadata={"v": 1},
        chunk_size=160,
        chunk_overlap=40,
    )
    _check(again.unchanged and again.embedded == 0, f"unchanged text re-ingested: {again}")
    _check(counter.writes == 0, f"unchanged text caused {counter.writes} writes")
    _check(embedder.texts == [], "unchanged text was embedded again")
    _check(_keys_of(await case.store.get_by_source(case.scope, "handbook")) == stored, "changed")
    edited = _DOCUMENT.replace("blue cabinet", "green cabinet", 1)
    third = await ingest(
        counter,
        case.scope,
        "handbook",
        edited,
        embedder=embedder,
        metadata={"v": 1},
        chunk_size=160,
        chunk_overlap=40,
    )
    _check(not third.unchanged and third.embedded == 1, f"one edited chunk: {third}")
    _check(embedder.texts == [t for t in embedder.texts if "green cabinet" in t], "re-embedded")
    chunks = await case.store.get_by_source(case.scope, "handbook")
    _check([c.index for c in chunks] == list(range(third.chunks)), "indexes must be 0..n-1")
    _check(any("green cabinet" in c.text for c in chunks), "the edit was not stored")
    retagged = await ingest(
        counter,
        case.scope,
        "handbook",
        edited,
        embedder=embedder,
        metadata={"v": 2},
        chunk_size=160,
        chunk_overlap=40,
    )
    _check(not retagged.unchanged and retagged.embedded == 0, "new metadata rewrites, no embed")
    shorter = await ingest(counter, case.scope, "handbook", "Only one line now.", embedder=embedder)
    _check(shorter.chunks == 1, "a shorter text replaces the source")
    _check(len(await case.store.get_by_source(case.scope, "handbook")) == 1, "old chunks remain")


async def bad_vectors_write_nothing(kit: RagConformanceKit) -> None:
    """NaN, ±inf, wrong widths, empty and non-numeric vectors: rejected, nothing written."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    await store.upsert(scope, [case.chunk("base", 0, "base text", _unit(w, 1))])
    good = case.chunk("new", 0, "good text", _unit(w, 2))
    poison: dict[str, Any] = {
        "NaN": np.full(w, np.nan),
        "+inf": np.full(w, np.inf),
        "-inf": np.full(w, -np.inf),
        "too wide": np.ones(w + 1),
        "too narrow": np.ones(w - 1),
        "empty": np.zeros(0),
        "float32 overflow": np.full(w, 1e300),
        "text": ["x"] * w,
    }
    for label, vector in poison.items():
        bad = case.chunk("new", 1, "bad text", _unit(w, 3))
        object.__setattr__(bad, "embedding", vector)
        await _raises(InvalidVectorError, store.upsert(scope, [good, bad]), f"upsert {label}")
        _check(
            await store.get_by_source(scope, "new") == [], f"{label}: the good chunk was written"
        )
        await _raises(
            InvalidVectorError,
            store.query(scope, embedding=vector, top_k=1),
            f"query with {label}",
        )
    poisoned = NonFiniteEmbedder(case.embedder, poison="second")
    from ..rag import ingest

    await _raises(
        InvalidVectorError,
        ingest(
            store,
            scope,
            "base",
            "A first sentence here. A second sentence here.",
            embedder=poisoned,
            chunk_size=24,
            chunk_overlap=0,
        ),
        "ingest with a NaN embedding",
    )
    kept = await store.get_by_source(scope, "base")
    _check([c.text for c in kept] == ["base text"], "a failed ingest changed the source")


async def scopes_filters_and_inputs(kit: RagConformanceKit) -> None:
    """Scopes are isolated, filters are exact JSON equality, bad input raises typed errors."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    other_resource = RagScope(case.tenant, "other")
    await store.upsert(
        scope,
        [
            case.chunk("a", 0, "alpha", _unit(w, 0), {"lang": "en", "n": 1, "draft": True}),
            case.chunk("a", 1, "beta", _unit(w, 1), {"lang": "de", "n": 1.0, "draft": False}),
            case.chunk("b", 0, "gamma", _unit(w, 2), {"lang": "en", "n": 2, "draft": None}),
        ],
    )
    await store.upsert(other_resource, [case.chunk("a", 0, "elsewhere", _unit(w, 0))])
    q = _unit(w, 0)

    async def keys(flt: Mapping[str, JsonScalar] | None) -> list[tuple[str, int]]:
        return sorted(_keys(await store.query(scope, embedding=q, top_k=10, filter=flt)))

    _check(await keys(None) == [("a", 0), ("a", 1), ("b", 0)], "scope isolation on query")
    _check(await keys({"lang": "en"}) == [("a", 0), ("b", 0)], "string equality filter")
    _check(await keys({"n": 1}) == [("a", 0), ("a", 1)], "1 and 1.0 are the same JSON number")
    _check(await keys({"draft": True}) == [("a", 0)], "true is not 1")
    _check(await keys({"n": True}) == [], "true must not equal 1")
    _check(await keys({"draft": None}) == [("b", 0)], "null matches a present null only")
    _check(await keys({"lang": "en", "n": 2}) == [("b", 0)], "every key must match")
    _check(await keys({"missing": "x"}) == [], "a missing key never matches")
    _check(
        [c.text for c in await store.get_by_source(other_resource, "a")] == ["elsewhere"],
        "get_by_source crosses scopes",
    )
    _check(await store.delete_source(other_resource, "a") == 1, "delete_source counts")
    _check(len(await store.get_by_source(scope, "a")) == 2, "delete_source crossed scopes")
    _check(await store.get_current_generation(RagScope(case.tenant, "new")) == 0, "default gen 0")
    _check(await store.delete_generation(scope, 0) == 3, "delete_generation counts")

    bad_calls: list[tuple[type[BaseException], Awaitable[Any], str]] = [
        (ValidationError, store.query(scope, embedding=q, top_k=0), "top_k=0"),
        (CapExceededError, store.query(scope, embedding=q, top_k=33), "top_k=33"),
        (
            ValidationError,
            store.query(scope, embedding=q, top_k=1, filter={"k": [1]}),  # type: ignore[dict-item]
            "a list in a filter",
        ),
        (
            ValidationError,
            store.query(scope, embedding=q, top_k=1, authorization="bob"),  # type: ignore[arg-type]
            "a string authorization",
        ),
        (ValidationError, store.query(scope, embedding=q, top_k=1, generation=-1), "gen -1"),
        (ValidationError, store.lexical_query(scope, text="a\x00b", top_k=1), "NUL text"),
        (ValidationError, store.upsert(scope, [case.chunk("a", 0, "x")] * 2), "duplicates"),
        (
            ValidationError,
            store.set_source_access(scope, "a", principal_ids=["p"], access_version=0),
            "access_version 0",
        ),
        (
            CapExceededError,
            store.set_source_access(
                scope, "a", group_ids=[f"g{i}" for i in range(33)], access_version=1
            ),
            "33 groups",
        ),
    ]
    for error, call, label in bad_calls:
        await _raises(error, call, label)
    for build, label in (
        (lambda: RagScope("", "docs"), "empty tenant"),
        (lambda: RagScope("t", "d\x00"), "NUL in a resource"),
        (lambda: RagScope("t", "docs", "c" * 300), "overlong collection"),
        (lambda: AccessConstraint("p", tuple(f"g{i}" for i in range(33))), "33 groups"),
        (lambda: Chunk("s", 0, "\ud800", _unit(w, 0)), "a lone surrogate"),
        (lambda: Chunk("s", -1, "x", _unit(w, 0)), "a negative index"),
    ):
        try:
            build()
        except PrismMemoryError:
            continue
        raise AssertionError(f"{label} was accepted")


async def hybrid_query_fuses_authorised_legs(kit: RagConformanceKit) -> None:
    """``hybrid_query`` fuses both legs with recall's fusion, under the same ACL and generation."""
    from ..rag import hybrid_query, ingest

    case = _Case(kit)
    store, scope = case.store, case.scope
    embedder = case.embedder
    docs = {
        "pumps": "Pumps need a pressure check every spring. The pressure log lives in the office.",
        "seals": "Seals wear out. Replace a worn seal before the pump leaks.",
        "lunch": "Lunch is served at noon in the cafeteria.",
        "secret": "Pressure pressure pressure: the secret pump redesign.",
    }
    for source, text in docs.items():
        await ingest(store, scope, source, text, embedder=embedder)
        if source != "secret":
            await store.set_source_access(scope, source, group_ids=["crew"], access_version=1)
    crew = AccessConstraint("finn", ("crew",))
    hits = await hybrid_query(
        store, scope, text="pump pressure", embedder=embedder, top_k=3, authorization=crew
    )
    _check(hits != [] and all(h.source_id != "secret" for h in hits), "hybrid leaked a source")
    _check(hits[0].source_id == "pumps", f"expected the pumps document first, got {_keys(hits)}")
    _check(
        [h.score for h in hits] == sorted((h.score for h in hits), reverse=True),
        "hybrid hits must be best first",
    )
    for hit in hits:
        _check(hit.semantic is not None and hit.lexical is not None, "hybrid hits carry both legs")
    everyone = await hybrid_query(store, scope, text="pump pressure", embedder=embedder, top_k=4)
    _check(any(h.source_id == "secret" for h in everyone), "setup: the secret source matches")


def _nested(levels: int) -> dict[str, Any]:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(levels):
        node["k"] = {}
        node = node["k"]
    return deep


async def id_collections_and_bad_arguments_raise_alike(kit: RagConformanceKit) -> None:
    """A bare string where ids belong never widens a grant (``"staff"`` is not ``s, t, a, f``);
    every store raises the same typed error for the same bad argument, nothing written."""
    case = _Case(kit)
    store, scope = case.store, case.scope
    await store.upsert(scope, [case.chunk("hr", 0, "salaries")])
    await store.set_source_access(scope, "hr", principal_ids=["bob"], access_version=1)
    bad_calls: list[tuple[type[BaseException], Callable[[], Awaitable[Any]], str]] = [
        (
            ValidationError,
            lambda: store.set_source_access(scope, "hr", group_ids="staff", access_version=1),
            "group_ids as a bare string",
        ),
        (
            ValidationError,
            lambda: store.set_source_access(scope, "hr", principal_ids="eve", access_version=1),
            "principal_ids as a bare string",
        ),
        (
            ValidationError,
            lambda: store.set_source_access(scope, "hr", group_ids=7, access_version=1),  # type: ignore[arg-type]
            "group_ids as a number",
        ),
        (ValidationError, lambda: store.delete_source(scope, 123), "delete_source(123)"),  # type: ignore[arg-type]
        (ValidationError, lambda: store.get_by_source(scope, 123), "get_by_source(123)"),  # type: ignore[arg-type]
        (ValidationError, lambda: store.get_source_access(scope, ""), "an empty source id"),
        (
            ValidationError,
            lambda: store.query(scope, embedding=_unit(case.width, 0), top_k=1, filter="lang"),  # type: ignore[arg-type]
            "a string filter",
        ),
        (
            ValidationError,
            lambda: store.check_source_access(scope, "hr", "bob"),  # type: ignore[arg-type]
            "a string authorization",
        ),
    ]
    for error, call, label in bad_calls:
        await _raises(error, call(), label)
    grants = await store.get_source_access(scope, "hr")
    _check(
        grants is not None and grants.principal_ids == ("bob",) and not grants.group_ids,
        f"a refused grant changed nothing: {grants}",
    )
    for letter in "staf":
        granted = await store.check_source_access(scope, "hr", AccessConstraint("eve", (letter,)))
        _check(not granted, f"group {letter!r} was granted")
    deep = _nested(5000)
    for build, label in (
        (lambda: AccessConstraint("eve", "staff"), "AccessConstraint(group_ids='staff')"),  # type: ignore[arg-type]
        (lambda: SourceAccess("bob", (), 1), "SourceAccess(principal_ids='bob')"),  # type: ignore[arg-type]
        (lambda: case.chunk("s", 0, "x", metadata=deep), "5,000-level chunk metadata"),
        (lambda: case.chunk("s", 0, "x", metadata=_nested(33)), "33-level chunk metadata"),
    ):
        try:
            build()
        except ValidationError:
            continue
        raise AssertionError(f"{label} was accepted or raised an untyped error")
    _check(bool(case.chunk("s", 0, "x", metadata=_nested(31))), "31 levels are accepted")
    from ..rag import ingest  # the facade over the store, imported where the check needs it

    await _raises(
        ValidationError,
        ingest(store, scope, "deep", "some text", embedder=case.embedder, metadata=deep),
        "ingest() with 5,000-level metadata",
    )
    _check(await store.get_by_source(scope, "deep") == [], "nothing was ingested")
    canary = "canary-rag-51"
    q = _unit(case.width, 0)
    echoes: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("filter key", lambda: store.query(scope, embedding=q, top_k=1, filter={canary: [1]})),  # type: ignore[dict-item]
        ("filter value", lambda: store.query(scope, embedding=q, top_k=1, filter={"k": f"{canary}\x00"})),
        ("duplicate chunk", lambda: store.upsert(scope, [case.chunk(canary, 0, "x")] * 2)),
        ("source id", lambda: store.delete_source(scope, f"{canary}\x00")),
        ("group id", lambda: store.set_source_access(scope, "hr", group_ids=[f"{canary}\x01"], access_version=1)),
    ]  # fmt: skip
    for label, call in echoes:
        try:
            await call()
        except PrismMemoryError as exc:
            _check(canary not in str(exc), f"{label}: the message repeats the input: {exc}")
        else:
            raise AssertionError(f"{label}: nothing was raised")
    for metadata in ({canary: float("nan")}, {"k": {canary: {1, 2}}}):
        try:
            case.chunk("s", 0, "x", metadata=metadata)
        except ValidationError as exc:
            _check(canary not in str(exc), f"chunk metadata: the message repeats a key: {exc}")
        else:
            raise AssertionError("bad chunk metadata was accepted")


RAG_CONFORMANCE_CHECKS: dict[str, Callable[[RagConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        acl_denies_by_default,
        authorised_chunk_survives_crowding,
        lexical_leg_honours_acl,
        lexical_leg_ranks_by_bm25,
        generation_switch_never_mixes,
        transaction_that_raises_leaves_nothing,
        reingesting_unchanged_text_writes_nothing,
        bad_vectors_write_nothing,
        scopes_filters_and_inputs,
        hybrid_query_fuses_authorised_legs,
        id_collections_and_bad_arguments_raise_alike,
    )
}
"""Every RAG conformance check by name."""


async def _kit(factory: RagKitFactory) -> RagConformanceKit:
    made = factory()
    if inspect.isawaitable(made):
        made = await made
    if isinstance(made, RagConformanceKit):
        return made
    if isinstance(made, Mapping):
        store = made["store"]
        embedder = made.get("embedder") or HashEmbedder(store.dimension or 64)
        return RagConformanceKit(store=store, embedder=embedder)
    raise TypeError("the factory must return a RagConformanceKit or a mapping")


async def run_rag_conformance_check(name: str, factory: RagKitFactory) -> None:
    """Run one RAG check by name; raises ``AssertionError`` (or the unexpected error) on failure."""
    await RAG_CONFORMANCE_CHECKS[name](await _kit(factory))


async def run_rag_conformance(factory: RagKitFactory, *, only: list[str] | None = None) -> None:
    """Run every RAG check (or ``only`` those); raise :class:`ConformanceError` if any fails."""
    from ._conformance import ConformanceError

    failures: dict[str, str] = {}
    for name in only or list(RAG_CONFORMANCE_CHECKS):
        try:
            await run_rag_conformance_check(name, factory)
        except Exception as exc:  # noqa: BLE001 - every failure is collected and reported
            failures[name] = f"{type(exc).__name__}: {exc}"
    if failures:
        raise ConformanceError(failures)
