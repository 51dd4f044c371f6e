"""Conformance checks of the hybrid ranking's store contract (``SearchResult`` statistics, BM25).

Every backend must report the same corpus statistics for the same recallable entries — that is
what makes the one pure fusion order identically everywhere. They run on every backend through
:data:`~prism_memory.testing.CONFORMANCE_CHECKS`.
"""

from __future__ import annotations

import numpy as np

from ..models import RecallScoring
from ..stores.base import RecallFilter, SearchRequest
from ._support import ConformanceKit, _Case, _check

__all__ = ["RANKING_CHECKS"]

# plain words that are their own terms (no stop word, unchanged by the stemmer)
_TEXTS = {
    "a": "zebra lamp river",
    "b": "grass lamp",
    "c": "grass stone river tulip",
    "d": "grass kiwi",
    "hidden": "zebra zebra grass",
    "held": "zebra mango",
}


async def search_reports_statistics_of_recallable_entries(kit: ConformanceKit) -> None:
    """``search`` counts exactly the scope's recallable entries: N, total terms, per-term df."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember([{"id": i, "text": t} for i, t in _TEXTS.items()], wait=True)
    await memory.set_consent("hidden", visible=False)
    await memory.forget(ids=["held"], hold=True)
    other = case.memory(thread="thread-2")  # same words next door: never counted
    await other.remember(
        [{"id": f"o{i}", "text": "zebra zebra grass"} for i in range(5)], wait=True
    )

    vector = np.asarray((await kit.embedder.embed(["zebra grass"]))[0], dtype=np.float32)
    request = SearchRequest(
        vector=vector,
        terms=frozenset({"zebra", "grass", "absent"}),
        limit=2,
        filter=RecallFilter(now=case.clock()),
    )
    result = await kit.vector_store.search(memory.identity, request)
    recallable = [_TEXTS[i] for i in ("a", "b", "c", "d")]
    stats = result.stats
    _check(stats.documents == 4, f"documents {stats.documents} != 4")
    total = sum(len(text.split()) for text in recallable)
    _check(stats.total_length == total, f"total_length {stats.total_length} != {total}")
    frequency = {t: stats.frequency(t) for t in ("zebra", "grass", "absent")}
    _check(frequency == {"zebra": 1, "grass": 3, "absent": 0}, f"frequencies {frequency}")
    ids = {c.record.id for c in result.candidates}
    _check(not ids & {"hidden", "held"}, f"excluded entries came back: {ids}")
    # lexical leg, limit 2: the rare term's entry ("a") leads; then grass + the shortest text ("b"
    # and "d" tie on length: the lower sequence, "b")
    _check({"a", "b"} <= ids, f"lexical leg by BM25: {sorted(ids)}")
    await memory.aclose()
    await other.aclose()


async def search_counts_only_recallable_holders_of_a_term(kit: ConformanceKit) -> None:
    """A row holding a query term counts in the term's document frequency, and can come back from
    the lexical leg, only when recallable: never when hidden, revoked, on legal hold, invalidated
    through its lineage (its source's correction tombstone), or without explicit consent when that
    is required -- the lexical leg applies every exclusion rule the dense leg does."""
    case = _Case(kit)
    memory = case.memory()
    explicit = {"source": "user"}
    await memory.remember(
        [
            {"id": "kept", "text": "walrus lamp", "consent": explicit},
            {"id": "legacy", "text": "walrus"},
            {"id": "hidden", "text": "walrus", "consent": {"visible": False}},
            {"id": "revoked", "text": "walrus tusk", "consent": explicit},
            {"id": "held", "text": "walrus", "consent": explicit},
            {"id": "source", "text": "otter", "consent": explicit},
        ],
        wait=True,
    )
    derived = {"id": "derived", "text": "walrus summary", "consent": explicit}
    await memory.remember({**derived, "lineage": {"source_ids": ["source"]}}, wait=True)
    await memory.set_consent("revoked", visible=False)
    await memory.forget(ids=["held"], hold=True)
    await memory.correct("source", "otter, corrected")  # "derived" predates the correction
    vector = np.asarray((await kit.embedder.embed(["walrus"]))[0], dtype=np.float32)
    for require_consent, holders, documents in ((False, 2, 3), (True, 1, 2)):
        request = SearchRequest(
            vector=vector,
            terms=frozenset({"walrus", "otter"}),
            limit=10,
            filter=RecallFilter(now=case.clock(), require_consent=require_consent),
        )
        result = await kit.vector_store.search(memory.identity, request)
        stats, where = result.stats, f"require_consent={require_consent}"
        _check(stats.documents == documents, f"{where}: documents {stats.documents}")
        frequency = {t: stats.frequency(t) for t in ("walrus", "otter")}
        _check(frequency == {"walrus": holders, "otter": 1}, f"{where}: frequencies {frequency}")
        ids = {c.record.id for c in result.candidates}
        allowed = {"kept", "source"} | (set() if require_consent else {"legacy"})
        _check(ids == allowed, f"{where}: candidates {sorted(ids)}")
    await memory.aclose()


async def recall_weighs_a_rare_term_above_a_common_one(kit: ConformanceKit) -> None:
    """BM25 of a hit reflects idf: the entry with the rare query term scores the higher BM25."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember(
        [{"id": "rare", "text": "zebra lamp"}, {"id": "common", "text": "grass lamp"}]
        + [{"id": f"g{i}", "text": f"grass field {i}"} for i in range(6)],
        wait=True,
    )
    hits = {h.id: h for h in (await memory.recall("zebra grass", top_k=10)).hits}
    _check({"rare", "common"} <= set(hits), f"both matches recalled: {sorted(hits)}")
    _check(hits["rare"].bm25 > hits["common"].bm25 > 0.0, "idf orders the rare term first")
    _check(hits["rare"].lexical > hits["common"].lexical, "and the higher lexical signal")
    again = {h.id: h.score for h in (await memory.recall("zebra grass", top_k=10)).hits}
    _check(again == {i: h.score for i, h in hits.items()}, "a repeated recall scores the same")
    await memory.aclose()


