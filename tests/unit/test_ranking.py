"""The shared pure re-rank: composite score, recency, lexical leg, tie-break, cut and dedupe."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism_memory.errors import ValidationError
from prism_memory.models import Candidate, MemoryRecord, RecallHit, RecallScoring
from prism_memory.ranking import (
    chronological,
    cosine,
    explain,
    query_terms,
    recency_score,
    rerank,
)

NOW = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)


def record(
    entry_id,
    text="plain words",
    *,
    sequence=0,
    age_ms=0.0,
    importance=1.0,
    thread="th",
):
    occurred = NOW - timedelta(milliseconds=age_ms)
    return MemoryRecord(
        tenant_id="t",
        resource_id="r",
        thread_id=thread,
        id=entry_id,
        text=text,
        role="user",
        metadata={},
        consent=None,
        sequence=sequence,
        occurred_at=occurred,
        created_at=occurred,
        written_at=occurred,
        importance=importance,
        status="indexed",
    )


def cand(rec, *vector):
    return Candidate(record=rec, vector=np.array(vector, dtype=np.float32))


def ranked(candidates, *, query=(1.0, 0.0), text="", top_k=32, scoring=None, shared=None):
    return rerank(
        candidates,
        query_vector=np.array(query, dtype=np.float32),
        query_text=text,
        top_k=top_k,
        now=NOW,
        scoring=scoring,
        shared_thread_id=shared,
    )


# ---- primitives ----------------------------------------------------------------------------------


def test_query_terms_are_casefolded_stemmed_distinct_words():
    assert query_terms("Alpha, beta! ALPHA gamma_1 Painting painted") == frozenset(
        {"alpha", "beta", "gamma_1", "paint"}
    )


def test_cosine_of_known_vectors():
    q = np.array([1.0, 0.0], dtype=np.float32)
    assert cosine(q, np.array([3.0, 0.0], dtype=np.float32)) == pytest.approx(1.0)
    assert cosine(q, np.array([0.0, 2.0], dtype=np.float32)) == pytest.approx(0.0)
    assert cosine(q, np.array([1.0, 1.0], dtype=np.float32)) == pytest.approx(1 / math.sqrt(2))


def test_cosine_is_not_clamped_and_zero_vectors_are_unrelated():
    q = np.array([1.0, 0.0], dtype=np.float32)
    assert cosine(q, np.array([-1.0, 0.0], dtype=np.float32)) == -1.0
    assert cosine(q, np.array([-1.0, 1.0], dtype=np.float32)) == pytest.approx(-1 / math.sqrt(2))
    assert cosine(q, np.array([0.0, 0.0], dtype=np.float32)) == 0.0


@pytest.mark.parametrize(
    ("age_ms", "half_life_ms", "expected"),
    [
        (0, 1000, 1.0),
        (1000, 1000, 0.5),
        (2000, 1000, 0.25),
        (2500, 500, 0.03125),
        (500, 1000, 2**-0.5),
        (86_400_000, 3_600_000, 0.5**24),
    ],
)
def test_recency_halves_every_half_life(age_ms, half_life_ms, expected):
    occurred = NOW - timedelta(milliseconds=age_ms)
    assert recency_score(occurred, NOW, half_life_ms) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("ahead", [timedelta(milliseconds=1), timedelta(days=365)])
def test_a_future_timestamp_counts_as_age_zero(ahead):
    assert recency_score(NOW + ahead, NOW, 1000.0) == 1.0


def test_recency_of_an_ancient_entry_stays_within_bounds():
    value = recency_score(NOW - timedelta(days=365 * 100), NOW, 1.0)
    assert 0.0 <= value <= 1.0


# ---- scoring weights ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recency", "importance", "expected"),
    [
        (0.0, 0.0, (1.0, 0.0, 0.0)),
        (0.3, 0.2, (0.5, 0.3, 0.2)),
        (0.5, 0.5, (0.0, 0.5, 0.5)),
        (0.75, 0.75, (0.0, 0.5, 0.5)),
        (0.9, 0.3, (0.0, 0.75, 0.25)),
        (1.0, 1.0, (0.0, 0.5, 0.5)),
        (0.0, 1.0, (0.0, 0.0, 1.0)),
    ],
)
def test_weights_are_sum_normalised(recency, importance, expected):
    scoring = RecallScoring(
        recency_weight=recency, importance_weight=importance, half_life_ms=1000.0
    )
    assert scoring.weights() == pytest.approx(expected)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"recency_weight": 1.5, "half_life_ms": 1.0},
        {"recency_weight": -0.1, "half_life_ms": 1.0},
        {"importance_weight": float("nan")},
        {"importance_weight": float("inf")},
        {"lexical_weight": 1.01},
        {"half_life_ms": 0.0},
        {"half_life_ms": -5.0},
        {"half_life_ms": float("inf")},
        {"recency_weight": 0.2},  # recency without a half-life
    ],
)
def test_invalid_scoring_is_rejected(kwargs):
    with pytest.raises(ValidationError):
        RecallScoring(**kwargs)


# ---- rerank: the composite score -------------------------------------------------------------


def test_composite_score_matches_the_hand_computed_formula():
    # chance_margin 0: every match counts in full (plain BM25), so the blend is checked alone
    scoring = RecallScoring(
        recency_weight=0.3, importance_weight=0.2, half_life_ms=1000.0, chance_margin=0.0
    )
    a = cand(record("a", "alpha gamma", age_ms=1000, importance=0.4), 1.0, 0.0)
    b = cand(record("b", "beta alpha", age_ms=3000, importance=1.0), 0.0, 1.0)
    c = cand(record("c", "nothing remains", age_ms=-5000, importance=0.0), 1.0, 1.0)
    hits = ranked([b, c, a], text="alpha beta", scoring=scoring)
    # corpus = the three candidates: N = 3, every length 2 = avgdl, so each tf=1 term adds its idf
    idf_alpha = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    idf_beta = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    best = idf_alpha + idf_beta  # b's BM25, the best candidate's
    # cosines 1, 0 and 1/sqrt(2) (scale 1): their median weighs the lexical signal, w = 0.5 · it
    w = 0.5 / math.sqrt(2)
    sim_a = (1 - w) * 1.0 + w * idf_alpha / best
    sim_b = (1 - w) * 0.0 + w * 1.0
    sim_c = (1 - w) / math.sqrt(2) + 0.0
    assert [h.id for h in hits] == ["a", "c", "b"]  # 0.61, 0.53, 0.41 (scores below)
    by_id = {h.id: h for h in hits}
    assert by_id["a"].semantic == pytest.approx(1.0)
    assert by_id["a"].bm25 == pytest.approx(idf_alpha)
    assert by_id["b"].bm25 == pytest.approx(best)
    assert by_id["a"].lexical == pytest.approx(idf_alpha / best)
    assert by_id["a"].similarity == pytest.approx(sim_a)
    assert by_id["a"].recency == pytest.approx(0.5)
    assert by_id["a"].importance == pytest.approx(0.4)
    assert by_id["a"].score == pytest.approx(0.5 * sim_a + 0.3 * 0.5 + 0.2 * 0.4)
    assert by_id["b"].recency == pytest.approx(0.125)
    assert by_id["b"].score == pytest.approx(0.5 * sim_b + 0.3 * 0.125 + 0.2 * 1.0)
    assert by_id["c"].recency == 1.0
    assert by_id["c"].lexical == 0.0
    assert by_id["c"].similarity == pytest.approx(sim_c)
    assert by_id["c"].score == pytest.approx(0.5 * sim_c + 0.3)


def test_default_scoring_is_similarity_only():
    old_unimportant = cand(record("old", "x", age_ms=10**9, importance=0.0), 1.0, 0.0)
    new_important = cand(record("new", "x", age_ms=0, importance=1.0), 0.0, 1.0)
    hits = ranked([new_important, old_unimportant], text="alpha")
    assert [h.id for h in hits] == ["old", "new"]
    # cosines 1 and 0: median 0.5, so w = 0.5 · 0.5; (1 − w) · cosine 1 / best 1 + w · lexical 0
    assert hits[0].score == pytest.approx(0.75)
    assert hits[1].score == pytest.approx(0.0)


def test_a_negative_final_score_stays_negative():
    # The score is clamped to [-1, 1] (float noise only), never to [0, 1]: an entry pointing away
    # from the query keeps a negative score, below one that is merely unrelated.
    near = cand(record("near", "x"), 1.0, 0.0)
    away = cand(record("away", "x"), -1.0, 0.0)  # cosine -1, as large in size as the nearest
    unrelated = cand(record("unrelated", "x"), 0.0, 1.0)  # cosine 0
    hits = ranked([away, unrelated, near], text="alpha")
    assert [h.id for h in hits] == ["near", "unrelated", "away"]
    by_id = {h.id: h for h in hits}
    assert by_id["away"].semantic == pytest.approx(-1.0)
    # cosines 1, 0, −1: median 0, so the lexical weight is 0 and similarity is cosine / 1
    assert by_id["away"].similarity == pytest.approx(-1.0)
    assert by_id["away"].score == pytest.approx(-1.0)
    assert by_id["unrelated"].score == pytest.approx(0.0)


def test_a_negative_score_blends_with_recency_and_importance():
    scoring = RecallScoring(recency_weight=0.25, importance_weight=0.25, half_life_ms=1000.0)
    away = cand(record("away", "x", age_ms=1000.0, importance=0.2), -1.0, 0.0)
    (hit,) = ranked([away], text="alpha", scoring=scoring)
    # median cosine −1 → lexical weight 0, similarity −1;
    # 0.5 · similarity (−1) + 0.25 · recency (0.5) + 0.25 · importance (0.2) = −0.325
    assert hit.score == pytest.approx(-0.325)


def test_overshooting_weights_leave_similarity_nothing():
    scoring = RecallScoring(recency_weight=0.9, importance_weight=0.3, half_life_ms=1000.0)
    similar = cand(record("similar", "alpha", age_ms=2000, importance=0.0), 1.0, 0.0)
    unrelated = cand(record("unrelated", "zzz", age_ms=0, importance=1.0), 0.0, 1.0)
    hits = ranked([similar, unrelated], text="alpha", scoring=scoring)
    by_id = {h.id: h for h in hits}
    # normalised weights (0, 0.75, 0.25)
    assert by_id["similar"].score == pytest.approx(0.75 * 0.25 + 0.25 * 0.0)
    assert by_id["unrelated"].score == pytest.approx(0.75 * 1.0 + 0.25 * 1.0)
    assert [h.id for h in hits] == ["unrelated", "similar"]


@pytest.mark.parametrize(
    ("lexical_weight", "expected"),
    # normalised cosines 0.75 and 1: median 0.875, so w = λ · 0.875 and a's similarity (1 − w) · 0.75
    [(0.0, 0.75), (1.0, 0.125 * 0.75), (0.5, (1 - 0.4375) * 0.75)],
)
def test_lexical_weight_blends_the_scaled_signals(lexical_weight, expected):
    # "a": cosine 0.6, no query term; "b": cosine 0.8 (the best cosine), the only lexical match
    a = cand(record("a", "gamma"), 0.6, 0.8)
    b = cand(record("b", "alpha"), 0.8, 0.6)
    hits = ranked([a, b], text="alpha", scoring=RecallScoring(lexical_weight=lexical_weight))
    hit = {h.id: h for h in hits}["a"]
    assert hit.semantic == pytest.approx(0.6)
    assert hit.lexical == 0.0
    assert hit.similarity == pytest.approx(expected)
    assert hit.score == pytest.approx(expected)


def test_importance_outside_the_unit_interval_is_clamped():
    scoring = RecallScoring(importance_weight=1.0)
    hits = ranked(
        [
            cand(record("hi", importance=3.0), 1.0, 0.0),
            cand(record("lo", importance=-2.0), 1.0, 0.0),
        ],
        scoring=scoring,
    )
    by_id = {h.id: h for h in hits}
    assert (by_id["hi"].importance, by_id["hi"].score) == (1.0, 1.0)
    assert (by_id["lo"].importance, by_id["lo"].score) == (0.0, 0.0)


def test_without_a_half_life_recency_is_one():
    hit = ranked([cand(record("a", age_ms=10**8), 1.0, 0.0)])[0]
    assert hit.recency == 1.0


# ---- rerank: order, cut, dedupe ----------------------------------------------------------------


def test_ties_break_on_sequence_then_id():
    same = (1.0, 0.0)
    candidates = [
        cand(record("b", sequence=2), *same),
        cand(record("c", sequence=1), *same),
        cand(record("a", sequence=1), *same),
        cand(record("0", sequence=3), *same),
    ]
    assert [h.id for h in ranked(candidates)] == ["a", "c", "b", "0"]


def test_score_beats_sequence_and_id():
    candidates = [
        cand(record("a", sequence=0), 0.0, 1.0),  # cosine 0
        cand(record("z", sequence=99), 1.0, 0.0),  # cosine 1
    ]
    assert [h.id for h in ranked(candidates)] == ["z", "a"]


def test_top_k_keeps_the_best():
    candidates = [cand(record(f"e{i}", sequence=i), 1.0, i / 10) for i in range(6)]
    # cosine falls as the second coordinate grows: e0 > e1 > ... > e5
    assert [h.id for h in ranked(candidates, top_k=3)] == ["e0", "e1", "e2"]
    assert [h.id for h in ranked(candidates, top_k=1)] == ["e0"]
    assert len(ranked(candidates, top_k=32)) == 6


def test_duplicate_candidates_are_scored_once():
    rec = record("a")
    candidates = [cand(rec, 1.0, 0.0), cand(rec, 1.0, 0.0), cand(record("b"), 0.0, 1.0)]
    assert [h.id for h in ranked(candidates)] == ["a", "b"]


def test_the_same_id_in_two_threads_is_two_hits():
    candidates = [
        cand(record("a", thread="parent"), 1.0, 0.0),
        cand(record("a", thread="child"), 1.0, 0.0),
    ]
    hits = ranked(candidates)
    assert sorted(h.record.thread_id for h in hits) == ["child", "parent"]


def test_an_id_in_two_threads_and_a_repeat_of_one_of_them_are_two_hits():
    # ids repeat, so the (thread, id) pairs decide: the repeat is scored once, the other thread's
    # entry of the same id still counts
    parent = record("a", thread="parent")
    candidates = [
        cand(parent, 1.0, 0.0),
        cand(record("a", thread="child"), 1.0, 0.0),
        cand(parent, 1.0, 0.0),
    ]
    hits = ranked(candidates)
    assert sorted(h.record.thread_id for h in hits) == ["child", "parent"]


def test_shared_marks_only_hits_from_the_shared_thread():
    candidates = [
        cand(record("p", thread="parent"), 1.0, 0.0),
        cand(record("c", thread="child"), 1.0, 0.1),
    ]
    hits = {h.id: h for h in ranked(candidates, shared="parent")}
    assert hits["p"].shared is True
    assert hits["c"].shared is False
    assert not any(h.shared for h in ranked(candidates))


def test_empty_candidates_give_no_hits():
    assert ranked([]) == []


def test_explain_numbers_ranks_and_reports_normalised_weights():
    scoring = RecallScoring(recency_weight=0.75, importance_weight=0.75, half_life_ms=10.0)
    hits = ranked([cand(record("a"), 1.0, 0.0), cand(record("b"), 0.0, 1.0)], scoring=scoring)
    explanations = explain(hits, scoring)
    assert [(e.id, e.rank) for e in explanations] == [(hits[0].id, 1), (hits[1].id, 2)]
    assert all(e.weights == pytest.approx((0.0, 0.5, 0.5)) for e in explanations)


def test_chronological_ignores_score():
    records = [
        record("b", sequence=2),
        record("a", sequence=2),
        record("z", sequence=1, age_ms=5),
        record("y", sequence=1, age_ms=10),
    ]
    assert [r.id for r in chronological(records)] == ["y", "z", "a", "b"]


# ---- properties ---------------------------------------------------------------------------------

VOCAB = ["alpha", "beta", "gamma", "delta", "omega"]

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
coordinate = st.sampled_from([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0])  # coarse values force ties

candidate_specs = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3),  # sequence
        st.tuples(coordinate, coordinate, coordinate),  # vector
        st.lists(st.sampled_from(VOCAB), max_size=3).map(" ".join),  # text
        st.floats(min_value=-0.5, max_value=1.5, allow_nan=False),  # importance (clamped)
        st.integers(min_value=-10_000, max_value=10_000_000),  # age in ms (negative = future)
        st.sampled_from(["th", "other"]),  # thread
    ),
    min_size=0,
    max_size=12,
)

scorings = (
    st.builds(
        lambda r, i, lw, hl: RecallScoring(
            recency_weight=r, importance_weight=i, lexical_weight=lw, half_life_ms=hl
        ),
        unit,
        unit,
        unit,
        st.floats(min_value=1e-3, max_value=1e9, allow_nan=False),
    )
    | st.none()
)


def build(specs):
    return [
        cand(
            record(
                f"id{n % 5}-{n}",
                text or "empty",
                sequence=seq,
                age_ms=age,
                importance=imp,
                thread=thread,
            ),
            *vec,
        )
        for n, (seq, vec, text, imp, age, thread) in enumerate(specs)
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=candidate_specs,
    scoring=scorings,
    query=st.tuples(coordinate, coordinate, coordinate),
    query_text=st.lists(st.sampled_from(VOCAB), max_size=3).map(" ".join),
    top_k=st.integers(min_value=1, max_value=32),
    data=st.data(),
)
def test_rerank_is_invariant_to_candidate_order(specs, scoring, query, query_text, top_k, data):
    candidates = build(specs)
    shuffled = data.draw(st.permutations(candidates))
    # also feed exact duplicates, which must not change anything
    with_duplicates = (
        shuffled + data.draw(st.lists(st.sampled_from(candidates))) if candidates else []
    )

    def key(hits):
        return [(h.record.thread_id, h.id, h.score) for h in hits]

    kwargs = {"query": query, "text": query_text, "top_k": top_k, "scoring": scoring}
    expected = key(ranked(candidates, **kwargs))
    assert key(ranked(shuffled, **kwargs)) == expected
    assert key(ranked(with_duplicates, **kwargs)) == expected


@settings(max_examples=300, deadline=None)
@given(
    specs=candidate_specs,
    scoring=scorings,
    query=st.tuples(coordinate, coordinate, coordinate),
    query_text=st.lists(st.sampled_from(VOCAB), max_size=3).map(" ".join),
)
def test_every_score_component_lies_in_its_interval(specs, scoring, query, query_text):
    hits = ranked(build(specs), query=query, text=query_text, scoring=scoring)
    for hit in hits:
        for value in (hit.lexical, hit.recency, hit.importance):
            assert 0.0 <= value <= 1.0, hit
        for value in (hit.score, hit.similarity, hit.semantic):  # cosine is never clamped
            assert -1.0 <= value <= 1.0, hit
    order = [(-h.score, h.record.sequence, h.id) for h in hits]
    assert order == sorted(order)


@settings(max_examples=300, deadline=None)
@given(r=unit, i=unit)
def test_normalised_weights_lie_in_the_unit_interval_and_sum_to_one(r, i):
    weights = RecallScoring(recency_weight=r, importance_weight=i, half_life_ms=1.0).weights()
    assert all(0.0 <= w <= 1.0 for w in weights)
    assert sum(weights) == pytest.approx(1.0)
    if r + i <= 1.0:
        assert weights[1:] == (r, i)
    else:
        assert weights[1] == pytest.approx(r / (r + i))
        assert weights[2] == pytest.approx(i / (r + i))


# Found by brute force: with r + i > 1 the normalised weights can sum to 1 + 1 ulp, so an entry that
# is perfectly recent and important scores just above 1.0.
OVERSHOOT = (0.9406309179033175, 0.19669036446951527)


@settings(max_examples=500, deadline=None)
@given(
    r=st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    i=st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
)
@pytest.mark.parametrize("forced", [OVERSHOOT])
def test_a_perfect_entry_never_scores_above_one(forced, r, i):
    for recency_weight, importance_weight in (forced, (r, i)):
        scoring = RecallScoring(
            recency_weight=recency_weight,
            importance_weight=importance_weight,
            half_life_ms=1000.0,
            chance_margin=0.0,  # in a one-entry scope every term is in every entry: no evidence else
        )
        hit = ranked(
            [cand(record("a", "alpha", age_ms=-1, importance=1.0), 1.0, 0.0)],
            text="alpha",
            scoring=scoring,
        )[0]
        # every component is exactly 1 (cosine 1, lexical 1, future -> recency 1, importance 1)
        assert (hit.semantic, hit.lexical, hit.recency, hit.importance) == (1.0, 1.0, 1.0, 1.0)
        assert 0.0 <= hit.score <= 1.0


def test_explain_says_how_each_component_was_computed():
    scoring = RecallScoring(lexical_weight=0.25)
    hits = ranked(
        [cand(record("a", "zebra zebra"), 0.6, 0.8), cand(record("b", "plain"), 1.0, 0.0)],
        text="zebra",
        scoring=scoring,
    )
    (first, second) = explain(hits, scoring)
    by_id = {h.id: h for h in hits}
    assert first.id == "b"  # cosine 1 outweighs the lexical match at λ = 0.25
    assert second.bm25 == by_id["a"].bm25 > 0.0
    assert first.bm25 == 0.0
    assert second.lexical_weight == 0.25
    assert set(second.how) == {"semantic", "lexical", "similarity", "score"}
    assert "cosine" in second.how["semantic"]
    a = by_id["a"]
    assert f"({a.bm25:.6g} - {a.bm25_chance:.6g}) / {a.bm25_scale:.6g}" in second.how["lexical"]
    assert "k1=0.9 b=0.4" in second.how["lexical"]
    assert "up to 3 x what an entry of this length gets by chance" in second.how["lexical"]
    # normalised cosines 0.6 and 1: median 0.8, so the weight used is 0.25 · 0.8 = 0.2
    assert a.lexical_weight == pytest.approx(0.2)
    assert "(1 - 0.2) * semantic / 1 + 0.2 * lexical" in second.how["similarity"]
    assert "lexical weight = 0.25 x the candidates' median" in second.how["similarity"]


def deferred(rec, vector, built):
    """``rec`` as a deferred candidate that notes in ``built`` when its record is made."""

    def build():
        built.append(rec.id)
        return rec

    return Candidate.deferred(
        np.array(vector, dtype=np.float32),
        thread_id=rec.thread_id,
        id=rec.id,
        text=rec.text,
        sequence=rec.sequence,
        occurred_at=rec.occurred_at,
        importance=rec.importance,
        embedding_model=rec.embedding_model,
        build=build,
    )


def test_deferred_candidates_rank_like_eager_ones_and_build_only_the_hits():
    rng = np.random.default_rng(7)
    records = [
        record(f"e{i}", f"word{i % 3} shared", sequence=i, age_ms=1000.0 * i, importance=i / 20)
        for i in range(20)
    ]
    vectors = [rng.normal(size=4) for _ in records]
    scoring = RecallScoring(half_life_ms=5000.0)
    query = (1.0, 0.5, -0.25, 0.0)
    eager = ranked(
        [cand(r, *v) for r, v in zip(records, vectors, strict=True)],
        query=query,
        text="word1",
        top_k=5,
        scoring=scoring,
    )
    built: list[str] = []
    lazy = ranked(
        [deferred(r, v, built) for r, v in zip(records, vectors, strict=True)],
        query=query,
        text="word1",
        top_k=5,
        scoring=scoring,
    )
    assert [(h.record, h.score, h.similarity) for h in lazy] == [
        (h.record, h.score, h.similarity) for h in eager
    ]
    assert sorted(built) == sorted(h.record.id for h in eager)  # five records built, not twenty


def test_the_query_terms_a_caller_hands_over_rank_as_the_query_text_does():
    """Recall hands the re-rank the terms it already checked (``terms``): the hits, scores and
    explanations are exactly those of the terms made from ``query_text``; terms alone decide."""
    candidates = [
        cand(record("a", "the painter painted a red barn", sequence=1), 1.0, 0.2),
        cand(record("b", "a barn by the river", sequence=2), 0.9, 0.4),
        cand(record("c", "red paint on the river", sequence=3), 0.2, 1.0),
    ]
    text = "red barn painting"
    plain = RecallScoring(chance_margin=0.0)  # plain BM25: every matched term counts
    made = ranked(candidates, text=text, scoring=plain)

    def given(terms: str) -> list[RecallHit]:
        return rerank(
            candidates,
            query_vector=np.array((1.0, 0.0), dtype=np.float32),
            query_text=text,
            top_k=32,
            now=NOW,
            scoring=plain,
            terms=query_terms(terms),
        )

    assert given(text) == made
    assert any(hit.lexical > 0.0 for hit in made)
    other = given("river")
    assert [hit.lexical for hit in other] != [hit.lexical for hit in made]
