"""The one pure re-rank every backend shares.

Stores only *select* candidates — the nearest by cosine and the best lexical matches — and hand back
each candidate's stored vector and text plus the recall scope's :class:`~prism_memory.lexical.CorpusStats`.
Everything that decides order happens here, in float64, so every backend orders identically by
construction. :func:`fuse` is the hybrid fusion (recall and the RAG store's ``hybrid_query`` both
use it); :func:`rerank` adds the opt-in recency and importance blend and the cut.

Fusion over the candidate set ``C`` of one query (λ = ``lexical_weight``, 0.5 by default; m =
``chance_margin``, 3 by default)::

    semantic(d)   = cos(q, d)                               # true cosine, in [−1, 1], never clamped
    dense(d)      = semantic(d) / max_C |semantic|
                    # (an entry with later windows: semantic(d) = max(cos(q, d),
                    #  max_j cos(q, w_j) − δ), δ = prism_memory.windows.WINDOW_MARGIN)
    gain(t, d)    = idf(t)·tf·(k1 + 1) / (tf + k1·(1 − b + b·|d| / avgdl))    # bm25(d) = Σ_t gain
    chance(t, d)  = idf(t)·(1 − (1 − (df(t) − 1)/(N − 1))^(|d| / avgdl))·(k1 + 1) / (1 + k1·(1 − b + b·|d| / avgdl))
    evidence(d)   = Σ_{t ∈ q, tf(t, d) > 0} max(0, gain(t, d) − m·chance(t, d))
    lexical(d)    = evidence(d) / max_C evidence
    w             = λ · clamp(median_C dense, 0, 1)
    similarity(d) = (1 − w)·dense(d) + w·lexical(d)

* ``chance(t, d)`` is what term ``t`` adds to the BM25 of an entry of ``d``'s length that holds it
  as a random entry of that length would (:func:`prism_memory.lexical.chance_bm25`). A term counts
  only for what it adds above ``m`` times that: a term a third of the scope holds (a speaker's
  name, the project's name) is no evidence at m = 3, and a long entry gets no credit for holding a
  verbose query's common words, which it would by chance. m = 0 is plain BM25.
* the dense signal is divided by the largest ``|cosine|`` among the candidates — the nearest
  candidate counts 1 and cosine order is kept exactly (a negative cosine stays below a smaller
  negative one); the lexical evidence by the best candidate's, so both are in [0, 1] whatever the
  query's length or the corpus.
* the query's lexical weight ``w`` adapts to how sure the dense leg is: when the nearest candidate
  stands far above the typical (median) one, the dense order is informative and the lexical signal
  counts less; when the candidates sit close together, the lexical evidence decides more.

An all-zero signal stays zero. The divisors depend on the extreme candidates and the corpus
statistics only, and the weight on the candidates' median cosine: adding a candidate that is
neither the nearest nor the best lexical match changes another candidate's scaled signals only
through the statistics (idf, average length) it shifts, and its similarity only through those and
the median. Only the candidates — never the whole scope — are scored, so a store never scans more
than it selects.

Why (measured on the LoCoMo and BEAM development splits, docs/retrieval.md): with plain BM25 and a
fixed λ the lexical leg let long assistant messages, holding many of a verbose request's common
words, crowd out the short message that stated the rule: on BEAM the fusion fell 8 points below
cosine alone. The chance margin and the adaptive weight keep LoCoMo's gains (names and rare words
matter there) and put BEAM above cosine.

With normalised weights ``r`` (recency) and ``i`` (importance)::

    score = (1 − r − i)·similarity + r·recency + i·importance
    recency = 0.5 ** (age_ms / half_life_ms)        # clamped to [0, 1]; future timestamps count as age 0

Ties break on score descending, then sequence ascending, then id ascending.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from ._columns import CandidateColumns
from ._windowed import WINDOW_MARGIN
from .lexical import BM25_B, BM25_K1, CorpusStats, Profile, bm25_evidence, corpus_stats, query_terms
from .models import (
    DEFAULT_CHANCE_MARGIN,
    DEFAULT_LEXICAL_WEIGHT,
    Candidate,
    MemoryRecord,
    RecallExplanation,
    RecallHit,
    RecallScoring,
    Vector,
)

__all__ = [
    "DEFAULT_CHANCE_MARGIN",
    "DEFAULT_LEXICAL_WEIGHT",
    "DEFAULT_SCORING",
    "Fused",
    "FusionCandidate",
    "chronological",
    "cosine",
    "explain",
    "fuse",
    "query_terms",
    "recency_score",
    "rerank",
]

DEFAULT_SCORING = RecallScoring()
"""Scoring used when a recall names none: similarity (the cosine + BM25 fusion) alone."""
_DEFAULT_WEIGHTS = DEFAULT_SCORING.weights()
""":data:`DEFAULT_SCORING`'s normalised weights, resolved once (``(1.0, 0.0, 0.0)``)."""