async def search_candidates_carry_the_stored_records(kit: ConformanceKit) -> None:
    """Every candidate's record is the record ``get_entries`` returns — metadata, consent and
    lineage included — and the fields ranking reads without it (``Candidate.deferred``) agree."""
    case = _Case(kit)
    memory = case.memory()
    consent = {"source": "user", "scope": "user", "granted_at": case.clock().isoformat()}
    await memory.remember(
        [
            {"id": "src", "text": "zebra lamp", "importance": 0.25},
            {
                "id": "rich",
                "text": "zebra grass",
                "role": "assistant",
                "metadata": {"nested": {"list": [1, "two", None]}, "quote": 'say "hi"', "é": 1.5},
                "consent": consent,
                "lineage": {"source_ids": ["src"], "reason": "summary"},
            },
            {"id": "plain", "text": "grass kiwi"},
        ],
        wait=True,
    )
    vector = np.asarray((await kit.embedder.embed(["zebra grass"]))[0], dtype=np.float32)
    request = SearchRequest(  # a limit below the candidates' count: a store may send the
        vector=vector,  # records of all but the first of a leg another way (PostgreSQL does)
        terms=frozenset({"zebra", "grass"}),
        limit=3,
        filter=RecallFilter(now=case.clock()),
    )
    result = await kit.vector_store.search(memory.identity, request)
    ids = sorted(c.id for c in result.candidates)
    _check(ids == ["plain", "rich", "src"], f"candidates {ids}")
    stored = {r.id: r for r in await kit.vector_store.get_entries(memory.identity, ids)}
    for candidate in result.candidates:
        record = candidate.record
        _check(
            record == stored[candidate.id], f"{candidate.id}: {record} != {stored[candidate.id]}"
        )
        fields = (
            candidate.thread_id,
            candidate.text,
            candidate.sequence,
            candidate.occurred_at,
            candidate.importance,
            candidate.embedding_model,
        )
        expected = (
            record.thread_id,
            record.text,
            record.sequence,
            record.occurred_at,
            record.importance,
            record.embedding_model,
        )
        _check(fields == expected, f"{candidate.id}: ranking fields {fields} != {expected}")
        _check(candidate.record is record, "a candidate builds its record once")
    await memory.aclose()


