"""The vectorised fusion against hand-computed BM25 values and the documented tie-breaks.

Expected numbers are written out from the formulas in ``prism_memory.lexical`` and
``prism_memory.ranking`` (k1 = 0.9, b = 0.4, Lucene idf), never computed by the code under test.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pytest

from prism_memory.lexical import CorpusStats, chance_bm25
from prism_memory.models import Candidate, MemoryRecord, RecallScoring
from prism_memory.ranking import FusionCandidate, fuse, rerank

T = datetime(2024, 1, 1, tzinfo=UTC)
SIDEWAYS = np.array([0.0, 1.0], np.float32)  # cosine 0 with the query: only BM25 moves
QUERY = np.array([1.0, 0.0], np.float32)


def candidate(entry_id: str, text: str, vector=SIDEWAYS, sequence: int = 1) -> FusionCandidate[str]:
    return FusionCandidate(entry_id, entry_id, sequence, np.asarray(vector, np.float32), text)


def by_id(fused):
    return {f.id: f for f in fused}


def test_bm25_of_each_candidate_follows_the_formula_term_by_term():
    # N = 10, avgdl = 40 / 10 = 4; idf(alpha) = ln(1 + 8.5 / 2.5) = ln 4.4, idf(beta) = ln 2
    stats = CorpusStats(10, 40, {"alpha": 2, "beta": 5})
    fused = fuse(
        [
            candidate("two-alpha", "alpha alpha beta gamma"),  # |d| = 4 = avgdl: norm = k1
            candidate("one-beta", "beta"),  # |d| = 1: norm = 0.9 · (0.6 + 0.4 / 4) = 0.63
            candidate("none", "gamma delta"),
        ],
        query_vector=QUERY,
        query_text="alpha beta",
        stats=stats,
    )
    scores = by_id(fused)
    two_alpha = math.log(4.4) * 2 * 1.9 / (2 + 0.9) + math.log(2.0) * 1 * 1.9 / (1 + 0.9)
    one_beta = math.log(2.0) * 1.9 / (1 + 0.63)
    assert scores["two-alpha"].bm25 == pytest.approx(two_alpha, rel=1e-12)
    assert scores["one-beta"].bm25 == pytest.approx(one_beta, rel=1e-12)
    assert scores["none"].bm25 == 0.0
    # evidence: each term's gain above 3 × its chance gain, idf · p · (k1 + 1) / (1 + norm) with
    # p = 1 − (1 − (df − 1)/(N − 1))^(|d|/avgdl) (the share among the other documents).
    # two-alpha (|d|/avgdl = 1, (k1 + 1) / (1 + k1) = 1): alpha p = 1/9, so 3 · ln 4.4 / 9 is
    # discounted; beta p = 4/9, 4/3 · ln 2 > its gain ln 2: nothing
    two_alpha_evidence = math.log(4.4) * (2 * 1.9 / 2.9 - 3 / 9)
    # one-beta (|d|/avgdl = 0.25): p = 1 − (5/9)^0.25
    one_beta_evidence = math.log(2.0) * 1.9 / 1.63 * (1 - 3 * (1 - (5 / 9) ** 0.25))
    assert scores["two-alpha"].bm25_chance == pytest.approx(
        two_alpha - two_alpha_evidence, rel=1e-12
    )
    assert scores["two-alpha"].bm25_scale == pytest.approx(two_alpha_evidence, rel=1e-12)
    assert scores["two-alpha"].lexical == 1.0
    assert scores["one-beta"].lexical == pytest.approx(
        one_beta_evidence / two_alpha_evidence, rel=1e-12
    )
    assert scores["none"].lexical == 0.0


def test_the_best_evidence_is_the_lexical_scale_whatever_its_size():
    stats = CorpusStats(10, 40, {"alpha": 2, "beta": 5})
    fused = fuse(
        [candidate("one-beta", "beta"), candidate("none", "gamma")],
        query_vector=QUERY,
        query_text="alpha beta",
        stats=stats,
    )
    scores = by_id(fused)
    evidence = math.log(2.0) * 1.9 / 1.63 * (1 - 3 * (1 - (5 / 9) ** 0.25))
    assert scores["one-beta"].bm25_scale == pytest.approx(evidence, rel=1e-12)
    assert scores["one-beta"].lexical == 1.0


def test_a_short_average_length_still_normalises_by_it():
    # N = 2, avgdl = 0.5: a one-term document has norm = 0.9 · (0.6 + 0.4 · 1 / 0.5) = 1.26
    stats = CorpusStats(2, 1, {"alpha": 1})
    (only,) = fuse([candidate("a", "alpha")], query_vector=QUERY, query_text="alpha", stats=stats)
    assert only.bm25 == pytest.approx(math.log(1 + 1.5 / 1.5) * 1.9 / (1 + 1.26), rel=1e-12)


def test_a_corpus_of_empty_documents_takes_length_normalisation_as_one():
    # avgdl = 0 (no terms anywhere): |d| / avgdl is taken as 1, so norm = k1 and bm25 = idf
    stats = CorpusStats(3, 0, {"alpha": 1})
    (only,) = fuse([candidate("a", "alpha")], query_vector=QUERY, query_text="alpha", stats=stats)
    assert only.bm25 == pytest.approx(math.log(1 + 2.5 / 1.5), rel=1e-12)


def test_no_candidates_fuse_to_an_empty_list():
    assert fuse([], query_vector=QUERY, query_text="alpha") == []


def test_fused_ties_break_on_id_whatever_the_input_order():
    same = [1.0, 0.0]
    fused = fuse(
        [
            candidate("b", "x", same, sequence=3),
            candidate("c", "x", same, sequence=2),
            candidate("a", "x", same, sequence=3),
        ],
        query_vector=QUERY,
        query_text="nothing",
    )
    assert [f.id for f in fused] == ["c", "a", "b"]


def record(thread_id: str, importance: float) -> MemoryRecord:
    return MemoryRecord(
        tenant_id="t",
        resource_id="r",
        thread_id=thread_id,
        id="same",
        text="x",
        role="user",
        metadata={},
        consent=None,
        sequence=7,
        occurred_at=T,
        created_at=T,
        written_at=T,
        importance=importance,
    )


def test_equal_scores_with_equal_sequence_and_id_rank_the_more_similar_first():
    # λ = 0, weights 0.5 / 0.5: score = 0.5·cosine + 0.5·importance
    # thread "b": 0.5 · 1.0 + 0.5 · 0.0 = 0.5;  thread "a": 0.5 · 0.6 + 0.5 · 0.4 = 0.3 + 0.2 = 0.5
    less_similar = Candidate(record("a", 0.4), np.array([3.0, 4.0], np.float32))  # cosine 0.6
    more_similar = Candidate(record("b", 0.0), np.array([1.0, 0.0], np.float32))  # cosine 1.0
    hits = rerank(
        [less_similar, more_similar],
        query_vector=QUERY,
        query_text="nothing",
        top_k=2,
        now=T,
        scoring=RecallScoring(importance_weight=0.5, lexical_weight=0.0),
    )
    assert [(h.score, h.similarity) for h in hits] == [(0.5, 1.0), (0.5, pytest.approx(0.6))]
    assert [h.record.thread_id for h in hits] == ["b", "a"]


def test_the_chance_bm25_is_written_out_as_the_formula():
    # N = 10, avgdl = 4; alpha in 2 documents, beta in 5; a document of the average length:
    # p = (df − 1) / (N − 1), the share among the other documents, and (k1 + 1) / (1 + k1) = 1,
    # so each term adds idf · (df − 1) / (N − 1)
    stats = CorpusStats(10, 40, {"alpha": 2, "beta": 5})
    expected = math.log(4.4) * (1 / 9) + math.log(2.0) * (4 / 9)
    assert chance_bm25(["alpha", "beta", "absent"], 4, stats) == pytest.approx(expected, rel=1e-12)
    # a document of 8 terms (twice avgdl): p = 1 − (1 − (df − 1)/(N − 1))^2, norm = 0.9 · 1.4
    long = (math.log(4.4) * (1 - (8 / 9) ** 2) + math.log(2.0) * (1 - (5 / 9) ** 2)) * 1.9 / 2.26
    assert chance_bm25(["alpha", "beta"], 8, stats) == pytest.approx(long, rel=1e-12)
    assert chance_bm25(["alpha"], 3, CorpusStats()) == 0.0
    # a term only the scored document holds is never chance, even in a scope of two
    assert chance_bm25(["alpha"], 4, CorpusStats(2, 8, {"alpha": 1})) == 0.0
    assert chance_bm25(["alpha"], 4, CorpusStats(1, 4, {"alpha": 1})) == 0.0


def test_the_fusion_discounts_the_chance_bm25_times_the_margin():
    # every term's gain is above 3 × its chance gain: the discount is exactly 3 × chance_bm25
    stats = CorpusStats(100, 400, {"alpha": 2, "beta": 3})
    (only,) = fuse(
        [candidate("both", "alpha beta gamma delta")],
        query_vector=QUERY,
        query_text="alpha beta",
        stats=stats,
    )
    assert only.bm25_chance == pytest.approx(3 * chance_bm25(["alpha", "beta"], 4, stats), rel=1e-9)
    assert only.bm25_chance == pytest.approx(
        3 * ((1 / 99) * math.log(1 + 98.5 / 2.5) + (2 / 99) * math.log(1 + 97.5 / 3.5)), rel=1e-12
    )
