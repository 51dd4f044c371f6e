"""The SDK's own client session calls every tool of ``prism-memory mcp`` over stdio and over
Streamable HTTP, on both backends, and HTTP refuses requests without a valid bearer token."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from tests.mcp._support import (
    ADA,
    BACKENDS,
    exercise_every_tool,
    free_port,
    http_server,
    http_session,
    identity_args,
    stdio_session,
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
async def test_stdio_client_calls_every_tool(backend: str, database_args: list[str]) -> None:
    async with stdio_session([*identity_args(ADA), *database_args]) as session:
        await exercise_every_tool(session)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_http_client_calls_every_tool(backend: str, backend_stores) -> None:
    async with (
        backend_stores() as stores,
        http_server(stores) as url,
        http_session(url, "token-ada") as session,
    ):
        await exercise_every_tool(session)


async def test_http_refuses_a_request_without_a_valid_token() -> None:
    async with http_server({}) as url:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        headers = {"Accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient(timeout=10) as client:
            for auth in (None, "Bearer wrong", "Basic token-ada", "token-ada"):
                sent = headers if auth is None else {**headers, "Authorization": auth}
                response = await client.post(url, json=body, headers=sent)
                assert response.status_code == 401, auth
                assert "token-ada" not in response.text
        with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's own error for a 401
            async with http_session(url, None):
                pass


@pytest.mark.slow
async def test_the_cli_serves_http_behind_a_token_file(tmp_path: Path) -> None:
    """``prism-memory mcp --transport http --auth-tokens FILE`` as a subprocess: a token of the
    file reaches its identity's memory; no token gets 401."""
    import asyncio
    import sys

    from tests.mcp._support import REPO, call, server_env

    tokens = tmp_path / "tokens.json"
    identity = {"tenant_id": "t1", "resource_id": "ada", "thread_id": "chat-1"}
    tokens.write_text(json.dumps({"token-ada": identity}), encoding="utf-8")
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *["-m", "prism_memory", "mcp", "--embedder", "prism_memory:HashEmbedder"],
        *["--transport", "http", "--auth-tokens", str(tokens), "--port", str(port)],
        env=server_env(),
        cwd=str(REPO),
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx2.AsyncClient(timeout=5) as client:
            for _ in range(200):
                try:
                    response = await client.post(url, json={})
                    break
                except httpx2.TransportError:
                    await asyncio.sleep(0.05)
            assert response.status_code == 401
        async with http_session(url, "token-ada") as session:
            ids = (await call(session, "remember", texts=["Ada drinks green tea"]))["ids"]
            hits = (await call(session, "recall", query="green tea"))["hits"]
            assert [hit["id"] for hit in hits] == ids
    finally:
        process.terminate()
        await process.wait()
