"""The gated model switch under steady writes of old-model-only hosts (issue 46 item 12), on both
backends: with ``backfill_generation(follow=True)`` running, ``switch_generation`` with
``max_lag_seconds`` passes while the writers keep writing, and the follower then catches up."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory
from prism_memory._clock import utcnow
from prism_memory.errors import GenerationNotReadyError
from prism_memory.generations import backfill_generation
from prism_memory.stores.base import VectorGenerations, VectorStore

OLD, NEW = HashEmbedder(dimensions=32), HashEmbedder(dimensions=48)
WRITERS = 2
PAUSE = 0.05  # each writer: one entry every ~50 ms, ~40 writes/s together (the rate)
MAX_WRITES = 600  # per writer: the loops are bounded whatever happens


@pytest.fixture(params=["memory", "postgres"])
async def store(request: pytest.FixtureRequest) -> VectorStore:
    """A store with a few entries of :data:`OLD` and the shadow generation :data:`NEW` started."""
    if request.param == "memory":
        made: VectorStore = InMemoryVectorStore()
    else:
        made = (await request.getfixturevalue("make_postgres_stores")()).vector_store
    async with create_memory(
        tenant_id="acme", resource_id="ada", thread_id="t0", embedder=OLD, vector_store=made
    ) as memory:
        await memory.remember([{"text": f"an early note {i}"} for i in range(20)], wait=True)
    assert isinstance(made, VectorGenerations)
    await made.start_generation(
        primary=OLD.model, primary_width=32, model=NEW.model, width=48, now=utcnow()
    )
    return made


async def test_the_gated_switch_passes_while_old_model_hosts_keep_writing(store) -> None:
    stop = asyncio.Event()
    written = [0] * WRITERS

    async def writer(number: int) -> None:
        """A host deployed without next_embedder: its entries get no vector of NEW."""
        async with create_memory(
            tenant_id="acme",
            resource_id="ada",
            thread_id=f"w{number}",
            embedder=OLD,
            vector_store=store,
        ) as memory:
            while not stop.is_set() and written[number] < MAX_WRITES:
                await memory.remember(
                    [{"text": f"note {written[number]} of writer {number}"}], wait=True
                )
                written[number] += 1
                await asyncio.sleep(PAUSE)

    follower = asyncio.create_task(
        backfill_generation(store, NEW.model, NEW, batch_size=50, follow=True, poll_seconds=0.2)
    )
    writers = [asyncio.create_task(writer(n)) for n in range(WRITERS)]
    switched = None
    try:
        await asyncio.sleep(1.0)  # the writers are under way
        for _ in range(150):  # bounded: ~30 s at most
            try:
                switched = await store.switch_generation(
                    NEW.model, force=False, now=utcnow(), max_lag_seconds=10
                )
                break
            except GenerationNotReadyError:
                await asyncio.sleep(0.2)
        writing = not any(task.done() for task in writers) and min(written) < MAX_WRITES
        before = sum(written)
        await asyncio.sleep(0.5)  # old-model hosts keep writing after the switch
        after = sum(written)
    finally:
        stop.set()
        await asyncio.gather(*writers)  # a writer that failed fails the test here
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
    assert switched is not None, "the gated switch never passed under steady writes"
    assert switched.active
    assert switched.model == NEW.model
    assert writing, "the switch passed while the writers were writing"
    assert after > before, "old-model hosts keep writing after the switch"

    async with create_memory(  # a host of the migration: recall answers from NEW
        tenant_id="acme",
        resource_id="ada",
        thread_id="w0",
        embedder=OLD,
        next_embedder=NEW,
        vector_store=store,
    ) as memory:
        result = await memory.recall("note of writer 0", top_k=5)
        assert result.hits
        # the follower is stopped: a last backfill brings every entry in
        report = await backfill_generation(store, NEW.model, NEW, batch_size=200)
        assert report.remaining == 0
        progress = await store.generation_progress(NEW.model, now=utcnow())
        assert progress.complete
        assert progress.entries == 20 + sum(written)
        full = await memory.recall("note of writer 0", top_k=5)
        assert full.pending == 0
