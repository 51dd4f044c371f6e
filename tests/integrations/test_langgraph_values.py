"""What PrismStore stores and reads, on both backends: entries that are not a JSON object, values
that are not JSON, the payload cap, scrubbing, and a put racing another store's delete."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from langgraph.store.base import PutOp

from prism_memory import (
    CapExceededError,
    ConfigurationError,
    InMemoryVectorStore,
    ValidationError,
)
from prism_memory.integrations.langgraph import PrismStore

pytestmark = pytest.mark.postgres

NS = ("users", "ada")


async def _row_text(store: PrismStore, namespace: tuple[str, ...], key: str) -> str:
    """The text of ``key``'s entry as the vector store holds it."""
    async with await store.memory(namespace) as memory:
        return (await memory.get(key)).text


async def _nothing_stored(store: PrismStore) -> None:
    assert await store.asearch(()) == []
    assert await store.alist_namespaces() == []


async def test_an_entry_that_is_not_a_json_object_reads_as_its_text(
    make_store, fake_embeddings
) -> None:
    """An entry written through ``store.memory(ns)`` reads as ``{"text": ...}``; one foreign row
    breaks neither ``get`` nor a search of the namespace or of every namespace."""
    index = {"dims": fake_embeddings.dims, "embed": fake_embeddings}
    async with make_store(index=index) as store:
        await store.aput(NS, "k", {"text": "pears"})
        await store.aput(("users", "bob"), "j", {"text": "figs"})
        async with await store.memory(NS) as memory:
            await memory.remember({"id": "p", "text": "plain"}, wait=True)
            await memory.remember({"id": "q", "text": "[1, 2]"}, wait=True)  # JSON, not an object
        assert (await store.aget(NS, "p")).value == {"text": "plain"}
        assert (await store.aget(NS, "q")).value == {"text": "[1, 2]"}
        assert (await store.aget(NS, "k")).value == {"text": "pears"}
        assert [item.key for item in await store.asearch(NS)] == ["k", "p", "q"]
        assert {item.key for item in await store.asearch(())} == {"k", "p", "q", "j"}
        assert [i.key for i in await store.asearch(NS, filter={"text": "plain"})] == ["p"]
        found = await store.asearch(("users",), query="plain")
        assert found[0].key == "p"
        assert found[0].score is not None
        await store.aput(NS, "p", {"text": "now JSON"})  # a put over it writes a value
        assert (await store.aget(NS, "p")).value == {"text": "now JSON"}


@pytest.mark.parametrize(
    "bad",
    [object(), {1, 2}, b"bytes", datetime(2026, 1, 1, tzinfo=UTC), [object()]],
    ids=["object", "set", "bytes", "datetime", "nested"],
)
async def test_a_value_that_is_not_json_is_refused_and_nothing_is_stored(make_store, bad) -> None:
    async with make_store() as store:
        with pytest.raises(ValidationError, match="value") as raised:
            await store.aput(NS, "k", {"x": bad})
        assert "b'bytes'" not in str(raised.value)
        assert "2026" not in str(raised.value)
        await _nothing_stored(store)
        with pytest.raises(ValidationError):  # one bad put: no put of the batch is applied
            await store.abatch([PutOp(NS, "ok", {"v": 1}), PutOp(NS, "k", {"x": bad})])
        await _nothing_stored(store)
        await store.aput(NS, "k", {"v": 1})
        with pytest.raises(ValidationError):  # an overwrite is refused alike
            await store.aput(NS, "k", {"x": bad})
        assert (await store.aget(NS, "k")).value == {"v": 1}


async def test_a_value_over_the_payload_cap_is_refused_and_nothing_is_stored(make_store) -> None:
    async with make_store() as store:
        for size in (10 * 1024 * 1024, 64 * 1024):  # the default cap is 64 KiB of text
            with pytest.raises(CapExceededError, match="payload") as raised:
                await store.aput(NS, "k", {"blob": "secret" + "x" * size})
            assert "secret" not in str(raised.value)
            await _nothing_stored(store)
        await store.aput(NS, "k", {"blob": "x" * 60_000})
        with pytest.raises(CapExceededError):
            await store.aput(NS, "k", {"blob": "y" * 70_000})
        assert (await store.aget(NS, "k")).value == {"blob": "x" * 60_000}
    async with make_store(limits={"payload_bytes": 1024 * 1024}) as store:  # raised, up to 1 MiB
        await store.aput(NS, "k", {"blob": "x" * 512 * 1024})
        assert len((await store.aget(NS, "k")).value["blob"]) == 512 * 1024
        with pytest.raises(CapExceededError):
            await store.aput(NS, "big", {"blob": "x" * 2 * 1024 * 1024})
        assert await store.aget(NS, "big") is None


