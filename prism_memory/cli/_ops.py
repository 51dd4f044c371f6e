"""The operator's service commands: ``doctor`` checks a database, ``stats`` counts, ``worker``
runs the all-scopes indexing queue."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .._defaults import DEFAULT_SCHEMA, DEFAULT_TABLE
from ._embedder import load_embedder
from ._options import EmbedderSpec, Schema, TableName, Url, VectorEmbedder
from ._output import console, print_table


def _generations(url: str, schema: str, table: str) -> tuple[list[str], int]:
    """:func:`generation_report`, or nothing for a store without generations (before 0011)."""
    from ..errors import PrismMemoryError
    from ._models import generation_report

    try:
        return asyncio.run(generation_report(url, schema, table))
    except PrismMemoryError:  # no registry (a schema before revision 0011): nothing to show
        return [], 0


def doctor(
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    embedder: EmbedderSpec = None,
    width: Annotated[
        int | None, typer.Option("--width", help="the embedder's width, instead of --embedder")
    ] = None,
    max_pending_age: Annotated[
        float, typer.Option("--max-pending-age", help="seconds a pending row may wait")
    ] = 600.0,
) -> None:
    """Check the extension, version table, pinned width vs the embedder, indexes and backlog.

    Exits 1 on a problem; a warning (a pgvector before 0.8.4, whose HNSW indexes concurrent
    INSERT and VACUUM can corrupt) is printed and does not change the exit status."""
    from ..postgres.ops import diagnose

    if embedder is not None:
        width = load_embedder(embedder, None).dimensions
    found = asyncio.run(
        diagnose(
            url,
            schema=schema,
            table=table,
            embedder_width=width,
            max_pending_age_seconds=max_pending_age,
        )
    )
    problems = list(found.problems)
    if "embedding" in found.facts:  # the table exists: its generations, if it has any
        lines, missing = _generations(url, schema, table)
        found.facts["generations"] = "; ".join(lines) or "(none)"
        if missing:
            problems.append(
                f"{missing} indexed entries have no vector of the active model and are not "
                "recalled (a forced switch): run `prism-memory models backfill`"
            )
    for key, value in found.facts.items():
        console.print(f"{key}: {value}", highlight=False)
    for warning in found.warnings:
        print(f"warning: {warning}")
    for problem in problems:
        print(f"problem: {problem}")
    if problems:
        raise typer.Exit(1)
    console.print("ok: no problems found" + (" (see the warnings)" if found.warnings else ""))


def stats(
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    top: Annotated[int, typer.Option("--top", help="how many tenants to list")] = 10,
) -> None:
    """Entries per status, the biggest tenants, working documents, size on disk."""
    from ..postgres.ops import schema_stats

    found = asyncio.run(schema_stats(url, schema=schema, table=table, top=top))
    summary = Table(title=f"{schema}.{table}")
    summary.add_column("what")
    summary.add_column("count", justify="right")
    for status in ("pending", "indexed", "failed"):
        summary.add_row(f"entries {status}", str(found.by_status.get(status, 0)))
    summary.add_row("tenants", str(found.tenant_count))
    summary.add_row("working documents", str(found.working_documents))
    summary.add_row("size on disk (bytes)", str(found.total_bytes))
    for line in _generations(url, schema, table)[0]:
        model, _, counts = line.rpartition(": ")
        summary.add_row(f"generation {model}", counts)
    print_table(summary)
    tenants = Table(title=f"top {top} tenants")
    for column in ("tenant", "entries", "pending", "failed"):
        tenants.add_column(column, justify="left" if column == "tenant" else "right")
    for row in found.tenants:
        tenants.add_row(*(str(value) for value in row))
    print_table(tenants)


def worker(
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    embedder: VectorEmbedder = "",
    batch_size: Annotated[int, typer.Option("--batch-size", help="texts per embedder call")] = 32,
    poll_seconds: Annotated[
        float | None,
        typer.Option(
            "--poll-seconds",
            help="fallback poll when no NOTIFY arrives (default 10; 1 when it cannot LISTEN)",
        ),
    ] = None,
    pooling: Annotated[
        str | None,
        typer.Option(
            "--pooling",
            help="'transaction' behind a transaction-mode pooler such as PgBouncer (default: "
            "the URL's prism_pooling, else $PRISM_MEMORY_POOLING, else 'session')",
        ),
    ] = None,
    listen_url: Annotated[
        str | None,
        typer.Option(
            "--listen-url",
            envvar="PRISM_MEMORY_LISTEN_URL",
            help="behind a transaction pooler: a URL that bypasses it, for LISTEN (else it polls)",
        ),
    ] = None,
    lease_seconds: Annotated[
        float, typer.Option("--lease-seconds", help="how long a claimed row stays leased")
    ] = 60.0,
    status_file: Annotated[
        Path | None, typer.Option("--status-file", help="rewrite the counts as JSON after a batch")
    ] = None,
    next_embedder: Annotated[
        str | None,
        typer.Option(
            "--next-embedder",
            help="during a model change: module:factory of the new model's Embedder, whose "
            "vectors it stores too (docs/operations.md, 'Switching models')",
        ),
    ] = None,
) -> None:
    """Run the all-scopes indexing queue as a service until SIGTERM or SIGINT.

    --embedder must be the model the table's vectors hold (the worker checks before it starts);
    --next-embedder, during a model change, the shadow generation's.
    """
    from ..errors import DimensionMismatchError
    from ..indexing import IndexingPolicy
    from ..postgres import create_postgres_vector_store
    from ..postgres._engine import checked_pooling
    from ..postgres.worker import IndexingWorker

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    async def run() -> None:
        # first, so a SIGTERM that arrives while the worker connects still stops it gracefully
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        store = await create_postgres_vector_store(
            url,
            schema=schema,
            table=table,
            skip_migrations=True,
            pooling=checked_pooling(pooling),
        )
        try:
            chosen = load_embedder(embedder, store.dimension)
            if store.dimension is not None and chosen.dimensions != store.dimension:
                raise DimensionMismatchError(
                    f"the embedder is {chosen.dimensions} wide but {schema}.{table} is pinned to "
                    f"vector({store.dimension})"
                )
            poll = poll_seconds
            if poll is None and (listen_url is not None or store.pooling == "session"):
                poll = 10.0  # the fallback of a worker that listens
            service = IndexingWorker(
                store,
                chosen,
                batch_size=batch_size,
                poll_seconds=poll,
                policy=IndexingPolicy(lease_seconds=lease_seconds),
                status_file=status_file,
                listen_url=listen_url,
                next_embedder=None if next_embedder is None else load_embedder(next_embedder, None),
            )
            await service.run(stop)
        finally:
            await store.close()

    asyncio.run(run())
