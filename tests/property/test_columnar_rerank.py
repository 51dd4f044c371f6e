"""The columnar re-rank (issue 50) against the object re-rank it replaced, on random candidate sets.

``_object_rerank`` is the re-rank as it was before candidates became columns (``Candidate``
objects, a float64 matrix stacked from their float32 vectors), kept here as the reference. The
re-rank of today must give identical hits -- order, records and every float64 score, bit for bit --
whether it is handed ``Candidate`` objects (a host's adapter, the in-memory store) or the columns a
PostgreSQL search decodes from its rows (:meth:`SearchedColumns.from_rows`, the vectors converted
from the joined ``vector_send`` bytes) -- each row with its record's columns, or with only those
the re-rank reads and the others as one ``record_send`` value (the rows a search does not expect
to be hits), which :func:`prism_memory.postgres.rows.search_result` decodes for a hit alone.
"""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prism_memory._entry_fields import RECORD_COLUMNS
from prism_memory.lexical import CorpusStats, query_terms, term_profile
from prism_memory.models import (
    Candidate,
    Lineage,
    MemoryConsent,
    MemoryRecord,
    RecallHit,
    RecallScoring,
)
from prism_memory.postgres._codec import decode_matrix, decode_record
from prism_memory.postgres.rows import DEFERRED_COLUMNS, SearchedColumns, consent_values
from prism_memory.ranking import (
    DEFAULT_SCORING,
    _median,
    _ranked,
    _score,
    recency_score,
    rerank,
)

NOW = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)
WORDS = ("alpha", "beta", "gamma", "delta", "omega", "kappa", "rho", "sigma")


def _object_rerank(
    candidates: list[Candidate],
    *,
    query_vector: Any,
    query_text: str,
    top_k: int,
    now: datetime,
    stats: CorpusStats | None,
    scoring: RecallScoring | None,
    shared_thread_id: str | None,
) -> list[RecallHit]:
    """The object re-rank before issue 50 (the reference)."""
    rules = scoring if scoring is not None else DEFAULT_SCORING
    w_similarity, w_recency, w_importance = rules.weights()
    chosen = list(candidates)
    if len({c.id for c in chosen}) < len(chosen) and len(
        {(c.thread_id, c.id) for c in chosen}
    ) < len(chosen):
        unique: dict[tuple[str, str], Candidate] = {}
        for candidate in chosen:
            unique.setdefault((candidate.thread_id, candidate.id), candidate)
        chosen = list(unique.values())
    if not chosen:
        return []
    scores = _score(
        [c.vector for c in chosen],
        [c.text for c in chosen],
        query_vector=query_vector,
        query_text=query_text,
        stats=stats,
        lexical_weight=rules.lexical_weight,
        chance_margin=rules.chance_margin,
        profiles=[c.profile for c in chosen],
        windows=[c.windows for c in chosen],
    )
    half_life = rules.half_life_ms

    def recencies(items: list[Candidate]) -> Any:
        if half_life is None:
            return np.ones(len(items), dtype=np.float64)
        return np.array([recency_score(c.occurred_at, now, half_life) for c in items])

    def importances(items: list[Candidate]) -> Any:
        return np.minimum(1.0, np.maximum(0.0, np.array([c.importance for c in items])))

    alone = w_recency == 0.0 and w_importance == 0.0
    if alone:
        blend = w_similarity * scores.similarity + 0.0
    else:
        recency, importance = recencies(chosen), importances(chosen)
        blend = w_similarity * scores.similarity + w_recency * recency + w_importance * importance
    score = np.minimum(1.0, np.maximum(-1.0, blend))
    order = _ranked(score, [c.sequence for c in chosen], [c.id for c in chosen], scores.similarity)
    order = order[:top_k]
    if alone:
        hits = [chosen[i] for i in order]
        recency, importance = recencies(hits), importances(hits)
    else:
        recency, importance = recency[order], importance[order]
    return [
        RecallHit(
            chosen[i].record,
            float(scores.similarity[i]),
            float(scores.semantic[i]),
            float(scores.lexical[i]),
            float(recency[rank]),
            float(importance[rank]),
            float(score[i]),
            shared_thread_id is not None and chosen[i].thread_id == shared_thread_id,
            float(scores.bm25[i]),
            scores.semantic_scale,
            scores.bm25_scale,
            float(scores.chance[i]),
            scores.lexical_weight,
        )
        for rank, i in enumerate(order)
    ]


