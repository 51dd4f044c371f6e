"""Long entries on both backends: their preparation runs off the event loop, recall reads each
entry's kept term counts instead of tokenizing its text again, and the scores stay bit-identical
to tokenizing (issue 46 item 1, issue 48 item 5)."""

from __future__ import annotations

import random
import string
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory, lexical
from prism_memory._offload import OFFLOAD_CHARS
from prism_memory.lexical import CorpusStats, bm25, query_terms, term_counts
from prism_memory.models import MemoryIdentity
from prism_memory.ranking import rerank
from prism_memory.stores.base import NewEntry, RecallFilter, SearchRequest

BACKENDS = [pytest.param("memory", id="memory"), pytest.param("postgres", id="postgres")]
SCOPE = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="long")
NOW = datetime(2026, 12, 6, tzinfo=UTC)


def _distinct_words(seed: int, chars: int) -> str:
    rng = random.Random(seed)
    words: list[str] = []
    size = 0
    while size < chars - 12:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 10)))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


def _long_english(seed: int) -> str:
    """A text over 4,096 characters (past the short-text memo) whose terms repeat."""
    rng = random.Random(seed)
    vocabulary = [
        "tide",
        "ocean",
        "harbor",
        "lantern",
        "violin",
        "meadow",
        "garden",
        "river",
        "cobalt",
        "moon",
    ]
    return " ".join(rng.choice(vocabulary) + rng.choice(["", "s", "ing"]) for _ in range(900))


@pytest.fixture
async def vector_store(request: pytest.FixtureRequest, backend: str) -> AsyncIterator[Any]:
    if backend == "memory":
        yield InMemoryVectorStore(dimension=64)
        return
    make = request.getfixturevalue("make_postgres_stores")
    stores = await make(dimension=64)
    try:
        yield stores.vector_store
    finally:
        await stores.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
    return str(request.param)


async def test_a_large_batch_is_tokenized_off_the_event_loop(
    vector_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tokenization of the batch's texts -- at the write, and of the candidates at recall
    -- runs on another thread than the event loop's (on the old code all of it ran on the loop)."""
    calls: list[tuple[int, int]] = []
    real = lexical.tokenize

    def recorded(text: str) -> list[str]:
        calls.append((threading.get_ident(), len(text)))
        return real(text)

    monkeypatch.setattr(lexical, "tokenize", recorded)
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="big",
        embedder=HashEmbedder(dimensions=64),
        vector_store=vector_store,
    )
    texts = [_distinct_words(seed, 16_000) for seed in range(8)]
    assert sum(map(len, texts)) > OFFLOAD_CHARS
    loop_thread = threading.get_ident()
    await memory.remember([{"text": text} for text in texts], wait=True)
    query = " ".join(texts[3].split()[10:14])
    result = await memory.recall(query, top_k=5)
    assert texts[3] in [hit.text for hit in result.hits]
    long_calls = [thread for thread, size in calls if size > 1_000]
    assert len(long_calls) >= len(texts)  # each text was tokenized for the write
    assert loop_thread not in long_calls


