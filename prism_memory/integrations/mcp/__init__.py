"""prism_memory as an MCP server (extra ``mcp``; see docs/integrations.md, "MCP server").

* :class:`PrismMcpServer` -- an ``MCPServer`` of the official SDK whose tools remember, recall,
  forget, revoke and restore consent, correct, read and update working memory and export, and
  whose ``memory_context`` prompt gives the chronological context block;
* :class:`McpIdentity` -- the one scope it serves: the host's, never chosen by a tool argument;
* :func:`http_app` / :func:`serve_http` -- Streamable HTTP behind an :data:`IdentityResolver`
  (:func:`token_resolver`, :func:`token_file_resolver`, or the host's own callable).

``prism-memory mcp`` runs it from the command line over stdio or HTTP.
"""

from __future__ import annotations

from ._http import http_app, serve_http
from ._identity import (
    IdentityResolver,
    McpIdentity,
    load_identity_resolver,
    token_file_resolver,
    token_resolver,
)
from ._server import PrismMcpServer

__all__ = [
    "IdentityResolver",
    "McpIdentity",
    "PrismMcpServer",
    "http_app",
    "load_identity_resolver",
    "serve_http",
    "token_file_resolver",
    "token_resolver",
]
