"""Long entries embedded whole on the paths the conformance checks do not walk, on both backends:
the bulk import of entries that come without a vector, and a model change (the next model's
vectors written by ``next_embedder`` and by ``backfill_generation``).

The embedder of the long entries is :class:`~prism_memory.testing.FirstWordsEmbedder`, which --
like a transformer -- reads only its first 200 words: a fact in the last paragraph of a
1,500-word entry is found by the dense leg alone (``lexical_weight=0``) only if the entry was
embedded as windows. Each test fails when texts go to the embedder whole (see the ``cut``
fixture parameter, which puts today's behaviour back).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from prism_memory import InMemoryVectorStore, InMemoryWorkingStore, create_memory
from prism_memory import windows as windows_module
from prism_memory._clock import utcnow
from prism_memory.generations import backfill_generation, promote_to_primary
from prism_memory.importing import import_entries
from prism_memory.memory import Memory
from prism_memory.ranking import cosine
from prism_memory.stores.base import VectorGenerations, VectorStore, WorkingStore
from prism_memory.testing import FirstWordsEmbedder
from prism_memory.testing._long_entries import long_text
from prism_memory.windows import embed_whole

TENANT, RESOURCE = "t-long", "r"
FACT = "Before you leave, your passport and visa are in the embassy envelope in the luggage."
QUERY = "Where are my passport and visa?"
OTHERS = [
    "I baked bread today: flour, butter and a slow oven for the dough.",
    "The garden soil needs more compost before we sow the seeds.",
    "Nothing much happened this afternoon, it was a quiet day.",
]
DENSE = {"lexical_weight": 0.0}


@pytest.fixture(params=["memory", "postgres"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[VectorStore, WorkingStore]]:
    if request.param == "memory":
        yield InMemoryVectorStore(), InMemoryWorkingStore()
        return
    made = await request.getfixturevalue("make_postgres_stores")()
    yield made.vector_store, made.working_store


def _memory(stores: tuple[VectorStore, WorkingStore], thread: str, **options: object) -> Memory:
    return create_memory(
        tenant_id=TENANT,
        resource_id=RESOURCE,
        thread_id=thread,
        vector_store=stores[0],
        working_store=stores[1],
        **options,  # type: ignore[arg-type]
    )


async def _top(memory: Memory) -> list[str]:
    return [hit.id for hit in (await memory.recall(QUERY, top_k=1, scoring=DENSE)).hits]


async def test_an_imported_long_entry_without_a_vector_is_embedded_whole(stores) -> None:
    embedder = FirstWordsEmbedder(32)
    rows = [
        {"tenant_id": TENANT, "resource_id": RESOURCE, "thread_id": "imported", "text": text}
        for text in OTHERS
    ]
    rows.append(
        {
            "tenant_id": TENANT,
            "resource_id": RESOURCE,
            "thread_id": "imported",
            "id": "long",
            "text": long_text(FACT),
        }
    )
    report = await import_entries(stores[0], rows, embedder=embedder)
    assert (report.inserted, report.embedded) == (4, 4)
    memory = _memory(stores, "imported", embedder=FirstWordsEmbedder(32))
    assert await _top(memory) == ["long"]
    await memory.aclose()


async def test_a_model_change_gives_long_entries_their_windows_back_on_rebuild(stores) -> None:
    """Windows belong to the entry's own vector: the next model's vectors (``backfill_generation``
    and ``next_embedder``'s dual write) are first windows only, so after the switch the last
    paragraph is out of the dense leg's reach; ``promote_to_primary`` drops the old model's
    windows with its vector (both models read alike here: kept, they would still find the fact),
    and ``rebuild_index`` by the new model embeds the entries in windows again."""
    store = stores[0]
    assert isinstance(store, VectorGenerations)
    old, new = FirstWordsEmbedder(32), FirstWordsEmbedder(32)
    new.model = "first-words-next-32"
    before = _memory(stores, "before", embedder=old)
    await before.remember(
        [*({"text": t} for t in OTHERS), {"id": "long", "text": long_text(FACT)}], wait=True
    )
    assert await _top(before) == ["long"]  # the old model's own vector, with its windows
    await before.aclose()
    await store.start_generation(
        primary=old.model, primary_width=32, model=new.model, width=32, now=utcnow()
    )
    during = _memory(stores, "during", embedder=old, next_embedder=new)
    await during.remember(
        [*({"text": t} for t in OTHERS), {"id": "long", "text": long_text(FACT)}], wait=True
    )
    await during.aclose()
    report = await backfill_generation(store, new.model, new)
    assert report.remaining == 0
    await store.switch_generation(new.model, force=False, now=utcnow())
    for thread in ("before", "during"):
        reader = _memory(stores, thread, embedder=new)
        assert await _top(reader) != ["long"], thread  # the next model's first window only
        await reader.aclose()
    promoted = await promote_to_primary(store, new.model)
    assert promoted.promoted
    for thread in ("before", "during"):
        reader = _memory(stores, thread, embedder=new)
        assert await _top(reader) != ["long"], thread  # the old model's windows are gone
        page = await reader.rebuild_index()
        assert page.rebuilt == 4, thread
        assert await _top(reader) == ["long"], thread
        await reader.aclose()


@pytest.fixture
def cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """Today's behaviour back: every text goes to the embedder as it is."""

    async def whole(embedder: object, window: object, texts: list[str]) -> list[list[str]]:
        return [[text] for text in texts]

    monkeypatch.setattr(windows_module, "_windows", whole)


@pytest.mark.usefixtures("cut")
@pytest.mark.parametrize(
    "check",
    [
        test_an_imported_long_entry_without_a_vector_is_embedded_whole,
        test_a_model_change_gives_long_entries_their_windows_back_on_rebuild,
    ],
)
async def test_without_windows_these_tests_fail(stores, check) -> None:
    with pytest.raises(AssertionError):
        await check(stores)


async def test_both_backends_score_long_entries_identically(make_postgres_stores) -> None:
    """The re-rank scores a long entry by its first window and its later windows with the margin,
    from the vectors each store hands back: the same hits and scores, bit for bit, on both
    backends -- also for the entries whose later window decides their semantic score."""
    made = await make_postgres_stores()
    backends = {
        "memory": (InMemoryVectorStore(), InMemoryWorkingStore()),
        "postgres": (made.vector_store, made.working_store),
    }
    music = "The cello rehearsal for the symphony concert moved to Thursday with the orchestra."
    entries = [
        *({"id": f"short-{at}", "text": text} for at, text in enumerate(OTHERS)),
        {"id": "travel", "text": long_text(FACT)},
        {"id": "music", "text": long_text(music, words=800)},
        {"id": "garden", "text": long_text("We sow the beans in the garden next week.")},
    ]
    queries = [QUERY, "When is the cello concert?", "compost and seeds in the garden", "bread"]
    found: dict[str, list[list[tuple[str, float, float, float]]]] = {}
    for name, pair in backends.items():
        memory = _memory(pair, "scores", embedder=FirstWordsEmbedder(32))
        await memory.remember(entries, wait=True)
        found[name] = []
        for query in queries:
            for scoring in (DENSE, None):
                result = await memory.recall(query, top_k=6, scoring=scoring)
                found[name].append([(h.id, h.semantic, h.similarity, h.score) for h in result.hits])
        await memory.aclose()
    assert found["memory"] == found["postgres"]
    # the windows decided: the travel entry's score is its last window's, above its first's
    (travel,) = [hit for hit in found["memory"][0] if hit[0] == "travel"]
    assert found["memory"][0][0][0] == "travel"
    embedder = FirstWordsEmbedder(32)
    query, first = await embed_whole(embedder, [QUERY, long_text(FACT)])
    assert travel[1] > cosine(query, first) + 0.05
