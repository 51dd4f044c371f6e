"""``prism-memory`` (also ``python -m prism_memory``): the demo and the operator's commands.

``demo`` runs remember → recall → working memory → the prompt block (in memory, or ``--postgres``);
``worker`` runs the all-scopes indexing queue as a service; ``migrate`` runs the Alembic revisions
with explicit targets; ``doctor`` checks a database; ``stats`` counts; ``export`` and ``rebuild``
loop over cursors with a progress bar and resume after Ctrl-C; ``import`` bulk-imports a file (or a
LangGraph store) and resumes after a kill. Errors print one line (``--verbose``
adds the traceback) and exit non-zero.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import HashEmbedder, Memory, create_memory
from .embedding import Embedder, embedder_model

__all__ = ["app", "load_embedder", "main", "run_demo"]

_MEMORIES = [
    {"id": "m1", "text": "Ada prefers concise answers with code first", "role": "user"},
    {"id": "m2", "text": "Ada is migrating the billing service to PostgreSQL", "role": "user"},
    {"id": "m3", "text": "Ada's cat is called Turing", "role": "user"},
    {"id": "m4", "text": "Ada asked for PostgreSQL index advice for pgvector", "role": "user"},
]

URL_ENV = "PRISM_MEMORY_DATABASE_URL"


async def _demo(memory: Memory, out: Any) -> None:
    def say(text: str = "") -> None:
        print(text, file=out)

    say("== working memory ==")
    record = await memory.update_working({"name": "Ada", "preferences": {"format": "concise"}})
    say(f"version {record.version}: {dict(record.data)}")

    say("\n== remember (deferred indexing) ==")
    result = await memory.remember(_MEMORIES)
    say(f"accepted {list(result.accepted)}; pending {list(result.pending)}")
    report = await result.done
    say(f"done: indexed {list(report.indexed)}; failed {dict(report.failed)}")

    query = "PostgreSQL advice for Ada"
    say(f"\n== recall {query!r} (score order, for inspection) ==")
    recalled = await memory.recall(query, top_k=3, explain=True)
    for hit in recalled.hits:
        say(
            f"  {hit.score:.3f}  (cosine {hit.semantic:.3f}, lexical {hit.lexical:.2f})  "
            f"{hit.id}: {hit.text}"
        )

    say("\n== context block (chronological, what a prompt gets) ==")
    say(await memory.context_provider(top_k=3).render(query))


async def run_demo(*, postgres: bool = False, url: str | None = None, out: Any = None) -> None:
    """Run the demo on the in-memory store, or on PostgreSQL (embedded unless ``url`` is given)."""
    out = out if out is not None else sys.stdout
    embedder = HashEmbedder(dimensions=64)
    options: dict[str, Any] = {
        "tenant_id": "demo",
        "resource_id": "user-ada",
        "thread_id": "thread-1",
        "embedder": embedder,
        "working_memory_template": "Name: {{name}}; Format: {{preferences.format}}",
    }
    if not postgres and url is None:
        print("backend: in-memory reference store", file=out)
        async with create_memory(**options) as memory:
            await _demo(memory, out)
        return

    from .postgres import create_postgres_memory_stores

    server: Any = None
    if url is None:
        from .postgres.embedded import start_embedded_postgres

        server = start_embedded_postgres()
        if inspect.isawaitable(server):
            server = await server
        url = server.url
        print("backend: embedded PostgreSQL + pgvector", file=out)
    else:
        print("backend: PostgreSQL at the given URL", file=out)
    try:
        stores = await create_postgres_memory_stores(url, schema="prism_demo", dimension=64)
        try:
            async with create_memory(
                **options, vector_store=stores.vector_store, working_store=stores.working_store
            ) as memory:
                await memory.forget()  # start each demo run from an empty thread
                await _demo(memory, out)
        finally:
            await stores.close()
    finally:
        if server is not None:
            closed = server.close()
            if inspect.isawaitable(closed):
                await closed


def load_embedder(spec: str, width: int | None) -> Embedder:
    """The embedder an import path names: ``module:attribute``.

    The attribute is an :class:`~prism_memory.Embedder` instance, or a factory called with no
    arguments -- or with ``dimensions=width`` when it accepts that keyword and the table's width is
    pinned (so ``prism_memory:HashEmbedder`` fits any table). There is no default: the commands
    that write vectors (``worker``, ``rebuild``) use the model the operator names, and it must
    have a ``model`` identity (:func:`~prism_memory.embedding.embedder_model`), recorded with
    every vector.
    """
    from .errors import ConfigurationError

    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"--embedder must look like module:factory; got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigurationError(
                f"--embedder: no module named {module_name!r}; it must be importable where "
                "prism-memory runs (installed in this environment, or its folder on PYTHONPATH)"
            ) from exc
        raise ConfigurationError(f"--embedder: importing {module_name!r} failed: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigurationError(f"{module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if (callable(target) and not hasattr(target, "embed")) or isinstance(target, type):
        try:
            accepts = "dimensions" in inspect.signature(target).parameters
        except (TypeError, ValueError):
            accepts = False
        try:
            target = target(dimensions=width) if accepts and width is not None else target()
        except Exception as exc:
            raise ConfigurationError(f"--embedder {spec!r} failed to build: {exc}") from exc
    if not hasattr(target, "embed") or not hasattr(target, "dimensions"):
        raise ConfigurationError(f"--embedder {spec!r} did not give an Embedder")
    if embedder_model(target) is None:
        raise ConfigurationError(
            f"--embedder {spec!r} has no `model` identity; give it one (a short string naming "
            "the model and its version): it is recorded with every vector, and checked"
        )
    embedder: Embedder = target
    return embedder


# ---- the command line --------------------------------------------------------------------------

app = typer.Typer(
    name="prism-memory",
    help="prism_memory's demo and operator commands (`prism-memory COMMAND --help` for each).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
migrate_app = typer.Typer(
    help="Run prism_memory's Alembic revisions (explicit targets; downgrades confirm).",
    no_args_is_help=True,
)
app.add_typer(migrate_app, name="migrate")

_console = Console()
T = TypeVar("T")
_errors = Console(stderr=True)


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


@app.callback()
def _root(
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="show tracebacks of errors, and Alembic's log"),
    ] = False,
) -> None:
    """prism_memory's demo and operator commands."""
    # Alembic logs each plugin and revision it loads at INFO: one command, one line of output
    logging.getLogger("alembic").setLevel(logging.NOTSET if verbose else logging.WARNING)


