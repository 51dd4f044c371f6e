"""Conformance checks of a memory during a model change (``create_memory(next_embedder=...)``) on
a store with vector generations: recall answers from the active generation's model, a reader
that believed another model embeds again instead of failing, and the dual write keeps the next
model's vectors complete so a switch needs no further backfill.

Like the store checks of :mod:`._generations`, they are asked only of a
:class:`~prism_memory.stores.base.VectorGenerations` and leave it as they found it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..embedding import Embedder, HashEmbedder
from ..errors import DimensionMismatchError, EmbeddingModelMismatchError
from ..memory import Memory
from ..models import MemoryIdentity
from ._generations import _Migration
from ._support import ConformanceKit, _check, _raises

__all__ = ["GENERATION_RECALL_CHECKS"]


class _Failing:
    """An embedder of ``model`` and ``dimensions`` whose every call fails."""

    def __init__(self, model: str, dimensions: int) -> None:
        self.model = model
        self.dimensions = dimensions
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        raise ConnectionError("the next model's service is down")


class _Renamed:
    """``inner``'s vectors under another model name (a width the generation does not hold)."""

    def __init__(self, inner: Embedder, model: str) -> None:
        self._inner = inner
        self.model = model
        self.dimensions = inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Any:
        return await self._inner.embed(texts)


def _models(result: Any) -> set[str | None]:
    return {hit.record.embedding_model for hit in result.hits}


async def _close(*memories: Memory) -> None:
    for memory in memories:
        await memory.aclose()


async def recall_follows_the_active_generation(kit: ConformanceKit) -> None:
    """Recall answers from the model the store reports active: before the switch from the
    primary, after it from the shadow generation (a reader that believed the old model embeds
    its query again), after the rollback from the primary again; a memory without an embedder
    of the active model is refused with EmbeddingModelMismatchError."""
    run = _Migration(kit)
    both = run.case.memory(next_embedder=run.embedder)
    old_only = run.case.memory()
    try:
        await both.remember(
            [{"text": "Ada keeps bees behind the barn"}, {"text": "Ada rows at dawn"}], wait=True
        )
        await run.start()
        first = await both.recall("bees barn")
        _check(bool(first.hits), "recall finds the entry before the switch")
        _check(_models(first) <= {run.primary}, "before the switch: the primary's vectors")
        await old_only.recall("bees barn")  # both readers now believe the primary is active
        await run.switch_ready()
        after = await both.recall("bees barn")
        _check(
            [h.id for h in after.hits][:1] == [h.id for h in first.hits][:1],
            "the stale reader re-embeds and finds the entry",
        )
        _check(_models(after) == {run.model}, "after the switch: the shadow generation's vectors")
        again = await both.recall("bees barn")
        _check(_models(again) == {run.model}, "the reader keeps the model the store reported")
        await _raises(
            EmbeddingModelMismatchError,
            old_only.recall("bees barn"),
            "a memory without an embedder of the active model",
        )
        await run.store.switch_generation(run.primary, force=False, now=run.now())
        back = await both.recall("bees barn")
        _check(_models(back) <= {run.primary}, "after the rollback: the primary's vectors again")
        _check(bool((await old_only.recall("bees barn")).hits), "and the old reader recalls again")
    finally:
        await _close(both, old_only)
        await run.finish()


async def next_embedder_writes_keep_the_generation_complete(kit: ConformanceKit) -> None:
    """With next_embedder, remember(wait=True), a background remember and correct store their
    vectors of the next model too, so the generation stays complete and a switch right after
    finds every new entry; a failing next embedder loses no primary write, and one of another
    width than its generation is refused before anything is written."""
    run = _Migration(kit)
    memory = run.case.memory(next_embedder=run.embedder)
    failing = _Failing(run.model, run.width)
    flaky = run.case.memory(thread="thread-2", next_embedder=failing)
    wrong = run.case.memory(
        thread="thread-3", next_embedder=_Renamed(HashEmbedder(dimensions=run.width + 8), run.model)
    )
    try:
        await run.start()
        waited = await memory.remember([{"text": "Ada paints the barn door red"}], wait=True)
        background = await memory.remember([{"text": "Ada counts the bees at noon"}])
        await background.done
        progress = await run.store.generation_progress(run.model, now=run.now())
        _check(progress.complete, f"the dual write covered the new entries: {progress}")
        corrected = await memory.correct(waited.accepted[0], "Ada paints the barn door blue")
        progress = await run.store.generation_progress(run.model, now=run.now())
        _check(progress.complete, f"a correction's new text got its next vector: {progress}")
        await run.store.switch_generation(run.model, force=False, now=run.now())
        hits = (await memory.recall("barn door blue")).hits
        _check(
            bool(hits) and hits[0].id == corrected.id and hits[0].text == corrected.text,
            "the entry written before the switch is recalled from the new model at once",
        )
        await run.store.switch_generation(run.primary, force=False, now=run.now())
        stored = await flaky.remember([{"text": "Ada mends the fence"}], wait=True)
        _check(failing.calls >= 1, "the next embedder was asked")
        hits = (await flaky.recall("mends fence")).hits
        _check(
            [h.id for h in hits][:1] == list(stored.accepted),
            "a failing next embedder loses no primary write",
        )
        progress = await run.store.generation_progress(run.model, now=run.now())
        _check(progress.missing == 1, f"its entry is left to the backfill: {progress}")
        await _raises(
            DimensionMismatchError,
            wrong.remember([{"text": "Ada sells honey"}], wait=True),
            "a next embedder of another width than its generation",
        )
        _check(
            not await run.store.list_by_thread(
                MemoryIdentity(
                    tenant_id=run.scope.tenant_id, resource_id="user-ada", thread_id="thread-3"
                ),
                after=None,
                limit=5,
            ),
            "the refused write wrote nothing",
        )
    finally:
        await _close(memory, flaky, wrong)
        await run.finish()


GENERATION_RECALL_CHECKS = {
    "recall_follows_the_active_generation": recall_follows_the_active_generation,
    "next_embedder_writes_keep_the_generation_complete": (
        next_embedder_writes_keep_the_generation_complete
    ),
}
"""The facade's checks of the ``generations`` role, by name."""
