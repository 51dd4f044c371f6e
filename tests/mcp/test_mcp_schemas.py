"""The tools' schemas carry the library's caps, and working memory is what the server says it is
(issue 46, items 6 and 8), over HTTP on both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import ClientSession

from prism_memory import HashEmbedder, Limits
from prism_memory.integrations.mcp import McpIdentity, PrismMcpServer, http_app, token_resolver
from tests.mcp._support import BACKENDS, call, call_error, http_session, serving

CHAT_1 = McpIdentity("tenant-a", "ada", "chat-1")
CHAT_2 = McpIdentity("tenant-a", "ada", "chat-2")


@asynccontextmanager
async def _served(
    stores: Mapping[str, Any], **memory_options: Any
) -> AsyncIterator[tuple[PrismMcpServer, str]]:
    server = PrismMcpServer(
        embedder=HashEmbedder(), memory_options=memory_options or None, **stores
    )
    resolver = token_resolver({"token-chat-1": CHAT_1, "token-chat-2": CHAT_2})
    async with serving(http_app(server, resolver)) as url:
        yield server, url


async def _schemas(session: ClientSession) -> dict[str, dict[str, Any]]:
    return {tool.name: tool.input_schema for tool in (await session.list_tools()).tools}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_schemas_carry_the_library_caps_and_refuse_booleans(
    backend: str, backend_stores
) -> None:
    """Before: ``top_k`` up to 50 (cap 32), ``limit`` up to 500 (cap 200), the library's refusal
    repeating the value, and ``top_k: true`` taken as 1."""
    caps = Limits()
    async with (
        backend_stores() as stores,
        _served(stores) as (_, url),
        http_session(url, "token-chat-1") as session,
    ):
        schemas = await _schemas(session)
        top_k = schemas["recall"]["properties"]["top_k"]
        limit = schemas["export_memory"]["properties"]["limit"]
        assert (top_k["minimum"], top_k["maximum"]) == (1, caps.top_k)
        assert (limit["minimum"], limit["maximum"]) == (1, caps.export_entries)
        assert top_k["type"] == limit["type"] == "integer"

        await call(session, "remember", texts=["Ada drinks green tea"])
        assert len((await call(session, "recall", query="tea", top_k=caps.top_k))["hits"]) == 1
        await call(session, "export_memory", limit=caps.export_entries)
        refusals = [
            await call_error(session, "recall", query="tea", top_k=caps.top_k + 1),
            await call_error(session, "recall", query="tea", top_k=True),
            await call_error(session, "recall", query="tea", top_k=0),
            await call_error(session, "export_memory", limit=caps.export_entries + 1),
            await call_error(session, "export_memory", limit=True),
            await call_error(session, "update_working_memory", data={}, expected_version=True),
        ]
        for message in refusals:
            assert message.startswith("ValidationError: "), message
            assert str(caps.top_k + 1) not in message
            assert str(caps.export_entries + 1) not in message
            assert "True" not in message
            assert "true" not in message


@pytest.mark.parametrize("backend", BACKENDS)
async def test_lowered_limits_lower_the_schemas(backend: str, backend_stores) -> None:
    async with (
        backend_stores() as stores,
        _served(stores, limits=Limits(top_k=4, export_entries=10)) as (_, url),
        http_session(url, "token-chat-1") as session,
    ):
        schemas = await _schemas(session)
        top_k = schemas["recall"]["properties"]["top_k"]
        limit = schemas["export_memory"]["properties"]["limit"]
        assert (top_k["maximum"], top_k["default"]) == (4, 4)
        assert (limit["maximum"], limit["default"]) == (10, 10)
        message = await call_error(session, "recall", query="tea", top_k=5)
        assert message.startswith("ValidationError: ")
        assert (await call(session, "recall", query="tea"))["hits"] == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_working_memory_is_the_users_by_default_shared_by_their_threads(
    backend: str, backend_stores
) -> None:
    """Before: the instructions said "the conversation's" while chat-1 and chat-2 of one user
    read and overwrote one document. Per SPEC §2 it is the user's (tenant/resource) unless the
    host sets ``working_scope="thread"``; the server now says so."""
    async with (
        backend_stores() as stores,
        _served(stores) as (server, url),
        http_session(url, "token-chat-1") as chat_1,
        http_session(url, "token-chat-2") as chat_2,
    ):
        assert "shared by all their conversations" in (server.instructions or "")
        assert "conversation's structured state" not in (server.instructions or "")
        described = {t.name: t.description or "" for t in (await chat_1.list_tools()).tools}
        assert "shared by all their conversations" in described["get_working_memory"]
        assert "shared by all their conversations" in described["update_working_memory"]

        written = await call(chat_1, "update_working_memory", data={"name": "Ada"})
        assert await call(chat_2, "get_working_memory") == written
        stale = await call_error(chat_2, "update_working_memory", data={}, expected_version=0)
        assert stale.startswith("ConflictError: ")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_working_memory_per_thread_when_the_host_asks(backend: str, backend_stores) -> None:
    async with (
        backend_stores() as stores,
        _served(stores, working_scope="thread") as (server, url),
        http_session(url, "token-chat-1") as chat_1,
        http_session(url, "token-chat-2") as chat_2,
    ):
        assert "this conversation's structured state" in (server.instructions or "")
        described = {t.name: t.description or "" for t in (await chat_1.list_tools()).tools}
        assert "one document per conversation" in described["get_working_memory"]

        one = await call(chat_1, "update_working_memory", data={"topic": "tea"})
        assert await call(chat_2, "get_working_memory") == {"version": 0, "data": {}}
        two = await call(
            chat_2, "update_working_memory", data={"topic": "trains"}, expected_version=0
        )
        assert await call(chat_1, "get_working_memory") == one
        assert await call(chat_2, "get_working_memory") == two


def test_a_bad_working_scope_is_refused_at_construction() -> None:
    from prism_memory.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        PrismMcpServer(embedder=HashEmbedder(), memory_options={"working_scope": "tenant"})
