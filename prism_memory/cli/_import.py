"""``prism-memory import``: a stream of entries of many scopes, resumable after a kill."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .._defaults import DEFAULT_SCHEMA, DEFAULT_TABLE
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
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
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
    max_line_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-line-bytes",
            help="refuse a longer line (default 8 MiB for jsonl, 64 MiB for export and mem0)",
        ),
    ] = None,
) -> None:
    """Import entries of many tenants, resources and threads; resumes after a kill.

    The number of entries done is saved in the --state file after every batch, with the file's
    identity and the target (server, database, schema, table); running the same command again
    continues from there. A state file left by an import of another file or into another target
    is set aside: the import starts from the first entry. Importing a file twice changes nothing. See
    docs/importing.md for the formats and how each maps onto tenant / resource / thread.
    """
    from ..importing._command import default_state_path, run_import

    state = state_file or default_state_path(source, fmt)
    factory = None if embedder is None else (lambda width: load_embedder(embedder, width))

    async def run() -> Any:
        with progress_bar() as progress:
            task = progress.add_task("import", total=None)

            def advance(report: Any, total: int | None) -> None:
                # the total is the file's entries, estimated from the share of its bytes read
                # (exact once the reader reaches its end): the bar shows an ETA
                progress.update(task, completed=report.read, total=total)

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
                max_line_bytes=max_line_bytes,
                secrets=secret or (),
                on_progress=advance,
            )

    report = resumable(run(), state)
    if report.restarted:
        console.print(
            "the state file belonged to an import of another file or into another target: "
            "it was set aside and this import started from the first entry"
        )
    console.print(
        f"imported {report.inserted} new entries ({report.pending} pending, "
        f"{report.embedded} embedded); {report.existing} already stored; "
        f"{report.skipped} skipped by the checkpoint"
    )
