"""Helpers of the MCP server tests: the SDK's own client over stdio (a subprocess running
``python -m prism_memory mcp``) and over Streamable HTTP (uvicorn on 127.0.0.1, a free port), on
both backends."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from prism_memory import HashEmbedder
from prism_memory.integrations.mcp import McpIdentity, PrismMcpServer, http_app, token_resolver

REPO = Path(__file__).resolve().parents[2]

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("postgres", marks=pytest.mark.postgres),
]

ADA = McpIdentity("tenant-a", "ada", "chat-1")
BOB = McpIdentity("tenant-b", "bob", "chat-9")
TOKENS = {"token-ada": ADA, "token-bob": BOB}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env() -> dict[str, str]:
    """The environment of a server subprocess: this checkout first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRISM_MEMORY_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def identity_args(identity: McpIdentity) -> list[str]:
    return [
        "--tenant",
        identity.tenant_id,
        "--resource",
        identity.resource_id,
        "--thread",
        identity.thread_id,
    ]


@asynccontextmanager
async def stdio_session(args: list[str]) -> AsyncIterator[ClientSession]:
    """A client session with ``python -m prism_memory mcp <args>`` over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "prism_memory", "mcp", "--embedder", "prism_memory:HashEmbedder", *args],
        env=server_env(),
        cwd=str(REPO),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """A client session over Streamable HTTP, with ``Authorization: Bearer <token>``."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Run ``app`` with uvicorn on 127.0.0.1 and a free port; yield the MCP endpoint's URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(200):
            if server.started:
                break
            if task.done():
                task.result()
            await asyncio.sleep(0.025)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def http_server(stores: Mapping[str, Any]) -> AsyncIterator[str]:
    """An in-process HTTP memory server for Ada's and Bob's tokens; yields its URL."""
    server = PrismMcpServer(embedder=HashEmbedder(), **stores)
    async with serving(http_app(server, token_resolver(TOKENS))) as url:
        yield url


TOOLS = {
    "remember",
    "recall",
    "forget",
    "revoke_consent",
    "restore_consent",
    "correct",
    "get_working_memory",
    "update_working_memory",
    "export_memory",
}


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call ``tool``; its structured result (the call must succeed)."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content}"
    assert result.structured_content is not None
    return dict(result.structured_content)


async def call_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    """Call ``tool``, which must fail as a tool error; the error's one line of text."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    [content] = result.content
    message = getattr(content, "text", "")
    assert "\n" not in message, message
    assert "Traceback" not in message, message
    return str(message)


async def exercise_every_tool(session: ClientSession) -> None:
    """List the tools and call each one as a model would, results and errors checked."""
    listed = (await session.list_tools()).tools
    assert {tool.name for tool in listed} == TOOLS
    for tool in listed:
        assert len(tool.description or "") > 40, tool.name
        assert tool.input_schema["additionalProperties"] is False, tool.name
        assert tool.output_schema is not None, tool.name
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
            assert name not in {"tenant_id", "resource_id", "thread_id", "identity"}

    ids = (await call(session, "remember", texts=["Ada drinks green tea", "Ada lives in Lyon"]))[
        "ids"
    ]
    assert len(ids) == 2
    hits = (await call(session, "recall", query="green tea", top_k=2))["hits"]
    assert hits[0]["id"] == ids[0]
    assert hits[0]["text"] == "Ada drinks green tea"
    assert all(isinstance(hit["score"], float) for hit in hits)

    assert await call(session, "revoke_consent", id=ids[0]) == {"id": ids[0], "visible": False}
    hits = (await call(session, "recall", query="green tea"))["hits"]
    assert ids[0] not in [hit["id"] for hit in hits]
    assert await call(session, "restore_consent", id=ids[0]) == {"id": ids[0], "visible": True}
    hits = (await call(session, "recall", query="green tea"))["hits"]
    assert hits[0]["id"] == ids[0]

    fixed = await call(session, "correct", id=ids[1], text="Ada lives in Lyon, near the river")
    assert fixed == {"id": ids[1], "text": "Ada lives in Lyon, near the river"}

    assert await call(session, "get_working_memory") == {"version": 0, "data": {}}
    written = await call(session, "update_working_memory", data={"name": "Ada"}, expected_version=0)
    assert written == {"version": 1, "data": {"name": "Ada"}}
    assert await call(session, "get_working_memory") == written
    stale = await call_error(session, "update_working_memory", data={"x": 1}, expected_version=0)
    assert stale.startswith("ConflictError: ")

    page = await call(session, "export_memory", limit=10)
    assert sorted(entry["id"] for entry in page["entries"]) == sorted(ids)
    assert page["next_cursor"] is None

    assert await call(session, "forget", ids=[ids[0]]) == {"deleted": 1}
    hits = (await call(session, "recall", query="green tea"))["hits"]
    assert ids[0] not in [hit["id"] for hit in hits]

    # typed errors: their type and one-line message, nothing of the caller's values
    missing = await call_error(session, "correct", id="m_no_such_entry", text="x")
    assert missing.startswith("NotFoundError: ")
    assert "m_no_such_entry" not in missing
    assert (await call_error(session, "revoke_consent", id="m_gone")).startswith("NotFoundError: ")
    invalid = await call_error(session, "forget", ids="sk-secret-value")
    assert invalid.startswith("ValidationError: ")
    assert "sk-secret-value" not in invalid
    assert (await call_error(session, "recall", query="")).startswith("ValidationError: ")
    undeclared = await call_error(session, "recall", query="tea", thread_id="chat-2")
    assert "fixed by the host" in undeclared

    prompt = await session.get_prompt("memory_context", {"query": "where does Ada live"})
    [message] = prompt.messages
    block = getattr(message.content, "text", "")
    assert '"name":"Ada"' in block.replace(" ", "")
    assert "Lyon, near the river" in block
