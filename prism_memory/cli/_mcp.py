"""``prism-memory mcp``: the memory MCP server over stdio or Streamable HTTP."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal

import anyio
import typer

from .._defaults import DEFAULT_SCHEMA, DEFAULT_TABLE
from ._embedder import load_embedder
from ._options import URL_ENV, Dimension, Schema, TableName, VectorEmbedder

_IDENTITY_ENV = {
    "tenant": "PRISM_MEMORY_TENANT",
    "resource": "PRISM_MEMORY_RESOURCE",
    "thread": "PRISM_MEMORY_THREAD",
}


def mcp(
    embedder_spec: VectorEmbedder = "",
    transport: Annotated[
        str,
        typer.Option(
            "--transport", help="stdio (one identity, from --tenant/--resource/--thread) or http"
        ),
    ] = "stdio",
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", envvar=_IDENTITY_ENV["tenant"], help="tenant_id (stdio)"),
    ] = None,
    resource: Annotated[
        str | None,
        typer.Option(
            "--resource", envvar=_IDENTITY_ENV["resource"], help="resource_id, the user (stdio)"
        ),
    ] = None,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread", envvar=_IDENTITY_ENV["thread"], help="thread_id, the conversation (stdio)"
        ),
    ] = None,
    working_scope: Annotated[
        str,
        typer.Option(
            "--working-scope",
            help="resource: one working-memory document per user, shared by their threads; "
            "thread: one per conversation",
        ),
    ] = "resource",
    auth_tokens: Annotated[
        str | None,
        typer.Option(
            "--auth-tokens",
            help="http: JSON file mapping bearer tokens (or sha256:<hex> of them) to identities",
        ),
    ] = None,
    auth: Annotated[
        str | None,
        typer.Option(
            "--auth",
            help="http: module:function mapping the Authorization header to an McpIdentity or None",
        ),
    ] = None,
    host: Annotated[
        str, typer.Option("--host", help="http: the address to listen on")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="http: the port to listen on")] = 8000,
    path: Annotated[str, typer.Option("--path", help="http: the MCP endpoint's path")] = "/mcp",
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            envvar=URL_ENV,
            help=f"postgresql[+asyncpg]://… (or ${URL_ENV}); without it memory lives in this process",
        ),
    ] = None,
    pooling: Annotated[
        str | None,
        typer.Option("--pooling", help="session (default) or transaction (behind PgBouncer)"),
    ] = None,
    direct_url: Annotated[
        str | None,
        typer.Option("--direct-url", help="a URL bypassing the pooler, for the migrations"),
    ] = None,
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    dimension: Dimension = None,
) -> None:
    """Serve memory to MCP clients: tools to remember, recall, forget, revoke/restore consent,
    correct, read/update working memory and export, and a `memory_context` prompt.

    The user and conversation are the host's, never a tool argument's: over stdio --tenant,
    --resource and --thread; over http each request's bearer token, through --auth-tokens or
    --auth (requests without a valid one get 401).
    """
    if transport not in ("stdio", "http"):
        raise typer.BadParameter("must be stdio or http", param_hint="--transport")
    if working_scope not in ("resource", "thread"):
        raise typer.BadParameter("must be resource or thread", param_hint="--working-scope")
    if pooling not in (None, "session", "transaction"):
        raise typer.BadParameter("must be session or transaction", param_hint="--pooling")
    named = {"tenant": tenant, "resource": resource, "thread": thread}
    if transport == "stdio":
        missing = [f"--{k}" for k, v in named.items() if not v]
        if missing:
            raise typer.BadParameter(
                f"stdio serves one identity: pass {', '.join(missing)} (or "
                f"{', '.join(_IDENTITY_ENV[m[2:]] for m in missing)})",
                param_hint="--tenant/--resource/--thread",
            )
        if auth_tokens or auth:
            raise typer.BadParameter("only over http", param_hint="--auth/--auth-tokens")
    else:
        if (auth_tokens is None) == (auth is None):
            raise typer.BadParameter(
                "http needs exactly one of --auth-tokens FILE or --auth module:function",
                param_hint="--auth/--auth-tokens",
            )
        if any(named.values()):
            raise typer.BadParameter(
                "over http the identity comes from each request's token, not from options",
                param_hint="--tenant/--resource/--thread",
            )
    settings: dict[str, Any] = {
        "embedder_spec": embedder_spec,
        "transport": transport,
        "identity": named,
        "working_scope": working_scope,
        "auth_tokens": auth_tokens,
        "auth": auth,
        "http": (host, port, path),
        "url": url,
        "pooling": pooling,
        "direct_url": direct_url,
        "schema": schema,
        "table": table,
        "dimension": dimension,
    }
    anyio.run(_serve, settings)


async def _serve(settings: dict[str, Any]) -> None:
    try:
        from ..integrations.mcp import (
            McpIdentity,
            PrismMcpServer,
            load_identity_resolver,
            serve_http,
            token_file_resolver,
        )
    except ImportError as exc:
        from ..errors import ConfigurationError

        raise ConfigurationError(
            "the mcp command needs the MCP SDK: pip install 'prism-memory[mcp]'"
        ) from exc
    if settings["transport"] == "http":
        resolver = (
            token_file_resolver(settings["auth_tokens"])
            if settings["auth_tokens"] is not None
            else load_identity_resolver(settings["auth"])
        )
    stores: Any = None
    if settings["url"]:
        from ..errors import DimensionMismatchError
        from ..postgres import create_postgres_memory_stores

        pooling: Literal["session", "transaction"] | None = settings["pooling"]
        try:
            stores = await create_postgres_memory_stores(
                settings["url"],
                schema=settings["schema"],
                table=settings["table"],
                dimension=settings["dimension"],
                pooling=pooling,
                direct_url=settings["direct_url"],
            )
        except DimensionMismatchError as exc:
            if settings["dimension"] is None:
                raise
            # the table exists, unpinned or pinned to another width (``doctor`` shows which)
            raise DimensionMismatchError(
                f"--dimension pins a new table only, and {settings['schema']}.{settings['table']} "
                "exists with another pinning: drop --dimension to serve it at its own width"
            ) from exc
    else:
        print(
            f"prism-memory mcp: no --url (or {URL_ENV}): memory lives in this process only",
            file=sys.stderr,
        )
    try:
        width = stores.vector_store.dimension if stores is not None else settings["dimension"]
        embedder = load_embedder(settings["embedder_spec"], width)
        identity = None
        if settings["transport"] == "stdio":
            who = settings["identity"]
            identity = McpIdentity(who["tenant"], who["resource"], who["thread"])
        server = PrismMcpServer(
            embedder=embedder,
            vector_store=None if stores is None else stores.vector_store,
            working_store=None if stores is None else stores.working_store,
            identity=identity,
            memory_options={"working_scope": settings["working_scope"]},
        )
        if settings["transport"] == "stdio":
            await server.run_stdio_async()
        else:
            host, port, path = settings["http"]
            await serve_http(server, resolver, host=host, port=port, path=path)
    finally:
        if stores is not None:
            await stores.close()