def _record(at: int, entry_id: str, thread: str, text: str, draw: Any) -> MemoryRecord:
    consent = None
    if draw(st.booleans()):
        consent = MemoryConsent(
            source="user",
            scope=draw(st.sampled_from(["thread", "user"])),
            granted_at=NOW - timedelta(microseconds=draw(st.integers(0, 10**12))),
            revoked_at=draw(st.sampled_from([None, NOW])),
        )
    lineage = Lineage(source_ids=("a", "b"), reason="summary") if draw(st.booleans()) else None
    return MemoryRecord(
        tenant_id="t",
        resource_id="r",
        thread_id=thread,
        id=entry_id,
        text=text,
        role="user",
        metadata={"at": at, "é": [1.5, None, 'say "hi"']},
        consent=consent,
        sequence=draw(st.integers(0, 6)),
        occurred_at=NOW - timedelta(milliseconds=draw(st.integers(-5_000, 10**8))),
        created_at=NOW - timedelta(microseconds=draw(st.integers(-(10**15), 10**15))),
        written_at=NOW,
        importance=draw(st.floats(-0.5, 1.5, allow_nan=False)),
        lineage=lineage,
        legal_hold=draw(st.booleans()),
        status="indexed",
        revision=draw(st.integers(1, 2**31 - 1)),
        attempts=draw(st.integers(0, 9)),
        last_error=draw(st.sampled_from([None, "", "boom ☃"])),
        embedding_model="m",
    )


def _row(record: MemoryRecord, deferred: bool = False) -> dict[str, Any]:
    """The record's row as the search statement returns it: its record's columns (``metadata``
    as JSON text), or (``deferred``) those the re-rank reads and the others NULL, sent as
    ``record_send`` bytes in the ``deferred`` column."""
    values = {name: getattr(record, name, None) for name in RECORD_COLUMNS}
    metadata = dict(record.metadata)
    if record.lineage is not None:
        metadata["_lineage"] = {"sourceIds": list(record.lineage.source_ids), "reason": "summary"}
    values["metadata"] = json.dumps(metadata)
    values.update(consent_values(record.consent))
    values["deferred"] = None
    if deferred:
        values["deferred"] = _record_send([values[name] for name in DEFERRED_COLUMNS])
        values.update(dict.fromkeys(DEFERRED_COLUMNS))
    return values


def _record_send(values: list[Any]) -> bytes:
    """PostgreSQL's ``record_send`` of ``values`` (text, boolean, integer, timestamptz)."""
    out = [struct.pack(">i", len(values))]
    for value in values:
        if value is None:
            oid, data = 25, None
        elif isinstance(value, bool):
            oid, data = 16, b"\x01" if value else b"\x00"
        elif isinstance(value, int):
            oid, data = 23, struct.pack(">i", value)
        elif isinstance(value, datetime):
            micros = (value - datetime(2000, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
            oid, data = 1184, struct.pack(">q", micros)
        else:
            oid, data = 25, str(value).encode()
        out.append(struct.pack(">Ii", oid, -1 if data is None else len(data)) + (data or b""))
    return b"".join(out)


def _sent(vector: Any) -> bytes:
    """``vector_send`` bytes of a float32 vector (pgvector's binary format)."""
    return struct.pack(">HH", len(vector), 0) + np.asarray(vector, dtype=">f4").tobytes()


@st.composite
def _cases(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 24))
    width = draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1.0, 1e-3, 1e3]))
    vectors = (rng.standard_normal((n, width)) * scale).astype(np.float32)
    if draw(st.booleans()):  # exact duplicates of vectors: ties on the cosine
        vectors[rng.integers(0, n, size=n // 2)] = vectors[0]
    if draw(st.booleans()):
        vectors[rng.integers(0, n)] = 0.0  # a zero vector
    candidates, rows = [], []
    for at in range(n):
        entry_id = f"e{draw(st.integers(0, n))}"  # repeated ids: duplicates and same-id threads
        thread = draw(st.sampled_from(["th", "th", "parent"]))
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=0, max_size=8)))
        record = _record(at, entry_id, thread, text, draw)
        windows = None
        if draw(st.integers(0, 4)) == 0:
            windows = rng.standard_normal((draw(st.integers(1, 3)), width)).astype(np.float32)
        profile = term_profile(text) if draw(st.booleans()) else None
        candidates.append(Candidate(record, vectors[at], profile, windows))
        rows.append((_row(record, deferred=draw(st.booleans())), windows))
    query = (rng.standard_normal(width) * scale).astype(np.float32)
    scoring = draw(
        st.sampled_from(
            [
                None,
                RecallScoring(recency_weight=0.3, importance_weight=0.2, half_life_ms=10**7),
                RecallScoring(importance_weight=0.5),
                RecallScoring(lexical_weight=0.9, chance_margin=0.0),
            ]
        )
    )
    texts = [c.text for c in candidates]
    stats = None
    if draw(st.booleans()):
        lengths = [term_profile(t)[1] for t in texts]
        terms = query_terms(" ".join(WORDS))
        stats = CorpusStats(
            n + 3,
            sum(lengths) + 7,
            {t: min(n + 3, sum(t in term_profile(x)[0] for x in texts) + 1) for t in terms},
        )
    return {
        "candidates": candidates,
        "rows": rows,
        "sent": [_sent(v) for v in vectors],
        "query_vector": query,
        "query_text": " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=0, max_size=5))),
        "top_k": draw(st.integers(1, n + 2)),
        "stats": stats,
        "scoring": scoring,
        "shared_thread_id": draw(st.sampled_from([None, "parent"])),
    }