@app.command()
def demo(
    postgres: Annotated[
        bool, typer.Option("--postgres", help="use an embedded PostgreSQL")
    ] = False,
    url: Annotated[
        str | None, typer.Option("--url", help="use this PostgreSQL instead (postgresql://…)")
    ] = None,
) -> None:
    """Remember, recall and working memory, end to end."""
    asyncio.run(run_demo(postgres=postgres, url=url))


# ---- migrate -----------------------------------------------------------------------------------


@migrate_app.command("upgrade")
def migrate_upgrade(
    target: Annotated[str, typer.Argument(help="`head`, or a prism_memory revision id")],
    url: Url = "",
    schema: Schema = "prism_memory",
    table: TableName = "semantic_memory",
    dimension: Dimension = None,
) -> None:
    """Upgrade the schema to TARGET and say what changed."""
    from .postgres import migrate

    async def run() -> tuple[str | None, str | None]:
        before = await migrate.current_revision(url, schema=schema, table=table)
        await migrate.upgrade(url, schema=schema, table=table, dimension=dimension, revision=target)
        return before, await migrate.current_revision(url, schema=schema, table=table)

    before, after = asyncio.run(run())
    if before == after:
        _console.print(f"{schema}.{table} is already at {after}; nothing to do")
    else:
        _console.print(f"upgraded {schema}.{table}: {before or '(empty)'} -> {after}")


@migrate_app.command("downgrade")
def migrate_downgrade(
    url: Url = "",
    target: Annotated[
        str | None,
        typer.Argument(help="a prism_memory revision id, or `base` to drop every table"),
    ] = None,
    schema: Schema = "prism_memory",
    table: TableName = "semantic_memory",
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
) -> None:
    """Downgrade the schema to TARGET (required; asks first unless --yes)."""
    from .errors import ConfigurationError
    from .postgres import migrate

    if target is None:
        raise ConfigurationError(
            "downgrade needs an explicit target: a revision id, or `base` to drop every "
            "prism_memory table (see `prism-memory migrate current`)"
        )
    before = asyncio.run(migrate.current_revision(url, schema=schema, table=table))
    if before is None:
        raise ConfigurationError(f"{schema}.{table} has no prism_memory revision to downgrade")
    warning = (
        "drops every prism_memory table and its data"
        if target == "base"
        else "runs the downgrade steps, which may drop columns, indexes or tables"
    )
    if not yes:
        typer.confirm(
            f"Downgrade {schema}.{table} from {before} to {target}? This {warning}.", abort=True
        )
    asyncio.run(migrate.downgrade(url, schema=schema, table=table, revision=target))
    after = asyncio.run(migrate.current_revision(url, schema=schema, table=table))
    _console.print(f"downgraded {schema}.{table}: {before} -> {after or '(empty)'}")


