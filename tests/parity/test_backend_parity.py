"""The same data on both backends gives the same recall, byte for byte in ids and scores."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

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