def _key(hit: RecallHit) -> tuple[Any, ...]:
    return (
        hit.record,
        hit.similarity,
        hit.semantic,
        hit.lexical,
        hit.recency,
        hit.importance,
        hit.score,
        hit.shared,
        hit.bm25,
        hit.semantic_scale,
        hit.bm25_scale,
        hit.bm25_chance,
        hit.lexical_weight,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_columnar_rerank_is_the_object_rerank(case: dict[str, Any]) -> None:
    """Objects or a store's columns: the same hits, order and float64 scores as the reference."""
    options = {
        key: case[key]
        for key in ("query_vector", "query_text", "top_k", "stats", "scoring", "shared_thread_id")
    }
    expected = [_key(hit) for hit in _object_rerank(case["candidates"], now=NOW, **options)]
    from_objects = rerank(case["candidates"], now=NOW, **options)
    assert [_key(hit) for hit in from_objects] == expected
    rows = [row for row, _ in case["rows"]]
    held = [windows for _, windows in case["rows"]]
    columns = SearchedColumns.from_rows(
        rows, decode_matrix(case["sent"]), held if any(w is not None for w in held) else None
    )
    columns.profiles = [c.profile for c in case["candidates"]]
    assert [_key(hit) for hit in rerank(columns, now=NOW, **options)] == expected


@settings(max_examples=60, deadline=None)
@given(_cases())
def test_columns_read_as_candidates(case: dict[str, Any]) -> None:
    """Columns are a sequence of candidates: each one made on access has the row's fields."""
    rows = [row for row, _ in case["rows"]]
    columns = SearchedColumns.from_rows(rows, decode_matrix(case["sent"]))
    assert len(columns) == len(case["candidates"])
    for made, given_ in zip(columns, case["candidates"], strict=True):
        assert (made.id, made.thread_id, made.sequence) == (
            given_.id,
            given_.thread_id,
            given_.sequence,
        )
        assert made.record == given_.record
        assert np.array_equal(made.vector, given_.vector)
    assert columns[-1].id == case["candidates"][-1].id


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), min_size=1, max_size=300)
)
def test_median_is_numpys(values: list[float]) -> None:
    """The re-rank's median (the lexical weight's) is ``np.median``'s value, bit for bit -- also
    where the mean of the two middle values overflows (both give the same infinity: numpy's
    overflow warning is expected there, not noise for the summary)."""
    array = np.array(values, dtype=np.float64)
    with np.errstate(over="ignore"):
        assert _median(array) == float(np.median(array))


def test_record_send_decodes_as_asyncpg_would() -> None:
    """The timestamp's infinities (asyncpg's naive extremes), NULLs, integers of three widths and
    a float."""
    data = b"".join(
        [
            struct.pack(">i", 6),
            struct.pack(">Iiq", 1184, 8, 2**63 - 1),
            struct.pack(">Iiq", 1184, 8, -(2**63)),
            struct.pack(">Ii", 25, -1),
            struct.pack(">Iiq", 20, 8, -(2**40)),
            struct.pack(">Iih", 21, 2, -3),
            struct.pack(">Iid", 701, 8, -0.5),
        ]
    )
    assert decode_record(data) == [
        datetime.max,
        datetime.min,
        None,
        -(2**40),
        -3,
        -0.5,
    ]