T = TypeVar("T")


def _cosines(query: Vector, matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """:func:`cosine` of ``query`` with each row of ``matrix`` (float64), in one matrix product."""
    q = query.astype(np.float64, copy=False)
    # np.linalg.norm's own arithmetic (row sums of squares; a 1-D dot), without its dispatch
    norms = np.sqrt(np.add.reduce(matrix * matrix, axis=1))
    denominators = norms * math.sqrt(float(q.dot(q)))
    dots = matrix @ q
    safe = np.where(denominators > 0.0, denominators, 1.0)
    values = np.where(denominators > 0.0, dots / safe, 0.0)
    clamped: npt.NDArray[np.float64] = np.minimum(1.0, np.maximum(-1.0, values))
    return clamped


def _effective(
    semantic: npt.NDArray[np.float64], query: Vector, windows: Sequence[Vector | None]
) -> npt.NDArray[np.float64]:
    """Each candidate's ``effective_cos`` (:mod:`prism_memory.windows`): its first window's
    cosine ``semantic``, or a later window's cosine less :data:`WINDOW_MARGIN` when that is
    higher; candidates without windows keep ``semantic`` as it is (float64 throughout)."""
    held = [(at, w) for at, w in enumerate(windows) if w is not None and len(w)]
    if not held:
        return semantic
    stacked = np.concatenate([np.asarray(w, dtype=np.float64) for _, w in held])
    cosines = _cosines(query, stacked)
    effective = semantic.copy()
    start = 0
    for at, w in held:
        best = float(cosines[start : start + len(w)].max()) - WINDOW_MARGIN
        start += len(w)
        if best > effective[at]:
            effective[at] = best
    return effective


def cosine(query: Vector, vector: Vector) -> float:
    """True cosine similarity in float64, in [−1, 1]; 0.0 when either vector is zero."""
    q = query.astype(np.float64, copy=False)
    v = vector.astype(np.float64, copy=False)
    denominator = float(np.linalg.norm(q) * np.linalg.norm(v))
    if denominator == 0.0:
        return 0.0
    return min(1.0, max(-1.0, float(np.dot(q, v)) / denominator))


def recency_score(occurred_at: datetime, now: datetime, half_life_ms: float) -> float:
    """``0.5 ** (age_ms / half_life_ms)`` clamped to [0, 1]; a future timestamp is age 0."""
    age_ms = max(0.0, (now - occurred_at).total_seconds() * 1000.0)
    return min(1.0, max(0.0, math.pow(0.5, age_ms / half_life_ms)))


@dataclass(frozen=True, slots=True)
class FusionCandidate(Generic[T]):
    """One candidate of a hybrid query: any ``item`` plus what the fusion reads from it.

    ``id`` and ``sequence`` only break ties (sequence ascending, then id); ``text`` is tokenized
    for term frequencies and length; ``vector`` is the stored embedding.
    """

    item: T
    id: str
    sequence: int
    vector: Vector
    text: str


@dataclass(frozen=True, slots=True)
class Fused(Generic[T]):
    """A candidate with its fused scores (see the module doc for the formula)."""

    item: T
    id: str
    sequence: int
    semantic: float
    """True cosine of query and candidate, in [−1, 1]."""
    bm25: float
    """Raw BM25 (≥ 0) against the scope statistics."""
    lexical: float
    """``(bm25 − bm25_chance) / bm25_scale``, in [0, 1]."""
    similarity: float
    """``(1 − w)·semantic / semantic_scale + w·lexical`` with ``w`` = ``lexical_weight``: ≤ 1."""
    semantic_scale: float
    """The divisor applied to ``semantic``: the largest ``|cosine|`` among the candidates (1 if 0)."""
    bm25_scale: float
    """The divisor applied to the lexical evidence ``bm25 − bm25_chance``: the best candidate's
    evidence, or 1 when it is 0."""
    bm25_chance: float = 0.0
    """The part of ``bm25`` discounted as chance (the margin times what an entry of this length
    gets from the query's terms by chance, term by term, at most each term's gain)."""
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    """The weight λ·m the lexical signal got for this query (``m``: the candidates' median
    normalised cosine, clamped to [0, 1])."""


def _scale(largest: float) -> float:
    return largest if largest > 0.0 else 1.0


@dataclass(frozen=True, slots=True)
class _Scores:
    """The fusion's scores of ``n`` candidates, as float64 arrays in candidate order."""

    semantic: npt.NDArray[np.float64]
    bm25: npt.NDArray[np.float64]
    chance: npt.NDArray[np.float64]
    lexical: npt.NDArray[np.float64]
    similarity: npt.NDArray[np.float64]
    semantic_scale: float
    bm25_scale: float
    lexical_weight: float


def _score(
    vectors: Sequence[Vector] | npt.NDArray[np.float64],
    texts: Sequence[str],
    *,
    query_vector: Vector,
    query_text: str,
    stats: CorpusStats | None,
    lexical_weight: float,
    chance_margin: float,
    profiles: Sequence[Profile | None] | None = None,
    windows: Sequence[Vector | None] = (),
    terms: frozenset[str] | None = None,
) -> _Scores:
    """The fusion of the module doc over ``n ≥ 1`` candidates, vectorised (one matrix product).
    ``profiles`` (candidates' kept term counts) are read only with the store's ``stats``;
    ``windows``, when given, the later windows' vectors of each candidate (``None``: none);
    ``terms``, the query's terms when the caller has them (``None``: tokenize ``query_text``)."""
    if terms is None:
        terms = query_terms(query_text)
    if stats is None:
        stats, profiles = corpus_stats(texts, terms), None
    # one pass from the float32 rows to the float64 matrix (no float32 stack copied again); a
    # float64 matrix (the candidates' columns) as it is
    matrix = (
        vectors
        if isinstance(vectors, np.ndarray) and vectors.dtype == np.float64 and vectors.ndim == 2
        else np.array(vectors, dtype=np.float64)
    )
    semantic = _cosines(query_vector, matrix)
    if windows:
        semantic = _effective(semantic, query_vector, windows)
    raw, evidence = bm25_evidence(terms, texts, stats, chance_margin, profiles)
    semantic_scale = _scale(float(np.abs(semantic).max()))
    dense = semantic / semantic_scale
    bm25_scale = _scale(float(evidence.max()))
    lexical = evidence / bm25_scale
    weight = lexical_weight * min(1.0, max(0.0, _median(dense)))
    blend = (1.0 - weight) * dense + weight * lexical
    similarity = np.minimum(1.0, np.maximum(-1.0, blend))  # both parts are ≤ 1: removes an ulp
    return _Scores(
        semantic, raw, raw - evidence, lexical, similarity, semantic_scale, bm25_scale, weight
    )


def _median(values: npt.NDArray[np.float64]) -> float:
    """``np.median`` of ``n ≥ 1`` float64 values without NaN, the same value bit for bit (the mean
    of the two middle values is their sum halved, as ``np.mean`` computes it), without its
    dispatch: a partition around the middle."""
    n = len(values)
    middle = n // 2
    if n % 2:
        return float(np.partition(values, middle)[middle])
    part = np.partition(values, (middle - 1, middle))
    return float((part[middle - 1] + part[middle]) / 2.0)


def _ranked(
    keys: npt.NDArray[np.float64],
    sequences: Sequence[int],
    ids: Sequence[str],
    then: npt.NDArray[np.float64] | None = None,
) -> list[int]:
    """Positions ordered by ``keys`` descending, then sequence and id ascending, then ``then``
    descending; equal keys keep their input order (a stable sort)."""
    numbers = np.array(sequences, dtype=np.int64)
    order = np.lexsort((numbers, -keys))
    ordered_keys, ordered_numbers = keys[order], numbers[order]
    tied = (ordered_keys[1:] == ordered_keys[:-1]) & (ordered_numbers[1:] == ordered_numbers[:-1])
    if not tied.any():
        ranked: list[int] = order.tolist()
        return ranked  # (key, sequence) decides every pair: the order is final
    key_list = keys.tolist()
    then_list = then.tolist() if then is not None else [0.0] * len(key_list)
    return sorted(
        range(len(key_list)),
        key=lambda i: (-key_list[i], sequences[i], ids[i], -then_list[i]),
    )


def fuse(
    candidates: Sequence[FusionCandidate[T]],
    *,
    query_vector: Vector,
    query_text: str,
    stats: CorpusStats | None = None,
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT,
    chance_margin: float = DEFAULT_CHANCE_MARGIN,
) -> list[Fused[T]]:
    """Score ``candidates`` by the hybrid fusion and return them best first.

    Pure and deterministic: the result depends only on the arguments, and ties break on sequence
    ascending, then id ascending. ``stats`` are the corpus statistics of the scope the candidates
    were drawn from (the store returns them with the candidates); ``None`` takes the candidates
    themselves as the corpus. Candidate ids should be unique.
    """
    if not candidates:
        return []
    scores = _score(
        [c.vector for c in candidates],
        [c.text for c in candidates],
        query_vector=query_vector,
        query_text=query_text,
        stats=stats,
        lexical_weight=lexical_weight,
        chance_margin=chance_margin,
    )
    semantic, raw, chance = scores.semantic.tolist(), scores.bm25.tolist(), scores.chance.tolist()
    lexical, similarity = scores.lexical.tolist(), scores.similarity.tolist()
    order = _ranked(scores.similarity, [c.sequence for c in candidates], [c.id for c in candidates])
    return [
        Fused(
            item=candidates[i].item,
            id=candidates[i].id,
            sequence=candidates[i].sequence,
            semantic=semantic[i],
            bm25=raw[i],
            lexical=lexical[i],
            similarity=similarity[i],
            semantic_scale=scores.semantic_scale,
            bm25_scale=scores.bm25_scale,
            bm25_chance=chance[i],
            lexical_weight=scores.lexical_weight,
        )
        for i in order
    ]


def rerank(
    candidates: Iterable[Candidate] | CandidateColumns,
    *,
    query_vector: Vector,
    query_text: str,
    top_k: int,
    now: datetime,
    stats: CorpusStats | None = None,
    scoring: RecallScoring | None = None,
    shared_thread_id: str | None = None,
    terms: frozenset[str] | None = None,
) -> list[RecallHit]:
    """Fuse, blend and return the best ``top_k`` recall hits, deterministically ordered.

    ``candidates``: :class:`Candidate` objects, or the same as columns
    (:class:`~prism_memory._columns.CandidateColumns`, what a store decoding rows hands over):
    objects are turned into columns once, here, and the re-rank reads columns alone -- a record
    is made for the hits only. Duplicate candidates (same thread and id) are scored once.
    ``shared_thread_id`` marks hits that came from a parent thread through a share grant.
    ``stats`` are the statistics the store returned with the candidates; ``terms`` the query's
    terms (:func:`~prism_memory.lexical.query_terms` of ``query_text``) when the caller has them
    already (recall checked them against its cap), else they are made here. Ties on the score
    break on sequence, then id, then similarity.
    """
    rules = scoring if scoring is not None else DEFAULT_SCORING
    w_similarity, w_recency, w_importance = (
        _DEFAULT_WEIGHTS if scoring is None else scoring.weights()
    )
    chosen = CandidateColumns.of(candidates)
    ids, count = chosen.ids, len(chosen.ids)
    if not count:
        return []
    # distinct ids are distinct (thread, id) pairs: the pairs are only built when ids repeat
    if len(set(ids)) < count:
        first: dict[tuple[str, str], int] = {}
        for at, pair in enumerate(zip(chosen.thread_ids, ids, strict=True)):
            first.setdefault(pair, at)  # score each record once: its first candidate
        if len(first) < count:
            chosen = chosen.take(list(first.values()))  # one candidate at least
    scores = _score(
        chosen.matrix,
        chosen.texts,
        query_vector=query_vector,
        query_text=query_text,
        stats=stats,
        lexical_weight=rules.lexical_weight,
        chance_margin=rules.chance_margin,
        profiles=chosen.profiles,
        windows=chosen.windows or (),
        terms=terms,
    )
    half_life = rules.half_life_ms
    alone = w_recency == 0.0 and w_importance == 0.0
    if alone:  # similarity alone (the default): recency and clamped importance are finite and
        # >= 0, so both other terms are +0.0 for every candidate and the blend is exactly this;
        # they are then computed for the hits only, to report them
        blend = w_similarity * scores.similarity + 0.0
    else:
        recency = _recencies(chosen.occurred_at, now, half_life)
        importance = _importances(chosen.importances)
        blend = w_similarity * scores.similarity + w_recency * recency + w_importance * importance
    score = np.minimum(1.0, np.maximum(-1.0, blend))  # normalised weights may sum to 1 + 1 ulp
    order = _ranked(score, chosen.sequences, chosen.ids, scores.similarity)[:top_k]
    if alone:
        recency = _recencies([chosen.occurred_at[i] for i in order], now, half_life)
        importance = _importances([chosen.importances[i] for i in order])
    else:
        recency, importance = recency[order], importance[order]
    similarity, semantic = scores.similarity.tolist(), scores.semantic.tolist()
    lexical, raw, chance = scores.lexical.tolist(), scores.bm25.tolist(), scores.chance.tolist()
    recencies, importances, final = recency.tolist(), importance.tolist(), score.tolist()
    semantic_scale, bm25_scale = scores.semantic_scale, scores.bm25_scale
    weight = scores.lexical_weight
    threads, record = chosen.thread_ids, chosen.record
    return [  # positionally, in RecallHit's field order (no keyword parsing per hit)
        RecallHit(
            record(i),  # made here, for the hits only
            similarity[i],
            semantic[i],
            lexical[i],
            recencies[rank],
            importances[rank],
            final[i],
            shared_thread_id is not None and threads[i] == shared_thread_id,
            raw[i],
            semantic_scale,
            bm25_scale,
            chance[i],
            weight,
        )
        for rank, i in enumerate(order)
    ]


def _recencies(
    occurred_at: Sequence[datetime], now: datetime, half_life: float | None
) -> npt.NDArray[np.float64]:
    """:func:`recency_score` of each time (1 for each without a half-life)."""
    if half_life is None:
        return np.ones(len(occurred_at), dtype=np.float64)
    ages = [recency_score(at, now, half_life) for at in occurred_at]
    return np.array(ages, dtype=np.float64)


def _importances(importances: Sequence[float]) -> npt.NDArray[np.float64]:
    """Each importance, clamped to [0, 1]."""
    given = np.array(importances, dtype=np.float64)
    clamped: npt.NDArray[np.float64] = np.minimum(1.0, np.maximum(0.0, given))
    return clamped


def explain(
    hits: Sequence[RecallHit], scoring: RecallScoring | None
) -> tuple[RecallExplanation, ...]:
    """One :class:`RecallExplanation` per hit, in rank order."""
    rules = scoring if scoring is not None else DEFAULT_SCORING
    weights = rules.weights()
    lam = rules.lexical_weight
    return tuple(
        RecallExplanation(
            id=hit.id,
            rank=rank,
            score=hit.score,
            similarity=hit.similarity,
            semantic=hit.semantic,
            lexical=hit.lexical,
            recency=hit.recency,
            importance=hit.importance,
            weights=weights,
            bm25=hit.bm25,
            lexical_weight=lam,
            how={
                "semantic": (
                    "cosine(query vector, entry vector) in float64, in [-1, 1]; an entry longer "
                    "than the embedder's window: max(that, best later window's cosine - "
                    f"{WINDOW_MARGIN:g})"
                ),
                "lexical": (
                    f"(bm25 - chance) / best candidate's = ({hit.bm25:.6g} - "
                    f"{hit.bm25_chance:.6g}) / {hit.bm25_scale:.6g} (BM25 k1={BM25_K1:g} "
                    f"b={BM25_B:g}, recall scope's statistics; chance: each query term's gain up "
                    f"to {rules.chance_margin:g} x what an entry of this length gets by chance)"
                ),
                "similarity": (
                    f"(1 - {hit.lexical_weight:.6g}) * semantic / {hit.semantic_scale:.6g} "
                    f"+ {hit.lexical_weight:.6g} * lexical (lexical weight = {lam:g} x the "
                    "candidates' median semantic / scale, clamped to [0, 1])"
                ),
                "score": (
                    f"{weights[0]:.6g} * similarity + {weights[1]:.6g} * recency "
                    f"+ {weights[2]:.6g} * importance"
                ),
            },
        )
        for rank, hit in enumerate(hits, start=1)
    )


def chronological(records: Iterable[MemoryRecord]) -> list[MemoryRecord]:
    """Records in prompt order: sequence, then ``occurred_at``, ties broken by id — never by score."""
    return sorted(records, key=lambda r: (r.sequence, r.occurred_at, r.thread_id, r.id))
