"""``prism-memory import``: a stream of entries of many scopes, resumable after a kill."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ._embedder import load_embedder
from ._options import Dimension, Schema, TableName, Url
from ._output import console, progress_bar, resumable


def import_command(
    source: Annotated[
        str, typer.Argument(help="the file to import (a postgresql:// URL for --format langgraph)")
    ],
    url: Url,
    fmt: Annotated[
        str,
        typer.Option("--format", help="jsonl (prism_memory's), export, mem0 or langgraph"),
    ] = "jsonl",
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="tenant_id of every entry (mem0, langgraph)")
    ] = None,
    schema: Schema = "prism_memory",
    table: TableName = "semantic_memory",
    dimension: Dimension = None,
    embedder: Annotated[
        str | None,
        typer.Option(
            "--embedder",
            help="module:factory of your Embedder for entries without a vector "
            "(default: none; they are stored pending for `prism-memory worker`)",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="the model that made the vectors the file holds")
    ] = None,
    consent_scope: Annotated[
        str | None,
        typer.Option("--consent-scope", help="mem0/langgraph: consent scope (thread, user, …)"),
    ] = None,
    resource_index: Annotated[
        int,
        typer.Option("--resource-index", help="langgraph: the namespace element naming the user"),
    ] = 0,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="entries per transaction (default 2000)")
    ] = 2000,
    state_file: Annotated[
        Path | None,
        typer.Option("--state", help="checkpoint file (default: SOURCE.import-state.json)"),
    ] = None,
    secret: Annotated[
        list[str] | None, typer.Option("--secret", help="a literal to redact (repeatable)")
    ] = None,
) -> None:
    """Import entries of many tenants, resources and threads; resumes after a kill.

    The number of entries done is saved in the --state file after every batch; running the same
    command again continues from there. Importing a file twice changes nothing. See
    docs/importing.md for the formats and how each maps onto tenant / resource / thread.
    """
    from ..importing._command import default_state_path, run_import

    state = state_file or default_state_path(source, fmt)
    factory = None if embedder is None else (lambda width: load_embedder(embedder, width))

    async def run() -> Any:
        with progress_bar() as progress:
            task = progress.add_task("import", total=None)

            def advance(report: Any) -> None:
                progress.update(task, completed=report.read)

            return await run_import(
                source=source,
                fmt=fmt,
                url=url,
                schema=schema,
                table=table,
                dimension=dimension,
                embedder=factory,
                model=model,
                tenant=tenant,
                consent_scope=consent_scope,
                resource_index=resource_index,
                batch_size=batch_size,
                state=state,
                secrets=secret or (),
                on_progress=advance,
            )

    report = resumable(run(), state)
    console.print(
        f"imported {report.inserted} new entries ({report.pending} pending, "
        f"{report.embedded} embedded); {report.existing} already stored; "
        f"{report.skipped} skipped by the checkpoint"
    )
