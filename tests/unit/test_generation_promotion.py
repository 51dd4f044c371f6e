"""A promotion to a model of another width on the in-memory store (64 -> 32): the store takes
the new model's vectors as the entries' own, reports the new width once the roles swap, and a
memory whose embedder is the new model writes and recalls -- during the promotion and after the
old model is dropped. The backend-neutral checks (same width, every backend) are in
``prism_memory/testing/_generations_promotion.py``; a PostgreSQL column is pinned to one width,
so there a promotion to another width is refused, as it is on a pinned in-memory store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, InMemoryWorkingStore, create_memory
from prism_memory.errors import DimensionMismatchError
from prism_memory.memory import Memory
from prism_memory.stores.base import Promotion

OLD, NEW = HashEmbedder(dimensions=64), HashEmbedder(dimensions=32)
TEXTS = ["Ada keeps bees behind the barn", "Ada rows at dawn", "Ada reads maps", "Ada bakes"]


def _now() -> datetime:
    return datetime.now(UTC)


def _memory(
    store: InMemoryVectorStore,
    working: InMemoryWorkingStore,
    embedder: HashEmbedder,
    *,
    next_embedder: HashEmbedder | None = None,
    thread: str = "th",
) -> Memory:
    return create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id=thread,
        embedder=embedder,
        next_embedder=next_embedder,
        vector_store=store,
        working_store=working,
    )


async def _migrated(store: InMemoryVectorStore, working: InMemoryWorkingStore) -> list[str]:
    """Entries of the old model with their new vectors (the dual write), switched to new."""
    await store.start_generation(
        primary=OLD.model, primary_width=64, model=NEW.model, width=32, now=_now()
    )
    async with _memory(store, working, OLD, next_embedder=NEW) as memory:
        stored = await memory.remember([{"text": t} for t in TEXTS], wait=True)
    await store.switch_generation(NEW.model, force=False, now=_now())
    return list(stored.accepted)


async def _top(memory: Memory, text: str) -> tuple[str, float]:
    hit = (await memory.recall(text, top_k=1)).hits[0]
    return hit.id, hit.score


async def test_a_promotion_to_a_narrower_model_lets_the_new_models_memory_write_and_recall() -> (
    None
):
    store, working = InMemoryVectorStore(), InMemoryWorkingStore()
    ids = await _migrated(store, working)
    assert await store.vector_width() == 64
    step = await store.promote_generation(NEW.model, limit=2, now=_now())
    assert step == Promotion(NEW.model, moved=2, left=None, promoted=False)
    assert await store.vector_width() == 64, "the primary is still the old model"

    # mid-promotion the thread holds own vectors of both models: a memory of the new model
    # (registered, so not foreign) writes at its registered width and recalls
    async with _memory(store, working, NEW) as new:
        during = await new.remember([{"text": "Ada tunes the piano"}], wait=True)
        assert (await _top(new, "Ada tunes the piano"))[0] == during.accepted[0]
        assert (await _top(new, TEXTS[3]))[0] == ids[3]
    step = await store.promote_generation(NEW.model, limit=10, now=_now())
    assert (step.moved, step.left, step.promoted) == (2, 0, True)
    assert await store.vector_width() == 32, "new own vectors are written at the new width"
    assert [(g.model, g.role, g.active) for g in await store.generations()] == [
        (NEW.model, "primary", True),
        (OLD.model, "shadow", False),
    ]
    assert await store.drop_generation(OLD.model) == len(TEXTS)

    async with _memory(store, working, NEW) as new:
        after = await new.remember([{"text": "Ada mends the fence"}], wait=True)
        hit_id, score = await _top(new, "Ada mends the fence")
        assert hit_id == after.accepted[0]
        assert score == pytest.approx(1.0, abs=1e-5)
        for entry_id, text in zip(ids, TEXTS, strict=True):
            assert (await _top(new, text))[0] == entry_id
    async with _memory(store, working, NEW, thread="fresh") as fresh:
        written = await fresh.remember([{"text": "Bob grows tomatoes"}], wait=True)
        assert (await _top(fresh, "Bob grows tomatoes"))[0] == written.accepted[0]


async def test_an_old_model_memory_still_writes_at_its_width_after_the_swap() -> None:
    """The old model is a registered (shadow) generation until dropped: its memory's writes are
    held to its registered width, and they keep its drop refused until promoted again."""
    store, working = InMemoryVectorStore(), InMemoryWorkingStore()
    await _migrated(store, working)
    step = await store.promote_generation(NEW.model, limit=10, now=_now())
    assert step.promoted
    async with _memory(store, working, OLD, next_embedder=NEW) as old:
        late = await old.remember([{"text": "Ada sells honey"}], wait=True)
    async with _memory(store, working, NEW) as new:
        assert (await _top(new, "Ada sells honey"))[0] == late.accepted[0]
    step = await store.promote_generation(NEW.model, limit=10, now=_now())
    assert (step.moved, step.left, step.promoted) == (1, 0, True)
    assert await store.drop_generation(OLD.model) == len(TEXTS) + 1


async def test_a_model_of_another_unregistered_width_is_still_refused() -> None:
    store, working = InMemoryVectorStore(), InMemoryWorkingStore()
    await _migrated(store, working)
    await store.promote_generation(NEW.model, limit=1, now=_now())
    with pytest.raises(DimensionMismatchError):
        async with _memory(store, working, HashEmbedder(dimensions=48)) as other:
            await other.remember([{"text": "Ada sings"}], wait=True)


async def test_a_pinned_store_refuses_a_promotion_to_another_width() -> None:
    store, working = InMemoryVectorStore(dimension=64), InMemoryWorkingStore()
    await _migrated(store, working)
    registered = await store.generations()
    with pytest.raises(DimensionMismatchError):
        await store.promote_generation(NEW.model, limit=10, now=_now())
    assert await store.generations() == registered
    progress = await store.generation_progress(OLD.model, now=_now())
    assert progress.complete
    assert progress.entries == len(TEXTS)
