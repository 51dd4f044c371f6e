"""The options several commands share: the database, the table, the identity, the embedder."""

from __future__ import annotations

from typing import Annotated

import typer

URL_ENV = "PRISM_MEMORY_DATABASE_URL"


def _require_url(value: str) -> str:
    if not value:
        raise typer.BadParameter(
            f"no database URL: pass --url or set {URL_ENV}", param_hint="--url"
        )
    return value


# Not a required option: click's own "Missing option" would not name the environment variable.
Url = Annotated[
    str,
    typer.Option(
        "--url",
        envvar=URL_ENV,
        callback=_require_url,
        help=f"postgresql[+asyncpg]://… (or ${URL_ENV})",
    ),
]
Schema = Annotated[str, typer.Option("--schema", help="the schema prism_memory lives in")]
TableName = Annotated[str, typer.Option("--table", help="the entries table name")]
Dimension = Annotated[
    int | None, typer.Option("--dimension", help="pin embedding to vector(N) (new tables)")
]
EmbedderSpec = Annotated[
    str | None, typer.Option("--embedder", help="module:factory of your Embedder")
]


def _require_embedder(value: str | None) -> str:
    if not value:
        raise typer.BadParameter(
            "this command writes vectors: name the embedder that made the table's vectors "
            "(module:factory; there is no default)",
            param_hint="--embedder",
        )
    return value


# Not a required option: click's own "Missing option" would not say why there is no default.
VectorEmbedder = Annotated[
    str,
    typer.Option(
        "--embedder",
        callback=_require_embedder,
        help="module:factory of the Embedder whose model the table's vectors hold (required)",
    ),
]
Tenant = Annotated[str, typer.Option("--tenant", help="tenant_id")]
Resource = Annotated[str, typer.Option("--resource", help="resource_id (the user)")]
Thread = Annotated[str, typer.Option("--thread", help="thread_id")]
