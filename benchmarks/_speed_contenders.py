"""``speed.py``'s contenders beside the library: the hand-written statements (the rules by hand,
the bare vector query, the library's whole work in one statement) and the fusion a hand-roller
writes. Not a benchmark itself."""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from _speed_data import Query, resource_of, tenant_of, thread_id

from prism_memory.lexical import BM25_B, BM25_K1, query_terms, tokenize
from prism_memory.models import DEFAULT_CHANCE_MARGIN, DEFAULT_LEXICAL_WEIGHT


@dataclass
class Contender:
    key: str
    label: str
    run: Callable[[Query, int], Awaitable[list[str]]]  # -> ids, best first
    samples: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    # the event loop thread's CPU time per call, in seconds
    cpu: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    recall: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    short: int = 0  # results with fewer than min(K, eligible) rows
    mismatches: int = 0  # timed queries whose ids differ from the same-work hand-written ones
    differs_from_direct: int = 0  # pooled routes: timed queries whose ids differ from "prism"


def hand_sql(schema: str) -> str:
    """Reference: the exact per-thread query by hand, vector only (no lexical leg, no statistics).

    The same rules (consent, hold, the row's own tombstone, its lineage sources' tombstones), the
    columns a caller needs, the K nearest by ``ORDER BY distance + 0`` (exact: no HNSW)."""
    e = f'"{schema}".semantic_memory'
    inv = f'"{schema}".semantic_memory_invalidation'
    lineage = "((e.metadata -> '_lineage') -> 'sourceIds')"
    return (
        f"SELECT e.id, e.text, e.role, e.metadata, e.sequence, e.occurred_at, e.importance, "
        f"e.embedding <=> $1 AS d FROM {e} e "
        "WHERE e.tenant_id = $2 AND e.resource_id = $3 AND e.thread_id = $4 "
        "AND e.status = 'indexed' AND e.consent_visible AND e.consent_revoked_at IS NULL "
        f"AND NOT e.legal_hold AND NOT EXISTS (SELECT 1 FROM {inv} o "
        "WHERE o.tenant_id = e.tenant_id AND o.resource_id = e.resource_id "
        "AND o.thread_id = e.thread_id AND o.entry_id = e.id "
        "AND (o.reason <> 'corrected' OR o.created_at > e.written_at)) "
        f"AND ({lineage} IS NULL OR NOT EXISTS (SELECT 1 FROM {inv} t "
        "WHERE t.tenant_id = e.tenant_id AND t.resource_id = e.resource_id "
        f"AND t.thread_id = e.thread_id AND t.entry_id IN (SELECT jsonb_array_elements_text({lineage})) "
        "AND (t.reason <> 'corrected' OR t.created_at > e.written_at))) "
        "ORDER BY (e.embedding <=> $1) + 0, e.sequence LIMIT $5"
    )


def bare_sql(schema: str) -> str:
    """The reference of the targets: the bare exact per-thread vector query, no rules at all
    (``ORDER BY embedding <=> $1 LIMIT K`` over the thread; the table has no HNSW index)."""
    return (
        "SELECT e.id, e.text, e.role, e.metadata, e.sequence, e.occurred_at, e.importance, "
        f'e.embedding <=> $1 AS d FROM "{schema}".semantic_memory e '
        "WHERE e.tenant_id = $2 AND e.resource_id = $3 AND e.thread_id = $4 "
        "ORDER BY e.embedding <=> $1 LIMIT $5"
    )