async def test_secrets_and_the_redactor_scrub_values_before_they_persist(
    make_store, fake_embeddings
) -> None:
    seen: list[str] = []

    def embed(texts: list[str]) -> list[list[float]]:
        seen.extend(texts)
        return fake_embeddings.embed_documents(texts)

    index = {"dims": fake_embeddings.dims, "embed": embed}
    options: dict[str, Any] = {
        "index": index,
        "secrets": ["hunter2"],
        "redactor": lambda text: text.replace("4111", "[CARD]"),
    }
    async with make_store(**options) as store:
        value = {"note": "pw is hunter2", "hunter2": ["card 4111", 7], "n": {"deep": "hunter2!"}}
        await store.aput(NS, "k", value)
        await store.aput(NS, "k2", {"note": "first"})
        await store.aput(NS, "k2", {"note": "then hunter2"})  # an overwrite is scrubbed too
        for key in ("k", "k2"):
            stored = await _row_text(store, NS, key)
            assert "hunter2" not in stored
            assert "4111" not in stored
        assert (await store.aget(NS, "k")).value == {
            "note": "pw is [REDACTED]",
            "[REDACTED]": ["card [CARD]", 7],
            "n": {"deep": "[REDACTED]!"},
        }
        assert (await store.aget(NS, "k2")).value == {"note": "then [REDACTED]"}
        assert seen
        assert not any("hunter2" in text or "4111" in text for text in seen)
        async with await store.memory(NS) as memory:  # the handle scrubs as the store does
            await memory.remember({"id": "p", "text": "hunter2 again"})
        assert "hunter2" not in await _row_text(store, NS, "p")


def test_secrets_must_be_strings() -> None:
    with pytest.raises(ConfigurationError, match="secrets"):
        PrismStore(secrets=[b"raw"])  # type: ignore[list-item]


async def _shared_stores(
    request: pytest.FixtureRequest, backend: str
) -> tuple[Any, list[PrismStore], Any]:
    """Two PrismStores on one vector store (memory), or on one PostgreSQL schema through two
    ``from_conn_string`` pools (postgres); the vector store the first writes through; a closer."""
    if backend == "memory":
        shared = InMemoryVectorStore()
        stores = [PrismStore(vector_store=shared), PrismStore(vector_store=shared)]

        async def close_memory() -> None:
            return None

        return shared, stores, close_memory
    url = request.getfixturevalue("postgres_url")
    make_postgres_stores = request.getfixturevalue("make_postgres_stores")
    schema = f"lg_race_{uuid.uuid4().hex[:12]}"
    await (await make_postgres_stores(schema=schema)).close()  # created, dropped at teardown
    contexts = [PrismStore.from_conn_string(url, schema=schema) for _ in range(2)]
    stores = [await context.__aenter__() for context in contexts]
    for store in stores:
        await store.setup()

    async def close_postgres() -> None:
        for context in contexts:
            await context.__aexit__(None, None, None)

    return await stores[0]._store(), stores, close_postgres


@pytest.mark.parametrize("backend", ["memory", "postgres"])
async def test_a_put_over_an_item_another_store_deletes_meanwhile_inserts_it(
    request: pytest.FixtureRequest, arm_race: Any, backend: str
) -> None:
    """Another store deletes the item between this put's read and its overwrite: the put is
    ordered after the delete -- it raises nothing and the item holds its value."""
    vectors, (store, other), close = await _shared_stores(request, backend)
    try:
        await store.aput(NS, "k", {"v": 1})
        race = arm_race(vectors, "users.ada", "apply_governance")
        race.racer = lambda: other.adelete(NS, "k")
        await store.aput(NS, "k", {"v": 2})
        assert race.racer is None  # the delete did run in between
        assert (await store.aget(NS, "k")).value == {"v": 2}
        assert (await other.aget(NS, "k")).value == {"v": 2}
        assert [item.key for item in await other.asearch(NS)] == ["k"]
    finally:
        await close()


@pytest.mark.parametrize("backend", ["memory", "postgres"])
async def test_puts_racing_another_stores_deletes_win_or_lose_cleanly(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """Two stores on one database, many rounds of a put and a delete of one existing key at once:
    no put raises, and after each round the key holds that round's value or nothing."""
    _, (writer, deleter), close = await _shared_stores(request, backend)
    try:
        for round_ in range(60):
            await writer.aput(NS, "k", {"round": -1})
            calls = [writer.aput(NS, "k", {"round": round_}), deleter.adelete(NS, "k")]
            await asyncio.gather(*(calls if round_ % 2 else calls[::-1]))
            item = await deleter.aget(NS, "k")
            assert item is None or item.value == {"round": round_}
    finally:
        await close()
