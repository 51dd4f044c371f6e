"""A memory during a model change (``create_memory(next_embedder=...)``) on the in-memory store:
what the backend-neutral conformance checks (``prism_memory/testing/_generations_recall.py``)
cannot see from outside -- the order of the dual write, the argument checks, the bounded rounds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory
from prism_memory.errors import ConfigurationError
from prism_memory.models import MemoryIdentity, Vector
from prism_memory.stores.base import (
    ClaimedEntry,
    EntryLease,
    NewEntry,
    SearchRequest,
    SearchResult,
    StoredEntries,
)

OLD, NEW = HashEmbedder(dimensions=64), HashEmbedder(dimensions=32)


class RecordingStore(InMemoryVectorStore):
    """Records the order of the indexing and generation writes, and counts searches."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.searches: list[str | None] = []
        self.flap = False

    async def complete_indexing(
        self,
        items: Sequence[tuple[ClaimedEntry, Vector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        self.calls.append(("complete", tuple(item.id for item, _ in items)))
        return await super().complete_indexing(items, worker_id=worker_id, now=now, model=model)

    async def put_entries(
        self,
        scope: MemoryIdentity,
        entries: Sequence[NewEntry],
        *,
        now: datetime,
        lease: EntryLease | None = None,
        vectors: Sequence[Vector] | Vector | None = None,
        model: str | None = None,
    ) -> StoredEntries:
        if vectors is not None:  # stored indexed at once: recallable from here on
            self.calls.append(("complete", tuple(entry.id for entry in entries)))
        return await super().put_entries(
            scope, entries, now=now, lease=lease, vectors=vectors, model=model
        )

    async def store_generation_vectors(
        self, model: str, items: Sequence[tuple[ClaimedEntry, Vector]], *, now: datetime
    ) -> int:
        self.calls.append(("generation", tuple(item.id for item, _ in items)))
        return await super().store_generation_vectors(model, items, now=now)

    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        self.searches.append(request.model)
        result = await super().search(scope, request)
        if self.flap:  # a store that names the other model on every search
            other = NEW.model if request.model == OLD.model else OLD.model
            result = replace(result, active_model=other)
        return result


async def _started(store: RecordingStore) -> None:
    await store.start_generation(
        primary=OLD.model, primary_width=64, model=NEW.model, width=32, now=datetime.now(UTC)
    )


@pytest.mark.parametrize("wait", [False, True])
async def test_the_next_models_vectors_are_stored_before_the_batch_completes(wait: bool) -> None:
    """Also with ``wait=True``, which otherwise stores its rows indexed at once: an entry
    recallable under the old model before its new vector exists could be missed by a recall
    right after a switch that had not seen it yet."""
    store = RecordingStore()
    await _started(store)
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=OLD,
        next_embedder=NEW,
        vector_store=store,
    )
    async with memory:
        written = await memory.remember(
            [{"text": "Ada keeps bees"}, {"text": "Ada rows"}], wait=wait
        )
        await written.done
    ids = set(written.accepted)
    firsts = {
        entry_id: next(kind for kind, named in store.calls if entry_id in named) for entry_id in ids
    }
    assert firsts == dict.fromkeys(ids, "generation")
    assert any(kind == "complete" for kind, _ in store.calls)


@pytest.mark.parametrize("next_embedder", [HashEmbedder(dimensions=64), object()])
def test_next_embedder_must_be_another_named_model(next_embedder: object) -> None:
    with pytest.raises(ConfigurationError):
        create_memory(
            tenant_id="t",
            resource_id="r",
            thread_id="th",
            embedder=OLD,
            next_embedder=next_embedder,  # type: ignore[arg-type]
        )


async def test_recall_searches_at_most_three_times_while_the_store_flaps() -> None:
    store = RecordingStore()
    await _started(store)
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=OLD,
        next_embedder=NEW,
        vector_store=store,
    )
    async with memory:
        await memory.remember([{"text": "Ada keeps bees"}], wait=True)
        store.flap = True
        store.searches.clear()
        await memory.recall("bees")
    assert store.searches == [OLD.model, NEW.model, OLD.model]
