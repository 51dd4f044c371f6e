"""Malformed JSON-RPC messages, prompt arguments and transport failures (issue 46, items 4, 5,
7 and 9): every one gets one fixed, typed answer over stdio and over HTTP, and nothing the
server answers or logs repeats a value of the request."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from prism_memory import HashEmbedder
from prism_memory.integrations.mcp import McpIdentity, PrismMcpServer, http_app
from tests.mcp._support import (
    ADA,
    BACKENDS,
    REPO,
    http_server,
    http_session,
    identity_args,
    server_env,
    serving,
)

SECRET = "sk_live_51HqTzKx9secret"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}

# (raw message, expected error code, expected id of the reply)
MALFORMED: list[tuple[bytes, int, int | None]] = [
    (json.dumps([{"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"x": SECRET}}]).encode(), -32600, None),
    (json.dumps({"jsonrpc": "1.0", "id": 4, "method": "tools/list", "params": {"x": SECRET}}).encode(), -32600, 4),
    (json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": SECRET}).encode(), -32600, 5),
    (json.dumps({"jsonrpc": "2.0", "id": 6, "method": 6, "params": {"x": SECRET}}).encode(), -32600, 6),
    (json.dumps({"jsonrpc": "2.0", "id": True, "method": "tools/list", "params": {"x": SECRET}}).encode(), -32600, None),
    (json.dumps(SECRET).encode(), -32600, None),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", ' + SECRET.encode(), -32700, None),
    (b'{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"x":"\\ud800' + SECRET.encode() + b'"}}', -32700, None),
    (b"[" * 100_000 + SECRET.encode() + b"]" * 100_000, -32700, None),
    (b'{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"x":"\xff' + SECRET.encode() + b'"}}', -32700, None),
    (b'{"jsonrpc":"2.0","id":10,"method":"tools/list","params":{"x":"' + SECRET.encode() * 1_000_000 + b'"}}', -32600, None),
]  # fmt: skip


def _check_reply(reply: dict[str, Any], code: int, request_id: int | None) -> None:
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] == request_id
    assert reply["error"]["code"] == code
    assert set(reply["error"]) == {"code", "message"}
    assert SECRET not in json.dumps(reply)


class _Stdio:
    """A raw line-level client of ``python -m prism_memory mcp`` (no SDK client: it would refuse
    to send what these tests send)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.initialized: dict[str, Any] = {}

    async def send(self, line: bytes) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(line + b"\n")
        await self.process.stdin.drain()
        answer = await asyncio.wait_for(self.process.stdout.readline(), 30)
        assert answer, "the server sent no reply"
        return dict(json.loads(answer))


async def _start_stdio(args: list[str]) -> _Stdio:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *["-m", "prism_memory", "mcp", "--embedder", "prism_memory:HashEmbedder", *args],
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=server_env(),
        cwd=str(REPO),
        limit=1 << 20,
    )
    client = _Stdio(process)
    client.initialized = await client.send(json.dumps(INITIALIZE).encode())
    assert "result" in client.initialized
    assert process.stdin is not None
    process.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    return client


def _prompt_get(request_id: int, arguments: dict[str, str]) -> bytes:
    params = {"name": "memory_context", "arguments": arguments}
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "prompts/get", "params": params}
    ).encode()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
async def test_stdio_answers_every_malformed_message_with_a_fixed_error(
    backend: str, database_args: list[str]
) -> None:
    """Items 4, 5 and 7 over stdio: before, these got no reply at all (or a logged value)."""
    client = await _start_stdio([*identity_args(ADA), *database_args])
    process = client.process
    try:
        for raw, code, request_id in MALFORMED:
            _check_reply(await client.send(raw), code, request_id)

        # a prompt's undeclared argument is refused before anything runs, and typed
        undeclared = await client.send(_prompt_get(20, {"query": "tea", "thread_id": SECRET}))
        _check_reply(undeclared, -32602, 20)
        assert undeclared["error"]["message"].startswith(
            "ValidationError: memory_context takes only"
        )
        # a NUL in the query: the library's typed refusal, not "Error rendering prompt"
        nul = await client.send(_prompt_get(21, {"query": f"tea\x00{SECRET}"}))
        _check_reply(nul, -32602, 21)
        assert nul["error"]["message"].startswith("ValidationError: ")
        unknown = await client.send(_prompt_get(22, {}).replace(b"memory_context", SECRET.encode()))
        _check_reply(unknown, -32602, 22)
        # an unknown method: the SDK put its name in the error's data
        method = {"jsonrpc": "2.0", "id": 23, "method": SECRET, "params": {"x": SECRET}}
        _check_reply(await client.send(json.dumps(method).encode()), -32601, 23)
        # spec methods with malformed params: the SDK's fixed answer, nothing of the request
        for params in (
            {"name": 5, "arguments": {"x": SECRET}},
            {"name": "recall", "arguments": SECRET},
        ):
            call = {"jsonrpc": "2.0", "id": 24, "method": "tools/call", "params": params}
            reply = await client.send(json.dumps(call).encode())
            assert reply["error"]["code"] == -32602
            assert SECRET not in json.dumps(reply)

        # the server is still serving
        listed = await client.send(b'{"jsonrpc":"2.0","id":30,"method":"tools/list"}')
        assert listed["id"] == 30
        assert "tools" in listed["result"]
    finally:
        assert process.stdin is not None
        assert process.stderr is not None
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), 30) == 0
        logged = (await process.stderr.read()).decode("utf-8", "replace")
    assert SECRET not in logged
    assert "input_value" not in logged
    assert "Traceback" not in logged


