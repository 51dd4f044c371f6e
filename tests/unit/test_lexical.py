"""The tokenizer's stop list, the long-text path and a corpus without length (``prism_memory.lexical``).

Expected values are written out here by hand -- the stop list is copied from the Snowball English
list the module documents, not imported from it -- so a changed word, a dropped branch or a changed
bound in the module fails a test.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from prism_memory.lexical import (
    STOP_WORDS,
    CorpusStats,
    _LongProfiles,
    bm25,
    ideal_bm25,
    leg_score,
    leg_scores,
    query_terms,
    term_profile,
    term_weights,
    tokenize,
)

# The Snowball English stop list (snowballstem.org/algorithms/english/stop.txt); its contractions
# split into \w+ runs, of which only the fragments that are never words alone are listed.
SNOWBALL_ENGLISH = """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her
hers herself it its itself they them their theirs themselves what which who whom this that these
those am is are was were be been being have has had having do does did doing would should could
ought a an the and but if or because as until while of at by for with about against between into
through during before after above below to from up down in out on off over under again further
then once here there when where why how all any both each few more most other some such no nor not
only own same so than too very cannot s t m d ll re ve
""".split()  # noqa: SIM905 - laid out as the Snowball file prints it

# contraction fragments that are words of their own, and near misses of listed words: all terms.
# The list is matched before stemming: "yourselfs" is a term, although it stems to a stop word.
NOT_STOP_WORDS = [
    ("don", "don"),
    ("won", "won"),
    ("can", "can"),
    ("shan", "shan"),
    ("isn", "isn"),
    ("mine", "mine"),
    ("yourselfs", "yourself"),
    ("thing", "thing"),
    ("x", "x"),
    ("ab", "ab"),
]


def test_the_stop_list_is_the_snowball_english_list():
    assert len(SNOWBALL_ENGLISH) == 131 == len(set(SNOWBALL_ENGLISH))
    assert frozenset(SNOWBALL_ENGLISH) == STOP_WORDS


@pytest.mark.parametrize("word", SNOWBALL_ENGLISH)
def test_each_stop_word_is_dropped_in_any_case(word: str):
    assert tokenize(word) == []
    assert tokenize(f"zebra {word.upper()} zebra") == ["zebra", "zebra"]
    assert query_terms(f"{word.title()} zebra") == frozenset({"zebra"})


@pytest.mark.parametrize(("word", "term"), NOT_STOP_WORDS)
def test_words_off_the_list_are_terms(word: str, term: str):
    assert tokenize(f"zebra {word}") == ["zebra", term]


# ---- texts over 4,096 characters -------------------------------------------------------------------

SHORT_LIMIT = 4096  # texts up to this long are memoised; longer ones are tokenized afresh


def _text_of_length(length: int, words: str = "ocean tides ") -> str:
    body = (words * (length // len(words) + 1))[: length - 5]
    return body + " moon"  # always ends on a whole word


def test_a_long_text_has_its_terms_like_a_short_one():
    long_text = _text_of_length(SHORT_LIMIT + 1)
    assert len(long_text) == SHORT_LIMIT + 1
    assert query_terms(long_text) == frozenset({"ocean", "tide", "moon"})
    counts, length = term_profile(long_text)
    assert dict(counts) == {"ocean": length // 2, "tide": length // 2, "moon": 1}
    assert length == len(tokenize(long_text)) == 683


def test_long_texts_profiles_are_memoised_within_a_budget_and_short_ones_are():
    at_limit, over = _text_of_length(SHORT_LIMIT), _text_of_length(SHORT_LIMIT + 1)
    assert (len(at_limit), len(over)) == (SHORT_LIMIT, SHORT_LIMIT + 1)
    # a text of exactly 4,096 characters is memoised: the same objects come back
    assert query_terms(at_limit) is query_terms(at_limit)
    assert term_profile(at_limit) is term_profile(at_limit)
    # one character more: its query terms are made afresh, its profile comes from the long memo
    assert query_terms(over) is not query_terms(over)
    assert query_terms(over) == query_terms(over)
    assert term_profile(over) is term_profile(over)
    assert term_profile(over) == (dict(Counter(tokenize(over))), len(tokenize(over)))


def test_the_long_memo_keeps_at_most_its_budget_of_distinct_terms():
    memo = _LongProfiles(budget=10)
    texts = [" ".join(f"word{i}x{j}" for j in range(4)) + " " * SHORT_LIMIT for i in range(5)]
    made = [memo.get(text) for text in texts]
    assert memo.held == 8
    assert list(memo.profiles) == texts[3:]
    assert memo.get(texts[4]) is made[4]
    assert memo.get(texts[0]) is not made[0]
    assert memo.get(texts[0]) == made[0]
    huge = " ".join(f"w{i}a" for i in range(11))
    assert memo.get(huge)[1] == 11
    assert huge not in memo.profiles


def test_a_short_text_is_memoised_across_calls():
    text = "memo pad notes"
    assert query_terms(text) is query_terms(text) == frozenset({"memo", "pad", "note"})
    counts, length = term_profile(text)
    assert (dict(counts), length) == ({"memo": 1, "pad": 1, "note": 1}, 3)


# ---- a corpus whose average length is zero ---------------------------------------------------------
# Decided behaviour: no score is ever NaN or infinite. With avgdl = 0 (an empty corpus, or
# documents without terms) the lexical leg's selection score is 0.0 for every document -- there is
# nothing to normalise by, and a store has no term to rank on -- while bm25 takes |d| / avgdl as 1.


@pytest.mark.parametrize(
    "stats",
    [CorpusStats(), CorpusStats(0, 0, {"x": 1}), CorpusStats(4, 0, {"x": 2})],
    ids=["empty", "empty-with-df", "documents-without-terms"],
)
def test_a_zero_average_length_gives_zero_leg_scores_never_nan(stats: CorpusStats):
    assert stats.average_length == 0.0
    scores = leg_scores(np.array([1.5, 0.0, 2.0]), np.array([3, 0, 7]), stats)
    assert scores.dtype == np.float64
    assert scores.tolist() == [0.0, 0.0, 0.0]
    assert leg_score(["x"], 3, stats) == 0.0
    assert leg_score([], 0, stats) == 0.0


def test_a_zero_average_length_takes_the_length_ratio_as_one_in_bm25():
    stats = CorpusStats(4, 0, {"x": 2})
    idf_x = math.log(1 + (4 - 2 + 0.5) / (2 + 0.5))
    # norm = k1 · (1 − b + b) = 0.9, whatever the document's length
    for length in (0, 1, 50):
        score = bm25(["x"], {"x": 3}, length, stats)
        assert math.isfinite(score)
        assert score == pytest.approx(idf_x * 3 * 1.9 / (3 + 0.9), rel=1e-12)


def test_an_empty_corpus_has_average_length_zero_not_an_error():
    assert CorpusStats().average_length == 0.0
    assert CorpusStats(0, 5).average_length == 0.0  # no documents: no average, whatever the total
    assert CorpusStats(1, 0).average_length == 0.0
    assert CorpusStats(4, 10).average_length == 2.5


# ---- term weights and the ideal match ---------------------------------------------------------------


def test_term_weights_keep_only_terms_the_corpus_holds_in_sorted_order():
    stats = CorpusStats(10, 40, {"pear": 1, "fig": 9, "kiwi": 0})
    weights = term_weights(["pear", "kiwi", "fig", "pear", "plum"], stats)
    assert [term for term, _ in weights] == ["fig", "pear"]
    assert weights[0][1] == pytest.approx(math.log(1 + 1.5 / 9.5), rel=1e-12)
    assert weights[1][1] == pytest.approx(math.log(1 + 9.5 / 1.5), rel=1e-12)
    assert ideal_bm25(["pear", "kiwi", "fig"], stats) == pytest.approx(
        math.log(1 + 1.5 / 9.5) + math.log(1 + 9.5 / 1.5), rel=1e-12
    )
    assert ideal_bm25(["kiwi", "plum"], stats) == 0.0


def test_precomputed_weights_are_used_as_given():
    stats = CorpusStats(10, 40, {"pear": 1})
    assert bm25(["pear"], {"pear": 1}, 4, stats, weights=[("pear", 2.0)]) == pytest.approx(
        2.0 * 1.9 / (1 + 0.9), rel=1e-12
    )
    assert bm25(["pear"], {"pear": 1}, 4, stats, weights=[]) == 0.0


def test_a_query_term_the_corpus_holds_but_the_document_lacks_adds_nothing():
    stats = CorpusStats(10, 40, {"ant": 3, "bee": 2})
    only_bee = bm25(["bee"], {"bee": 1}, 4, stats)
    assert only_bee == pytest.approx(math.log(1 + 8.5 / 2.5) * 1.9 / (1 + 0.9), rel=1e-12)
    assert bm25(["ant", "bee"], {"bee": 1}, 4, stats) == only_bee
    assert bm25(["ant"], {"bee": 1}, 4, stats) == 0.0


def test_a_word_ending_in_a_digit_is_its_own_stem_as_the_stemmer_says():
    """The tokenizer skips the stemmer for words ending in a digit: the stemmer would have kept
    them as they are (random ``\\w+`` words over letters, digits and ``_``, and real suffixes
    followed by a digit), while a word ending in a letter is still stemmed."""
    import random
    import string

    import snowballstemmer

    stemmer = snowballstemmer.stemmer("english")
    rng = random.Random(7)
    letters = string.ascii_lowercase * 3 + string.digits + "_éß"
    words = [
        "".join(rng.choice(letters) for _ in range(rng.randint(0, 14))) + rng.choice(string.digits)
        for _ in range(20_000)
    ]
    words += [f"{base}{d}" for base in ("running", "skies", "ying", "happiness", "y") for d in "09"]
    for word in words:
        folded = word.casefold()
        assert stemmer.stemWord(folded) == folded
        assert tokenize(word) == [folded]
    assert tokenize("running2 running") == ["running2", "run"]