@migrate_app.command("current")
def migrate_current(
    url: Url = "", schema: Schema = "prism_memory", table: TableName = "semantic_memory"
) -> None:
    """Print the revision the schema is at (empty when there is none)."""
    from .postgres import migrate

    print(asyncio.run(migrate.current_revision(url, schema=schema, table=table)) or "")


@migrate_app.command("heads")
def migrate_heads() -> None:
    """Print the head revision of the installed prism_memory."""
    from .postgres import migrate

    print(migrate.head_revision())


@migrate_app.command("sql")
def migrate_sql(
    schema: Schema = "prism_memory",
    table: TableName = "semantic_memory",
    dimension: Dimension = None,
) -> None:
    """Print the DDL from an empty database to head (offline; connects nowhere)."""
    from .postgres import migrate

    print(migrate.build_ddl(schema=schema, table=table, dimension=dimension))


@migrate_app.command("version-location")
def migrate_version_location() -> None:
    """Print the `version_locations` entry for a host's alembic.ini (a package resource)."""
    from .postgres import migrate

    print(migrate.VERSION_LOCATION)


@migrate_app.command("ini-path")
def migrate_ini_path() -> None:
    """Print the path of the alembic.ini for prism_memory's own history."""
    from .postgres import migrate

    print(migrate.ini_path())


@migrate_app.command("script-location")
def migrate_script_location() -> None:
    """Print the path of prism_memory's Alembic script directory."""
    from .postgres import migrate

    print(migrate.migrations_dir())


# ---- doctor and stats --------------------------------------------------------------------------


@app.command()
def doctor(
    url: Url = "",
    schema: Schema = "prism_memory",
    table: TableName = "semantic_memory",
    embedder: EmbedderSpec = None,
    width: Annotated[
        int | None, typer.Option("--width", help="the embedder's width, instead of --embedder")
    ] = None,
    max_pending_age: Annotated[
        float, typer.Option("--max-pending-age", help="seconds a pending row may wait")
    ] = 600.0,
) -> None:
    """Check the extension, version table, pinned width vs the embedder, indexes and backlog."""
    from .postgres.ops import diagnose

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
    for key, value in found.facts.items():
        _console.print(f"{key}: {value}", highlight=False)
    for problem in found.problems:
        print(f"problem: {problem}")
    if found.problems:
        raise typer.Exit(1)
    _console.print("ok: no problems found")


@app.command()
def stats(
    url: Url = "",
    schema: Schema = "prism_memory",
    table: TableName = "semantic_memory",
    top: Annotated[int, typer.Option("--top", help="how many tenants to list")] = 10,
) -> None:
    """Entries per status, the biggest tenants, working documents, size on disk."""
    from .postgres.ops import schema_stats

    found = asyncio.run(schema_stats(url, schema=schema, table=table, top=top))
    summary = Table(title=f"{schema}.{table}")
    summary.add_column("what")
    summary.add_column("count", justify="right")
    for status in ("pending", "indexed", "failed"):
        summary.add_row(f"entries {status}", str(found.by_status.get(status, 0)))
    summary.add_row("tenants", str(found.tenant_count))
    summary.add_row("working documents", str(found.working_documents))
    summary.add_row("size on disk (bytes)", str(found.total_bytes))
    _console.print(summary)
    tenants = Table(title=f"top {top} tenants")
    for column in ("tenant", "entries", "pending", "failed"):
        tenants.add_column(column, justify="left" if column == "tenant" else "right")
    for row in found.tenants:
        tenants.add_row(*(str(value) for value in row))
    _console.print(tenants)


# ---- export and rebuild: cursor loops that resume (import, below, resumes too) ---------------


def _read_state(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return state


def _write_state(path: Path, state: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(state), encoding="utf-8")
    temporary.replace(path)


def _resumable(run: Coroutine[Any, Any, T], state: Path) -> T:
    """Run a resumable command to its end, then remove its ``state`` file; on Ctrl-C the file
    stays for the next run, which resumes from it (exit status 130)."""
    try:
        result = asyncio.run(run)
    except KeyboardInterrupt:
        print(f"interrupted; run the same command again to resume ({state})", file=sys.stderr)
        raise typer.Exit(130) from None
    state.unlink(missing_ok=True)
    return result


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_errors,
    )


