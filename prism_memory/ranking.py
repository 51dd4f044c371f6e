"""The one pure re-rank every backend shares.

Stores only *select* candidates (``top_k × 4`` by vector distance, plus lexical matches) and hand
back each candidate's stored vector. Everything that decides order happens here, in float64 over
those vectors, so every backend orders identically by construction.

``similarity = (1 − λ)·cosine + λ·lexical`` (λ = ``lexical_weight``, 0.2 by default), and with
normalised weights ``r`` (recency) and ``i`` (importance)::

    score = (1 − r − i)·similarity + r·recency + i·importance
    recency = 0.5 ** (age_ms / half_life_ms)        # clamped to [0, 1]; future timestamps count as age 0

Ties break on score descending, then sequence ascending, then id ascending.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime

import numpy as np

from .models import Candidate, MemoryRecord, RecallExplanation, RecallHit, RecallScoring, Vector

__all__ = [
    "DEFAULT_SCORING",
    "chronological",
    "cosine",
    "explain",
    "lexical_score",
    "query_terms",
    "recency_score",
    "rerank",
]

DEFAULT_SCORING = RecallScoring()
"""Scoring used when a recall names none: similarity (cosine blended with lexical) alone."""

_TERM = re.compile(r"\w+", re.UNICODE)


def query_terms(text: str) -> frozenset[str]:
    """Distinct lower-cased word terms of ``text`` (the lexical leg's vocabulary)."""
    return frozenset(_TERM.findall(text.lower()))


def lexical_score(terms: frozenset[str], text: str) -> float:
    """Share of the distinct query ``terms`` that occur as words in ``text``, in [0, 1]."""
    if not terms:
        return 0.0
    return len(terms & query_terms(text)) / len(terms)


def cosine(query: Vector, vector: Vector) -> float:
    """Cosine similarity in float64, clamped to [0, 1] (opposite directions count as unrelated)."""
    q = query.astype(np.float64, copy=False)
    v = vector.astype(np.float64, copy=False)
    denominator = float(np.linalg.norm(q) * np.linalg.norm(v))
    if denominator == 0.0:
        return 0.0
    return min(1.0, max(0.0, float(np.dot(q, v)) / denominator))


def recency_score(occurred_at: datetime, now: datetime, half_life_ms: float) -> float:
    """``0.5 ** (age_ms / half_life_ms)`` clamped to [0, 1]; a future timestamp is age 0."""
    age_ms = max(0.0, (now - occurred_at).total_seconds() * 1000.0)
    return min(1.0, max(0.0, math.pow(0.5, age_ms / half_life_ms)))


def _order_key(hit: RecallHit) -> tuple[float, int, str]:
    return (-hit.score, hit.record.sequence, hit.record.id)


def rerank(
    candidates: Iterable[Candidate],
    *,
    query_vector: Vector,
    query_text: str,
    top_k: int,
    now: datetime,
    scoring: RecallScoring | None = None,
    shared_thread_id: str | None = None,
) -> list[RecallHit]:
    """Score ``candidates`` and return the best ``top_k`` hits, deterministically ordered.

    Duplicate candidates (same thread and id) are scored once. ``shared_thread_id`` marks hits that
    came from a parent thread through a share grant.
    """
    rules = scoring if scoring is not None else DEFAULT_SCORING
    w_similarity, w_recency, w_importance = rules.weights()
    terms = query_terms(query_text)
    seen: set[tuple[str, str]] = set()
    hits: list[RecallHit] = []
    for candidate in candidates:
        record = candidate.record
        key = (record.thread_id, record.id)
        if key in seen:
            continue
        seen.add(key)
        semantic = cosine(query_vector, candidate.vector)
        lexical = lexical_score(terms, record.text)
        similarity = (1.0 - rules.lexical_weight) * semantic + rules.lexical_weight * lexical
        recency = (
            recency_score(record.occurred_at, now, rules.half_life_ms)
            if rules.half_life_ms is not None
            else 1.0
        )
        importance = min(1.0, max(0.0, record.importance))
        blend = w_similarity * similarity + w_recency * recency + w_importance * importance
        score = min(1.0, max(0.0, blend))  # normalised weights may sum to 1 + 1 ulp
        hits.append(
            RecallHit(
                record=record,
                similarity=similarity,
                semantic=semantic,
                lexical=lexical,
                recency=recency,
                importance=importance,
                score=score,
                shared=shared_thread_id is not None and record.thread_id == shared_thread_id,
            )
        )
    hits.sort(key=_order_key)
    return hits[:top_k]


def explain(
    hits: Sequence[RecallHit], scoring: RecallScoring | None
) -> tuple[RecallExplanation, ...]:
    """One :class:`RecallExplanation` per hit, in rank order."""
    weights = (scoring if scoring is not None else DEFAULT_SCORING).weights()
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
        )
        for rank, hit in enumerate(hits, start=1)
    )


def chronological(records: Iterable[MemoryRecord]) -> list[MemoryRecord]:
    """Records in prompt order: sequence, then ``occurred_at``, ties broken by id — never by score."""
    return sorted(records, key=lambda r: (r.sequence, r.occurred_at, r.thread_id, r.id))
