"""The HTTP transport's own promises, each checked on the wire (issue 47's mutation run): a refusal
is a 401 with a ``WWW-Authenticate`` challenge and a JSON body naming no credential; responses are
plain JSON, with no session; a foreign ``Host`` is refused on loopback (DNS rebinding);
:func:`serve_http` serves the same app on its own."""

from __future__ import annotations

import asyncio
import inspect

import httpx2

from prism_memory import HashEmbedder
from prism_memory.integrations.mcp import PrismMcpServer, http_app, serve_http, token_resolver
from tests.mcp._support import ADA, call, free_port, http_session, serving

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def _server() -> PrismMcpServer:
    return PrismMcpServer(embedder=HashEmbedder())


async def test_a_refusal_is_a_bearer_challenge_with_a_json_body() -> None:
    app = http_app(_server(), token_resolver({"token-ada": ADA}))
    async with serving(app) as url, httpx2.AsyncClient(timeout=10) as client:
        response = await client.post(url, json=INITIALIZE, headers=ACCEPT)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="prism-memory"'
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": "unauthorized",
        "error_description": "a valid bearer token is required",
    }


async def test_answers_are_json_and_no_session_is_kept() -> None:
    app = http_app(_server(), token_resolver({"token-ada": ADA}))
    headers = {**ACCEPT, "Authorization": "Bearer token-ada"}
    async with serving(app) as url, httpx2.AsyncClient(timeout=10) as client:
        response = await client.post(url, json=INITIALIZE, headers=headers)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        assert "mcp-session-id" not in response.headers  # stateless: nothing to hijack
        assert response.json()["result"]["serverInfo"]["name"] == "prism-memory"
        # on loopback a page of another site cannot reach it through DNS rebinding
        foreign = await client.post(url, json=INITIALIZE, headers={**headers, "Host": "evil.test"})
        assert foreign.status_code in (400, 403, 421)


async def test_serve_http_serves_the_authenticated_app() -> None:
    assert inspect.signature(serve_http).parameters["port"].default == 8000
    port = free_port()
    task = asyncio.create_task(serve_http(_server(), token_resolver({"token-ada": ADA}), port=port))
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx2.AsyncClient(timeout=5) as client:
            for _ in range(200):
                try:
                    refused = await client.post(url, json=INITIALIZE, headers=ACCEPT)
                    break
                except httpx2.TransportError:
                    assert not task.done(), task.exception()
                    await asyncio.sleep(0.05)
            assert refused.status_code == 401
        async with http_session(url, "token-ada") as session:
            ids = (await call(session, "remember", texts=["Ada drinks green tea"]))["ids"]
            assert len(ids) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
