"""Two users' memory servers on one database: a model-style call that passes the other user's
ids, tenant, resource or thread gets nothing of theirs and changes nothing of theirs."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import ClientSession

from tests.mcp._support import (
    ADA,
    BACKENDS,
    BOB,
    call,
    call_error,
    http_server,
    http_session,
    identity_args,
    stdio_session,
)

ADA_FACTS = ["Ada's door code is 4512", "Ada is allergic to peanuts"]


async def _seed_ada(ada: ClientSession) -> list[str]:
    ids: list[str] = (await call(ada, "remember", texts=[ADA_FACTS[0]], scope="thread"))["ids"] + (
        await call(ada, "remember", texts=[ADA_FACTS[1]], scope="user")
    )["ids"]
    await call(ada, "update_working_memory", data={"name": "Ada", "pin": "4512"})
    return ids


async def _bob_tries_everything(bob: ClientSession, ada_ids: list[str]) -> None:
    """Every tool, as a model that learnt Ada's ids and identity would call it as Bob."""
    theirs: dict[str, Any] = {
        "tenant_id": ADA.tenant_id,
        "resource_id": ADA.resource_id,
        "thread_id": ADA.thread_id,
    }
    for scope in ("thread", "resource"):
        hits = (await call(bob, "recall", query="Ada door code peanuts", scope=scope))["hits"]
        assert hits == []
    for name, value in theirs.items():  # an undeclared argument is refused, never honoured
        message = await call_error(bob, "recall", query="door code", **{name: value})
        assert "fixed by the host" in message
        assert value not in message
        await call_error(bob, "remember", texts=["planted"], **{name: value})
    assert await call(bob, "forget", ids=ada_ids) == {"deleted": 0}
    for entry_id in ada_ids:
        for tool in ("revoke_consent", "restore_consent"):
            message = await call_error(bob, tool, id=entry_id)
            assert message.startswith("NotFoundError: ")
            assert entry_id not in message
        message = await call_error(bob, "correct", id=entry_id, text="Ada's door code is 0000")
        assert message.startswith("NotFoundError: ")
    assert await call(bob, "get_working_memory") == {"version": 0, "data": {}}
    assert (await call(bob, "export_memory"))["entries"] == []
    prompt = await bob.get_prompt("memory_context", {"query": "Ada door code peanuts"})
    text = "".join(getattr(m.content, "text", "") for m in prompt.messages)
    assert "Ada" not in text
    assert "4512" not in text


async def _ada_is_untouched(ada: ClientSession, ada_ids: list[str]) -> None:
    hits = (await call(ada, "recall", query="Ada door code peanuts", top_k=5))["hits"]
    assert sorted(hit["id"] for hit in hits) == sorted(ada_ids)
    assert sorted(hit["text"] for hit in hits) == sorted(ADA_FACTS)
    working = await call(ada, "get_working_memory")
    assert working["data"] == {"name": "Ada", "pin": "4512"}
    exported = (await call(ada, "export_memory"))["entries"]
    assert sorted(entry["id"] for entry in exported) == sorted(ada_ids)


@pytest.mark.slow
@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_two_stdio_servers_on_one_database_share_nothing(
    backend: str, database_args: list[str]
) -> None:
    """Two ``prism-memory mcp`` processes, one per user, on one PostgreSQL schema."""
    async with (
        stdio_session([*identity_args(ADA), *database_args]) as ada,
        stdio_session([*identity_args(BOB), *database_args]) as bob,
    ):
        ada_ids = await _seed_ada(ada)
        await _bob_tries_everything(bob, ada_ids)
        await _ada_is_untouched(ada, ada_ids)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_two_tokens_on_one_http_server_share_nothing(backend: str, backend_stores) -> None:
    """One HTTP server, one store: each bearer token reaches its own identity's memory only."""
    async with (
        backend_stores() as stores,
        http_server(stores) as url,
        http_session(url, "token-ada") as ada,
        http_session(url, "token-bob") as bob,
    ):
        ada_ids = await _seed_ada(ada)
        await _bob_tries_everything(bob, ada_ids)
        await _ada_is_untouched(ada, ada_ids)
