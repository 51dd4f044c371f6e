"""The same data on both backends gives the same recall, byte for byte in ids and scores."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, InMemoryWorkingStore, create_memory

WORDS = [
    "coffee",
    "tea",
    "garden",
    "rocket",
    "budget",
    "falcon",
    "deploy",
    "friday",
    "migration",
    "index",
    "vector",
    "postgres",
    "billing",
    "cat",
    "turing",
    "hiking",
    "alps",
    "pasta",
    "lunch",
    "train",
    "monday",
    "sofa",
    "reading",
    "weather",
    "report",
]


def _corpus(seed: int, size: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        {
            "id": f"e{i:03d}",
            "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7))),
            "occurred_at": start + timedelta(hours=rng.randint(0, 24 * 300)),
            "importance": round(rng.random(), 3),
            "consent": {"source": "user"} if rng.random() < 0.7 else None,
        }
        for i in range(size)
    ]


async def test_recall_orders_identically_on_both_backends(make_postgres_stores) -> None:
    embedder = HashEmbedder(dimensions=64)
    stores = await make_postgres_stores(dimension=64)
    now = datetime(2026, 11, 1, tzinfo=UTC)

    def clock() -> datetime:  # frozen, so both backends score recency at the same instant
        return now

    scope = {
        "tenant_id": "t",
        "resource_id": "r",
        "thread_id": "th",
        "embedder": embedder,
        "clock": clock,
    }
    reference = create_memory(
        **scope, vector_store=InMemoryVectorStore(), working_store=InMemoryWorkingStore()
    )
    postgres = create_memory(
        **scope, vector_store=stores.vector_store, working_store=stores.working_store
    )
    corpus = _corpus(seed=7, size=150)
    for memory in (reference, postgres):
        for start in range(0, len(corpus), 50):
            await memory.remember(corpus[start : start + 50], wait=True)
        await memory.set_consent("e010", visible=False)
        await memory.forget(ids=["e020"], hold=True)

    rng = random.Random(11)
    scorings = [
        None,
        {"recency_weight": 0.3, "importance_weight": 0.2, "half_life_ms": 30 * 86_400_000},
        {"importance_weight": 0.9},
    ]
    compared = 0
    for _ in range(25):
        query = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        for scoring in scorings:
            for consent in (False, True):
                results = [
                    await m.recall(
                        query, top_k=10, scoring=scoring, require_consent=consent, message_range=1
                    )
                    for m in (reference, postgres)
                ]
                ours, theirs = results
                assert [h.id for h in ours.hits] == [h.id for h in theirs.hits], query
                assert [round(h.score, 9) for h in ours.hits] == [
                    round(h.score, 9) for h in theirs.hits
                ]
                assert [r.id for r in ours.adjacent] == [r.id for r in theirs.adjacent]
                assert "e010" not in {h.id for h in ours.hits}
                compared += 1
    assert compared == 150
    for memory in (reference, postgres):
        await memory.aclose()


MIXED = [
    "Caroline said she painted a sunrise over the lake",
    "Melanie went hiking in the Alps with the kids",
    "Привет, мир! Мы говорили о погоде и о поезде",
    "東京タワー の 夜景 は きれい",
    "Γειά σου κόσμε, ο καιρός είναι καλός",
    "مرحبا بالعالم والطقس جميل",
    "what is it that you would do",  # nothing but stop words: no terms, length 0
    "painting painting painting paintings of lakes",
    "the café served naïve crème brûlée",
    "ﬁsh and chips at the harbour on friday",
]

HARD_QUERIES = {  # query -> the entry it must match lexically (None: no lexical match at all)
    "zebra quantum xylophone": None,  # terms absent from the scope
    "what would you do if it is": None,  # all stop words
    "Погоде, поезде": "m02",  # Cyrillic (case-folded; no Russian stemming)
    "東京タワー": "m03",  # CJK
    "ΚΑΙΡΌΣ": "m04",  # Greek, upper case
    "بالعالم": "m05",  # Arabic
    "painted lakes sunrise": "m00",  # stems: paint, lake
    "naïve café": "m08",  # accented Latin
    "fish friday": "m09",  # NFKC ligature in the entry
}


async def test_recall_with_absent_stopword_and_non_latin_terms_matches(
    make_postgres_stores,
) -> None:
    embedder = HashEmbedder(dimensions=32)
    stores = await make_postgres_stores(dimension=32)
    now = datetime(2026, 11, 1, tzinfo=UTC)
    scope = {
        "tenant_id": "t",
        "resource_id": "r",
        "thread_id": "mixed",
        "embedder": embedder,
        "clock": lambda: now,
    }
    reference = create_memory(
        **scope, vector_store=InMemoryVectorStore(), working_store=InMemoryWorkingStore()
    )
    postgres = create_memory(
        **scope, vector_store=stores.vector_store, working_store=stores.working_store
    )
    entries = [{"id": f"m{i:02d}", "text": text} for i, text in enumerate(MIXED)]
    for memory in (reference, postgres):
        await memory.remember(entries, wait=True)
    lexical_hits = 0
    for query in HARD_QUERIES:
        for top_k in (1, 3, 10):
            ours, theirs = [
                await m.recall(query, top_k=top_k, explain=True) for m in (reference, postgres)
            ]
            assert [h.id for h in ours.hits] == [h.id for h in theirs.hits], query
            for a, b in zip(ours.hits, theirs.hits, strict=True):
                assert (round(a.score, 9), round(a.bm25, 9), round(a.lexical, 9)) == (
                    round(b.score, 9),
                    round(b.bm25, 9),
                    round(b.lexical, 9),
                ), query
                assert a.bm25_scale == pytest.approx(b.bm25_scale, rel=1e-12)
            lexical_hits += sum(h.bm25 > 0 for h in ours.hits)
            expected = HARD_QUERIES[query]
            if expected is None:
                assert all(h.bm25 == 0.0 and h.lexical == 0.0 for h in ours.hits), query
            elif top_k == 10:
                best = max(ours.hits, key=lambda h: h.bm25)
                assert (best.id, best.lexical > 0.0) == (expected, True), query
    assert lexical_hits > 0  # the non-Latin and stemmed queries did match lexically
    for memory in (reference, postgres):
        await memory.aclose()
