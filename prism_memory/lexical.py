"""The lexical signal: one tokenizer and BM25 over a scope's own corpus statistics.

Pure and storage-free. Every backend tokenizes with :func:`tokenize` — PostgreSQL stores its output
(``text_tsv`` and ``text_terms``) instead of running its own text-search parser — so a term means the
same thing, and a statistic has the same value, on every backend.

Tokenizer
    Unicode NFKC, case-folded, split into ``\\w+`` runs (letters, digits and ``_`` of any script);
    the words of the Snowball English stop list (:data:`STOP_WORDS`) are dropped, and so are runs
    longer than :data:`MAX_TERM_CHARS` characters (not words); each remaining run is stemmed by the
    Snowball English (Porter2) stemmer -- PyStemmer's C build of it when installed (a runtime
    dependency: ~10x faster, and it holds the GIL for less time), else ``snowballstemmer``'s pure
    Python one; both are generated from the same Snowball source and give identical stems
    (``tests/unit/test_stemmer_parity.py`` compares them over a large vocabulary). :data:`STEMMER`
    says which one runs. This is the standard English BM25 analyser (Lucene's
    ``EnglishAnalyzer``, Anserini's default): "painting", "painted" and "paints" are one term, and
    "what", "would" or "her" — rare enough in short chat turns for idf to weigh them, common enough
    to add up over a long turn — are not terms. Words of other scripts pass through unchanged.

BM25 (Robertson & Zaragoza 2009, Lucene's non-negative idf)::

    idf(t)     = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
    bm25(d, q) = Σ_{t ∈ distinct terms of q}  idf(t) · tf(t, d)·(k1 + 1) / (tf(t, d) + k1·(1 − b + b·|d| / avgdl))

with ``N``, ``df`` and ``avgdl`` taken from :class:`CorpusStats` of the recall scope, and the
parameter defaults of the Anserini toolkit (k1 = 0.9, b = 0.4), not fitted to any data set.

BM25 by chance (:func:`chance_bm25`): what an entry of ``|d|`` terms scores on the query's terms
when it holds each of them as often as a random entry of its length would — term ``t`` with
probability ``p(t, d) = 1 − (1 − (df(t) − 1)/(N − 1))^(|d| / avgdl)``, once. The share is taken
among the *other* entries (``d`` is one of the ``df(t)`` that hold ``t``), so a term only ``d``
holds is never chance, however small the scope (0 when ``N ≤ 1``)::

    chance(d, q) = Σ_t  idf(t) · p(t, d) · (k1 + 1) / (1 + k1·(1 − b + b·|d| / avgdl))

A long entry holds many of a verbose query's common words by chance alone; the fusion
(:mod:`prism_memory.ranking`) counts only what a match scores above a margin of this.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import unicodedata
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from snowballstemmer.english_stemmer import EnglishStemmer  # type: ignore[import-untyped]

try:  # the same Snowball English algorithm compiled to C (PyStemmer)
    import Stemmer as _PyStemmer  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover - PyStemmer is a runtime dependency; this is its fallback
    _PyStemmer = None

__all__ = [
    "BM25_B",
    "BM25_K1",
    "MAX_TERM_CHARS",
    "STEMMER",
    "STOP_WORDS",
    "CorpusStats",
    "Profile",
    "TextTerms",
    "bm25",
    "bm25_evidence",
    "chance_bm25",
    "corpus_stats",
    "ideal_bm25",
    "idf",
    "leg_score",
    "leg_scores",
    "query_terms",
    "remembered_profile",
    "term_counts",
    "term_profile",
    "term_weights",
    "terms_of_tokens",
    "text_terms",
    "tokenize",
]

BM25_K1 = 0.9
"""Term-frequency saturation (Anserini's default): the 2nd occurrence of a term adds ~30 %."""
BM25_B = 0.4
"""Length normalisation strength (Anserini's default): 0 ignores length, 1 divides by it fully."""
MAX_TERM_CHARS = 64
"""Longer ``\\w+`` runs (hashes, base64, pasted blobs) are not words and are not indexed."""

# The Snowball English stop list (snowballstem.org/algorithms/english/stop.txt), the stemmer's
# companion; its contractions appear as the \w+ runs they split into ("don't" -> don, t), and
# only the fragments that are never words on their own are kept (not "don", "won", "can").
_STOP_LIST = """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom
this that these those am is are was were be been being have has had having do does did doing
would should could ought a an the and but if or because as until while of at by for with
about against between into through during before after above below to from up down in out on
off over under again further then once here there when where why how all any both each few
more most other some such no nor not only own same so than too very cannot s t m d ll re ve
"""
STOP_WORDS = frozenset(_STOP_LIST.split())
"""Words that are not terms (matched after case folding, before stemming)."""

_WORD = re.compile(r"\w+", re.UNICODE)

STEMMER: str = "PyStemmer" if _PyStemmer is not None else "snowballstemmer"
"""The Snowball English stemmer :func:`tokenize` runs: ``"PyStemmer"`` (C) or
``"snowballstemmer"`` (pure Python, when PyStemmer cannot be imported). Same stems either way."""

_LOCAL = threading.local()
"""One stemmer per thread: neither implementation's stemmer object may be shared by threads, and
large inputs are tokenized on worker threads (see :mod:`prism_memory._offload`)."""


def _c_stems(words: list[str]) -> list[str]:
    stemmer = getattr(_LOCAL, "stemmer", None)
    if stemmer is None:
        # no memo: PyStemmer's own (10,000 words) costs more than it saves once it is full and
        # purges -- ~2 us a word on texts of new words, against ~0.3 us for the bare algorithm
        stemmer = _LOCAL.stemmer = _PyStemmer.Stemmer("english", 0)
    stems: list[str] = stemmer.stemWords(words)  # one call for the whole text
    return stems


def _python_stemmer() -> Any:
    stemmer = getattr(_LOCAL, "python_stemmer", None)
    if stemmer is None:
        stemmer = _LOCAL.python_stemmer = EnglishStemmer()
    return stemmer


@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    stemmed: str = _python_stemmer().stemWord(word)
    return stemmed


_DIGITS = frozenset("0123456789")
"""A word ending in one of these is its own stem: every suffix the English stemmer removes or
rewrites ends in a letter, and ``\\w+`` words hold no apostrophe (the one prefix it drops). So
numbers, dates and codes -- most of a history's words that are new to the memo -- skip the
pure Python stemmer (the C one takes a whole text in one call)."""


def _python_stems(words: list[str]) -> list[str]:
    return [word if word[-1] in _DIGITS else _stem(word) for word in words]


_stems = _c_stems if _PyStemmer is not None else _python_stems


def tokenize(text: str) -> list[str]:
    """The terms of ``text`` in order, repeats kept (see the module doc for the rules)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _stems(
        [
            word
            for word in _WORD.findall(folded)
            if len(word) <= MAX_TERM_CHARS and word not in STOP_WORDS
        ]
    )


_CACHED_TEXT_CHARS = 4096
"""Texts up to this long have their terms memoised."""


def query_terms(text: str) -> frozenset[str]:
    """Distinct terms of ``text``: the vocabulary a recall's lexical leg looks for.

    Memoised for recently seen short texts (a recall asks twice, and agents repeat queries).
    """
    if len(text) <= _CACHED_TEXT_CHARS:
        return _cached_terms(text)
    return frozenset(tokenize(text))


@functools.lru_cache(maxsize=1024)
def _cached_terms(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


def term_counts(text: str) -> Counter[str]:
    """``term -> occurrences`` in ``text`` (its length is ``sum(counts.values())``)."""
    return Counter(tokenize(text))


@functools.lru_cache(maxsize=8192)
def _cached_profile(text: str) -> tuple[Mapping[str, int], int]:
    counts = term_counts(text)
    return dict(counts), sum(counts.values())


LONG_PROFILE_TERMS = 500_000
"""Long texts' profiles are memoised up to this many distinct terms in all (tens of MB)."""


class _LongProfiles:
    """A least-recently-used memo of long texts' profiles, bounded by their distinct terms
    (thread-safe: large candidate sets are profiled on worker threads)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held = 0
        self.profiles: OrderedDict[str, tuple[Mapping[str, int], int]] = OrderedDict()
        self.lock = threading.Lock()

    def known(self, text: str) -> tuple[Mapping[str, int], int] | None:
        with self.lock:
            found = self.profiles.get(text)
            if found is not None:
                self.profiles.move_to_end(text)
            return found

    def get(self, text: str) -> tuple[Mapping[str, int], int]:
        found = self.known(text)
        if found is not None:
            return found
        counts = term_counts(text)
        made: tuple[Mapping[str, int], int] = (dict(counts), sum(counts.values()))
        if len(counts) > self.budget:
            return made
        with self.lock:
            if text not in self.profiles:
                self.profiles[text] = made
                self.held += len(counts)
                while self.held > self.budget:
                    _, (dropped, _) = self.profiles.popitem(last=False)
                    self.held -= len(dropped)
        return made


_LONG_PROFILES = _LongProfiles(LONG_PROFILE_TERMS)


def remembered_profile(text: str) -> tuple[Mapping[str, int], int] | None:
    """:func:`term_profile` of a long ``text`` when it is memoised, else ``None`` (never
    tokenizes)."""
    return _LONG_PROFILES.known(text) if len(text) > _CACHED_TEXT_CHARS else None


def term_profile(text: str) -> tuple[Mapping[str, int], int]:
    """``(term counts, length)`` of ``text``; read-only, memoised for recently seen texts.

    Recall re-scores the same entries query after query, so their tokenization is memoised: up to
    8,192 texts of at most 4,096 characters, and longer ones up to :data:`LONG_PROFILE_TERMS`
    distinct terms in all -- a few tens of MB at worst. Stores that keep each entry's terms hand
    them to the re-rank instead (:attr:`prism_memory.models.Candidate.profile`).
    """
    if len(text) <= _CACHED_TEXT_CHARS:
        return _cached_profile(text)
    return _LONG_PROFILES.get(text)


_NO_REPEATS: Mapping[str, int] = {}


@dataclass(frozen=True, slots=True)
class TextTerms:
    """What the lexical signal keeps of one text, computed once when the text is written.

    ``joined`` is its distinct terms, sorted, separated by single spaces (a term never holds
    whitespace; one string, which the garbage collector never walks, instead of a tuple of
    thousands), ``length`` its term count with repeats, ``repeats`` the number of occurrences of
    each term found more than once (a term of :attr:`distinct` not in it occurs once). Stores keep
    it with the entry, so recall never tokenizes a stored text again: the re-rank reads each
    candidate's counts of the query's terms from it.
    """

    joined: str
    length: int
    repeats: Mapping[str, int]

    @property
    def distinct(self) -> list[str]:
        """The distinct terms, sorted."""
        return self.joined.split()

    def counts(self, terms: Iterable[str]) -> dict[str, int]:
        """``term -> occurrences`` of each of ``terms`` the text holds (the others are left out)."""
        held = frozenset(self.distinct).intersection(terms)
        return {term: self.repeats.get(term, 1) for term in held}


def text_terms(text: str) -> TextTerms:
    """The :class:`TextTerms` of ``text`` (one :func:`tokenize`)."""
    return terms_of_tokens(tokenize(text))


def terms_of_tokens(tokens: Iterable[str]) -> TextTerms:
    """The :class:`TextTerms` of a text whose :func:`tokenize` is ``tokens``."""
    counts = Counter(tokens)
    repeats = {term: n for term, n in counts.items() if n > 1} or _NO_REPEATS
    return TextTerms(" ".join(sorted(counts)), sum(counts.values()), repeats)


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """Statistics of the documents a query ranks against (the recall scope's recallable entries).

    ``documents`` is N, ``total_length`` the sum of every document's term count (so
    ``avgdl = total_length / documents``), and ``document_frequency`` maps each *query* term to
    the number of documents containing it (absent terms may be left out: they count 0). All are
    integers, so every backend reports exactly the same values.
    """

    documents: int = 0
    total_length: int = 0
    document_frequency: Mapping[str, int] = field(default_factory=dict)

    @property
    def average_length(self) -> float:
        """``avgdl``, or 0.0 for an empty corpus."""
        return self.total_length / self.documents if self.documents > 0 else 0.0

    def frequency(self, term: str) -> int:
        """``df(term)``; 0 when the term is unknown."""
        return self.document_frequency.get(term, 0)


def idf(document_frequency: int, documents: int) -> float:
    """Lucene's BM25 idf, ``ln(1 + (N − df + 0.5) / (df + 0.5))``: positive, falling with df."""
    df = min(max(document_frequency, 0), max(documents, 0))
    return math.log(1.0 + (documents - df + 0.5) / (df + 0.5))


def term_weights(terms: Iterable[str], stats: CorpusStats) -> list[tuple[str, float]]:
    """``(term, idf)`` of the distinct ``terms`` the corpus holds, in sorted term order."""
    weights = []
    for term in sorted(set(terms)):
        df = stats.frequency(term)
        if df > 0:
            weights.append((term, idf(df, stats.documents)))
    return weights


def bm25(
    terms: Iterable[str],
    counts: Mapping[str, int],
    length: int,
    stats: CorpusStats,
    *,
    k1: float = BM25_K1,
    b: float = BM25_B,
    weights: Sequence[tuple[str, float]] | None = None,
) -> float:
    """BM25 of a document (``counts``, ``length`` terms) for the distinct query ``terms``.

    Terms are summed in sorted order, so the float result does not depend on set iteration order.
    A term the statistics give no document frequency contributes nothing. ``weights`` may pass
    :func:`term_weights` of ``terms`` precomputed (when scoring many documents).
    """
    average = stats.average_length
    norm = k1 * (1.0 - b + (b * length / average if average > 0.0 else b))
    total = 0.0
    for term, weight in term_weights(terms, stats) if weights is None else weights:
        tf = counts.get(term, 0)
        if tf > 0:
            total += weight * tf * (k1 + 1.0) / (tf + norm)
    return total


def chance_bm25(
    terms: Iterable[str],
    length: int,
    stats: CorpusStats,
    *,
    k1: float = BM25_K1,
    b: float = BM25_B,
    weights: Sequence[tuple[str, float]] | None = None,
) -> float:
    """The BM25 a document of ``length`` terms scores for the distinct query ``terms`` by chance.

    ``Σ idf(t) · p(t) · (k1 + 1) / (1 + k1·(1 − b + b·length / avgdl))`` over the terms the corpus
    holds (sorted order), where ``p(t) = 1 − (1 − (df(t) − 1) / (N − 1)) ** (length / avgdl)`` is the
    chance that a random *other* document of that length holds ``t`` (the document scored is one of
    the ``df(t)``; see the module doc). 0 for an empty corpus.
    """
    average = stats.average_length
    if average <= 0.0 or stats.documents <= 0:
        return 0.0
    ratio = length / average
    unit = (k1 + 1.0) / (1.0 + k1 * (1.0 - b + b * ratio))
    total = 0.0
    for term, weight in term_weights(terms, stats) if weights is None else weights:
        share = max(0, min(stats.frequency(term), stats.documents) - 1) / max(
            stats.documents - 1, 1
        )
        total += weight * (1.0 - (1.0 - share) ** ratio) * unit
    return total


Profile = tuple[Mapping[str, int], int]
"""``(term counts, length)`` of a text (:func:`term_profile`)."""


def _profiles(texts: Sequence[str], given: Sequence[Profile | None] | None) -> list[Profile]:
    """Each ``given`` profile as it is (a store's, kept since the text was written), the others
    made by tokenizing the text."""
    if given is None:
        return list(map(term_profile, texts))
    return [
        term_profile(text) if profile is None else profile
        for text, profile in zip(texts, given, strict=True)
    ]


def bm25_evidence(
    terms: frozenset[str],
    texts: Sequence[str],
    stats: CorpusStats,
    margin: float,
    given: Sequence[Profile | None] | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """:func:`bm25` of each of ``texts`` and its lexical *evidence*, vectorised: what the fusion
    (:mod:`prism_memory.ranking`) reads of the candidates. ``given`` may hold the texts' ``(term
    counts, length)`` (``None``: tokenize that text); their counts must cover every term of
    ``terms`` that ``stats`` gives a document frequency.

    The evidence is ``Σ_t max(0, gain(t, d) − margin·chance(t, d))`` over the query terms ``d``
    holds: each term's BM25 gain above ``margin`` times what an entry of ``d``'s length gets from it
    by chance (:func:`chance_bm25`, term by term). The BM25 uses the same IEEE operations as the
    scalar formula, element-wise and term by term in sorted order, so every value is bit-identical
    to it; both sums run in sorted term order.
    """
    weights = term_weights(terms, stats)
    total = np.zeros(len(texts), dtype=np.float64)
    evidence = np.zeros(len(texts), dtype=np.float64)
    if not weights:
        return total, evidence
    profiles = _profiles(texts, given)
    lengths = np.array([length for _, length in profiles], dtype=np.float64)
    frequencies = np.array(
        [[counts.get(term, 0) for counts, _ in profiles] for term, _ in weights],
        dtype=np.float64,
    )  # one row per term, one column per text
    average = stats.average_length
    relative = BM25_B * lengths / average if average > 0.0 else BM25_B
    norm = BM25_K1 * (1.0 - BM25_B + relative)
    idfs = np.array([[weight] for _, weight in weights], dtype=np.float64)
    gains = np.where(
        frequencies > 0.0, idfs * frequencies * (BM25_K1 + 1.0) / (frequencies + norm), 0.0
    )  # gains[t, d]: what term t adds to text d's BM25
    # chance[t, d]: what term t would add to a text of d's length holding it as a random one would
    ratio = lengths / average if average > 0.0 else np.zeros(len(texts), dtype=np.float64)
    shares = np.array(
        [
            [max(0, min(stats.frequency(term), stats.documents) - 1) / max(stats.documents - 1, 1)]
            for term, _ in weights
        ],
        dtype=np.float64,
    )
    unit = (BM25_K1 + 1.0) / (1.0 + norm)
    chance = idfs * (1.0 - np.power(1.0 - shares, ratio)) * unit
    surplus = np.where(frequencies > 0.0, np.maximum(0.0, gains - margin * chance), 0.0)
    for gain, extra in zip(gains, surplus, strict=True):  # in sorted term order
        total += gain
        evidence += extra
    return total, evidence


def corpus_stats(texts: Iterable[str], terms: Iterable[str]) -> CorpusStats:
    """The :class:`CorpusStats` of ``texts`` for the query ``terms`` (a reference computation)."""
    wanted = frozenset(terms)
    documents = total = 0
    frequency: Counter[str] = Counter()
    for text in texts:
        tokens = tokenize(text)
        documents += 1
        total += len(tokens)
        frequency.update(wanted.intersection(tokens))
    return CorpusStats(documents, total, dict(frequency))


def ideal_bm25(terms: Iterable[str], stats: CorpusStats) -> float:
    """BM25 of an average-length document holding each query term (present in the corpus) once.

    With ``tf = 1`` and ``|d| = avgdl`` every term contributes exactly its idf, so this is
    ``Σ idf(t)`` over the distinct ``terms`` whose document frequency is positive (summed in sorted
    order). It is what "a good lexical match for this query" scores in this corpus.
    """
    total = 0.0
    for _, weight in term_weights(terms, stats):
        total += weight
    return total


def leg_scores(
    idf_sums: npt.NDArray[np.float64], lengths: npt.NDArray[Any], stats: CorpusStats
) -> npt.NDArray[np.float64]:
    """The lexical leg's selection score of many documents at once (see :func:`leg_score`).

    ``idf_sums[i]`` is document ``i``'s sum of the idf of its matched terms, added in sorted term
    order starting from 0.0; ``lengths[i]`` its term count. Element-wise IEEE arithmetic in the
    same order as :func:`leg_score` (and the PostgreSQL store's SQL), so the values are identical.
    """
    average = stats.average_length
    if average <= 0.0:
        return np.zeros(len(idf_sums), dtype=np.float64)
    sums = np.asarray(idf_sums, dtype=np.float64)
    sizes = np.asarray(lengths, dtype=np.float64)
    result: npt.NDArray[np.float64] = (sums * (BM25_K1 + 1.0)) / (
        1.0 + BM25_K1 * ((1.0 - BM25_B) + (BM25_B * sizes) / average)
    )
    return result


def leg_score(matched: Iterable[str], length: int, stats: CorpusStats) -> float:
    """The lexical leg's selection score: BM25 with each matched term's frequency taken as 1.

    ``(Σ idf(t) over the matched terms, in sorted order) · (k1 + 1) / (1 + k1·(1 − b + b·length /
    avgdl))``. Stores keep term *sets*, so this is what they can rank by; the fusion re-scores the
    selected candidates with the true term frequencies. Written operation by operation as the
    PostgreSQL store computes it in SQL, so both backends select the same records.
    """
    total = 0.0
    for _, weight in term_weights(matched, stats):
        total += weight
    return float(leg_scores(np.array([total]), np.array([length]), stats)[0])