class _NoEmbedder:
    """The embedder of a command that embeds nothing (``export``): calling it is a bug."""

    def __init__(self, width: int | None) -> None:
        self.dimensions = width or 1

    async def embed(self, texts: Sequence[str]) -> Any:
        from .errors import ConfigurationError

        raise ConfigurationError("this command does not embed")


async def _thread_memory(
    url: str,
    schema: str,
    table: str,
    identity: dict[str, str],
    embedder_spec: str | None,
) -> tuple[Any, Memory, int]:
    from sqlalchemy import func, select

    from .postgres import create_postgres_memory_stores

    stores = await create_postgres_memory_stores(
        url, schema=schema, table=table, skip_migrations=True
    )
    try:
        width = stores.vector_store.dimension
        embedder = (
            _NoEmbedder(width) if embedder_spec is None else load_embedder(embedder_spec, width)
        )
        memory = create_memory(
            tenant_id=identity["tenant_id"],
            resource_id=identity["resource_id"],
            thread_id=identity["thread_id"],
            embedder=embedder,
            vector_store=stores.vector_store,
            working_store=stores.working_store,
        )
        entries = stores.vector_store.tables.entries
        async with stores.vector_store.engine.connect() as conn:
            total = (
                await conn.execute(
                    select(func.count()).where(
                        entries.c.tenant_id == identity["tenant_id"],
                        entries.c.resource_id == identity["resource_id"],
                        entries.c.thread_id == identity["thread_id"],
                    )
                )
            ).scalar_one()
    except BaseException:
        await stores.close()
        raise
    return stores, memory, int(total)


@app.command()
def export(
    tenant: Tenant,
    resource: Resource,
    thread: Thread,
    out: Annotated[Path, typer.Option("--out", help="JSON Lines file to write")],
    url: Url = "",
    schema: Schema = "prism_memory",
    table: TableName = "semantic_memory",
    page_size: Annotated[
        int | None, typer.Option("--page-size", help="entries per page (default 100, cap 200)")
    ] = None,
) -> None:
    """Export one identity's exportable entries to JSON Lines; resumes after Ctrl-C.

    The cursor and the file's length are saved in OUT.cursor after every page; running the same
    command again continues from there (a half-written page is cut off first).
    """
    state_path = out.with_name(out.name + ".cursor")
    state = _read_state(state_path) or {"cursor": None, "offset": 0, "exported": 0}
    identity = {"tenant_id": tenant, "resource_id": resource, "thread_id": thread}

    async def run() -> int:
        stores, memory, total = await _thread_memory(url, schema, table, identity, None)
        try:
            with out.open("ab") as handle, _progress() as progress:
                handle.truncate(state["offset"])
                handle.seek(state["offset"])
                task = progress.add_task("export", total=total, completed=state["exported"])
                while True:
                    page = await memory.export_memory(
                        identity=identity, cursor=state["cursor"], limit=page_size
                    )
                    for entry in page.entries:
                        handle.write(json.dumps(entry, default=str).encode() + b"\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                    state.update(
                        cursor=page.next_cursor,
                        offset=handle.tell(),
                        exported=state["exported"] + len(page.entries),
                    )
                    _write_state(state_path, state)
                    progress.update(task, completed=min(total, state["exported"]))
                    if page.next_cursor is None:
                        return int(state["exported"])
        finally:
            await memory.aclose()
            await stores.close()

    exported = _resumable(run(), state_path)
    _console.print(f"exported {exported} entries to {out}")