@pytest.mark.slow
def test_a_stdio_server_whose_stdout_closes_exits_with_one_line() -> None:
    """Item 9: it used to fail with "unhandled errors in a TaskGroup" (and a read of stdin that
    never ends kept it alive)."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "prism_memory",
            "mcp",
            "--embedder",
            "prism_memory:HashEmbedder",
            *identity_args(ADA),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(),
        cwd=str(REPO),
    )
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        process.stdin.flush()
        assert b'"result"' in process.stdout.readline()
        process.stdout.close()
        process.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n')
        process.stdin.flush()
        assert process.wait(timeout=30) == 0  # stdin is still open: it stops by itself
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    logged = process.stderr.read().decode("utf-8", "replace")
    process.stdin.close()
    process.stderr.close()
    assert "client closed stdout; stopping" in logged
    assert "TaskGroup" not in logged
    assert "Traceback" not in logged


@pytest.mark.parametrize("backend", BACKENDS)
async def test_http_answers_every_malformed_message_with_a_fixed_error(
    backend: str, backend_stores, caplog: pytest.LogCaptureFixture
) -> None:
    """Items 4, 5 and 7 over HTTP: before, the reply was -32602 with the request in it."""
    caplog.set_level(logging.DEBUG)
    headers = {
        "Authorization": "Bearer token-ada",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with (
        backend_stores() as stores,
        http_server(stores) as url,
        httpx2.AsyncClient(timeout=30) as client,
    ):
        for raw, code, request_id in MALFORMED:
            response = await client.post(url, content=raw, headers=headers)
            assert response.status_code in (400, 413)
            _check_reply(response.json(), code, request_id)
        method = {"jsonrpc": "2.0", "id": 23, "method": SECRET, "params": {"x": SECRET}}
        response = await client.post(url, json=method, headers=headers)
        _check_reply(response.json(), -32601, 23)

        async with http_session(url, "token-ada") as session:
            with pytest.raises(MCPError) as undeclared:
                await session.get_prompt("memory_context", {"query": "tea", "thread_id": SECRET})
            assert undeclared.value.code == -32602
            assert undeclared.value.message.startswith("ValidationError: memory_context takes only")
            with pytest.raises(MCPError) as nul:
                await session.get_prompt("memory_context", {"query": f"tea\x00{SECRET}"})
            assert nul.value.code == -32602
            assert nul.value.message.startswith("ValidationError: ")
            for error in (undeclared.value, nul.value):
                assert SECRET not in error.message
                assert error.data is None
    client_side = ("mcp.client", "httpx2", "httpcore2")  # the test's own client logs what it sends
    logged = "\n".join(
        record.getMessage() + (record.exc_text or "")
        for record in caplog.records
        if not record.name.startswith(client_side)
    )
    assert SECRET not in logged
    assert "input_value" not in logged


async def test_a_failing_resolver_refuses_and_logs_its_type_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Item 9: a resolver that raises answered 401 and logged nothing."""

    def resolver(header: str | None) -> McpIdentity | None:
        raise RuntimeError(f"the token store is down while checking {header}")

    server = PrismMcpServer(embedder=HashEmbedder())
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {SECRET}"}
    with caplog.at_level(logging.WARNING, logger="prism_memory.mcp"):
        async with (
            serving(http_app(server, resolver)) as url,
            httpx2.AsyncClient(timeout=10) as client,
        ):
            response = await client.post(url, json=body, headers=headers)
    assert response.status_code == 401
    [record] = [r for r in caplog.records if r.name == "prism_memory.mcp"]
    assert record.levelno == logging.WARNING
    assert "RuntimeError" in record.getMessage()
    assert SECRET not in record.getMessage()
    assert record.exc_info is None


@pytest.mark.slow
async def test_the_cli_says_whose_working_memory_it_serves() -> None:
    """Item 8 from the command line: ``--working-scope thread`` keeps one document per
    conversation, and the instructions the client receives say so (the default: the user's)."""
    for option, expected in (
        ([], "shared by all their conversations"),
        (["--working-scope", "thread"], "this conversation's"),
    ):
        client = await _start_stdio([*identity_args(ADA), *option])
        process = client.process
        assert process.stdin is not None
        process.stdin.close()
        await asyncio.wait_for(process.wait(), 30)
        assert expected in client.initialized["result"]["instructions"]


def test_the_largest_call_the_schemas_allow_fits_the_message_cap() -> None:
    """``remember`` of 100 texts of 16,000 characters, escaped as surrogate pairs (12 bytes each),
    is not refused for its size; one byte past the cap is."""
    from prism_memory.integrations.mcp._wire import MAX_MESSAGE_BYTES, refusal

    texts = ["\U0001f41d" * 16_000] * 100
    params = {"name": "remember", "arguments": {"texts": texts}}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    raw = json.dumps(call).encode()  # ensure_ascii: every character as \\ud83d\\udc1d
    assert len(raw) > 19_000_000
    assert refusal(raw) is None
    padded = raw[:-1] + b" " * (MAX_MESSAGE_BYTES - len(raw) + 1) + b"}"
    reply = refusal(padded)
    assert reply is not None
    assert reply["error"]["code"] == -32600
