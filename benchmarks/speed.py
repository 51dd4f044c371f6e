"""The speed suite: prism_memory vs the same query by hand on asyncpg vs LangGraph's store.

One run on one PostgreSQL (the embedded one unless ``--url``): a seeded dataset (random unit 384-d
vectors, Zipf-sized threads, consent and lineage-invalidation filters active) is loaded through
``Memory.remember``, by COPY into a table of the same shape, and into LangGraph's
``AsyncPostgresStore``; then per-thread recall is timed for every contender on the same queries,
interleaved, with truth from numpy (exact top-K over the rows the rules allow). With PgBouncer
installed (``--pgbouncer``, the default when the program is found), the same recall also runs
through a PgBouncer in transaction mode in front of the same database, interleaved with the direct
one. Writes JSON and Markdown (``--out``); the Markdown's first table is every ratio of issue 50
against its target. See benchmarks/README.md.

    .venv/bin/python benchmarks/speed.py                  # 10k rows, ~2-3 minutes
    .venv/bin/python benchmarks/speed.py --rows 100000 --queries 500 --no-langgraph   # issue 50
    .venv/bin/python benchmarks/speed.py --rows 1000000 --i-mean-it
"""

from __future__ import annotations

import os

# Pin BLAS before numpy loads: matrix products must not fight the database for the two cores.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse
import asyncio
import contextlib
import functools
import gc
import importlib.metadata
import json
import math
import platform
import struct
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _targets
import asyncpg
import numpy as np
from _common import (
    DIM,
    LookupEmbedder,
    database,
    pgbouncer,
    pgbouncer_program,
    unit_vectors,
    zipf_sizes,
)
from pgvector.asyncpg import register_vector

from prism_memory import InMemoryVectorStore, Memory, MemoryConsent, create_memory
from prism_memory.lexical import BM25_B, BM25_K1, query_terms, tokenize
from prism_memory.models import DEFAULT_CHANCE_MARGIN, DEFAULT_LEXICAL_WEIGHT
from prism_memory.postgres import create_postgres_memory_stores

SEED = 20261201
TENANT = "bench-tenant"  # the in-memory micro targets' scope
RESOURCE = "bench-user"
SHAPE = {"tenants": 10, "resources": 10}  # threads spread over tenants x resources (--tenants)
BATCH = 128
KS = (10, 32)
SMALL = 100  # a thread of at most this many rows is "small"
INVISIBLE_EVERY = 20  # every 20th row is hidden by its consent
DERIVED_EVERY = 25  # every 25th row derives from the row 5 before it ...
CORRECTED_EVERY = (
    4  # ... and every 4th such source is corrected afterwards (dependents invalidated)
)
VOCABULARY = 300  # stored texts carry WORDS_PER_ROW words of a seeded vocabulary (Zipf: 1/rank)
WORDS_PER_ROW = 3
LEXICAL_EVERY = 4  # every 4th query carries one or two words of a stored row (class "lexical")


# ---- dataset ------------------------------------------------------------------------------------


@dataclass
class Row:
    thread: int
    index: int
    id: str
    text: str
    vector: np.ndarray
    visible: bool = True
    source: str | None = None  # lineage source id within the thread
    invalid: bool = False


@dataclass
class Dataset:
    sizes: list[int]
    rows: list[Row]
    by_thread: list[list[Row]]
    corrected: list[tuple[int, str]]
    table: dict[str, np.ndarray]

    def eligible(self, thread: int) -> list[Row]:
        return [r for r in self.by_thread[thread] if r.visible and not r.invalid]


def thread_id(t: int) -> str:
    return f"thread-{t:05d}"


def tenant_of(t: int) -> str:
    """Thread ``t``'s tenant: threads go round the tenants, then round the resources."""
    return f"tenant-{t % SHAPE['tenants']:02d}"


def resource_of(t: int) -> str:
    return f"resource-{(t // SHAPE['tenants']) % SHAPE['resources']:02d}"


def vocabulary() -> list[str]:
    """Distinct made-up words (consonant-vowel syllables), each one term of ``tokenize``."""
    rng = np.random.default_rng(SEED + 3)
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    words: dict[str, None] = {}
    while len(words) < VOCABULARY:
        word = "".join(
            consonants[int(rng.integers(len(consonants)))] + vowels[int(rng.integers(len(vowels)))]
            for _ in range(3)
        )
        if tokenize(word) == [word]:
            words[word] = None
    return list(words)


def build_dataset(rows: int, threads: int, long_words: int = 0) -> Dataset:
    """``long_words`` > 0: every row's text also carries that many words of the vocabulary
    (Zipf-drawn, repeats kept) -- long entries, which recall's re-rank must score by their term
    counts (``--long-words 600``: ~4,300 characters, past the tokenizer's short-text memo)."""
    rng = np.random.default_rng(SEED)
    sizes = zipf_sizes(rows, threads)
    vectors = unit_vectors(rng, rows)
    # the words come from their own generator, so the vectors (and the truth) stay as they were
    words = vocabulary()
    weights = 1.0 / np.arange(1, len(words) + 1)
    picks = np.random.default_rng(SEED + 4).choice(
        len(words), size=(rows, WORDS_PER_ROW), p=weights / weights.sum()
    )
    extra = np.random.default_rng(SEED + 5).choice(
        len(words), size=(rows if long_words else 0, long_words), p=weights / weights.sum()
    )
    table: dict[str, np.ndarray] = {}
    all_rows: list[Row] = []
    by_thread: list[list[Row]] = []
    corrected: list[tuple[int, str]] = []
    at = 0
    for t, size in enumerate(sizes):
        mine: list[Row] = []
        for i in range(size):
            said = " ".join(words[w] for w in picks[at])
            if long_words:
                said += " " + " ".join(words[w] for w in extra[at])
            row = Row(t, i, f"e{t:05d}-{i:07d}", f"note t{t:05d} e{i:07d} {said}", vectors[at])
            at += 1
            row.visible = (at % INVISIBLE_EVERY) != 0
            if i >= 5 and i % DERIVED_EVERY == 0:
                row.source = mine[i - 5].id
            table[row.text] = row.vector
            mine.append(row)
        # correct every CORRECTED_EVERY-th lineage source: its dependents become invalid
        sources = [r.source for r in mine if r.source is not None]
        for n, source in enumerate(sources):
            if n % CORRECTED_EVERY == 0:
                corrected.append((t, source))
                for r in mine:
                    if r.source == source:
                        r.invalid = True
                src = next(r for r in mine if r.id == source)
                table[src.text + " (corrected)"] = src.vector  # same vector: truth is unchanged
        by_thread.append(mine)
        all_rows.extend(mine)
    return Dataset(sizes, all_rows, by_thread, corrected, table)