@app.command()
def rebuild(
    tenant: Tenant,
    resource: Resource,
    thread: Thread,
    url: Url = "",
    embedder: VectorEmbedder = "",
    state_file: Annotated[
        Path, typer.Option("--state", help="where the cursor is kept between runs")
    ] = Path("prism-memory-rebuild.json"),
    schema: Schema = "prism_memory",
    table: TableName = "semantic_memory",
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", help="entries per page (default 32, cap 128)")
    ] = None,
    switch_model: Annotated[
        bool,
        typer.Option(
            "--switch-model",
            help="re-embed with another model than the thread's vectors hold (a model switch)",
        ),
    ] = False,
) -> None:
    """Re-embed one thread's entries page by page; resumes after Ctrl-C from --state.

    --embedder must be the model the thread's vectors hold; with another one the command stops
    and writes nothing, unless --switch-model (docs/operations.md, "Switching models").
    """
    identity = {"tenant_id": tenant, "resource_id": resource, "thread_id": thread}
    saved = _read_state(state_file)
    if saved is not None and saved.get("identity") != identity:
        from .errors import ConfigurationError

        raise ConfigurationError(f"{state_file} belongs to another thread: {saved.get('identity')}")
    state = saved or {"identity": identity, "cursor": None, "rebuilt": 0, "done": 0}

    async def run() -> int:
        stores, memory, total = await _thread_memory(url, schema, table, identity, embedder)

        async def next_page() -> Any:
            return await memory.rebuild_index(
                cursor=state["cursor"], batch_size=batch_size, switch_model=switch_model
            )

        try:
            page = await next_page()  # a refused model stops here, before the progress bar
            with _progress() as progress:
                task = progress.add_task("rebuild", total=total, completed=state["done"])
                while True:
                    state.update(
                        cursor=page.next_cursor,
                        rebuilt=state["rebuilt"] + page.rebuilt,
                        done=min(total, state["done"] + max(page.rebuilt, 1)),
                    )
                    _write_state(state_file, state)
                    progress.update(task, completed=state["done"])
                    if page.next_cursor is None:
                        return int(state["rebuilt"])
                    page = await next_page()
        finally:
            await memory.aclose()
            await stores.close()

    rebuilt = _resumable(run(), state_file)
    _console.print(f"re-embedded {rebuilt} entries of {tenant}/{resource}/{thread}")


# ---- import: a stream of entries of many scopes, resumable ---------------------------------------


@app.command("import")
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
    from .importing._command import default_state_path, run_import

    state = state_file or default_state_path(source, fmt)
    factory = None if embedder is None else (lambda width: load_embedder(embedder, width))

    async def run() -> Any:
        with _progress() as progress:
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

    report = _resumable(run(), state)
    _console.print(
        f"imported {report.inserted} new entries ({report.pending} pending, "
        f"{report.embedded} embedded); {report.existing} already stored; "
        f"{report.skipped} skipped by the checkpoint"
    )


# ---- worker ------------------------------------------------------------------------------------


@app.command()
def worker(
    url: Url = "",
    schema: Schema = "prism_memory",
    table: TableName = "semantic_memory",
    embedder: VectorEmbedder = "",
    batch_size: Annotated[int, typer.Option("--batch-size", help="texts per embedder call")] = 32,
    poll_seconds: Annotated[
        float, typer.Option("--poll-seconds", help="fallback poll when no NOTIFY arrives")
    ] = 10.0,
    lease_seconds: Annotated[
        float, typer.Option("--lease-seconds", help="how long a claimed row stays leased")
    ] = 60.0,
    status_file: Annotated[
        Path | None, typer.Option("--status-file", help="rewrite the counts as JSON after a batch")
    ] = None,
) -> None:
    """Run the all-scopes indexing queue as a service until SIGTERM or SIGINT.

    --embedder must be the model the table's vectors hold (the worker checks before it starts).
    """
    from .errors import DimensionMismatchError
    from .indexing import IndexingPolicy
    from .postgres import create_postgres_vector_store
    from .postgres.worker import IndexingWorker

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
            url, schema=schema, table=table, skip_migrations=True
        )
        try:
            chosen = load_embedder(embedder, store.dimension)
            if store.dimension is not None and chosen.dimensions != store.dimension:
                raise DimensionMismatchError(
                    f"the embedder is {chosen.dimensions} wide but {schema}.{table} is pinned to "
                    f"vector({store.dimension})"
                )
            service = IndexingWorker(
                store,
                chosen,
                batch_size=batch_size,
                poll_seconds=poll_seconds,
                policy=IndexingPolicy(lease_seconds=lease_seconds),
                status_file=status_file,
            )
            await service.run(stop)
        finally:
            await store.close()

    asyncio.run(run())


# ---- entry point -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit code.

    Usage errors (an unknown option, a missing ``--url``) print typer's message and return 2; any
    other error prints one line on stderr (``--verbose`` adds the traceback) and returns 1.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in args or "-v" in args
    try:
        # standalone mode: typer reports its own usage errors (exit 2) and aborts (exit 1) and
        # ends with SystemExit; everything else a command raises comes through to the handler below
        app(args=args, prog_name="prism-memory", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the one place errors become an exit code
        if verbose:
            traceback.print_exc()
        message = str(exc).strip().splitlines()
        print(f"error: {message[0] if message else type(exc).__name__}", file=sys.stderr)
        return 1
    return 0