async def recall_hits_past_the_legs_first_rows_carry_their_records(kit: ConformanceKit) -> None:
    """A hit that is neither the nearest candidate nor the best lexical one -- here the most
    important, which an importance-only scoring ranks first -- carries the record
    ``get_entries`` returns, metadata, consent and lineage included (a store may send such a
    candidate's record in another form than its likelier ones': it must still be whole)."""
    case = _Case(kit)
    memory = case.memory()
    consent = {"source": "user", "scope": "user", "granted_at": case.clock().isoformat()}
    await memory.remember(
        [
            {"id": "near", "text": "zebra grass", "importance": 0.0},
            {"id": "src", "text": "zebra lamp", "importance": 0.0},
            {"id": "plain", "text": "grass kiwi", "importance": 0.0},
            {
                "id": "far",
                "text": "quartz violin",
                "role": "assistant",
                "importance": 1.0,
                "metadata": {"nested": {"list": [1, "two", None]}, "é": 1.5},
                "consent": consent,
                "lineage": {"source_ids": ["src"], "reason": "summary"},
            },
        ],
        wait=True,
    )
    result = await memory.recall(
        "zebra grass", top_k=1, scoring=RecallScoring(importance_weight=1.0)
    )
    (stored,) = await kit.vector_store.get_entries(memory.identity, ["far"])
    _check([h.id for h in result.hits] == ["far"], f"hits {[h.id for h in result.hits]}")
    _check(result.hits[0].record == stored, f"{result.hits[0].record} != {stored}")
    await memory.aclose()


async def recall_counts_a_term_most_entries_hold_as_no_evidence(kit: ConformanceKit) -> None:
    """A query term a third or more of the scope holds is no lexical evidence (the chance margin):
    its BM25 is reported and discounted in full, and it cannot lift a long entry above the one that
    holds the rare term -- the scope statistics must be the store's own for this to hold."""
    case = _Case(kit)
    memory = case.memory()
    long_text = "project " + " ".join(f"note{i}" for i in range(60))  # "project" once, long
    await memory.remember(
        [{"id": "rare", "text": "the deadline is friday"}, {"id": "long", "text": long_text}]
        + [{"id": f"n{i}", "text": f"project update {i}"} for i in range(6)],
        wait=True,
    )
    hits = {h.id: h for h in (await memory.recall("project deadline", top_k=10)).hits}
    _check({"rare", "long"} <= set(hits), f"both matches recalled: {sorted(hits)}")
    long, rare = hits["long"], hits["rare"]
    _check(long.bm25 > 0.0 and long.lexical == 0.0, "a common term is no evidence")
    _check(long.bm25_chance == long.bm25, "and its BM25 is discounted in full")
    _check(rare.lexical == 1.0 and rare.bm25_chance < rare.bm25, "the rare term is the evidence")
    await memory.aclose()


RANKING_CHECKS = {
    check.__name__: check
    for check in (
        search_reports_statistics_of_recallable_entries,
        search_counts_only_recallable_holders_of_a_term,
        recall_weighs_a_rare_term_above_a_common_one,
        recall_counts_a_term_most_entries_hold_as_no_evidence,
        search_candidates_carry_the_stored_records,
        recall_hits_past_the_legs_first_rows_carry_their_records,
    )
}
"""The ranking checks by name."""