def size_class(size: int, largest: int) -> str:
    if size == largest:
        return "largest"
    return "small" if size <= SMALL else "medium"


@dataclass
class Query:
    n: int
    thread: int
    cls: str
    text: str
    vector: np.ndarray
    truth: dict[int, list[str]]
    eligible: int


def build_queries(data: Dataset, count: int, table: dict[str, np.ndarray]) -> list[Query]:
    rng = np.random.default_rng(SEED + 1)
    largest = max(data.sizes)
    by_class: dict[str, list[int]] = {"small": [], "medium": [], "largest": []}
    for t, size in enumerate(data.sizes):
        if data.eligible(t):
            by_class[size_class(size, largest)].append(t)
    classes = [c for c in ("small", "medium", "largest") if by_class[c]]
    queries: list[Query] = []
    for n in range(count):
        lexical = n % LEXICAL_EVERY == LEXICAL_EVERY - 1
        size = classes[(n // LEXICAL_EVERY if lexical else n) % len(classes)]
        cls = "lexical" if lexical else size
        pool = by_class[size]
        t = pool[int(rng.integers(len(pool)))]
        eligible = data.eligible(t)
        row = eligible[int(rng.integers(len(eligible)))]
        # near one stored row, but not on it: neighbours exist and the order is not trivial
        v = row.vector + 0.9 * unit_vectors(rng, 1)[0]
        v = (v / np.linalg.norm(v)).astype(np.float32)
        text = f"probe q{n:06d}"  # words no stored row holds: the lexical leg finds nothing
        if lexical:  # one or two of that row's vocabulary words: both legs contribute
            said = row.text.split()[3:]
            text += " " + " ".join(said[: 1 + n % 2])
        table[text] = v
        m = np.stack([r.vector for r in eligible]).astype(np.float64)
        scores = m @ v.astype(np.float64)
        order = np.argsort(-scores, kind="stable")
        truth = {k: [eligible[i].id for i in order[:k]] for k in KS}
        queries.append(Query(n, t, cls, text, v, truth, len(eligible)))
    return queries


# ---- loading ------------------------------------------------------------------------------------


def entry_dicts(rows: list[Row]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        item: dict[str, Any] = {"id": r.id, "text": r.text}
        if not r.visible:
            item["consent"] = MemoryConsent(visible=False)
        if r.source is not None:
            item["lineage"] = {"source_ids": [r.source]}
        out.append(item)
    return out


def arrival_order(data: Dataset) -> list[Row]:
    """Every row once, threads interleaved at random (seeded), each thread's rows in their order:
    how rows arrive from many live conversations, so a thread's rows are spread over the table."""
    labels = np.repeat(np.arange(len(data.sizes)), data.sizes)
    np.random.default_rng(SEED + 5).shuffle(labels)
    at = [0] * len(data.sizes)
    order = []
    for t in labels.tolist():
        order.append(data.by_thread[t][at[t]])
        at[t] += 1
    return order


async def load_interleaved(data: Dataset, store: Any) -> float:
    """``import_entries`` of every row (its vector given) in arrival order; returns seconds."""
    from prism_memory.importing import import_entries

    def items() -> Any:
        for r in arrival_order(data):
            item = entry_dicts([r])[0]
            item.update(
                tenant_id=tenant_of(r.thread), resource_id=resource_of(r.thread),
                thread_id=thread_id(r.thread), vector=r.vector,
            )  # fmt: skip
            yield item

    start = time.perf_counter()
    await import_entries(store, items(), batch_size=1000)
    return time.perf_counter() - start


async def load_prism(data: Dataset, make: Callable[[int], Memory]) -> float:
    """``remember(batch, wait=True)`` thread by thread; returns seconds."""
    start = time.perf_counter()
    for t, rows in enumerate(data.by_thread):
        async with make(t) as memory:
            for lo in range(0, len(rows), BATCH):
                await memory.remember(entry_dicts(rows[lo : lo + BATCH]), wait=True)
    return time.perf_counter() - start


async def apply_corrections(data: Dataset, make: Callable[[int], Memory]) -> None:
    texts = {r.id: r.text for r in data.rows}
    for t, source in data.corrected:
        async with make(t) as memory:
            await memory.correct(source, texts[source] + " (corrected)")


def tsvector_binary(terms: list[str]) -> bytes:
    """PostgreSQL's binary ``tsvector`` (``tsvectorsend``): count, then each lexeme NUL-terminated
    with no positions."""
    return struct.pack(">i", len(terms)) + b"".join(t.encode() + b"\0\0\0" for t in terms)


async def copy_baseline(
    conn: asyncpg.Connection, schema: str, data: Dataset
) -> tuple[float, float]:
    """COPY the same rows into a table of the same shape (every index but HNSW, which is deferred
    for both); rows/s without and with the HNSW build afterwards. The rows carry the library's ``text_tsv`` (binary, through a codec
    registered here), so the lexical GIN index is maintained as for the library's writes."""
    await conn.set_type_codec(
        "tsvector", schema="pg_catalog", encoder=tsvector_binary, decoder=bytes, format="binary"
    )
    target = f'"{schema}".copy_target'
    await conn.execute(f'CREATE TABLE {target} (LIKE "{schema}".semantic_memory INCLUDING ALL)')
    for name in await conn.fetch(
        "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'copy_target' "
        "AND indexdef ILIKE '%hnsw%'",
        schema,
    ):
        await conn.execute(f'DROP INDEX "{schema}"."{name[0]}"')
    now = datetime.now(UTC)
    columns = [
        "tenant_id", "resource_id", "thread_id", "id", "text", "role", "metadata",
        "consent_explicit", "consent_source", "consent_scope", "consent_visible", "sequence",
        "occurred_at", "created_at", "written_at", "importance", "legal_hold", "status",
        "revision", "attempts", "embedding", "term_count", "text_tsv",
    ]  # fmt: skip
    records = [
        (
            tenant_of(r.thread), resource_of(r.thread), thread_id(r.thread), r.id, r.text, "user",
            json.dumps({} if r.source is None else {"_lineage": {"sourceIds": [r.source]}}),
            not r.visible, "user", "thread", r.visible, r.index, now, now, now, 1.0, False,
            "indexed", 1, 0, r.vector, len(tokenize(r.text)), sorted(set(tokenize(r.text))),
        )
        for r in data.rows
    ]  # fmt: skip
    start = time.perf_counter()
    await conn.copy_records_to_table(
        "copy_target", schema_name=schema, columns=columns, records=records
    )
    seconds = time.perf_counter() - start
    # the HNSW index built afterwards, with the statement deferred_vector_index() runs
    start = time.perf_counter()
    await conn.execute(
        f"CREATE INDEX copy_target_hnsw ON {target} USING hnsw (embedding vector_cosine_ops)"
    )
    build = time.perf_counter() - start
    await conn.execute(f"DROP TABLE {target}")
    return len(records) / seconds, len(records) / (seconds + build)


# ---- contenders ---------------------------------------------------------------------------------


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


# ---- main ---------------------------------------------------------------------------------------


async def run(
    args: argparse.Namespace, url: str, libpq_url: str, pooled_url: str | None = None
) -> dict[str, Any]:
    """The whole run; ``pooled_url``: PgBouncer (transaction mode) in front of ``url``'s database,
    whose recall becomes contender ``pooled``."""
    threads = args.threads or max(10, args.rows // 100)
    data = build_dataset(args.rows, threads, args.long_words)
    table = dict(data.table)
    queries = build_queries(data, args.queries, table)
    embedder = LookupEmbedder(table)
    largest = max(data.sizes)
    result: dict[str, Any] = {"load": {}, "recall": {}, "throughput": {}, "in_memory": {}}

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    # as many pooled connections as the hand-written contenders' pool (8 in flight at most)
    stores = await create_postgres_memory_stores(
        url, schema=schema, dimension=DIM, engine_options={"pool_size": 8}
    )
    raw = await asyncpg.connect(libpq_url)
    await register_vector(raw)
    mem_store = InMemoryVectorStore(dimension=DIM)
    routes: dict[str, Any] = {}  # the pooled contenders' stores, opened after the load
    lg_cm: Any = None
    lg_store: Any = None
    try:

        def pg_memory(t: int) -> Memory:
            return create_memory(
                tenant_id=tenant_of(t), resource_id=resource_of(t), thread_id=thread_id(t),
                embedder=embedder, vector_store=stores.vector_store,
                working_store=stores.working_store,
            )  # fmt: skip

        def routed_memory(route: str, t: int) -> Memory:
            return create_memory(
                tenant_id=tenant_of(t), resource_id=resource_of(t), thread_id=thread_id(t),
                embedder=embedder, vector_store=routes[route].vector_store,
                working_store=routes[route].working_store,
            )  # fmt: skip

        def mem_memory(t: int) -> Memory:
            return create_memory(
                tenant_id=tenant_of(t), resource_id=resource_of(t), thread_id=thread_id(t),
                embedder=embedder, vector_store=mem_store,
            )  # fmt: skip

        async def load(make: Callable[[int], Memory], store: Any) -> float:
            if args.load == "interleaved":
                return await load_interleaved(data, store)
            return await load_prism(data, make)

        # ---- load
        print(f"loading {args.rows:,} rows over {threads} threads ...", flush=True)
        deferred = getattr(stores.vector_store, "deferred_vector_index", None)
        if deferred is not None and not args.keep_hnsw:
            async with deferred():
                seconds = await load(pg_memory, stores.vector_store)
                build_start = time.perf_counter()
            index_seconds = time.perf_counter() - build_start
        else:
            seconds = await load(pg_memory, stores.vector_store)
            index_seconds = 0.0
        result["load"]["prism_rows_per_s"] = args.rows / (seconds + index_seconds)
        result["load"]["prism_load_rows_per_s"] = args.rows / seconds
        result["load"]["prism_seconds"] = seconds
        result["load"]["hnsw_build_seconds"] = index_seconds
        result["load"]["hnsw_deferred"] = deferred is not None and not args.keep_hnsw
        await apply_corrections(data, pg_memory)
        mem_seconds = await load(mem_memory, mem_store)
        await apply_corrections(data, mem_memory)
        result["load"]["in_memory_rows_per_s"] = args.rows / mem_seconds
        await raw.execute(f'VACUUM (ANALYZE) "{schema}".semantic_memory')
        await raw.execute(f'ANALYZE "{schema}".semantic_memory_invalidation')
        copy_rates = await copy_baseline(raw, schema, data)
        result["load"]["copy_rows_per_s"], result["load"]["copy_build_rows_per_s"] = copy_rates
        print(
            f"  prism {result['load']['prism_load_rows_per_s']:,.0f} rows/s "
            f"({result['load']['prism_rows_per_s']:,.0f} with the HNSW build), "
            f"COPY {result['load']['copy_rows_per_s']:,.0f} rows/s "
            f"({result['load']['copy_build_rows_per_s']:,.0f} with the HNSW build)",
            flush=True,
        )

        if args.langgraph:
            try:
                from langgraph.store.base import PutOp
                from langgraph.store.postgres import AsyncPostgresStore
            except ImportError:
                print("  langgraph-checkpoint-postgres not installed: skipping LangGraph")
                args.langgraph = False
        if args.langgraph:

            async def lg_embed(texts: list[str]) -> list[list[float]]:
                return [table[t].tolist() for t in texts]

            lg_cm = AsyncPostgresStore.from_conn_string(
                libpq_url,
                pool_config={"min_size": 1, "max_size": 8},
                index={"dims": DIM, "embed": lg_embed, "fields": ["text"]},
            )
            lg_store = await lg_cm.__aenter__()
            await lg_store.setup()
            eligible_rows = [r for r in data.rows if r.visible and not r.invalid]
            start = time.perf_counter()
            for lo in range(0, len(eligible_rows), BATCH):
                await lg_store.abatch(
                    [
                        PutOp(("bench", thread_id(r.thread)), r.id, {"text": r.text})
                        for r in eligible_rows[lo : lo + BATCH]
                    ]
                )
            result["load"]["langgraph_rows_per_s"] = len(eligible_rows) / (
                time.perf_counter() - start
            )
            print(f"  LangGraph {result['load']['langgraph_rows_per_s']:,.0f} rows/s", flush=True)

        # ---- the same stores opened in transaction-pooling mode: through PgBouncer, and (with
        # --transaction-direct) on the direct URL, which tells the mode's cost from the pooler's hop
        pooled_options: dict[str, Any] = {
            "schema": schema, "dimension": DIM, "skip_migrations": True,
            "pooling": "transaction", "engine_options": {"pool_size": 8},
        }  # fmt: skip
        if pooled_url is not None:
            routes["pooled"] = await create_postgres_memory_stores(pooled_url, **pooled_options)
        if args.transaction_direct:
            routes["txn_direct"] = await create_postgres_memory_stores(url, **pooled_options)

        # ---- contenders
        sql = hand_sql(schema)
        stmt = await raw.prepare(sql)
        bare = bare_sql(schema)
        bare_stmt = await raw.prepare(bare)
        hybrid = hand_hybrid_sql(schema)
        hybrid_stmt = await raw.prepare(hybrid)
        memories: dict[tuple[str, int], Memory] = {}

        def memory_of(kind: str, t: int) -> Memory:
            key = (kind, t)
            if key not in memories:
                if kind in routes:
                    memories[key] = routed_memory(kind, t)
                else:
                    memories[key] = (pg_memory if kind == "pg" else mem_memory)(t)
            return memories[key]

        def routed(route: str) -> Callable[[Query, int], Awaitable[list[str]]]:
            async def recall(q: Query, k: int) -> list[str]:
                hits = (await memory_of(route, q.thread).recall(q.text, top_k=k)).hits
                return [h.record.id for h in hits]

            return recall

        async def c_pg(q: Query, k: int) -> list[str]:
            return [
                h.record.id for h in (await memory_of("pg", q.thread).recall(q.text, top_k=k)).hits
            ]

        async def c_mem(q: Query, k: int) -> list[str]:
            return [
                h.record.id for h in (await memory_of("mem", q.thread).recall(q.text, top_k=k)).hits
            ]

        async def c_raw(q: Query, k: int) -> list[str]:
            rows = await stmt.fetch(q.vector, *scope_args(q), k)
            return [r["id"] for r in rows]

        async def c_bare(q: Query, k: int) -> list[str]:
            rows = await bare_stmt.fetch(q.vector, *scope_args(q), k)
            return [r["id"] for r in rows]

        async def c_hand(q: Query, k: int) -> list[str]:
            # what recall does around its statement, by hand: terms, the statement, the fusion
            terms, quoted, any_term = hand_terms(q.text)
            rows = await hybrid_stmt.fetch(q.vector, *scope_args(q), 4 * k, quoted, any_term)
            return hand_fuse(rows, q.vector, terms, k)

        async def c_lg(q: Query, k: int) -> list[str]:
            items = await lg_store.asearch(("bench", thread_id(q.thread)), query=q.text, limit=k)
            return [item.key for item in items]

        contenders = [
            Contender("prism", "prism_memory `Memory.recall` (PostgreSQL)", c_pg),
            Contender("hand", "hand-written asyncpg, same work (prepared, binary)", c_hand),
            Contender("asyncpg", "hand-written asyncpg, vector-only, no lexical leg", c_raw),
            Contender("bare", "bare vector query, no rules (the targets' reference)", c_bare),
            Contender("in_memory", "prism_memory `Memory.recall` (in-memory)", c_mem),
        ]
        if args.langgraph:
            contenders.append(Contender("langgraph", "LangGraph `AsyncPostgresStore`", c_lg))
        labels = {
            "pooled": "prism_memory `Memory.recall` through PgBouncer (transaction mode)",
            "txn_direct": 'prism_memory `Memory.recall`, direct URL, `pooling="transaction"`',
        }
        contenders += [Contender(route, labels[route], routed(route)) for route in routes]

        # warm-up: every contender once on every query (steady state, as in a long-running host:
        # each thread's Memory exists, every pooled connection has prepared its statements and
        # PostgreSQL has settled on its plans), then the heap built so far (the dataset) is frozen
        # out of the garbage collector's way, for every contender alike
        for q in queries:
            for c in contenders:
                for k in KS:
                    await c.run(q, k)
        gc.collect()
        gc.freeze()

        result["load_average_timed"] = " / ".join(f"{v:.2f}" for v in os.getloadavg())
        # ---- timed, interleaved, rotating the first contender
        print(
            f"timing {len(queries)} queries x {len(KS)} K x {len(contenders)} contenders ...",
            flush=True,
        )
        for q in queries:
            for k in KS:
                shift = (q.n + k) % len(contenders)
                answers: dict[str, list[str]] = {}
                for c in contenders[shift:] + contenders[:shift]:
                    cpu_start, start = time.thread_time(), time.perf_counter()
                    ids = await c.run(q, k)
                    elapsed = time.perf_counter() - start
                    answers[c.key] = ids
                    c.samples.setdefault((q.cls, k), []).append(elapsed)
                    c.cpu.setdefault((q.cls, k), []).append(time.thread_time() - cpu_start)
                    if q.cls != "lexical":  # cosine truth; a query with stored words has none
                        want = q.truth[k]
                        c.recall.setdefault((q.cls, k), []).append(
                            len(set(ids[:k]) & set(want)) / max(1, len(want))
                        )
                    if c.key != "bare" and len(ids) < min(k, q.eligible):
                        c.short += 1
                # the library and its hand-written twin must agree id for id, in order
                for key in ("prism", "in_memory"):
                    if answers[key] != answers["hand"]:
                        contender_by_key = next(c for c in contenders if c.key == key)
                        contender_by_key.mismatches += 1
                # a pooled route must answer what the direct one answers
                for c in contenders:
                    if c.key in routes and answers[c.key] != answers["prism"]:
                        c.differs_from_direct += 1

        for c in contenders:
            entry: dict[str, Any] = {
                "label": c.label,
                "short_results": c.short,
                "mismatches_vs_hand": c.mismatches if c.key in ("prism", "in_memory") else None,
            }
            if c.key in routes:
                entry["differs_from_direct"] = c.differs_from_direct
            for k in KS:  # every class together: the headline figures
                c.samples[("all", k)] = [
                    v for (cls, kk), vs in c.samples.items() if kk == k and cls != "all" for v in vs
                ]
                c.cpu[("all", k)] = [
                    v for (cls, kk), vs in c.cpu.items() if kk == k and cls != "all" for v in vs
                ]
            for (cls, k), values in sorted(c.samples.items()):
                entry[f"{cls}_k{k}"] = {
                    "p50_ms": percentile(values, 50),
                    "p95_ms": percentile(values, 95),
                    "cpu_p50_us": percentile(c.cpu[(cls, k)], 50) * 1000.0,
                    "recall_at_k": float(np.mean(c.recall[(cls, k)]))
                    if (cls, k) in c.recall
                    else None,
                    "n": len(values),
                }
            result["recall"][c.key] = entry

        # ---- throughput: 8 in flight, K=10 and K=32
        flight = 8
        pool = await asyncpg.create_pool(
            libpq_url, min_size=flight, max_size=flight, init=register_vector
        )
        try:

            async def c_raw_pool(q: Query, k: int) -> list[str]:
                async with pool.acquire() as conn:
                    rows = await conn.fetch(sql, q.vector, *scope_args(q), k)
                return [r["id"] for r in rows]

            async def c_bare_pool(q: Query, k: int) -> list[str]:
                async with pool.acquire() as conn:
                    rows = await conn.fetch(bare, q.vector, *scope_args(q), k)
                return [r["id"] for r in rows]

            async def c_hand_pool(q: Query, k: int) -> list[str]:
                terms, quoted, any_term = hand_terms(q.text)
                async with pool.acquire() as conn:
                    rows = await conn.fetch(
                        hybrid, q.vector, *scope_args(q), 4 * k, quoted, any_term,
                    )  # fmt: skip
                return hand_fuse(rows, q.vector, terms, k)

            runners = {
                "prism": c_pg, "hand": c_hand_pool, "asyncpg": c_raw_pool, "bare": c_bare_pool,
            }  # fmt: skip
            if args.langgraph:
                runners["langgraph"] = c_lg
            runners.update((route, routed(route)) for route in routes)
            # rounds alternate between the contenders, so a change in the shared machine's load
            # falls on all of them alike; each round runs every query once, 8 in flight
            busy = {(key, k): 0.0 for key in runners for k in KS}
            for _ in range(max(1, args.throughput_rounds)):
                for k in KS:
                    for key, runner in runners.items():
                        semaphore = asyncio.Semaphore(flight)

                        async def one(
                            q: Query, runner: Any = runner, semaphore: Any = semaphore, k: int = k
                        ) -> None:
                            async with semaphore:
                                await runner(q, k)

                        start = time.perf_counter()
                        await asyncio.gather(*(one(q) for q in queries))
                        busy[(key, k)] += time.perf_counter() - start
            for (key, k), seconds in busy.items():
                rate = len(queries) * max(1, args.throughput_rounds) / seconds
                result["throughput"].setdefault(key, {})[f"k{k}"] = rate
        finally:
            await pool.close()

        # ---- in-memory micro targets
        result["in_memory"] = await in_memory_targets(embedder, table)
    finally:
        if lg_cm is not None:
            with contextlib.suppress(Exception):
                async with lg_store.conn.connection() as conn:  # type: ignore[union-attr]
                    await conn.execute(
                        "DROP TABLE IF EXISTS store_vectors, store, store_migrations, vector_migrations"
                    )
            await lg_cm.__aexit__(None, None, None)
        await raw.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await raw.close()
        for opened in routes.values():
            await opened.close()
        await stores.close()

    result["dataset"] = {
        "rows": args.rows,
        "long_words": args.long_words,
        "threads": threads,
        "largest_thread": largest,
        "small_threads": sum(1 for s in data.sizes if s <= SMALL),
        "medium_threads": sum(1 for s in data.sizes if SMALL < s < largest),
        "queries": len(queries),
        "hidden_by_consent": sum(1 for r in data.rows if not r.visible),
        "invalidated_by_lineage": sum(1 for r in data.rows if r.invalid),
        "dimension": DIM,
        "seed": SEED,
        "tenants": SHAPE["tenants"],
        "resources": SHAPE["resources"],
        "load": "interleaved across threads (import_entries, vectors given)"
        if args.load == "interleaved"
        else "thread by thread (remember)",
        "load_average_timed": result.pop("load_average_timed", "-"),
        "load_average": " / ".join(f"{v:.2f}" for v in os.getloadavg()),
    }
    return result


async def in_memory_targets(
    embedder: LookupEmbedder, table: dict[str, np.ndarray]
) -> dict[str, Any]:
    """A 100-row thread's store search, and remember-then-recall on a 13,000-row thread.

    The search asks for 40 candidates (a recall's 4 × K at K = 10), once with terms the thread does
    not hold (the dense leg alone: the target's figure) and once with the recall query's own terms,
    which occur in every row (both legs, ~64 candidates).
    """
    from prism_memory.lexical import query_terms
    from prism_memory.models import MemoryIdentity
    from prism_memory.stores.base import RecallFilter, SearchRequest

    rng = np.random.default_rng(SEED + 2)
    store = InMemoryVectorStore(dimension=DIM)
    out: dict[str, Any] = {}
    for size, name in ((100, "t100"), (13_000, "t13k")):
        vecs = unit_vectors(rng, size + 200)
        for i in range(size + 200):
            table[f"mem {name} {i}"] = vecs[i]
        memory = create_memory(
            tenant_id=TENANT, resource_id=RESOURCE, thread_id=name, embedder=embedder,
            vector_store=store,
        )  # fmt: skip
        async with memory:
            for lo in range(0, size, 256):
                await memory.remember(
                    [{"text": f"mem {name} {i}"} for i in range(lo, min(size, lo + 256))], wait=True
                )
            scope = MemoryIdentity(tenant_id=TENANT, resource_id=RESOURCE, thread_id=name)
            if size == 100:
                search, lexical, recall = [], [], []
                for j in range(1000):
                    text = f"mem {name} {size + j % 200}"
                    for terms, into in (("probe x", search), (text, lexical)):
                        request = SearchRequest(
                            vector=table[text], terms=query_terms(terms), limit=40,
                            filter=RecallFilter(now=datetime.now(UTC)),
                        )  # fmt: skip
                        start = time.perf_counter()
                        await store.search(scope, request)
                        into.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    await memory.recall(text, top_k=10)
                    recall.append(time.perf_counter() - start)
                out["t100_search_p50_us"] = percentile(search, 50) * 1000
                out["t100_search_lexical_p50_us"] = percentile(lexical, 50) * 1000
                out["t100_recall_p50_us"] = percentile(recall, 50) * 1000
            else:
                both, alone = [], []
                for j in range(100):
                    text = f"mem {name} {size + j}"
                    start = time.perf_counter()
                    await memory.remember({"text": text}, wait=True)
                    await memory.recall(text, top_k=10)
                    both.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    await memory.recall(f"mem {name} {j}", top_k=10)
                    alone.append(time.perf_counter() - start)
                out["t13k_remember_recall_p50_ms"] = percentile(both, 50)
                out["t13k_recall_p50_ms"] = percentile(alone, 50)
    return out


# ---- report -------------------------------------------------------------------------------------


def versions(server_version: str, pgvector: str) -> dict[str, str]:
    def v(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "-"

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": str(os.cpu_count()),
        "postgresql": server_version,
        "pgvector": pgvector,
        "prism-memory": v("prism-memory"),
        "numpy": np.__version__,
        "asyncpg": v("asyncpg"),
        "sqlalchemy": v("sqlalchemy"),
        "langgraph-checkpoint-postgres": v("langgraph-checkpoint-postgres"),
        "OPENBLAS_NUM_THREADS": os.environ["OPENBLAS_NUM_THREADS"],
    }


def markdown(result: dict[str, Any]) -> str:
    rec = result["recall"]
    ds = result["dataset"]
    tp = result["throughput"]
    pr, vo, hd = rec["prism"], rec["bare"], rec["hand"]
    lines = [
        f"### {result['date']}: {ds['rows']:,} rows, {ds['threads']} threads "
        f"(largest {ds['largest_thread']:,} rows), {ds['queries']} queries, dim {ds['dimension']}",
        "",
        "Machine and versions: "
        + ", ".join(f"{k} {v}" for k, v in result["versions"].items())
        + ".",
        "",
        f"Filters active: {ds['hidden_by_consent']:,} rows hidden by consent, "
        f"{ds['invalidated_by_lineage']:,} invalidated by a corrected lineage source. "
        f"Threads over {ds.get('tenants', 1)} tenants x {ds.get('resources', 1)} resources, "
        f"loaded {ds.get('load', 'thread by thread')}. Load average {ds.get('load_average', '-')}.",
        "",
        *([_targets.markdown(result)] if "targets" in result else []),
        "| every query, K=10 / K=32 | prism_memory `Memory.recall` | bare vector-only query "
        "(reference) | same work by hand | prism / bare (target) | prism / same work |",
        "| --- | --- | --- | --- | --- | --- |",
        *(
            f"| recall {name} | "
            + " / ".join(f"{pr[f'all_k{k}'][f'{name}_ms']:.2f}" for k in KS)
            + " ms | "
            + " / ".join(f"{vo[f'all_k{k}'][f'{name}_ms']:.2f}" for k in KS)
            + " ms | "
            + " / ".join(f"{hd[f'all_k{k}'][f'{name}_ms']:.2f}" for k in KS)
            + " ms | "
            + " / ".join(
                f"{pr[f'all_k{k}'][f'{name}_ms'] / vo[f'all_k{k}'][f'{name}_ms']:.2f}×" for k in KS
            )
            + f" ({target}) | "
            + " / ".join(
                f"{pr[f'all_k{k}'][f'{name}_ms'] / hd[f'all_k{k}'][f'{name}_ms']:.2f}×" for k in KS
            )
            + " |"
            for name, target in (("p50", "≤ 1.5× / ≤ 2×"), ("p95", "≤ 2×"))
        ),
        "| throughput, 8 in flight | "
        + " / ".join(f"{tp['prism'][f'k{k}']:,.0f}" for k in KS)
        + " qps | "
        + " / ".join(f"{tp['bare'][f'k{k}']:,.0f}" for k in KS)
        + " qps | "
        + " / ".join(f"{tp['hand'][f'k{k}']:,.0f}" for k in KS)
        + " qps | "
        + " / ".join(f"{tp['prism'][f'k{k}'] / tp['bare'][f'k{k}']:.2f}×" for k in KS)
        + " (≥ 0.6×) | "
        + " / ".join(f"{tp['prism'][f'k{k}'] / tp['hand'][f'k{k}']:.2f}×" for k in KS)
        + " |",
        "| client CPU per recall, median | "
        + " / ".join(f"{pr[f'all_k{k}']['cpu_p50_us']:.0f}" for k in KS)
        + " µs | "
        + " / ".join(f"{vo[f'all_k{k}']['cpu_p50_us']:.0f}" for k in KS)
        + " µs | "
        + " / ".join(f"{hd[f'all_k{k}']['cpu_p50_us']:.0f}" for k in KS)
        + " µs | | |",
        "",
        "| recall p50 / p95, ms | "
        + " | ".join(v["label"] for v in rec.values())
        + " | prism / same work p50 (≤1.15) | p95 (≤1.25) | prism / bare p50 | p95 |",
        "| --- | " + " | ".join("---" for _ in rec) + " | --- | --- | --- | --- |",
    ]
    for cls in ("all", "small", "medium", "largest", "lexical"):
        for k in KS:
            key = f"{cls}_k{k}"
            if key not in rec["prism"]:
                continue
            cells = []
            for v in rec.values():
                s = v[key]
                quality = (
                    f"recall {s['recall_at_k']:.3f}"
                    if s["recall_at_k"] is not None
                    else f"n={s['n']}"
                )
                cells.append(f"{s['p50_ms']:.2f} / {s['p95_ms']:.2f} ({quality})")
            p, h, a = rec["prism"][key], rec["hand"][key], rec["bare"][key]
            lines.append(
                f"| {cls}, K={k} | "
                + " | ".join(cells)
                + f" | {p['p50_ms'] / h['p50_ms']:.2f}× | {p['p95_ms'] / h['p95_ms']:.2f}×"
                + f" | {p['p50_ms'] / a['p50_ms']:.2f}× | {p['p95_ms'] / a['p95_ms']:.2f}× |"
            )
    lines.append(
        "| results short of min(K, eligible) | "
        + " | ".join(str(v["short_results"]) for v in rec.values())
        + " | | | | |"
    )
    lines.append(
        "| ids differ from the same-work hand-written | "
        + " | ".join(
            "-" if v.get("mismatches_vs_hand") is None else str(v["mismatches_vs_hand"])
            for v in rec.values()
        )
        + " | | | | |"
    )
    lines.append(
        "| ids differ from direct `Memory.recall` | "
        + " | ".join(str(v.get("differs_from_direct", "-")) for v in rec.values())
        + " | | | | |"
    )
    lines += pooled_markdown(result)
    lines += [
        "",
        "| client CPU per recall, median µs (the event loop's thread: Python, driver, decoding; not the "
        "server's) | " + " | ".join(v["label"] for v in rec.values()) + " | prism / same work |",
        "| --- | " + " | ".join("---" for _ in rec) + " | --- |",
    ]
    for cls in ("all", "small", "medium", "largest", "lexical"):
        for k in KS:
            key = f"{cls}_k{k}"
            if key not in rec["prism"] or "cpu_p50_us" not in rec["prism"][key]:
                continue
            cpu = [v[key]["cpu_p50_us"] for v in rec.values()]
            ratio = rec["prism"][key]["cpu_p50_us"] / rec["hand"][key]["cpu_p50_us"]
            lines.append(
                f"| {cls}, K={k} | " + " | ".join(f"{c:.0f}" for c in cpu) + f" | {ratio:.2f}× |"
            )
    lines += [
        "",
        "| throughput, 8 in flight, qps | " + " | ".join(f"K={k}" for k in KS) + " |",
        "| --- | " + " | ".join("---" for _ in KS) + " |",
        *(f"| {n} | " + " | ".join(f"{v[f'k{k}']:,.0f}" for k in KS) + " |" for n, v in tp.items()),
        "| prism / same work | "
        + " | ".join(f"{tp['prism'][f'k{k}'] / tp['hand'][f'k{k}']:.2f}×" for k in KS)
        + " |",
        "| prism / bare vector query (≥ 0.6) | "
        + " | ".join(f"{tp['prism'][f'k{k}'] / tp['bare'][f'k{k}']:.2f}×" for k in KS)
        + " |",
        "",
        "| load | rows/s |",
        "| --- | --- |",
    ]
    ld = result["load"]
    deferred = " (HNSW deferred)" if ld["hnsw_deferred"] else ""
    how = (
        "`import_entries`, vectors given, threads interleaved"
        if ds["load"].startswith("interleaved")
        else f"`remember(wait=True)`, {BATCH}/batch, free embedder"
    )
    lines.append(f"| prism_memory {how}{deferred} | {ld['prism_load_rows_per_s']:,.0f} |")
    lines.append(f"| COPY into the same table shape (no HNSW) | {ld['copy_rows_per_s']:,.0f} |")
    lines.append(f"| prism_memory, HNSW built afterwards | {ld['prism_rows_per_s']:,.0f} |")
    lines.append(f"| COPY, HNSW built afterwards | {ld['copy_build_rows_per_s']:,.0f} |")
    if "langgraph_rows_per_s" in ld:
        lines.append(
            f"| LangGraph `abatch` puts, {BATCH}/batch | {ld['langgraph_rows_per_s']:,.0f} |"
        )
    lines.append(f"| in-memory, the same way | {ld['in_memory_rows_per_s']:,.0f} |")
    lines.append(
        f"| prism / COPY (≥0.5): load / with the HNSW build | "
        f"{ld['prism_load_rows_per_s'] / ld['copy_rows_per_s']:.2f}× / "
        f"{ld['prism_rows_per_s'] / ld['copy_build_rows_per_s']:.2f}× |"
    )
    im = result["in_memory"]
    lines += [
        "",
        "| in-memory | measured | target |",
        "| --- | --- | --- |",
        f"| 100-row thread, `store.search` p50 | {im['t100_search_p50_us']:.0f} µs | ≤ 50 µs |",
        f"| 100-row thread, `store.search` p50, query terms in every row | {im['t100_search_lexical_p50_us']:.0f} µs | - |",
        f"| 100-row thread, `Memory.recall` p50 | {im['t100_recall_p50_us']:.0f} µs | - |",
        f"| 13,000-row thread, remember(wait=True) then recall, p50 | {im['t13k_remember_recall_p50_ms']:.2f} ms | ≤ 5 ms |",
        f"| 13,000-row thread, `Memory.recall` p50 | {im['t13k_recall_p50_ms']:.2f} ms | - |",
    ]
    return "\n".join(lines) + "\n"


def pooled_markdown(result: dict[str, Any]) -> list[str]:
    """The pooled routes beside the direct recall: p50, p95, throughput and their ratios."""
    rec, tp = result["recall"], result["throughput"]
    routes = [key for key in ("pooled", "txn_direct") if key in rec]
    if not routes:
        return []
    lines = [
        "",
        "| every query, K=10 / K=32 | direct `Memory.recall` | "
        + " | ".join(f"{rec[r]['label']} | / direct" for r in routes)
        + " |",
        "| --- | --- | " + " | ".join("--- | ---" for _ in routes) + " |",
    ]

    for name in ("p50", "p95"):
        cells = [" / ".join(f"{rec['prism'][f'all_k{k}'][f'{name}_ms']:.2f}" for k in KS) + " ms"]
        for r in routes:
            cells.append(" / ".join(f"{rec[r][f'all_k{k}'][f'{name}_ms']:.2f}" for k in KS) + " ms")
            cells.append(
                " / ".join(
                    f"{rec[r][f'all_k{k}'][f'{name}_ms'] / rec['prism'][f'all_k{k}'][f'{name}_ms']:.2f}×"
                    for k in KS
                )
            )
        lines.append(f"| recall {name} | " + " | ".join(cells) + " |")
    cells = [" / ".join(f"{tp['prism'][f'k{k}']:,.0f}" for k in KS) + " qps"]
    for r in routes:
        cells.append(" / ".join(f"{tp[r][f'k{k}']:,.0f}" for k in KS) + " qps")
        cells.append(" / ".join(f"{tp[r][f'k{k}'] / tp['prism'][f'k{k}']:.2f}×" for k in KS))
    lines.append("| throughput, 8 in flight | " + " | ".join(cells) + " |")
    cells = ["-"]
    for r in routes:
        cells += [f"{rec[r]['differs_from_direct']} differ, {rec[r]['short_results']} short", ""]
    lines.append("| same answers as direct | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="10000 (default), 100000, 1000000")
    parser.add_argument("--threads", type=int, default=0, help="default: rows / 100")
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument(
        "--long-words", type=int, default=0, help="words added to every row's text (long entries)"
    )
    parser.add_argument("--throughput-rounds", type=int, default=6)
    parser.add_argument("--tenants", type=int, default=10, help="threads spread over tenants ...")
    parser.add_argument("--resources", type=int, default=10, help="... x resources per tenant")
    parser.add_argument(
        "--load", choices=("interleaved", "threads"), default="interleaved",
        help="rows arrive interleaved across threads (import_entries, the default) or thread by "
        "thread (remember)",
    )  # fmt: skip
    parser.add_argument("--no-langgraph", dest="langgraph", action="store_false")
    parser.add_argument(
        "--pgbouncer", action=argparse.BooleanOptionalAction, default=None,
        help="time recall through PgBouncer (transaction mode) beside the direct one (default: "
        "when the pgbouncer program is installed)",
    )  # fmt: skip
    parser.add_argument(
        "--transaction-direct", action="store_true",
        help="also time recall with pooling='transaction' on the direct URL (the mode's own cost)",
    )  # fmt: skip
    parser.add_argument("--keep-hnsw", action="store_true", help="maintain HNSW during the load")
    parser.add_argument("--i-mean-it", action="store_true", help="allow --rows above 100,000")
    parser.add_argument("--url", help="PostgreSQL URL (default: an embedded server)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    SHAPE.update(tenants=max(1, args.tenants), resources=max(1, args.resources))
    if args.rows > 100_000 and not args.i_mean_it:
        raise SystemExit("--rows above 100,000 takes hours on a small machine: add --i-mean-it")
    program = pgbouncer_program() if args.pgbouncer is not False else None
    if args.pgbouncer and program is None:
        raise SystemExit("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    with database(args.url) as (url, libpq_url), contextlib.ExitStack() as stack:
        pooled_url, bouncer_version = (
            stack.enter_context(pgbouncer(url, program)) if program else (None, "-")
        )

        async def go() -> dict[str, Any]:
            conn = await asyncpg.connect(libpq_url)
            try:
                server_version = await conn.fetchval("SHOW server_version")
                pgv = await conn.fetchval(
                    "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
                )
            finally:
                await conn.close()
            result = await run(args, url, libpq_url, pooled_url)
            result["versions"] = versions(str(server_version), str(pgv))
            result["versions"]["pgbouncer"] = bouncer_version
            return result

        result = asyncio.run(go())
    result["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    result["targets"] = _targets.targets(result)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"speed-{args.rows}" + (f"-long{args.long_words}" if args.long_words else "")
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (out / f"{stem}.md").write_text(table)
    print()
    print(table)


if __name__ == "__main__":
    main()
