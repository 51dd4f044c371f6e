"""Who an MCP call acts as (issue 47): a token file's ``sha256:`` key is a digest, never a token
itself, and an HTTP request never borrows the identity a server keeps for stdio calls."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from prism_memory import HashEmbedder, create_memory
from prism_memory.integrations.mcp import (
    PrismMcpServer,
    http_app,
    token_file_resolver,
    token_resolver,
)
from prism_memory.memory import Memory
from tests.mcp._support import (
    ADA,
    BOB,
    call,
    call_error,
    http_session,
    serving,
)

SECRET_TOKEN = "ada-real-token-3f9c"
DIGEST_KEY = "sha256:" + hashlib.sha256(SECRET_TOKEN.encode()).hexdigest()


def _token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    identity = {"tenant_id": ADA.tenant_id, "resource_id": ADA.resource_id, "thread_id": "x"}
    path.write_text(json.dumps({DIGEST_KEY: identity}), encoding="utf-8")
    return path


def test_a_sha256_key_is_the_digest_of_the_token_not_the_token(tmp_path: Path) -> None:
    resolve = token_file_resolver(_token_file(tmp_path))
    found = resolve(f"Bearer {SECRET_TOKEN}")
    assert found is not None
    assert (found.tenant_id, found.resource_id, found.thread_id) == ("tenant-a", "ada", "x")
    # whoever reads the file holds the key, not the token: the key itself logs no one in
    assert resolve(f"Bearer {DIGEST_KEY}") is None
    assert resolve(f"Bearer {DIGEST_KEY.removeprefix('sha256:')}") is None


async def test_over_http_a_sha256_key_admits_its_token_only(tmp_path: Path) -> None:
    server = PrismMcpServer(embedder=HashEmbedder())
    async with serving(http_app(server, token_file_resolver(_token_file(tmp_path)))) as url:
        async with http_session(url, SECRET_TOKEN) as session:
            ids = (await call(session, "remember", texts=["Ada drinks green tea"]))["ids"]
            hits = (await call(session, "recall", query="green tea"))["hits"]
            assert [hit["id"] for hit in hits] == ids
        with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's own error for a 401
            async with http_session(url, DIGEST_KEY):
                pass


async def test_an_http_request_never_falls_back_to_the_stdio_identity() -> None:
    """A server configured with Ada's identity (for stdio) served over HTTP: a request with Bob's
    token is Bob, and a request that reached the SDK's app without the authentication in front of
    it (served bare, a host's mistake) is refused -- never Ada."""
    server = PrismMcpServer(embedder=HashEmbedder(), identity=ADA)
    async with (
        serving(http_app(server, token_resolver({"token-bob": BOB}))) as url,
        http_session(url, "token-bob") as bob,
    ):
        await call(bob, "remember", texts=["Bob plays the cello"], scope="thread")
        await call(bob, "update_working_memory", data={"who": "bob"})
    # Ada's own memory (the configured identity): untouched by Bob's calls
    async with _memory(server) as m:
        assert (await m.recall("cello")).hits == ()
        assert await m.get_working() is None

    bare = server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, host="127.0.0.1"
    )
    async with serving(bare) as url, http_session(url, None) as anonymous:
        for tool, arguments in (
            ("recall", {"query": "cello"}),
            ("remember", {"texts": ["planted"]}),
            ("get_working_memory", {}),
        ):
            message = await call_error(anonymous, tool, **arguments)
            assert "not authenticated" in message
    async with _memory(server) as m:
        assert (await m.recall("planted")).hits == ()


def _memory(server: PrismMcpServer) -> Memory:
    """Ada's memory on the server's stores, opened directly."""
    return create_memory(
        tenant_id=ADA.tenant_id,
        resource_id=ADA.resource_id,
        thread_id=ADA.thread_id,
        embedder=server.embedder,
        vector_store=server.vector_store,
        working_store=server.working_store,
    )
