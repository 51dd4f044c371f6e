"""The lexical signal and the hybrid fusion: tokenizer, BM25 properties, scale-free blend, ties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prism_memory.lexical import (
    BM25_B,
    BM25_K1,
    MAX_TERM_CHARS,
    CorpusStats,
    bm25,
    corpus_stats,
    ideal_bm25,
    idf,
    leg_score,
    query_terms,
    term_counts,
    tokenize,
)
from prism_memory.ranking import FusionCandidate, fuse


def vec(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def candidate(cid: str, text: str, vector: np.ndarray, sequence: int = 0) -> FusionCandidate[str]:
    return FusionCandidate(item=cid, id=cid, sequence=sequence, vector=vector, text=text)


# ---- tokenizer ------------------------------------------------------------------------------------


def test_tokenizer_folds_stems_and_drops_stop_words():
    assert tokenize("What would Caroline PAINT? She painted; paintings!") == [
        "carolin",
        "paint",
        "paint",
        "paint",
    ]


def test_tokenizer_normalises_unicode_and_keeps_other_scripts():
    assert tokenize("ﬁsh Straße") == ["fish", "strass"]  # NFKC ligature, case folding
    assert tokenize("Привет, мир! 東京タワー γειά") == ["привет", "мир", "東京タワー", "γειά"]


def test_tokenizer_drops_runs_that_are_not_words():
    blob = "x" * (MAX_TERM_CHARS + 1)
    assert tokenize(f"keep {blob} {'z' * MAX_TERM_CHARS}") == ["keep", "z" * MAX_TERM_CHARS]


def test_a_query_of_stop_words_has_no_terms():
    assert query_terms("what is it that you would do?") == frozenset()


def test_term_counts_count_repeats():
    assert term_counts("coffee, Coffee and more coffees") == {"coffe": 3}


# ---- BM25 -----------------------------------------------------------------------------------------


def test_idf_orders_a_rare_term_above_a_common_one():
    assert idf(1, 100) > idf(10, 100) > idf(60, 100) > idf(100, 100) > 0.0
    assert idf(1, 100) == pytest.approx(math.log(1 + 99.5 / 1.5))


def test_bm25_ranks_the_rare_term_match_first():
    texts = ["zebra grass", "grass field", "grass hill", "grass lake"]
    stats = corpus_stats(texts, ["zebra", "grass"])
    assert stats == CorpusStats(4, 8, {"zebra": 1, "grass": 4})
    rare = bm25(["zebra"], term_counts("zebra stone"), 2, stats)
    common = bm25(["grass"], term_counts("grass stone"), 2, stats)
    assert rare > common > 0.0
    fused = fuse(
        [
            candidate("common", "grass stone", vec(1, 0)),
            candidate("rare", "zebra stone", vec(1, 0)),
        ],
        query_vector=vec(1, 0),
        query_text="zebra grass",
        stats=stats,
    )
    assert [f.id for f in fused] == ["rare", "common"]


def test_a_repeated_term_saturates():
    stats = CorpusStats(10, 40, {"coffe": 3})
    scores = [bm25(["coffe"], {"coffe": tf}, 4, stats) for tf in range(1, 40)]
    gains = np.diff(scores)
    assert np.all(gains > 0)  # more occurrences still help ...
    assert np.all(np.diff(gains) < 0)  # ... less and less
    assert scores[-1] < idf(3, 10) * (BM25_K1 + 1)  # and never pass idf·(k1 + 1)


def test_longer_documents_score_lower_for_the_same_match():
    stats = CorpusStats(10, 100, {"coffe": 3})
    short, average, long = (bm25(["coffe"], {"coffe": 1}, n, stats) for n in (2, 10, 50))
    assert short > average > long
    assert average == pytest.approx(idf(3, 10))  # tf 1 at the average length: exactly its idf


def test_bm25_is_written_out_as_the_formula():
    stats = CorpusStats(documents=5, total_length=30, document_frequency={"a": 2, "b": 1})
    k1, b = BM25_K1, BM25_B
    norm = k1 * (1 - b + b * 9 / 6)
    expected = math.log(1 + 3.5 / 2.5) * 2 * (k1 + 1) / (2 + norm)
    expected += math.log(1 + 4.5 / 1.5) * 1 * (k1 + 1) / (1 + norm)
    assert bm25({"a", "b", "c"}, {"a": 2, "b": 1, "c": 5}, 9, stats) == pytest.approx(expected)


def test_the_leg_score_is_bm25_with_unit_term_frequencies():
    stats = CorpusStats(documents=7, total_length=50, document_frequency={"a": 2, "b": 5, "c": 1})
    for matched, length in ((["a"], 3), (["a", "b"], 12), (["c", "b", "a"], 7)):
        ones = dict.fromkeys(matched, 1)
        assert leg_score(matched, length, stats) == pytest.approx(
            bm25(matched, ones, length, stats), rel=1e-12
        )
    assert leg_score(["a"], 3, CorpusStats()) == 0.0


def test_the_ideal_match_sums_the_idf_of_terms_the_scope_holds():
    stats = CorpusStats(documents=4, total_length=12, document_frequency={"a": 1, "b": 4})
    assert ideal_bm25(["a", "b", "absent"], stats) == pytest.approx(idf(1, 4) + idf(4, 4))
    assert ideal_bm25(["absent"], stats) == 0.0


# ---- fusion ---------------------------------------------------------------------------------------


def test_fusion_scales_each_signal_to_the_candidates():
    stats = CorpusStats(documents=10, total_length=20, document_frequency={"zebra": 2})
    fused = fuse(
        [candidate("near", "plain words", vec(1, 0)), candidate("word", "zebra words", vec(0, 1))],
        query_vector=vec(2, 0),
        query_text="zebra",
        stats=stats,
    )
    by_id = {f.id: f for f in fused}
    # tf 1 at the average length: bm25 = idf; by chance an entry of that length holds "zebra" as
    # one of the 9 others would, p = 1 − (1 − 1/9)^1 = 1/9, so the margin (3) discounts idf / 3;
    # the best evidence is 1
    zebra = math.log(1 + 8.5 / 2.5)
    assert by_id["word"].bm25 == pytest.approx(zebra)
    assert by_id["word"].bm25_chance == pytest.approx(zebra / 3)
    assert by_id["word"].bm25_scale == pytest.approx(2 * zebra / 3)
    assert by_id["word"].lexical == pytest.approx(1.0)
    assert by_id["near"].semantic == 1.0
    # normalised cosines 1 and 0: median 0.5, lexical weight 0.5 · 0.5
    assert by_id["near"].lexical_weight == pytest.approx(0.25)
    assert by_id["near"].similarity == pytest.approx(0.75)
    assert by_id["word"].similarity == pytest.approx(0.25)
    assert [f.id for f in fused] == ["near", "word"]


def test_a_term_that_half_the_entries_hold_is_no_evidence():
    # the only match is a term half the scope holds (a speaker's name): a random entry of the same
    # length holds it about as often, so it counts nothing and cannot lift its entries
    texts = ["caroline went home", "caroline said hello", "melanie paints sunsets", "quiet day"]
    stats = corpus_stats(texts, query_terms("Caroline sunrise"))
    fused = fuse(
        [candidate(str(i), t, vec(1, 3 - i)) for i, t in enumerate(texts)],
        query_vector=vec(1, 0),
        query_text="Caroline sunrise",
        stats=stats,
    )
    assert max(f.bm25 for f in fused) > 0.0
    assert max(f.lexical for f in fused) == 0.0
    assert [f.id for f in fused] == ["3", "2", "1", "0"]  # cosine order


def test_cosine_order_survives_the_scaling_even_below_zero():
    fused = fuse(
        [
            candidate("opposite", "x", vec(-1, 0)),
            candidate("away", "x", vec(-1, 1)),
            candidate("near", "x", vec(1, 0.1)),
        ],
        query_vector=vec(1, 0),
        query_text="",
        stats=None,
    )
    assert [f.id for f in fused] == ["near", "away", "opposite"]
    assert fused[-1].semantic == -1.0
    assert fused[-1].lexical_weight == 0.0  # the median normalised cosine is below 0
    assert fused[-1].similarity == pytest.approx(-1.0)


def test_the_weight_moves_the_blend():
    cands = [candidate("dense", "nothing", vec(1, 0)), candidate("lexical", "zebra", vec(0.2, 1))]
    stats = CorpusStats(documents=10, total_length=10, document_frequency={"zebra": 1})
    for weight, first in ((0.0, "dense"), (1.0, "lexical")):
        fused = fuse(
            cands, query_vector=vec(1, 0), query_text="zebra", stats=stats, lexical_weight=weight
        )
        assert fused[0].id == first


def test_the_margin_zero_counts_every_match_in_full():
    # "zebra" in every entry of the scope: a random other entry of the same length holds it for
    # sure, so at the default margin it is no evidence; at margin 0 it is plain BM25
    cands = [candidate("dense", "nothing", vec(1, 0)), candidate("lexical", "zebra", vec(0.2, 1))]
    stats = CorpusStats(documents=3, total_length=3, document_frequency={"zebra": 3})
    default = {
        f.id: f for f in fuse(cands, query_vector=vec(1, 0), query_text="zebra", stats=stats)
    }
    plain = {
        f.id: f
        for f in fuse(
            cands, query_vector=vec(1, 0), query_text="zebra", stats=stats, chance_margin=0.0
        )
    }
    assert default["lexical"].lexical == 0.0
    assert default["lexical"].bm25_chance == default["lexical"].bm25 > 0.0
    assert plain["lexical"].lexical == 1.0
    assert plain["lexical"].bm25_chance == 0.0


def test_no_candidates_no_results():
    assert fuse([], query_vector=vec(1, 0), query_text="zebra", stats=CorpusStats()) == []


WORDS = ["zebra", "grass", "field", "hill", "lake", "stone", "river"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
coordinates = st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0])  # coarse, so scores tie
vectors = st.tuples(coordinates, coordinates, coordinates)


def _build(specs):
    return [
        candidate(f"c{i}", text, vec(*vector), sequence=seq)
        for i, (text, vector, seq) in enumerate(specs)
    ]


specs = st.lists(st.tuples(texts, vectors, st.integers(0, 3)), min_size=1, max_size=10)
queries = st.lists(st.sampled_from(WORDS), min_size=0, max_size=3).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(specs=specs, query=queries, query_vector=vectors, data=st.data())
def test_ties_are_deterministic_whatever_the_input_order(specs, query, query_vector, data):
    cands = _build(specs)
    stats = corpus_stats([c.text for c in cands], query_terms(query))
    qv = vec(*query_vector)
    expected = fuse(cands, query_vector=qv, query_text=query, stats=stats)
    shuffled = data.draw(st.permutations(cands))
    again = fuse(shuffled, query_vector=qv, query_text=query, stats=stats)
    assert [(f.id, f.similarity) for f in again] == [(f.id, f.similarity) for f in expected]
    keys = [(-f.similarity, f.sequence, f.id) for f in expected]
    assert keys == sorted(keys)


@settings(max_examples=200, deadline=None)
@given(specs=specs, query=queries, data=st.data())
def test_an_unrelated_entry_changes_others_only_through_the_statistics(specs, query, data):
    cands = _build(specs)
    qv = vec(1.0, 0.5, -0.5)
    # unrelated: shares no word with the query, and its vector is orthogonal to the query's
    filler = data.draw(st.sampled_from(["moon", "tide", "ember lantern"]))
    unrelated = candidate(
        "unrelated", filler, vec(0.0, 1.0, 1.0), sequence=data.draw(st.integers(0, 3))
    )
    assert float(unrelated.vector @ qv) == 0.0
    widened = [*cands, unrelated]
    stats = corpus_stats([c.text for c in widened], query_terms(query))  # N and avgdl shift

    with_it = fuse(widened, query_vector=qv, query_text=query, stats=stats)
    without_it = fuse(cands, query_vector=qv, query_text=query, stats=stats)
    # each other candidate keeps both scaled signals; only the lexical weight (λ times the median
    # normalised cosine, which the extra candidate shifts) may move its similarity
    mine = {f.id: f for f in without_it}
    for fused in with_it:
        if fused.id == "unrelated":
            continue
        alone = mine[fused.id]
        assert (fused.semantic, fused.lexical, fused.bm25, fused.bm25_chance) == (
            alone.semantic,
            alone.lexical,
            alone.bm25,
            alone.bm25_chance,
        )
        assert (fused.semantic_scale, fused.bm25_scale) == (alone.semantic_scale, alone.bm25_scale)
        w = fused.lexical_weight
        dense = fused.semantic / fused.semantic_scale
        assert fused.similarity == pytest.approx((1 - w) * dense + w * fused.lexical, abs=1e-12)
