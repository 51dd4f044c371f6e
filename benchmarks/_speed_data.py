"""``speed.py``'s dataset and its loading: seeded rows (random unit vectors, Zipf-sized threads,
consent and lineage-invalidation filters), the queries with their truth from numpy, and the loads
(``Memory.remember``, ``import_entries``, and the COPY baseline). Not a benchmark itself."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np
from _common import unit_vectors, zipf_sizes

from prism_memory import Memory, MemoryConsent
from prism_memory.lexical import tokenize

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
