"""PrismStore's TTL, on both backends: LangGraph's own TTL test and prism's guarantees.

``test_store_ttl`` is the one LangGraph runs against its Postgres store
(``libs/checkpoint-postgres/tests/test_store.py::test_store_ttl``), with the same TTL and waits,
on a clock the test moves instead of ``time.sleep`` (the store reads the time once per batch).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from langgraph.store.base import PutOp

from prism_memory import ConfigurationError, ValidationError
from prism_memory.integrations.langgraph import PrismStore, _store, _ttl
from prism_memory.integrations.langgraph._mapping import refresh_patch

pytestmark = pytest.mark.postgres

TTL_SECONDS = 6
TTL_MINUTES = TTL_SECONDS / 60


class Clock:
    """The time the store reads (``utcnow`` of its batches and sweeps), moved by the test."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


async def _rows(store: PrismStore, namespace: tuple[str, ...], ids: list[str]) -> list[str]:
    """The ids of ``ids`` stored as entries (swept or not), in the order of ``ids``."""
    found = await (await store._store()).get_entries(store.scope(namespace), ids)
    return [record.id for record in found]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    moved = Clock()
    monkeypatch.setattr(_store, "utcnow", moved)
    monkeypatch.setattr(_ttl, "utcnow", moved)
    return moved


pytestmark = pytest.mark.postgres


async def test_store_ttl(make_store, clock) -> None:
    """LangGraph's ``test_store_ttl``: a get or search with ``refresh_ttl`` restarts the TTL, one
    without does not, and an item whose TTL ran out is not returned."""
    ttl = {"default_ttl": TTL_MINUTES, "refresh_on_read": True, "sweep_interval_minutes": 1}
    async with make_store(ttl=ttl) as store:
        assert store.supports_ttl is True
        ns = ("foo",)
        await store.aput(ns, key="item1", value={"foo": "bar"}, ttl=TTL_MINUTES)
        clock.sleep(TTL_SECONDS - 2)
        res = await store.aget(ns, key="item1", refresh_ttl=True)
        assert res is not None
        clock.sleep(TTL_SECONDS - 2)
        results = await store.asearch(ns, query="foo", refresh_ttl=True)
        assert len(results) == 1
        clock.sleep(TTL_SECONDS - 2)
        res = await store.aget(ns, key="item1", refresh_ttl=False)
        assert res is not None
        clock.sleep(TTL_SECONDS - 1)
        res = await store.asearch(ns, query="bar", refresh_ttl=False)
        assert len(res) == 0


async def test_an_expired_item_is_never_returned_and_the_sweep_deletes_it(
    make_store, fake_embeddings, clock
) -> None:
    index = {"dims": fake_embeddings.dims, "embed": fake_embeddings}
    async with make_store(index=index, ttl={"default_ttl": 1.0}) as store:
        await store.aput(("t",), "short", {"text": "apples"})  # the default: 1 minute
        await store.aput(("t",), "long", {"text": "apples"}, ttl=10)
        await store.aput(("t",), "never", {"text": "apples"}, ttl=None)
        await store.aput(("t",), "held", {"text": "apples"})
        async with await store.memory(("t",)) as memory:
            await memory.forget(ids=["held"], hold=True)
        clock.sleep(61)
        assert await store.aget(("t",), "short") is None  # before any sweep
        found = await store.asearch(("t",), query="apples")
        assert sorted(item.key for item in found) == ["long", "never"]
        assert sorted(i.key for i in await store.asearch(("t",), filter={"text": "apples"})) == [
            "long",
            "never",
        ]
        assert await _rows(store, ("t",), ["short", "held"]) == ["short", "held"]
        assert await store.sweep_ttl() == 1  # the held item stays
        assert await _rows(store, ("t",), ["short", "long", "held"]) == ["long", "held"]
        assert await store.sweep_ttl() == 0


async def test_a_put_sets_replaces_or_drops_an_items_ttl(make_store, clock) -> None:
    async with make_store() as store:
        await store.aput(("t",), "k", {"v": 1}, ttl=1)
        first = await store.aget(("t",), "k")
        await store.aput(("t",), "k", {"v": 2})  # no ttl: it no longer expires
        clock.sleep(120)
        assert (await store.aget(("t",), "k")).value == {"v": 2}
        await store.aput(("t",), "k", {"v": 3}, ttl=1)
        clock.sleep(59)
        assert (await store.aget(("t",), "k", refresh_ttl=False)).created_at == first.created_at
        clock.sleep(2)
        assert await store.aget(("t",), "k") is None
        # a put over an expired item (not yet swept) makes a new item
        await store.aput(("t",), "k", {"v": 4})
        again = await store.aget(("t",), "k")
        assert again.value == {"v": 4}
        assert again.created_at > first.created_at


async def test_refresh_on_read_false_by_default_and_batched_refresh(make_store, clock) -> None:
    async with make_store(ttl={"default_ttl": 1, "refresh_on_read": False}) as store:
        await store.abatch(
            [PutOp(("a",), "1", {"v": 1}, ttl=1), PutOp(("b",), "2", {"v": 2}, ttl=1)]
        )
        clock.sleep(50)
        assert await store.aget(("a",), "1") is not None  # refresh_on_read=False: no refresh
        clock.sleep(20)
        assert await store.aget(("a",), "1") is None
        assert await store.aget(("b",), "2", refresh_ttl=True) is None  # expired: not revived


async def test_a_refresh_never_lands_on_a_newer_version(make_store, clock) -> None:
    """A refresh computed from a read does not touch the item a put rewrote meanwhile."""
    async with make_store() as store:
        await store.aput(("t",), "k", {"v": 1}, ttl=10)
        (record,) = await (await store._store()).get_entries(store.scope(("t",)), ["k"])
        await store.aput(("t",), "k", {"v": 2}, ttl=1)
        clock.sleep(30)
        stale = refresh_patch(record, clock.now)
        assert await (await store._store()).merge_metadata(store.scope(("t",)), {"k": stale}) == 0
        clock.sleep(31)
        assert await store.aget(("t",), "k") is None


async def test_the_sweeper_task_sweeps_until_stopped(make_store, clock) -> None:
    async with make_store() as store:
        await store.aput(("t",), "k", {"v": 1}, ttl=1)
        clock.sleep(61)
        task = await store.start_ttl_sweeper(sweep_interval_minutes=0.002)  # 0.12 s
        assert await store.start_ttl_sweeper() is task
        for _ in range(100):
            if await _rows(store, ("t",), ["k"]) == []:
                break
            await asyncio.sleep(0.05)
        assert await _rows(store, ("t",), ["k"]) == []
        assert await store.stop_ttl_sweeper(timeout=5) is True
        assert task.done()


async def test_bad_ttls_are_refused(make_store) -> None:
    async with make_store() as store:
        for bad in (0, -1, float("nan"), float("inf"), "5", True):
            with pytest.raises(ValidationError):
                await store.aput(("t",), "k", {"v": 1}, ttl=bad)
        assert await store.aget(("t",), "k") is None
    for config in ({"default_ttl": -1}, {"refresh_on_read": "yes"}, {"sweep_every": 1}):
        with pytest.raises(ConfigurationError):
            PrismStore(ttl=config)
