"""BM25 and the lexical leg's score are exactly the documented formulas (k1 = 0.9, b = 0.4).

The expected values are computed here from the formulas as ``prism_memory.lexical`` documents them,
with ``math`` only — not by the module under test.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from prism_memory.lexical import (
    BM25_B,
    BM25_K1,
    MAX_TERM_CHARS,
    CorpusStats,
    bm25,
    corpus_stats,
    idf,
    leg_score,
    term_counts,
    tokenize,
)

K1, B = 0.9, 0.4  # documented: Anserini's defaults


def reference_idf(df: int, n: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def test_the_documented_parameters():
    assert (BM25_K1, BM25_B, MAX_TERM_CHARS) == (0.9, 0.4, 64)


def test_idf_follows_lucene_and_clamps_df_into_zero_to_n():
    assert idf(2, 10) == pytest.approx(reference_idf(2, 10), rel=1e-12)
    assert idf(0, 10) == pytest.approx(math.log(1.0 + 10.5 / 0.5), rel=1e-12)
    assert idf(15, 10) == pytest.approx(reference_idf(10, 10), rel=1e-12)  # df > N counts as N
    assert idf(-3, 10) == pytest.approx(reference_idf(0, 10), rel=1e-12)  # df < 0 counts as 0
    assert idf(1, 0) == pytest.approx(math.log(2.0), rel=1e-12)  # an empty corpus: df is 0


def test_a_term_missing_from_the_document_or_the_corpus_adds_nothing():
    stats = CorpusStats(5, 25, {"bee": 2, "cat": 0})
    only_bee = bm25(["bee"], {"bee": 1}, 5, stats)
    assert only_bee > 0
    # "ant" sorts first and is absent from the document; "cat" has df 0; "bee" still counts
    assert bm25(["ant", "bee", "cat"], {"bee": 1, "cat": 4}, 5, stats) == only_bee
    assert bm25(["ant"], {"bee": 1}, 5, stats) == 0.0


def test_an_empty_corpus_has_no_average_length_and_no_leg_score():
    empty = CorpusStats()
    assert (empty.documents, empty.total_length, empty.average_length) == (0, 0, 0.0)
    assert empty.frequency("anything") == 0
    assert leg_score(["x"], 3, empty) == 0.0
    # without an average length the length factor is b itself: norm = k1 · (1 − b + b) = k1
    stats = CorpusStats(0, 0, {"x": 1})
    assert bm25(["x"], {"x": 2}, 3, stats) == pytest.approx(
        reference_idf(0, 0) * 2 * (K1 + 1) / (2 + K1), rel=1e-12
    )


def test_corpus_stats_counts_documents_lengths_and_frequencies():
    stats = corpus_stats(["red cat sat", "big cat", "dogs bark"], ["cat", "dog", "owl"])
    assert stats == CorpusStats(3, 7, {"cat": 2, "dog": 1})
    assert stats.average_length == pytest.approx(7 / 3)
    assert stats.frequency("owl") == 0


def test_a_word_of_max_term_chars_is_kept_and_a_longer_one_dropped():
    kept, dropped = "k" * 64, "d" * 65
    assert tokenize(f"{kept} {dropped} ok") == [kept, "ok"]
    assert term_counts(f"{kept} {kept}") == {kept: 2}


def test_corpus_statistics_are_immutable():
    stats = CorpusStats(1, 1, {"a": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.documents = 2  # type: ignore[misc]


def test_an_average_length_below_one_still_normalises():
    # two documents, one term between them: avgdl = 0.5
    stats = CorpusStats(2, 1, {"x": 1})
    assert CorpusStats(1, 5).average_length == 5.0
    assert stats.average_length == 0.5
    norm = K1 * (1 - B + B * 3 / 0.5)
    assert bm25(["x"], {"x": 1}, 3, stats) == pytest.approx(
        reference_idf(1, 2) * (K1 + 1) / (1 + norm), rel=1e-12
    )
    assert leg_score(["x"], 3, stats) == pytest.approx(
        reference_idf(1, 2) * (K1 + 1) / (1 + norm), rel=1e-12
    )
