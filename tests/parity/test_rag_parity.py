"""The same documents on both RAG backends give the same hits, in the same order, with the same scores."""

from __future__ import annotations

import random

import pytest

from prism_memory import HashEmbedder
from prism_memory.rag import AccessConstraint, InMemoryRagStore, RagScope, hybrid_query, ingest

WORDS = [
    "pump",
    "seal",
    "valve",
    "pressure",
    "turbine",
    "blade",
    "inspection",
    "spring",
    "audit",
    "budget",
    "invoice",
    "lunch",
    "cafeteria",
    "badge",
    "door",
    "security",
    "laptop",
    "travel",
    "visa",
    "salary",
    "review",
    "march",
    "april",
]


def _document(rng: random.Random, sentences: int) -> str:
    return " ".join(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))).capitalize() + "."
        for _ in range(sentences)
    )


@pytest.mark.postgres
async def test_rag_queries_agree_on_both_backends(make_postgres_stores):
    embedder = HashEmbedder(dimensions=64)
    memory_store = InMemoryRagStore(dimension=64)
    postgres_store = (await make_postgres_stores(dimension=64)).vector_store
    scope = RagScope("tenant", "docs", "handbook")
    rng = random.Random(7)
    documents = {f"doc-{n:02d}": _document(rng, rng.randint(2, 20)) for n in range(30)}
    for store in (memory_store, postgres_store):
        for n, (source, text) in enumerate(documents.items()):
            await ingest(
                store,
                scope,
                source,
                text,
                embedder=embedder,
                metadata={"team": "ops" if n % 3 else "hr"},
                chunk_size=120,
                chunk_overlap=30,
            )
            if n % 2:
                await store.set_source_access(scope, source, group_ids=["staff"], access_version=1)
    staff = AccessConstraint("ann", ("staff",), access_version=1)
    queries = ["pump pressure", "salary review in march", "badge", "lunch cafeteria door", "zebra"]
    compared = 0
    for text in queries:
        vector = embedder.embed_one(text)
        for authorization in (None, staff):
            for flt in (None, {"team": "ops"}):
                legs = {"top_k": 8, "filter": flt, "authorization": authorization}
                results = []
                for store in (memory_store, postgres_store):
                    results.append(
                        (
                            await store.query(scope, embedding=vector, **legs),
                            await store.lexical_query(scope, text=text, **legs),
                            await store.lexical_stats(
                                scope, text=text, filter=flt, authorization=authorization
                            ),
                            await hybrid_query(store, scope, text=text, embedding=vector, **legs),
                        )
                    )
                (m_vec, m_lex, m_stats, m_hyb), (p_vec, p_lex, p_stats, p_hyb) = results
                assert m_stats == p_stats
                for mine, theirs in ((m_vec, p_vec), (m_lex, p_lex), (m_hyb, p_hyb)):
                    assert [h.key for h in mine] == [h.key for h in theirs], (
                        text,
                        legs,
                        [(h.key, h.score) for h in mine],
                        [(h.key, h.score) for h in theirs],
                    )
                    for a, b in zip(mine, theirs, strict=True):
                        assert a.score == pytest.approx(b.score, abs=1e-9)
                        assert (a.text, a.metadata, a.generation) == (
                            b.text,
                            b.metadata,
                            b.generation,
                        )
                    compared += len(mine)
    assert compared > 100  # the comparison saw real hits, not empty lists
