"""The lexical signal: one tokenizer and BM25 over a scope's own corpus statistics.

Pure and storage-free. Every backend tokenizes with :func:`tokenize` — PostgreSQL stores its output
(``text_tsv`` and ``text_terms``) instead of running its own text-search parser — so a term means the
same thing, and a statistic has the same value, on every backend.

Tokenizer
    Unicode NFKC, case-folded, split into ``\\w+`` runs (letters, digits and ``_`` of any script),
    each run stemmed by the Snowball English (Porter2) stemmer; runs longer than
    :data:`MAX_TERM_CHARS` characters are not words and are dropped. Stemming is the standard BM25
    analyser choice (Lucene's ``EnglishAnalyzer``, Anserini's default): "painting", "painted" and
    "paints" are one term. Words of other scripts pass through unchanged; no stop-word list — idf
    already gives words that occur everywhere almost no weight.

BM25 (Robertson & Zaragoza 2009, Lucene's non-negative idf)::

    idf(t)     = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
    bm25(d, q) = Σ_{t ∈ distinct terms of q}  idf(t) · tf(t, d)·(k1 + 1) / (tf(t, d) + k1·(1 − b + b·|d| / avgdl))

with ``N``, ``df`` and ``avgdl`` taken from :class:`CorpusStats` of the recall scope, and the
parameter defaults of the Anserini toolkit (k1 = 0.9, b = 0.4), not fitted to any data set.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import snowballstemmer  # type: ignore[import-untyped]

__all__ = [
    "BM25_B",
    "BM25_K1",
    "MAX_TERM_CHARS",
    "CorpusStats",
    "bm25",
    "corpus_stats",
    "idf",
    "leg_score",
    "query_terms",
    "term_counts",
    "tokenize",
]

BM25_K1 = 0.9
"""Term-frequency saturation (Anserini's default): the 2nd occurrence of a term adds ~30 %."""
BM25_B = 0.4
"""Length normalisation strength (Anserini's default): 0 ignores length, 1 divides by it fully."""
MAX_TERM_CHARS = 64
"""Longer ``\\w+`` runs (hashes, base64, pasted blobs) are not words and are not indexed."""

_WORD = re.compile(r"\w+", re.UNICODE)
_STEMMER = snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    stemmed: str = _STEMMER.stemWord(word)
    return stemmed


def tokenize(text: str) -> list[str]:
    """The terms of ``text`` in order, repeats kept (see the module doc for the rules)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [_stem(word) for word in _WORD.findall(folded) if len(word) <= MAX_TERM_CHARS]


def query_terms(text: str) -> frozenset[str]:
    """Distinct terms of ``text``: the vocabulary a recall's lexical leg looks for."""
    return frozenset(tokenize(text))


def term_counts(text: str) -> Counter[str]:
    """``term -> occurrences`` in ``text`` (its length is ``sum(counts.values())``)."""
    return Counter(tokenize(text))


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


def bm25(
    terms: Iterable[str],
    counts: Mapping[str, int],
    length: int,
    stats: CorpusStats,
    *,
    k1: float = BM25_K1,
    b: float = BM25_B,
) -> float:
    """BM25 of a document (``counts``, ``length`` terms) for the distinct query ``terms``.

    Terms are summed in sorted order, so the float result does not depend on set iteration order.
    A term the statistics give no document frequency contributes nothing.
    """
    average = stats.average_length
    norm = k1 * (1.0 - b + (b * length / average if average > 0.0 else b))
    total = 0.0
    for term in sorted(set(terms)):
        tf = counts.get(term, 0)
        df = stats.frequency(term)
        if tf <= 0 or df <= 0:
            continue
        total += idf(df, stats.documents) * tf * (k1 + 1.0) / (tf + norm)
    return total


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


def leg_score(matched: Iterable[str], length: int, stats: CorpusStats) -> float:
    """The lexical leg's selection score: BM25 with each matched term's frequency taken as 1.

    ``(Σ idf(t) over the matched terms, in sorted order) · (k1 + 1) / (1 + k1·(1 − b + b·length /
    avgdl))``. Stores keep term *sets*, so this is what they can rank by; the fusion re-scores the
    selected candidates with the true term frequencies. Written operation by operation as the
    PostgreSQL store computes it in SQL, so both backends select the same records.
    """
    total = 0.0
    for term in sorted(set(matched)):
        total += idf(stats.frequency(term), stats.documents)
    average = stats.average_length
    if average <= 0.0:
        return 0.0
    return total * (BM25_K1 + 1.0) / (1.0 + BM25_K1 * (1.0 - BM25_B + BM25_B * length / average))