async def test_kept_term_counts_score_bit_identically_to_tokenizing(vector_store: Any) -> None:
    """The re-rank over the store's candidates gives the same floats whether it reads the kept
    term counts or tokenizes every candidate's text."""
    embedder = HashEmbedder(dimensions=64)
    texts = [_long_english(seed) for seed in range(6)] + ["the harbor lantern at night", "tide"]
    vectors = await embedder.embed(texts)
    entries = [
        NewEntry(f"e{i}", text, "user", {}, None, i, NOW, 1.0, None) for i, text in enumerate(texts)
    ]
    await vector_store.put_entries(SCOPE, entries, now=NOW, vectors=vectors, model=embedder.model)
    for query in ("harbor lanterns tide", "violin meadows", "moon garden river cobalt tides"):
        vector = (await embedder.embed([query]))[0]
        found = await vector_store.search(
            SCOPE,
            SearchRequest(vector, query_terms(query), 32, RecallFilter(now=NOW)),
        )
        kept = rerank(
            found.candidates, query_vector=vector, query_text=query, top_k=8, now=NOW,
            stats=found.stats,
        )  # fmt: skip
        for candidate in found.candidates:
            candidate.profile = None
        tokenized = rerank(
            found.candidates, query_vector=vector, query_text=query, top_k=8, now=NOW,
            stats=found.stats,
        )  # fmt: skip
        assert [(h.id, h.bm25, h.lexical, h.score) for h in kept] == [
            (h.id, h.bm25, h.lexical, h.score) for h in tokenized
        ]
        assert any(h.bm25 > 0.0 for h in kept)


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_the_in_memory_store_hands_candidates_their_kept_counts(vector_store: Any) -> None:
    embedder = HashEmbedder(dimensions=64)
    text = _long_english(1)
    vectors = await embedder.embed([text])
    entry = NewEntry("e1", text, "user", {}, None, 0, NOW, 1.0, None)
    await vector_store.put_entries(SCOPE, [entry], now=NOW, vectors=vectors, model=embedder.model)
    terms = query_terms("harbor lanterns and a comet")
    found = await vector_store.search(SCOPE, SearchRequest(vectors[0], terms, 8, RecallFilter(NOW)))
    [candidate] = found.candidates
    counts = term_counts(text)
    assert candidate.profile == (
        {term: counts[term] for term in terms if counts[term]},
        sum(counts.values()),
    )


async def test_a_corrected_text_is_scored_by_its_new_terms(vector_store: Any) -> None:
    """A correction (the new text under the same id) changes the counts recall reads: the BM25
    is the new text's, on both backends."""
    embedder = HashEmbedder(dimensions=64)
    old = "harbor " * 700 + "lantern"
    new = "lantern " * 700 + "harbor"
    memory = create_memory(
        tenant_id=SCOPE.tenant_id,
        resource_id=SCOPE.resource_id,
        thread_id=SCOPE.thread_id,
        embedder=embedder,
        vector_store=vector_store,
    )
    await memory.remember(
        [{"id": "e1", "text": old}, {"id": "e2", "text": "tide and moon"}], wait=True
    )
    query = "harbor"
    vector = (await embedder.embed([query]))[0]

    async def scored() -> tuple[float, CorpusStats]:
        found = await vector_store.search(
            SCOPE, SearchRequest(vector, query_terms(query), 8, RecallFilter(now=NOW))
        )
        hits = rerank(
            found.candidates, query_vector=vector, query_text=query, top_k=8, now=NOW,
            stats=found.stats,
        )  # fmt: skip
        return next(h.bm25 for h in hits if h.id == "e1"), found.stats

    before, stats = await scored()
    counts = term_counts(old)
    assert before == bm25(query_terms(query), counts, sum(counts.values()), stats)
    await memory.correct("e1", new)
    after, stats = await scored()
    counts = term_counts(new)
    assert after == bm25(query_terms(query), counts, sum(counts.values()), stats)
    assert 0.0 < after < before


@pytest.mark.postgres
async def test_both_backends_rank_long_entries_identically(make_postgres_stores: Any) -> None:
    embedder = HashEmbedder(dimensions=64)
    stores = await make_postgres_stores(dimension=64)
    texts = [_long_english(seed) for seed in range(10)] + [_distinct_words(3, 16_000)]
    texts += ["the harbor lantern at night", "a violin by the river"]
    results = []
    try:
        for store in (InMemoryVectorStore(dimension=64), stores.vector_store):
            memory = create_memory(
                tenant_id="t", resource_id="r", thread_id="same", embedder=embedder,
                vector_store=store,
            )  # fmt: skip
            await memory.remember(
                [{"id": f"e{i}", "text": t} for i, t in enumerate(texts)], wait=True
            )
            hits = []
            for query in ("harbor lanterns tide", "violin meadows river", "cobalt moons"):
                found = await memory.recall(query, top_k=8)
                hits.append([(h.id, h.bm25, h.lexical, h.similarity) for h in found.hits])
            results.append(hits)
    finally:
        await stores.close()
    assert results[0] == results[1]
