"""The memory server over Streamable HTTP, behind the host's authentication.

Every HTTP request passes the host's :data:`~prism_memory.integrations.mcp.IdentityResolver`
first: a request it maps to no identity gets 401 before the MCP app sees it, and the identity it
maps to is the only one that request's tools use. Sessions are stateless (each request stands
alone), so a session id cannot carry one user's identity into another user's request.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ._identity import IdentityResolver, resolve_identity
from ._server import IDENTITY_STATE_KEY, PrismMcpServer

__all__ = ["http_app", "serve_http"]

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
        except Exception:  # noqa: BLE001 - a failing resolver refuses, it never lets through
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
        streamable_http_path=path, stateless_http=True, json_response=True, host=host
    )
    return _Authenticated(app, resolver)


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
