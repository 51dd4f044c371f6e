"""Behaviour of the in-memory reference adapters."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from prism_memory.errors import (
    ConflictError,
    DimensionMismatchError,
    InvalidVectorError,
    NotFoundError,
)
from prism_memory.models import Lineage, MemoryConsent, MemoryIdentity, ShareGrant
from prism_memory.ranking import query_terms
from prism_memory.stores.base import (
    NewEntry,
    RecallFilter,
    SearchRequest,
    SharedSource,
    Tombstone,
)
from prism_memory.stores.memory import InMemoryVectorStore, InMemoryWorkingStore
from prism_memory.stores.rules import is_recallable

T0 = datetime(2024, 1, 1, tzinfo=UTC)
DIM = 4
SCOPE = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="th")


def scope(tenant="t", resource="r", thread="th"):
    return MemoryIdentity(tenant_id=tenant, resource_id=resource, thread_id=thread)


def entry(entry_id, text=None, **kw):
    values = {
        "id": entry_id,
        "text": text if text is not None else f"text of {entry_id}",
        "role": "user",
        "metadata": {},
        "consent": None,
        "sequence": None,
        "occurred_at": T0,
        "importance": 1.0,
        "lineage": None,
    }
    values.update(kw)
    return NewEntry(**values)


def vec(*values):
    return np.array(values, dtype=np.float32)


def unit(i, dim=DIM):
    v = np.zeros(dim, dtype=np.float32)
    v[i % dim] = 1.0
    return v


async def index_all(store, sc=None, *, vectors=None, now=T0):
    """Claim every pending row of ``sc`` (or all) and complete it with a vector."""
    claimed = await store.claim_pending(sc, limit=10_000, worker_id="ix", lease_seconds=60, now=now)
    items = [
        (c, vectors[c.id] if vectors and c.id in vectors else unit(hash(c.id))) for c in claimed
    ]
    return await store.complete_indexing(items, worker_id="ix", now=now)


def request(vector, *, limit=10, terms=(), shared=None, **filter_kw):
    return SearchRequest(
        vector=np.asarray(vector, dtype=np.float32),
        terms=frozenset(terms),
        limit=limit,
        filter=RecallFilter(now=T0 + timedelta(days=1), **filter_kw),
        shared=shared,
    )


async def search_ids(store, sc, req):
    return {c.record.id for c in (await store.search(sc, req)).candidates}


# ---- put_entries -----------------------------------------------------------------------------


async def test_new_entries_are_pending_revision_one_with_assigned_sequences():
    store = InMemoryVectorStore()
    records = await store.put_entries(SCOPE, [entry("a"), entry("b"), entry("c")], now=T0)
    assert [r.id for r in records] == ["a", "b", "c"]
    assert [r.sequence for r in records] == [0, 1, 2]
    for r in records:
        assert (r.status, r.revision, r.attempts, r.last_error) == ("pending", 1, 0, None)
        assert r.created_at == r.written_at == T0
        assert (r.tenant_id, r.resource_id, r.thread_id) == ("t", "r", "th")
    later = await store.put_entries(
        SCOPE, [entry("d", sequence=10), entry("e"), entry("f")], now=T0
    )
    assert [r.sequence for r in later] == [10, 11, 12]


async def test_sequences_are_per_thread():
    store = InMemoryVectorStore()
    await store.put_entries(SCOPE, [entry("a"), entry("b")], now=T0)
    other = await store.put_entries(scope(thread="other"), [entry("x")], now=T0)
    assert other[0].sequence == 0


async def test_identical_put_changes_nothing():
    store = InMemoryVectorStore()
    first = await store.put_entries(SCOPE, [entry("a", metadata={"k": [1]})], now=T0)
    await index_all(store)
    again = await store.put_entries(
        SCOPE, [entry("a", metadata={"k": [1]})], now=T0 + timedelta(hours=1)
    )
    assert again[0].written_at == first[0].written_at == T0
    assert again[0].status == "indexed"
    assert again[0].revision == 1
    assert await store.count_by_thread(SCOPE) == 1
    assert await store.claim_pending(None, limit=10, worker_id="w", lease_seconds=5, now=T0) == []


async def test_a_reput_of_an_existing_id_changes_nothing():
    """Governance invariant 1: a retry or replay never rewrites a stored entry."""
    store = InMemoryVectorStore()
    await store.put_entries(SCOPE, [entry("a", "alpha"), entry("b")], now=T0)
    await index_all(store, vectors={"a": unit(0), "b": unit(1)})
    await store.set_consent(SCOPE, "a", MemoryConsent(visible=False), now=T0)
    (before,) = await store.get_entries(SCOPE, ["a"])
    later = T0 + timedelta(hours=1)
    (rec,) = await store.put_entries(
        SCOPE,
        [
            entry(
                "a",
                "beta",
                sequence=7,
                metadata={"x": 1},
                consent=MemoryConsent(visible=True),
                lineage=Lineage(source_ids=("b",)),
            )
        ],
        now=later,
    )
    assert rec == before
    assert (rec.text, rec.revision, rec.status, rec.written_at) == ("alpha", 1, "indexed", T0)
    assert rec.consent == MemoryConsent(visible=False)
    assert (
        await store.claim_pending(SCOPE, limit=5, worker_id="w", lease_seconds=5, now=later) == []
    )


async def test_metadata_is_copied_in_and_out():
    store = InMemoryVectorStore()
    meta = {"nested": {"k": 1}}
    (rec,) = await store.put_entries(SCOPE, [entry("a", metadata=meta)], now=T0)
    meta["nested"]["k"] = 2
    rec.metadata["nested"]["k"] = 3  # type: ignore[index]
    (stored,) = await store.get_entries(SCOPE, ["a"])
    assert stored.metadata == {"nested": {"k": 1}}


async def test_same_id_twice_in_one_batch_keeps_the_first():
    store = InMemoryVectorStore()
    records = await store.put_entries(SCOPE, [entry("a", "one"), entry("a", "two")], now=T0)
    assert [r.text for r in records] == ["one", "one"]
    assert await store.count_by_thread(SCOPE) == 1


# ---- scoping ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "other", [scope(tenant="t2"), scope(resource="r2"), scope(thread="th2")], ids=str
)
async def test_nothing_crosses_scopes(other):
    store = InMemoryVectorStore()
    await store.put_entries(SCOPE, [entry("a", "hello world", lineage=None), entry("b")], now=T0)
    await store.put_entries(SCOPE, [entry("c", lineage=Lineage(source_ids=("a",)))], now=T0)
    assert await store.claim_pending(other, limit=10, worker_id="w", lease_seconds=5, now=T0) == []
    await index_all(store, SCOPE, vectors={"a": unit(0), "b": unit(1), "c": unit(2)})
    await store.add_tombstones(other, [Tombstone("a", "a", "forgotten", T0 + timedelta(1))])

    assert await store.get_entries(other, ["a", "b"]) == []
    assert await store.known_ids(other, ["a", "b"]) == set()  # a tombstone is not an entry
    assert await store.list_by_thread(other, after=None, limit=10) == []
    assert await store.count_by_thread(other) == 0
    assert await store.list_oldest(other, limit=10) == []
    assert await store.dependents(other, ["a"], limit=10) == []
    assert await store.index_status(other, ["a"]) == {}
    assert (await store.search(other, request(unit(0), terms={"hello"}))).candidates == []
    assert await store.neighbors(other, [(0, 100)], RecallFilter(now=T0)) == []
    assert await store.set_legal_hold(other, ["a"], True) == 0
    assert await store.requeue_failed(other) == 0
    with pytest.raises(NotFoundError):
        await store.set_consent(other, "a", MemoryConsent(visible=False), now=T0)
    with pytest.raises(NotFoundError):
        await store.replace_text(other, "a", "x", unit(0), now=T0)
    assert await store.delete_entries(other, ["a", "b"]) == 0
    assert await store.remove_tombstones(SCOPE, "a", "forgotten") == 0
    # the owner's rows are untouched; the other scope's tombstone did not invalidate "c"
    assert await store.count_by_thread(SCOPE) == 3
    assert await search_ids(store, SCOPE, request(unit(2), limit=3)) == {"a", "b", "c"}


async def test_stores_share_no_state():
    one, two = InMemoryVectorStore(), InMemoryVectorStore()
    await one.put_entries(SCOPE, [entry("a")], now=T0)
    assert await two.count_by_thread(SCOPE) == 0
    w1, w2 = InMemoryWorkingStore(), InMemoryWorkingStore()
    await w1.put_working("t", "r", None, {"a": 1}, expected_version=None, now=T0)
    assert await w2.get_working("t", "r", None) is None


# ---- search ----------------------------------------------------------------------------------

WORDS = ["apple", "banana", "cherry", "delta", "echo", "fox", "golf", "hotel"]
REASONS = ["forgotten", "revoked", "corrected", "held", "retention"]


async def _random_store(rng, n_threads=3, n_rows=60, dim=8):
    """A store with random rows, statuses, consents, holds, lineage and tombstones."""
    store = InMemoryVectorStore(dimension=dim)
    threads = [scope(thread=f"th{i}") for i in range(n_threads)]
    truth: dict[tuple[str, str], np.ndarray] = {}
    tombstones: dict[str, list[Tombstone]] = {}
    for sc in threads:
        entries = []
        for i in range(n_rows):
            consent = [
                None,
                MemoryConsent(),
                MemoryConsent(visible=False),
                MemoryConsent(revoked_at=T0),
            ][int(rng.choice(4, p=[0.4, 0.4, 0.1, 0.1]))]
            lineage = None
            if i > 3 and rng.random() < 0.3:
                sources = tuple(f"e{int(j)}" for j in rng.choice(i, size=2, replace=False))
                lineage = Lineage(source_ids=sources)
            text = " ".join(rng.choice(WORDS, size=3))
            entries.append(
                entry(
                    f"e{i}",
                    text,
                    consent=consent,
                    lineage=lineage,
                    sequence=int(rng.integers(0, 20)),  # duplicates exercise the id tie-break
                    occurred_at=T0 + timedelta(hours=int(rng.integers(0, 100))),
                )
            )
        written = T0 + timedelta(hours=int(rng.integers(0, 3)))
        await store.put_entries(sc, entries, now=written)
        claimed = await store.claim_pending(
            sc, limit=10_000, worker_id="w", lease_seconds=9, now=T0
        )
        done = [c for c in claimed if rng.random() < 0.85]  # the rest stays pending
        vectors = [rng.normal(size=dim).astype(np.float32) for _ in done]
        await store.complete_indexing(list(zip(done, vectors, strict=True)), worker_id="w", now=T0)
        for c, v in zip(done, vectors, strict=True):
            truth[(sc.thread_id, c.id)] = v
        held = [f"e{int(i)}" for i in rng.choice(n_rows, size=4, replace=False)]
        await store.set_legal_hold(sc, held, True)
        stones = [
            Tombstone(
                f"e{int(i)}",
                f"cause{int(i)}",
                REASONS[int(rng.integers(0, len(REASONS)))],
                T0 + timedelta(hours=int(rng.integers(0, 3)), minutes=30),
            )
            for i in rng.choice(n_rows, size=8, replace=False)
        ]
        await store.add_tombstones(sc, stones)
        tombstones[sc.thread_id] = stones
    return store, threads, truth, tombstones


def _pool(records, tombstones, req, thread_id, allowed=None):
    """The recallable ``(thread_id, record)`` pairs of one thread, by brute force."""
    pool = []
    for rec in records:
        if allowed is not None and rec.id not in allowed:
            continue
        sources = set(rec.lineage.source_ids) if rec.lineage else set()
        stones = [t for t in tombstones[thread_id] if t.entry_id in sources]
        own = [t for t in tombstones[thread_id] if t.entry_id == rec.id]
        if is_recallable(rec, req.filter, stones, own):
            pool.append((thread_id, rec))
    return pool


def _brute(pool, truth, req):
    """Expected dense-leg and lexical-leg keys and the corpus statistics, by brute force.

    The lexical key is BM25 (k1 = 0.9, b = 0.4) with every matched term counted once, written out
    here independently of the store; texts are space-separated words, so a length is a word count.
    """
    documents = len(pool)
    total = sum(len(rec.text.split()) for _, rec in pool)
    df = {t: sum(t in query_terms(rec.text) for _, rec in pool) for t in req.terms}
    df = {t: n for t, n in df.items() if n}
    q = req.vector.astype(np.float64)
    scored, lexical = [], []
    for thread_id, rec in pool:
        v = truth[(thread_id, rec.id)].astype(np.float64)
        cos = float(q @ v / (np.linalg.norm(q) * np.linalg.norm(v)))
        scored.append((-cos, rec.sequence, rec.id, thread_id))
        matched = sorted(query_terms(rec.text) & req.terms)
        if matched:
            idf_sum = 0.0
            for t in matched:
                idf_sum += math.log(1.0 + (documents - df[t] + 0.5) / (df[t] + 0.5))
            length = len(rec.text.split())
            key = idf_sum * 1.9 / (1.0 + 0.9 * (1.0 - 0.4 + 0.4 * length / (total / documents)))
            lexical.append((-key, rec.sequence, rec.id, thread_id))
    return sorted(scored), sorted(lexical), (documents, total, df)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
async def test_search_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    store, threads, truth, tombstones = await _random_store(rng)
    sc = threads[0]
    records = await store.list_by_thread(sc, after=None, limit=10_000)
    for trial in range(12):
        kw = {}
        if trial % 3 == 1:
            kw["require_consent"] = True
        if trial % 4 >= 2:
            kw["occurred_after"] = T0 + timedelta(hours=int(rng.integers(0, 100)))
        words = rng.choice(WORDS, size=int(rng.integers(0, 3)), replace=False)
        terms = query_terms(" ".join(words))
        req = request(rng.normal(size=8), limit=int(rng.integers(1, 12)), terms=terms, **kw)
        pool = _pool(records, tombstones, req, sc.thread_id)
        scored, lexical, stats = _brute(pool, truth, req)
        expected = {k[2] for k in scored[: req.limit]} | {k[2] for k in lexical[: req.limit]}
        result = await store.search(sc, req)
        got = result.candidates
        assert (result.stats.documents, result.stats.total_length) == stats[:2]
        assert dict(result.stats.document_frequency) == stats[2]
        assert len(got) == len({c.record.id for c in got})
        assert {c.record.id for c in got} == expected
        for c in got:
            assert c.record.thread_id == sc.thread_id
            np.testing.assert_array_equal(c.vector, truth[(sc.thread_id, c.record.id)])
            assert c.vector.dtype == np.float32


async def test_search_with_shared_source_matches_brute_force():
    rng = np.random.default_rng(42)
    store, threads, truth, tombstones = await _random_store(rng)
    child, parent = threads[0], threads[1]
    named = tuple(f"e{i}" for i in range(0, 60, 2))
    shared = SharedSource(thread_id=parent.thread_id, ids=named)
    own = await store.list_by_thread(child, after=None, limit=10_000)
    theirs = await store.list_by_thread(parent, after=None, limit=10_000)
    for trial in range(12):
        kw = {}
        if trial % 3 == 1:
            kw["require_consent"] = True
        if trial % 4 >= 2:
            kw["occurred_after"] = T0 + timedelta(hours=int(rng.integers(0, 100)))
        terms = query_terms(" ".join(rng.choice(WORDS, size=2, replace=False)))
        limit = int(rng.integers(1, 15))
        req = request(rng.normal(size=8), limit=limit, terms=terms, shared=shared, **kw)
        pool = _pool(own, tombstones, req, child.thread_id)
        pool += _pool(theirs, tombstones, req, parent.thread_id, allowed=set(named))
        scored, lexical, stats = _brute(pool, truth, req)  # one corpus: both threads' entries
        expected = {(k[3], k[2]) for k in scored[: req.limit]}
        expected |= {(k[3], k[2]) for k in lexical[: req.limit]}
        result = await store.search(child, req)
        got = result.candidates
        assert (result.stats.documents, result.stats.total_length) == stats[:2]
        assert dict(result.stats.document_frequency) == stats[2]
        assert {(c.record.thread_id, c.record.id) for c in got} == expected
        assert len(got) == len(expected)
        for c in got:
            if c.record.thread_id == parent.thread_id:
                assert c.record.id in named


async def test_shared_source_is_bound_to_tenant_and_resource():
    store = InMemoryVectorStore()
    parent_elsewhere = scope(resource="r2", thread="parent")
    await store.put_entries(parent_elsewhere, [entry("p", "secret")], now=T0)
    await index_all(store, vectors={"p": unit(0)})
    req = request(unit(0), terms={"secret"}, shared=SharedSource("parent", ("p",)))
    assert (await store.search(scope(thread="child"), req)).candidates == []


async def test_shared_entries_use_parent_tombstones_and_rules():
    store = InMemoryVectorStore()
    parent, child = scope(thread="parent"), scope(thread="child")
    await store.put_entries(
        parent,
        [
            entry("src"),
            entry("p1", lineage=Lineage(source_ids=("src",))),
            entry("p2"),
            entry("hidden", consent=MemoryConsent(visible=False)),
        ],
        now=T0,
    )
    # the child's own (hidden) "src": lineage names entries of the entry's own thread
    child_src = entry("src", consent=MemoryConsent(visible=False))
    await store.put_entries(
        child, [child_src, entry("c1", lineage=Lineage(source_ids=("src",)))], now=T0
    )
    await index_all(store)
    shared = SharedSource("parent", ("p1", "p2", "hidden", "src", "missing"))
    req = request(unit(0), limit=10, shared=shared)
    assert await search_ids(store, child, req) == {"c1", "p1", "p2", "src"}
    await store.add_tombstones(parent, [Tombstone("src", "src", "forgotten", T0)])
    # parent's tombstone invalidates p1 and src itself (not the child's c1, whose "src" is its
    # own thread's)
    assert await search_ids(store, child, req) == {"c1", "p2"}
    only_named = SharedSource("parent", ("p2",))
    assert await search_ids(store, child, request(unit(0), shared=only_named)) == {"c1", "p2"}


async def test_search_orders_ties_by_sequence_then_id():
    store = InMemoryVectorStore(dimension=2)
    await store.put_entries(
        SCOPE,
        [entry("b", sequence=1), entry("a", sequence=1), entry("c", sequence=0), entry("d")],
        now=T0,
    )
    await index_all(store, vectors={k: vec(1, 0) for k in "abcd"})
    assert await search_ids(store, SCOPE, request(vec(1, 0), limit=2)) == {"c", "a"}
    assert await search_ids(store, SCOPE, request(vec(0, 0), limit=3)) == {"c", "a", "b"}


async def test_lexical_leg_adds_word_matches_beyond_the_vector_leg():
    store = InMemoryVectorStore(dimension=2)
    await store.put_entries(
        SCOPE,
        [
            entry("near", "nothing here"),
            entry("one", "the Pineapple grows"),
            entry("two", "pineapple and mango"),
            entry("part", "pineapplejuice is another word"),
        ],
        now=T0,
    )
    await index_all(
        store,
        vectors={"near": vec(1, 0), "one": vec(0, 1), "two": vec(0, 1), "part": vec(0, 1)},
    )
    terms = query_terms("pineapple mango")
    got = await search_ids(store, SCOPE, request(vec(1, 0), limit=1, terms=terms))
    assert got == {"near", "two"}  # "two" matches two terms; "pineapplejuice" is not the word
    got = await search_ids(
        store, SCOPE, request(vec(1, 0), limit=2, terms=query_terms("Pineapples"))
    )
    assert got == {"near", "one", "two"}


@pytest.mark.parametrize(
    ("kwargs", "filter_kw"),
    [
        ({"consent": MemoryConsent(visible=False)}, {}),
        ({"consent": MemoryConsent(revoked_at=T0)}, {}),
        ({"consent": None}, {"require_consent": True}),
        ({"occurred_at": T0 - timedelta(seconds=1)}, {"occurred_after": T0}),
    ],
    ids=["invisible", "revoked", "no-explicit-consent", "retention"],
)
async def test_each_exclusion_rule(kwargs, filter_kw):
    store = InMemoryVectorStore(dimension=2)
    await store.put_entries(
        SCOPE,
        [entry("ok", "word", consent=MemoryConsent()), entry("x", "word", **kwargs)],
        now=T0,
    )
    await index_all(store, vectors={"ok": vec(1, 0), "x": vec(1, 0)})
    req = request(vec(1, 0), terms={"word"}, **filter_kw)
    assert await search_ids(store, SCOPE, req) == {"ok"}
    assert [r.id for r in await store.neighbors(SCOPE, [(0, 10)], req.filter)] == ["ok"]
    # without the rule, both are recallable - the rule and nothing else excluded "x"
    if filter_kw:
        assert await search_ids(store, SCOPE, request(vec(1, 0), terms={"word"})) == {"ok", "x"}


async def test_occurred_after_boundary_is_inclusive():
    store = InMemoryVectorStore(dimension=2)
    await store.put_entries(SCOPE, [entry("a", occurred_at=T0)], now=T0)
    await index_all(store, vectors={"a": vec(1, 0)})
    assert await search_ids(store, SCOPE, request(vec(1, 0), occurred_after=T0)) == {"a"}
    later = T0 + timedelta(microseconds=1)
    assert await search_ids(store, SCOPE, request(vec(1, 0), occurred_after=later)) == set()


async def test_pending_and_held_entries_are_excluded_and_cache_follows_writes():
    store = InMemoryVectorStore(dimension=2)
    await store.put_entries(SCOPE, [entry("a", "word"), entry("b", "word")], now=T0)
    await index_all(store, vectors={"a": vec(1, 0), "b": vec(1, 0)})
    await store.put_entries(SCOPE, [entry("p", "word")], now=T0)
    req = request(vec(1, 0), terms={"word"})
    assert await search_ids(store, SCOPE, req) == {"a", "b"}
    assert await store.set_legal_hold(SCOPE, ["a", "missing"], True) == 1
    assert await search_ids(store, SCOPE, req) == {"b"}
    await store.set_consent(SCOPE, "b", MemoryConsent(visible=False), now=T0)
    assert await search_ids(store, SCOPE, req) == set()
    await store.set_legal_hold(SCOPE, ["a"], False)
    await store.set_consent(SCOPE, "b", MemoryConsent(), now=T0)
    assert await search_ids(store, SCOPE, req) == {"a", "b"}
    assert await store.delete_entries(SCOPE, ["a", "a", "missing"]) == 1
    assert await search_ids(store, SCOPE, req) == {"b"}


@pytest.mark.parametrize("reason", ["forgotten", "revoked", "held", "retention"])
async def test_any_tombstone_on_a_source_invalidates(reason):
    store = InMemoryVectorStore(dimension=2)
    hidden = entry("zz", consent=MemoryConsent(visible=False))  # a second, untouched source
    await store.put_entries(
        SCOPE, [hidden, entry("src"), entry("d", lineage=Lineage(source_ids=("zz", "src")))], now=T0
    )
    await index_all(store, vectors={"zz": vec(1, 0), "src": vec(1, 0), "d": vec(1, 0)})
    await store.add_tombstones(SCOPE, [Tombstone("src", "c", reason, T0 - timedelta(days=1))])
    assert await search_ids(store, SCOPE, request(vec(1, 0))) == set()  # own tombstone too
    assert await store.remove_tombstones(SCOPE, "c", "corrected") == 0
    assert await store.remove_tombstones(SCOPE, "c", reason) == 1
    assert await search_ids(store, SCOPE, request(vec(1, 0))) == {"src", "d"}


async def test_corrected_tombstone_only_invalidates_records_written_before_it():
    store = InMemoryVectorStore(dimension=2)
    lineage = Lineage(source_ids=("src",))
    await store.put_entries(SCOPE, [entry("src"), entry("old", lineage=lineage)], now=T0)
    await store.put_entries(SCOPE, [entry("new", lineage=lineage)], now=T0 + timedelta(hours=2))
    await index_all(store, vectors={k: vec(1, 0) for k in ("src", "old", "new")})
    fixed = T0 + timedelta(hours=1)
    await store.replace_text(SCOPE, "src", "src, corrected", vec(1, 0), now=fixed)
    await store.add_tombstones(SCOPE, [Tombstone("src", "src", "corrected", fixed)])
    # equal times do not invalidate (src itself), strictly later ones do (old, not new)
    assert await search_ids(store, SCOPE, request(vec(1, 0))) == {"src", "new"}
    # a tombstone of another reason coexists with the correction ...
    await store.add_tombstones(SCOPE, [Tombstone("src", "src", "revoked", T0)])
    assert await search_ids(store, SCOPE, request(vec(1, 0))) == set()
    # ... and removing it leaves the correction in force
    assert await store.remove_tombstones(SCOPE, "src", "revoked") == 1
    assert await search_ids(store, SCOPE, request(vec(1, 0))) == {"src", "new"}


async def test_search_validates_query_vector():
    store = InMemoryVectorStore(dimension=2)
    with pytest.raises(InvalidVectorError):
        await store.search(SCOPE, request([float("nan"), 0.0]))
    with pytest.raises(DimensionMismatchError):
        await store.search(SCOPE, request([1.0, 0.0, 0.0]))
    assert (await store.search(SCOPE, request([1.0, 0.0], limit=0))).candidates == []


async def test_returned_vectors_cannot_change_the_store():
    store = InMemoryVectorStore(dimension=2)
    v = vec(1, 0)
    await store.put_entries(SCOPE, [entry("a")], now=T0)
    await index_all(store, vectors={"a": v})
    v[0] = 99.0  # the caller's array was copied on the way in
    (c,) = (await store.search(SCOPE, request(vec(1, 0)))).candidates
    c.vector[0] = 42.0
    (again,) = (await store.search(SCOPE, request(vec(1, 0)))).candidates
    np.testing.assert_array_equal(again.vector, vec(1, 0))


# ---- neighbors, listings ---------------------------------------------------------------------


async def test_neighbors_by_inclusive_ranges_in_sequence_order():
    store = InMemoryVectorStore(dimension=2)
    await store.put_entries(SCOPE, [entry(f"e{i}", sequence=i) for i in range(10)], now=T0)
    await store.put_entries(SCOPE, [entry("e5b", sequence=5)], now=T0)
    await index_all(store, vectors={f"e{i}": vec(1, 0) for i in range(10)} | {"e5b": vec(0, 1)})
    await store.set_legal_hold(SCOPE, ["e2"], True)
    got = await store.neighbors(SCOPE, [(5, 6), (1, 2), (9, 9)], RecallFilter(now=T0))
    assert [r.id for r in got] == ["e1", "e5", "e5b", "e6", "e9"]


async def test_list_by_thread_pages_by_sequence_and_id():
    store = InMemoryVectorStore()
    await store.put_entries(
        SCOPE,
        [entry("b", sequence=1), entry("a", sequence=1), entry("z", sequence=0), entry("c")],
        now=T0,
    )
    page = await store.list_by_thread(SCOPE, after=None, limit=2)
    assert [r.id for r in page] == ["z", "a"]
    page = await store.list_by_thread(SCOPE, after=(1, "a"), limit=2)
    assert [r.id for r in page] == ["b", "c"]
    assert await store.list_by_thread(SCOPE, after=(2, "c"), limit=2) == []
    assert await store.count_by_thread(SCOPE) == 4


async def test_list_oldest_orders_and_filters():
    store = InMemoryVectorStore()
    await store.put_entries(
        SCOPE,
        [
            entry("late", occurred_at=T0 + timedelta(days=2)),
            entry("b", occurred_at=T0, sequence=3),
            entry("a", occurred_at=T0, sequence=3),
            entry("first", occurred_at=T0 - timedelta(days=1), sequence=9),
        ],
        now=T0,
    )
    await store.set_legal_hold(SCOPE, ["a"], True)
    assert [r.id for r in await store.list_oldest(SCOPE, limit=10)] == ["first", "a", "b", "late"]
    got = await store.list_oldest(SCOPE, limit=10, occurred_before=T0, include_held=False)
    assert [r.id for r in got] == ["first"]
    assert [r.id for r in await store.list_oldest(SCOPE, limit=2, include_held=False)] == [
        "first",
        "b",
    ]


async def test_dependents_known_ids_and_delete():
    store = InMemoryVectorStore()
    await store.put_entries(
        SCOPE,
        [
            entry("s1"),
            entry("s2"),
            entry("d3", lineage=Lineage(source_ids=("s1",))),
            entry("d1", lineage=Lineage(source_ids=("s2", "s1"))),
            entry("x"),
            entry("d2", lineage=Lineage(source_ids=("x",))),
        ],
        now=T0,
    )
    assert await store.dependents(SCOPE, ["s1", "s2"], limit=10) == [
        ("d1", ("s2", "s1")),
        ("d3", ("s1",)),
    ]
    assert await store.dependents(SCOPE, ["s1"], limit=1) == [("d1", ("s2", "s1"))]
    await store.add_tombstones(SCOPE, [Tombstone("gone", "gone", "forgotten", T0)])
    assert await store.known_ids(SCOPE, ["s1", "gone", "never"]) == {"s1"}
    assert await store.delete_entries(SCOPE, ["s1", "never"]) == 1
    got = await store.get_entries(SCOPE, ["d1", "s1", "s2", "d1"])
    assert [r.id for r in got] == ["d1", "s2"]
    assert await store.known_ids(SCOPE, ["s1"]) == set()


async def test_set_consent_and_replace_text():
    store = InMemoryVectorStore(dimension=2)
    await store.put_entries(
        SCOPE, [entry("a", "old words", metadata={"m": 1}, sequence=4, consent=None)], now=T0
    )
    await index_all(store, vectors={"a": vec(1, 0)})
    rec = await store.set_consent(SCOPE, "a", MemoryConsent(source="agent"), now=T0)
    assert rec.consent == MemoryConsent(source="agent")
    assert (rec.status, rec.revision, rec.written_at) == ("indexed", 1, T0)
    later = T0 + timedelta(hours=1)
    rec = await store.replace_text(SCOPE, "a", "new words", vec(0, 1), now=later)
    assert (rec.text, rec.revision, rec.status, rec.written_at) == (
        "new words",
        2,
        "indexed",
        later,
    )
    assert (rec.sequence, rec.metadata, rec.consent) == (4, {"m": 1}, MemoryConsent(source="agent"))
    (c,) = (await store.search(SCOPE, request(vec(0, 1), terms={"new"}))).candidates
    np.testing.assert_array_equal(c.vector, vec(0, 1))
    assert await search_ids(store, SCOPE, request(vec(0, 1), terms={"old"})) == {"a"}
    with pytest.raises(NotFoundError):
        await store.set_consent(SCOPE, "missing", MemoryConsent(), now=T0)
    with pytest.raises(NotFoundError):
        await store.replace_text(SCOPE, "missing", "x", vec(1, 0), now=T0)
    with pytest.raises(DimensionMismatchError):
        await store.replace_text(SCOPE, "a", "bad", vec(1, 0, 0), now=later)
    assert (await store.get_entries(SCOPE, ["a"]))[0].text == "new words"


async def test_share_grants():
    store = InMemoryVectorStore()
    grant = ShareGrant("t", "r", "p", "c", ("a", "b"), T0, T0 + timedelta(days=1))
    assert await store.put_share_grant(grant) == grant
    assert await store.get_share_grant("t", "r", "p", "c") == grant
    assert await store.get_share_grant("t", "r2", "p", "c") is None
    assert await store.get_share_grant("t", "r", "c", "p") is None
    replaced = ShareGrant("t", "r", "p", "c", ("z",), T0)
    await store.put_share_grant(replaced)
    assert await store.get_share_grant("t", "r", "p", "c") == replaced
    assert await store.delete_share_grant("t2", "r", "p", "c") == 0
    assert await store.delete_share_grant("t", "r", "p", "c") == 1
    assert await store.delete_share_grant("t", "r", "p", "c") == 0


# ---- indexing ledger -------------------------------------------------------------------------


async def test_two_workers_never_claim_the_same_row():
    store = InMemoryVectorStore()
    await store.put_entries(SCOPE, [entry(f"e{i}") for i in range(5)], now=T0)
    one = await store.claim_pending(SCOPE, limit=3, worker_id="w1", lease_seconds=30, now=T0)
    two = await store.claim_pending(SCOPE, limit=10, worker_id="w2", lease_seconds=30, now=T0)
    assert [c.id for c in one] == ["e0", "e1", "e2"]
    assert [c.id for c in two] == ["e3", "e4"]
    assert (
        await store.claim_pending(SCOPE, limit=10, worker_id="w1", lease_seconds=30, now=T0) == []
    )
    # an expired lease is claimable again; w1's late completion then no longer applies
    later = T0 + timedelta(seconds=31)
    again = await store.claim_pending(SCOPE, limit=10, worker_id="w3", lease_seconds=30, now=later)
    assert [c.id for c in again] == ["e0", "e1", "e2", "e3", "e4"]
    assert await store.complete_indexing([(one[0], unit(0))], worker_id="w1", now=later) == 0
    assert await store.complete_indexing([(again[0], unit(0))], worker_id="w3", now=later) == 1
    status = await store.index_status(SCOPE, ["e0", "e1", "nope"])
    assert status == {"e0": ("indexed", None), "e1": ("pending", None)}


async def test_claim_across_scopes_orders_by_sequence_then_id():
    store = InMemoryVectorStore()
    await store.put_entries(scope(thread="x"), [entry("b"), entry("a", sequence=5)], now=T0)
    await store.put_entries(scope(tenant="t2"), [entry("a"), entry("c")], now=T0)
    claimed = await store.claim_pending(None, limit=3, worker_id="w", lease_seconds=5, now=T0)
    assert [(c.scope.tenant_id, c.id) for c in claimed] == [("t2", "a"), ("t", "b"), ("t2", "c")]
    assert claimed[1].scope == scope(thread="x")
    assert claimed[0].text == "text of a"
    assert claimed[0].revision == 1


async def test_a_lease_that_ran_out_no_longer_applies():
    store = InMemoryVectorStore()
    await store.put_entries(SCOPE, [entry("a"), entry("b")], now=T0)
    a, b = await store.claim_pending(SCOPE, limit=2, worker_id="w", lease_seconds=10, now=T0)
    expired = T0 + timedelta(seconds=10)
    assert await store.complete_indexing([(a, unit(0))], worker_id="w", now=expired) == 0
    await store.fail_indexing(b, worker_id="w", error="late", retry_at=None, now=expired)
    assert await store.index_status(SCOPE, ["a", "b"]) == {
        "a": ("pending", None),
        "b": ("pending", None),
    }
    just_in_time = expired + timedelta(seconds=9)
    a, b = await store.claim_pending(SCOPE, limit=2, worker_id="w", lease_seconds=10, now=expired)
    assert await store.complete_indexing([(a, unit(0))], worker_id="w", now=just_in_time) == 1


async def test_complete_with_stale_revision_is_ignored():
    store = InMemoryVectorStore()
    await store.put_entries(SCOPE, [entry("a", "one")], now=T0)
    (claim,) = await store.claim_pending(SCOPE, limit=1, worker_id="w", lease_seconds=60, now=T0)
    await store.replace_text(SCOPE, "a", "two", unit(1), now=T0)  # a correction: revision 2
    assert await store.complete_indexing([(claim, unit(0))], worker_id="w", now=T0) == 0
    (rec,) = await store.get_entries(SCOPE, ["a"])
    assert (rec.text, rec.revision, rec.status) == ("two", 2, "indexed")
    assert await store.claim_pending(SCOPE, limit=1, worker_id="w", lease_seconds=60, now=T0) == []


async def test_fail_retry_and_requeue():
    store = InMemoryVectorStore()
    await store.put_entries(SCOPE, [entry("a"), entry("b")], now=T0)
    a, b = await store.claim_pending(SCOPE, limit=2, worker_id="w", lease_seconds=60, now=T0)
    retry = T0 + timedelta(minutes=5)
    await store.fail_indexing(a, worker_id="w", error="timeout", retry_at=retry, now=T0)
    await store.fail_indexing(b, worker_id="w", error="fatal", retry_at=None, now=T0)
    assert await store.index_status(SCOPE, ["a", "b"]) == {
        "a": ("pending", "timeout"),
        "b": ("failed", "fatal"),
    }
    early = retry - timedelta(seconds=1)
    assert (
        await store.claim_pending(SCOPE, limit=5, worker_id="w", lease_seconds=5, now=early) == []
    )
    (again,) = await store.claim_pending(SCOPE, limit=5, worker_id="w", lease_seconds=5, now=retry)
    assert (again.id, again.attempts) == ("a", 1)
    # a failure reported by a worker that does not hold the lease changes nothing
    await store.fail_indexing(again, worker_id="intruder", error="x", retry_at=None, now=retry)
    assert (await store.index_status(SCOPE, ["a"]))["a"] == ("pending", "timeout")
    assert await store.requeue_failed(SCOPE, ["a"]) == 0  # "a" is pending, not failed
    assert await store.requeue_failed(SCOPE) == 1
    (rec,) = await store.get_entries(SCOPE, ["b"])
    assert (rec.status, rec.attempts) == ("pending", 0)
    claimed = await store.claim_pending(SCOPE, limit=5, worker_id="w2", lease_seconds=5, now=retry)
    assert [c.id for c in claimed] == ["b"]


async def test_fail_releases_the_lease_even_when_stale():
    store = InMemoryVectorStore()
    await store.put_entries(SCOPE, [entry("a", "one")], now=T0)
    (claim,) = await store.claim_pending(SCOPE, limit=1, worker_id="w", lease_seconds=60, now=T0)
    # metadata-only change keeps the lease; a stale revision is simulated with a forged claim
    stale = type(claim)(claim.scope, claim.id, claim.revision + 5, claim.text, claim.attempts)
    await store.fail_indexing(stale, worker_id="w", error="x", retry_at=None, now=T0)
    assert (await store.index_status(SCOPE, ["a"]))["a"] == ("pending", None)
    (reclaimed,) = await store.claim_pending(SCOPE, limit=1, worker_id="v", lease_seconds=9, now=T0)
    assert reclaimed.id == "a"


async def test_release_claims():
    store = InMemoryVectorStore()
    await store.put_entries(SCOPE, [entry("a"), entry("b"), entry("c")], now=T0)
    await store.claim_pending(SCOPE, limit=2, worker_id="w1", lease_seconds=60, now=T0)
    await store.claim_pending(SCOPE, limit=2, worker_id="w2", lease_seconds=60, now=T0)
    assert await store.release_claims("w1") == 2
    assert await store.release_claims("w1") == 0
    claimed = await store.claim_pending(SCOPE, limit=5, worker_id="w3", lease_seconds=60, now=T0)
    assert [c.id for c in claimed] == ["a", "b"]


async def test_store_vectors_reindexes_matching_revisions():
    store = InMemoryVectorStore(dimension=2)
    await store.put_entries(SCOPE, [entry("a"), entry("b"), entry("c")], now=T0)
    await index_all(store, vectors={"a": vec(1, 0), "b": vec(1, 0), "c": vec(1, 0)})
    n = await store.store_vectors(
        SCOPE, [("a", 1, vec(0, 1)), ("b", 2, vec(0, 1)), ("zz", 1, vec(0, 1))], now=T0
    )
    assert n == 1
    got = {
        c.record.id: c.vector for c in (await store.search(SCOPE, request(vec(0, 1)))).candidates
    }
    np.testing.assert_array_equal(got["a"], vec(0, 1))
    np.testing.assert_array_equal(got["b"], vec(1, 0))
    assert await store.store_vectors(scope(thread="other"), [("a", 1, vec(0, 1))], now=T0) == 0


# ---- vector validation and atomicity ---------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        np.array([np.nan, 0.0], dtype=np.float32),
        np.array([np.inf, 0.0]),
        np.array([1.0, 0.0, 0.0]),
        ["x", 1.0],
        np.array([], dtype=np.float32),
    ],
    ids=["nan", "inf", "width", "non-number", "empty"],
)
async def test_a_bad_vector_in_a_batch_changes_nothing(bad):
    store = InMemoryVectorStore(dimension=2)
    await store.put_entries(SCOPE, [entry("a"), entry("b"), entry("c")], now=T0)
    claimed = await store.claim_pending(SCOPE, limit=5, worker_id="w", lease_seconds=60, now=T0)
    items = [(claimed[0], vec(1, 0)), (claimed[1], bad), (claimed[2], vec(0, 1))]
    with pytest.raises(InvalidVectorError):
        await store.complete_indexing(items, worker_id="w", now=T0)
    assert {s for s, _ in (await store.index_status(SCOPE, ["a", "b", "c"])).values()} == {
        "pending"
    }
    # the leases are still w's: a good retry of the same batch applies
    good = [(claimed[0], vec(1, 0)), (claimed[1], vec(1, 1)), (claimed[2], vec(0, 1))]
    assert await store.complete_indexing(good, worker_id="w", now=T0) == 3
    with pytest.raises(InvalidVectorError):
        await store.store_vectors(SCOPE, [("a", 1, vec(0, 1)), ("b", 1, bad)], now=T0)
    got = {
        c.record.id: c.vector for c in (await store.search(SCOPE, request(vec(1, 0)))).candidates
    }
    np.testing.assert_array_equal(got["a"], vec(1, 0))


async def test_first_vector_fixes_the_width_when_not_pinned():
    store = InMemoryVectorStore()
    assert store.dimension is None
    await store.put_entries(SCOPE, [entry("a"), entry("b"), entry("c")], now=T0)
    a, b, _c = await store.claim_pending(SCOPE, limit=5, worker_id="w", lease_seconds=60, now=T0)
    with pytest.raises(DimensionMismatchError):  # inconsistent widths inside one batch
        await store.complete_indexing([(a, vec(1, 0)), (b, vec(1, 0, 0))], worker_id="w", now=T0)
    assert await store.complete_indexing([(a, vec(1, 0, 0))], worker_id="w", now=T0) == 1
    with pytest.raises(DimensionMismatchError):
        await store.complete_indexing([(b, vec(1, 0))], worker_id="w", now=T0)
    other = scope(thread="other")  # the width is the store's, not the thread's
    await store.put_entries(other, [entry("x")], now=T0)
    (x,) = await store.claim_pending(other, limit=5, worker_id="w", lease_seconds=60, now=T0)
    with pytest.raises(DimensionMismatchError):
        await store.complete_indexing([(x, vec(1, 0, 0, 0))], worker_id="w", now=T0)
    both = [(b, vec(0, 1, 0)), (x, vec(0, 0, 1))]
    assert await store.complete_indexing(both, worker_id="w", now=T0) == 2


async def test_pinned_dimension_rejects_other_widths():
    store = InMemoryVectorStore(dimension=3)
    assert store.dimension == 3
    await store.put_entries(SCOPE, [entry("a")], now=T0)
    (a,) = await store.claim_pending(SCOPE, limit=5, worker_id="w", lease_seconds=60, now=T0)
    with pytest.raises(DimensionMismatchError):
        await store.complete_indexing([(a, vec(1, 0))], worker_id="w", now=T0)
    with pytest.raises(DimensionMismatchError):
        await store.search(SCOPE, request(vec(1, 0)))


# ---- working store ---------------------------------------------------------------------------


async def test_working_store_versions_and_conflicts():
    store = InMemoryWorkingStore()
    assert await store.get_working("t", "r", None) is None
    with pytest.raises(ConflictError):
        await store.put_working("t", "r", None, {"a": 1}, expected_version=1, now=T0)
    first = await store.put_working("t", "r", None, {"a": 1}, expected_version=0, now=T0)
    assert (first.version, first.data, first.updated_at) == (1, {"a": 1}, T0)
    with pytest.raises(ConflictError):
        await store.put_working("t", "r", None, {"a": 2}, expected_version=0, now=T0)
    later = T0 + timedelta(seconds=1)
    second = await store.put_working("t", "r", None, {"a": 2}, expected_version=1, now=later)
    third = await store.put_working("t", "r", None, {"a": 3}, expected_version=None, now=later)
    assert (second.version, third.version) == (2, 3)
    current = await store.get_working("t", "r", None)
    assert current is not None
    assert (current.version, current.data) == (3, {"a": 3})
    with pytest.raises(ConflictError):
        await store.put_working("t", "r", None, {"a": 4}, expected_version=2, now=later)
    assert (await store.get_working("t", "r", None)).data == {"a": 3}  # type: ignore[union-attr]


async def test_working_store_scopes_and_copies():
    store = InMemoryWorkingStore()
    data = {"list": [1, 2]}
    await store.put_working("t", "r", None, data, expected_version=None, now=T0)
    await store.put_working("t", "r", "th", {"thread": True}, expected_version=0, now=T0)
    data["list"].append(3)
    got = await store.get_working("t", "r", None)
    assert got is not None
    assert got.data == {"list": [1, 2]}
    got.data["list"].append(4)  # type: ignore[index]
    assert (await store.get_working("t", "r", None)).data == {"list": [1, 2]}  # type: ignore[union-attr]
    assert (await store.get_working("t", "r", "th")).data == {"thread": True}  # type: ignore[union-attr]
    assert await store.get_working("t2", "r", None) is None
    assert await store.get_working("t", "r2", None) is None
    assert await store.get_working("t", "r", "other") is None
