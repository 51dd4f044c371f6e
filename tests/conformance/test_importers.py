"""Moving in: a mem0-shaped export, a LangGraph ``AsyncPostgresStore`` database (made by LangGraph
itself) and prism_memory's own export pages, imported on every backend, then recalled through
prism_memory."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from prism_memory import HashEmbedder, InMemoryVectorStore, InMemoryWorkingStore, create_memory
from prism_memory.importing import (
    import_entries,
    read_export,
    read_jsonl,
    read_langgraph_store,
    read_mem0,
)
from prism_memory.models import MemoryConsent, MemoryIdentity
from prism_memory.stores.base import VectorStore, WorkingStore

WIDTH = 32
TENANT = "acme"

MEM0_EXPORT = {
    "results": [
        {
            "id": "5b0c1f1e-2d3a-4f5b-8c6d-7e8f9a0b1c2d",
            "memory": "Alice plays the cello in an orchestra",
            "hash": "3f1a9c",
            "metadata": {"category": "hobbies"},
            "created_at": "2024-07-20T01:30:22.654906-07:00",
            "updated_at": None,
            "user_id": "alice",
        },
        {
            "id": "6c1d2e3f-4a5b-4c6d-9e7f-8a9b0c1d2e3f",
            "memory": "Alice is allergic to peanuts",
            "hash": "7b2e4d",
            "metadata": None,
            "created_at": "2024-07-21T09:00:00",
            "user_id": "alice",
            "agent_id": "travel-agent",
            "run_id": "trip-42",
        },
        {
            "id": "7d2e3f4a-5b6c-4d7e-8f9a-0b1c2d3e4f5a",
            "memory": "Bob prefers window seats",
            "hash": "9c3f5e",
            "created_at": "2024-07-22T10:15:00+00:00",
            "user_id": "bob",
        },
    ]
}


@pytest.fixture(params=["memory", "postgres"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[VectorStore, WorkingStore]]:
    if request.param == "memory":
        yield InMemoryVectorStore(), InMemoryWorkingStore()
        return
    made = await request.getfixturevalue("make_postgres_stores")(dimension=WIDTH)
    yield made.vector_store, made.working_store


async def _recall(
    stores: tuple[VectorStore, WorkingStore], resource: str, thread: str, query: str
) -> list[str]:
    async with create_memory(
        tenant_id=TENANT,
        resource_id=resource,
        thread_id=thread,
        embedder=HashEmbedder(WIDTH),
        vector_store=stores[0],
        working_store=stores[1],
    ) as memory:
        return [hit.text for hit in (await memory.recall(query, top_k=3)).hits]


async def test_a_mem0_export_is_recalled_through_prism_memory(stores, tmp_path: Path) -> None:
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(MEM0_EXPORT, indent=2), encoding="utf-8")  # pretty, not JSONL
    report = await import_entries(
        stores[0], read_mem0(path, tenant_id=TENANT), embedder=HashEmbedder(WIDTH)
    )
    assert (report.inserted, report.existing, report.embedded) == (3, 0, 3)
    assert await _recall(stores, "alice", "mem0", "cello") == [
        "Alice plays the cello in an orchestra"
    ]
    assert await _recall(stores, "alice", "trip-42", "peanuts") == ["Alice is allergic to peanuts"]
    assert await _recall(stores, "bob", "mem0", "window seats") == ["Bob prefers window seats"]
    scope = MemoryIdentity(tenant_id=TENANT, resource_id="alice", thread_id="mem0")
    (cello,) = await stores[0].get_entries(scope, ["5b0c1f1e-2d3a-4f5b-8c6d-7e8f9a0b1c2d"])
    assert cello.metadata == {"category": "hobbies", "mem0_hash": "3f1a9c"}
    assert cello.occurred_at == datetime(
        2024, 7, 20, 1, 30, 22, 654906, tzinfo=timezone(-timedelta(hours=7))
    )
    trip = MemoryIdentity(tenant_id=TENANT, resource_id="alice", thread_id="trip-42")
    (peanuts,) = await stores[0].get_entries(trip, ["6c1d2e3f-4a5b-4c6d-9e7f-8a9b0c1d2e3f"])
    assert peanuts.metadata == {"mem0_hash": "7b2e4d", "mem0_agent_id": "travel-agent"}
    assert peanuts.occurred_at == datetime(2024, 7, 21, 9, 0, tzinfo=UTC)  # naive: UTC
    again = await import_entries(
        stores[0], read_mem0(path, tenant_id=TENANT), embedder=HashEmbedder(WIDTH)
    )
    assert (again.inserted, again.existing, again.embedded) == (0, 3, 0)


async def test_mem0_memories_can_travel_resource_wide(stores, tmp_path: Path) -> None:
    path = tmp_path / "mem0.jsonl"
    path.write_text(
        "\n".join(json.dumps(m) for m in MEM0_EXPORT["results"]) + "\n", encoding="utf-8"
    )
    shared = MemoryConsent(scope="user")
    await import_entries(
        stores[0], read_mem0(path, tenant_id=TENANT, consent=shared), embedder=HashEmbedder(WIDTH)
    )
    async with create_memory(
        tenant_id=TENANT,
        resource_id="alice",
        thread_id="a-new-chat",
        embedder=HashEmbedder(WIDTH),
        vector_store=stores[0],
        working_store=stores[1],
    ) as memory:
        hits = (await memory.recall("peanuts", top_k=1, scope="resource")).hits
    assert [hit.text for hit in hits] == ["Alice is allergic to peanuts"]


async def _embed(texts: list[str]) -> list[list[float]]:
    return [[float(x) for x in vector] for vector in await HashEmbedder(WIDTH).embed(texts)]


@pytest.fixture
async def langgraph_db(postgres_url: str) -> AsyncIterator[str]:
    """A LangGraph ``AsyncPostgresStore`` database, made and filled by LangGraph itself."""
    from langgraph.store.postgres.aio import AsyncPostgresStore

    server = make_url(postgres_url).set(drivername="postgresql")
    name = f"lg_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(server.render_as_string(hide_password=False))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        url = server.set(database=name).render_as_string(hide_password=False)
        async with AsyncPostgresStore.from_conn_string(
            url, index={"dims": WIDTH, "embed": _embed, "fields": ["text"]}
        ) as store:
            await store.setup()
            await store.aput(("alice", "memories"), "cello", {"text": "Alice plays the cello"})
            await store.aput(("alice", "memories"), "tea", {"text": "Alice drinks green tea"})
            await store.aput(("bob", "memories"), "seat", {"text": "Bob prefers window seats"})
            await store.aput(
                ("alice", "notes", "work"),
                "desk",
                {"content": "Alice's desk is by the window"},
                index=False,
            )
        yield url
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.mark.postgres
async def test_a_langgraph_store_is_recalled_through_prism_memory(
    stores, langgraph_db: str
) -> None:
    items = [item async for item in read_langgraph_store(langgraph_db, tenant_id=TENANT)]
    by_key = {item["id"]: item for item in items}
    assert sorted(by_key) == ["cello", "desk", "seat", "tea"]
    assert (by_key["cello"]["resource_id"], by_key["cello"]["thread_id"]) == ("alice", "memories")
    assert by_key["desk"]["thread_id"] == "notes/work"
    assert by_key["desk"]["text"] == "Alice's desk is by the window"
    assert "vector" not in by_key["desk"]  # stored without an index: no vector
    assert len(by_key["cello"]["vector"]) == WIDTH
    report = await import_entries(
        stores[0],
        read_langgraph_store(langgraph_db, tenant_id=TENANT),
        embedder=HashEmbedder(WIDTH),
    )
    # LangGraph's own vectors are kept; the one item it did not index is embedded here
    assert (report.inserted, report.embedded) == (4, 1)
    assert (await _recall(stores, "alice", "memories", "cello"))[0] == "Alice plays the cello"
    assert await _recall(stores, "bob", "memories", "window seats") == ["Bob prefers window seats"]
    assert await _recall(stores, "alice", "notes/work", "desk") == ["Alice's desk is by the window"]
    scope = MemoryIdentity(tenant_id=TENANT, resource_id="alice", thread_id="memories")
    (tea,) = await stores[0].get_entries(scope, ["tea"])
    assert tea.metadata == {
        "langgraph_namespace": ["alice", "memories"],
        "langgraph_value": {"text": "Alice drinks green tea"},
    }
    again = await import_entries(stores[0], read_langgraph_store(langgraph_db, tenant_id=TENANT))
    assert (again.inserted, again.existing) == (0, 4)


async def test_export_pages_move_a_thread_to_another_store(stores, tmp_path: Path) -> None:
    source = InMemoryVectorStore()
    identity = {"tenant_id": TENANT, "resource_id": "alice", "thread_id": "t-1"}
    consent = MemoryConsent(scope="thread")
    async with create_memory(**identity, embedder=HashEmbedder(WIDTH), vector_store=source) as old:
        await old.remember(
            [
                {"id": "a", "text": "Alice plays the cello", "consent": consent},
                {
                    "id": "b",
                    "text": "Alice rows",
                    "consent": consent,
                    "lineage": {"source_ids": ["a"]},
                },
            ],
            wait=True,
        )
        page = await old.export_memory(identity=identity)
    path = tmp_path / "export.jsonl"
    path.write_text(
        json.dumps({"entries": list(page.entries), "next_cursor": None}, default=str) + "\n"
    )
    # what `prism-memory export` writes, one exported entry per line, reads the same
    lines = tmp_path / "cli-export.jsonl"
    lines.write_text("".join(json.dumps(e, default=str) + "\n" for e in page.entries))
    assert list(read_export(lines)) == list(read_export(path))
    assert [e["id"] for e in read_export(lines)] == ["a", "b"]
    assert all("created_at" not in e for e in read_export(lines))
    report = await import_entries(stores[0], read_export(path), embedder=HashEmbedder(WIDTH))
    assert report.inserted == 2
    assert (await _recall(stores, "alice", "t-1", "cello"))[0] == "Alice plays the cello"
    scope = MemoryIdentity(**identity)
    moved = {r.id: r for r in await stores[0].get_entries(scope, ["a", "b"])}
    lineage = moved["b"].lineage
    assert lineage is not None
    assert lineage.source_ids == ("a",)
    assert moved["a"].consent == consent
    assert moved["a"].sequence == 0


def test_jsonl_lines_that_are_not_objects_name_their_line(tmp_path: Path) -> None:
    from prism_memory.importing import ImportLineError

    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n\n[1, 2]\n', encoding="utf-8")
    entries = read_jsonl(path)
    assert next(entries) == {"text": "fine"}
    with pytest.raises(ImportLineError) as raised:
        next(entries)
    assert raised.value.line == 3


def _line(entry_id: str, **fields: object) -> str:
    return json.dumps(
        {"tenant_id": TENANT, "resource_id": "u", "thread_id": "t", "id": entry_id, **fields}
    )


@pytest.mark.parametrize(
    ("lines", "batch_size", "first_bad"),
    [
        # issue 46 item 16: the empty text of line 1 was named after the bad JSON of line 3
        ([_line("a", text=""), _line("b", text="ok"), "not json {secret-ish}"], 100, 1),
        # a vector is checked with its batch (not when read): still the first bad line
        (
            [_line("a", text="x", vector=[1.0, "secret-ish"]), _line("b", text="y"), "{"],
            100,
            1,
        ),
        # a batch already handed to the writer fails on line 2, the reader on line 5
        (
            [
                _line("a", text="x"),
                _line("b", text="y", vector=[float("nan")] * WIDTH),
                _line("c", text="z"),
                _line("d", text="w"),
                "not json {secret-ish}",
            ],
            2,
            2,
        ),
    ],
)
async def test_an_import_names_its_first_bad_line(
    stores, tmp_path: Path, lines: list[str], batch_size: int, first_bad: int
) -> None:
    from prism_memory.importing import ImportLineError

    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ImportLineError) as raised:
        await import_entries(stores[0], read_jsonl(path), model="hash-v1-32", batch_size=batch_size)
    assert raised.value.line == first_bad, str(raised.value)
    assert str(raised.value).startswith(f"line {first_bad}:")
    assert "secret-ish" not in str(raised.value)
    scope = MemoryIdentity(tenant_id=TENANT, resource_id="u", thread_id="t")
    stored = await stores[0].known_keys([(scope, key) for key in "abcd"])
    assert stored == set(), "nothing of the bad line's batch is written"