def hand_hybrid_sql(schema: str) -> str:
    """The target baseline: the library's work written by hand, one statement.

    Same rules as :func:`hand_sql`; the thread's tombstones are read once and folded into a
    "kill time" per entry (a corrected entry dies for rows written before its correction, any
    other reason kills always). Over the recallable rows: the corpus statistics (rows, total
    term count, document frequency of each query term), the ``$5`` nearest (exact) and the ``$5``
    best BM25 matches (term frequency 1, as stored); the union comes back with text and vector
    for the float64 fusion in :func:`hand_fuse`. ``$6`` holds one tsquery per query term (in
    sorted order), ``$7`` their OR."""
    e = f'"{schema}".semantic_memory'
    inv = f'"{schema}".semantic_memory_invalidation'
    f8 = "::float8"
    return (
        "WITH dead AS (SELECT entry_id, max(CASE WHEN reason = 'corrected' THEN created_at "
        f"ELSE 'infinity' END) AS kill FROM {inv} "
        "WHERE tenant_id = $2 AND resource_id = $3 AND thread_id = $4 GROUP BY entry_id), "
        "live AS MATERIALIZED (SELECT e.id, e.sequence, e.embedding <=> $1 AS d, e.term_count AS n, "
        "CASE WHEN e.text_tsv @@ $7::tsquery THEN e.text_tsv END AS tsv "
        f"FROM {e} e LEFT JOIN dead o ON o.entry_id = e.id "
        "WHERE e.tenant_id = $2 AND e.resource_id = $3 AND e.thread_id = $4 "
        "AND e.status = 'indexed' AND e.consent_visible AND e.consent_revoked_at IS NULL "
        "AND NOT e.legal_hold AND e.embedding IS NOT NULL "
        "AND (o.kill IS NULL OR o.kill <= e.written_at) "
        "AND (e.metadata -> '_lineage' IS NULL OR NOT EXISTS (SELECT 1 FROM dead s "
        "WHERE s.kill > e.written_at AND s.entry_id IN "
        "(SELECT jsonb_array_elements_text(e.metadata -> '_lineage' -> 'sourceIds'))))), "
        f"stats AS (SELECT count(*) AS docs, coalesce(sum(n), 0) AS len FROM live), "
        "terms AS (SELECT q, i, (SELECT count(*) FROM live WHERE tsv @@ q) AS df "
        "FROM unnest($6::tsquery[]) WITH ORDINALITY AS t(q, i)), "
        f"idf AS (SELECT q, i, ln(1{f8} + ((s.docs - df){f8} + 0.5{f8}) / (df{f8} + 0.5{f8})) AS w "
        "FROM terms, stats s WHERE df > 0), "
        "near AS (SELECT id FROM live ORDER BY d, sequence, id LIMIT $5), "
        "lex AS (SELECT l.id FROM live l, stats s WHERE l.tsv IS NOT NULL ORDER BY "
        "(SELECT sum(w ORDER BY i) FROM idf WHERE l.tsv @@ q) * 1.9::float8 / (1::float8 + "
        f"0.9{f8} * (0.6{f8} + 0.4{f8} * l.n / (s.len{f8} / s.docs{f8}))) DESC, l.sequence, l.id "
        "LIMIT $5) "
        "SELECT e.id, e.sequence, e.text, e.embedding, s.docs, s.len, "
        "(SELECT array_agg(df ORDER BY i) FROM terms) AS df "
        "FROM (SELECT id FROM near UNION SELECT id FROM lex) c "
        f"JOIN {e} e ON e.tenant_id = $2 AND e.resource_id = $3 AND e.thread_id = $4 "
        "AND e.id = c.id CROSS JOIN stats s"
    )


@functools.lru_cache(maxsize=65536)
def _profile(text: str) -> tuple[dict[str, int], int]:
    terms = tokenize(text)
    return dict(Counter(terms)), len(terms)


def hand_terms(query: str) -> tuple[list[str], list[str], str]:
    """Sorted query terms, one quoted tsquery each, and their OR (what ``$6``/``$7`` bind)."""
    terms = sorted(query_terms(query))
    quoted = [f"'{t}'" for t in terms]  # tokenize() yields \w+ runs: nothing to escape
    return terms, quoted, " | ".join(quoted) or "''"


def hand_fuse(rows: list[Any], query: np.ndarray, terms: list[str], k: int) -> list[str]:
    """The fusion a hand-roller writes: float64 cosine and BM25 (true term frequencies, the
    statistics from the statement), as the library documents it (docs/semantics.md): cosine by
    the largest |cosine|; each query term's BM25 gain counted above 3 × its chance gain, the
    evidence by the best candidate's; λ = 0.5 times the median scaled cosine; ties by sequence,
    then id."""
    if not rows:
        return []
    matrix = np.stack([r["embedding"].to_numpy() for r in rows]).astype(np.float64)
    q = query.astype(np.float64)
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(q)
    cos = np.clip(np.divide(matrix @ q, norms, out=np.zeros(len(rows)), where=norms > 0), -1, 1)
    docs, total = int(rows[0]["docs"]), int(rows[0]["len"])
    weights = [
        (t, math.log(1.0 + (docs - df + 0.5) / (df + 0.5)), df / docs)
        for t, df in zip(terms, rows[0]["df"] or [], strict=True)
        if df > 0
    ]
    evidence = np.zeros(len(rows))
    if weights:
        average = total / docs
        for j, r in enumerate(rows):
            counts, length = _profile(r["text"])
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * length / average)
            unit = (BM25_K1 + 1.0) / (1.0 + norm)
            evidence[j] = sum(
                max(
                    0.0,
                    w * counts[t] * (BM25_K1 + 1.0) / (counts[t] + norm)
                    - DEFAULT_CHANCE_MARGIN
                    * w
                    * (1.0 - (1.0 - share) ** (length / average))
                    * unit,
                )
                for t, w, share in weights
                if t in counts
            )
    top_cos = float(np.abs(cos).max()) or 1.0
    dense = cos / top_cos
    lexical = evidence / (float(evidence.max()) or 1.0)
    lam = DEFAULT_LEXICAL_WEIGHT * min(1.0, max(0.0, float(np.median(dense))))
    score = np.clip((1.0 - lam) * dense + lam * lexical, -1.0, 1.0)
    order = sorted(range(len(rows)), key=lambda j: (-score[j], rows[j]["sequence"], rows[j]["id"]))
    return [rows[j]["id"] for j in order[:k]]


def scope_args(q: Query) -> tuple[str, str, str]:
    """The tenant, resource and thread of ``q`` (what the hand-written statements bind)."""
    return tenant_of(q.thread), resource_of(q.thread), thread_id(q.thread)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q)) if values else float("nan")
