"""Consent changes racing each other on one thread decide against the consent as stored.

Two memories read an entry, then apply their consent changes one after the other. A decision taken
from the read before the transaction (revoke only what was in force, re-grant only what was
revoked) let a revoke racing a re-grant store a revoked consent with its tombstones lifted, and a
provenance change racing a re-grant write the old revoked consent back: either way an entry derived
from a revoked source was recallable (issue 20; found by the concurrent governance machine). The
gate below makes that interleaving certain instead of likely, on both backends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, InMemoryWorkingStore, create_memory
from prism_memory.memory import Memory
from prism_memory.stores.backend import role_object
from prism_memory.stores.base import VectorStore, WorkingStore
from prism_memory.testing import ManualClock

WIDTH = 32


@pytest.fixture(params=["memory", "postgres"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[VectorStore, WorkingStore]]:
    if request.param == "memory":
        yield InMemoryVectorStore(), InMemoryWorkingStore()
        return
    made = await request.getfixturevalue("make_postgres_stores")(dimension=WIDTH)
    yield made.vector_store, made.working_store


class Gate:
    """Holds every ``apply_governance`` call until both racers have read the entry, then lets them
    apply one at a time in the order they arrived (the first to arrive goes first)."""

    def __init__(self, store: VectorStore, racers: int) -> None:
        self.store = role_object(store, "apply_governance")  # what a memory on ``store`` calls
        self.racers = racers
        self.arrived = 0
        self.done = 0
        self.first_arrived = asyncio.Event()
        self.turn = asyncio.Condition()
        self.original: Callable[..., Awaitable[Any]] = store.apply_governance

    async def apply_governance(self, *args: Any, **kwargs: Any) -> Any:
        async with self.turn:
            ticket = self.arrived
            self.arrived += 1
            self.first_arrived.set()
            self.turn.notify_all()
            await self.turn.wait_for(lambda: self.arrived >= self.racers and self.done == ticket)
        try:
            return await self.original(*args, **kwargs)
        finally:
            async with self.turn:
                self.done += 1
                self.turn.notify_all()

    def __enter__(self) -> Gate:
        self.store.apply_governance = self.apply_governance  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.store.apply_governance


def _memories(
    stores: tuple[VectorStore, WorkingStore], thread: str, **options: Any
) -> tuple[Memory, Memory]:
    common: dict[str, Any] = {
        **options,
        "tenant_id": "t-race",
        "resource_id": "r",
        "thread_id": thread,
        "embedder": HashEmbedder(dimensions=WIDTH),
        "vector_store": stores[0],
        "working_store": stores[1],
        "clock": ManualClock(datetime(2030, 1, 1, tzinfo=UTC)),
    }
    return create_memory(**common), create_memory(**common)


async def _revoked_source_with_a_dependent(memory: Memory) -> None:
    await memory.remember(
        [
            {"id": "src", "text": "Noor keeps bees on the roof"},
            {"id": "sum", "text": "Noor beekeeping summary", "lineage": {"source_ids": ["src"]}},
        ],
        wait=True,
    )
    await memory.set_consent("src", visible=False)


async def _recalled(memory: Memory) -> list[str]:
    return [hit.id for hit in (await memory.recall("Noor bees beekeeping", top_k=10)).hits]


async def _later(gate: Gate, call: Awaitable[Any]) -> Any:
    """Start ``call`` once the first racer waits at the gate, so it arrives there second."""
    await gate.first_arrived.wait()
    return await call


async def test_a_revoke_racing_a_regrant_leaves_no_dependent_recallable(stores) -> None:
    first, second = _memories(stores, "grant-then-revoke")
    await _revoked_source_with_a_dependent(first)
    with Gate(stores[0], racers=2) as gate:
        # both read `src` revoked; the grant applies first, then the revoke
        await asyncio.gather(
            first.set_consent("src", visible=True),
            _later(gate, second.set_consent("src", visible=False)),
        )
    consent = (await first.get("src")).consent
    assert consent is not None
    assert not consent.visible
    assert await _recalled(first) == []
    await first.set_consent("src", visible=True)  # and a later grant lifts it all again
    assert sorted(await _recalled(first)) == ["src", "sum"]
    for memory in (first, second):
        await memory.aclose()


async def test_a_provenance_change_racing_a_regrant_keeps_the_grant(stores) -> None:
    first, second = _memories(stores, "grant-then-source")
    await _revoked_source_with_a_dependent(first)
    with Gate(stores[0], racers=2) as gate:
        # both read `src` revoked; the grant applies first, then the provenance change
        await asyncio.gather(
            first.set_consent("src", visible=True),
            _later(gate, second.set_consent("src", source="agent")),
        )
    consent = (await first.get("src")).consent
    assert consent is not None
    assert consent.visible
    assert consent.source == "agent"
    assert sorted(await _recalled(first)) == ["src", "sum"]
    for memory in (first, second):
        await memory.aclose()


async def test_a_revoke_racing_a_revoke_tells_the_host_once(stores) -> None:
    told: list[list[str]] = []
    first, second = _memories(
        stores, "revoke-twice", on_invalidate=lambda ids: told.append(sorted(ids))
    )
    await first.remember(
        [
            {"id": "src", "text": "Noor keeps bees on the roof"},
            {"id": "sum", "text": "Noor beekeeping summary", "lineage": {"source_ids": ["src"]}},
        ],
        wait=True,
    )
    with Gate(stores[0], racers=2) as gate:
        await asyncio.gather(
            first.set_consent("src", visible=False),
            _later(gate, second.set_consent("src", visible=False)),
        )
    assert told == [["src", "sum"]]
    assert await _recalled(first) == []
    for memory in (first, second):
        await memory.aclose()
