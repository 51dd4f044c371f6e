"""The memory server over Streamable HTTP, behind the host's authentication.

Every HTTP request passes the host's :data:`~prism_memory.integrations.mcp.IdentityResolver`
first: a request it maps to no identity gets 401 before the MCP app sees it, and the identity it
maps to is the only one that request's tools use. Sessions are stateless (each request stands
alone), so a session id cannot carry one user's identity into another user's request.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp_types import INVALID_REQUEST
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._identity import IdentityResolver, resolve_identity
from ._server import IDENTITY_STATE_KEY, PrismMcpServer
from ._wire import MAX_MESSAGE_BYTES, TOO_LARGE, encode, error_reply, refusal

__all__ = ["http_app", "serve_http"]

logger = logging.getLogger("prism_memory.mcp")

_REFUSED = json.dumps(
    {"error": "unauthorized", "error_description": "a valid bearer token is required"}
).encode()


class _Authenticated:
    """ASGI middleware: resolve the identity of each HTTP request, refuse it without one."""

    def __init__(self, app: ASGIApp, resolver: IdentityResolver) -> None:
        self.app = app
        self.resolver = resolver

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan (and websockets, which the app does not serve)
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        try:
            identity = await resolve_identity(self.resolver, header)
        except Exception as exc:  # noqa: BLE001 - a failing resolver refuses, it never lets through
            # its type only: the message may hold the credential it was handed
            logger.warning(
                "auth resolver raised %s: 401",
                type(exc).__name__,
            )
            identity = None
        if identity is None:
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="prism-memory"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": _REFUSED})
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        state[IDENTITY_STATE_KEY] = identity
        await self.app(scope, receive, send)


async def _send_json(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _refuse_oversized(receive: Receive, send: Send, message: Message, size: int) -> None:
    """413 for a body over the cap. The rest of a body up to 4x the cap is read and dropped
    first, so the client (still sending) gets the answer rather than a reset connection."""
    chunks_left = message.get("more_body", False)
    while chunks_left and size <= 4 * MAX_MESSAGE_BYTES:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        chunks_left = message.get("more_body", False)
    await _send_json(send, 413, encode(error_reply(INVALID_REQUEST, TOO_LARGE)))


class _CheckedMessages:
    """ASGI middleware: a POSTed JSON-RPC message passes :func:`~._wire.refusal` before the SDK
    parses it; a refused one gets 400 and one fixed JSON-RPC error that repeats nothing of it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_MESSAGE_BYTES:
                await _refuse_oversized(receive, send, message, size)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        reply = refusal(body)
        if reply is not None:
            await _send_json(send, 400, encode(reply))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def http_app(
    server: PrismMcpServer,
    resolver: IdentityResolver,
    *,
    path: str = "/mcp",
    host: str = "127.0.0.1",
) -> ASGIApp:
    """The ASGI app serving ``server`` over Streamable HTTP at ``path``, every request
    authenticated by ``resolver`` (unauthenticated ones get 401). Run it with any ASGI server
    (its lifespan must run: uvicorn does); ``host`` is where it listens, for the SDK's DNS-rebinding
    protection on loopback."""
    app = server.streamable_http_app(
        streamable_http_path=path,
        stateless_http=True,
        json_response=True,
        host=host,
        max_request_body_size=MAX_MESSAGE_BYTES,
    )
    return _Authenticated(_CheckedMessages(app), resolver)


async def serve_http(
    server: PrismMcpServer,
    resolver: IdentityResolver,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
) -> None:
    """Serve :func:`http_app` with uvicorn until cancelled (or SIGINT/SIGTERM)."""
    import uvicorn

    config = uvicorn.Config(
        http_app(server, resolver, path=path, host=host),
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
    )
    await uvicorn.Server(config).serve()
