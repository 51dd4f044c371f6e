"""``export`` and ``rebuild``: one thread's entries, page by page, resuming after Ctrl-C."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from .. import Memory, create_memory
from .._defaults import DEFAULT_SCHEMA, DEFAULT_TABLE
from ._embedder import load_embedder
from ._options import Resource, Schema, TableName, Tenant, Thread, Url, VectorEmbedder
from ._output import console, progress_bar, read_state, resumable, write_state


class _NoEmbedder:
    """The embedder of a command that embeds nothing (``export``): calling it is a bug."""

    def __init__(self, width: int | None) -> None:
        self.dimensions = width or 1

    async def embed(self, texts: Sequence[str]) -> Any:
        from ..errors import ConfigurationError

        raise ConfigurationError("this command does not embed")


async def _thread_memory(
    url: str,
    schema: str,
    table: str,
    identity: dict[str, str],
    embedder_spec: str | None,
) -> tuple[Any, Memory, int]:
    from ..models import MemoryIdentity
    from ..postgres import create_postgres_memory_stores

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
        scope = MemoryIdentity(
            tenant_id=identity["tenant_id"],
            resource_id=identity["resource_id"],
            thread_id=identity["thread_id"],
        )
        total = await stores.vector_store.count_by_thread(scope)
    except BaseException:
        await stores.close()
        raise
    return stores, memory, int(total)


def export(
    tenant: Tenant,
    resource: Resource,
    thread: Thread,
    out: Annotated[Path, typer.Option("--out", help="JSON Lines file to write")],
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    page_size: Annotated[
        int | None, typer.Option("--page-size", help="entries per page (default 100, cap 200)")
    ] = None,
) -> None:
    """Export one identity's exportable entries to JSON Lines; resumes after Ctrl-C.

    The cursor and the file's length are saved in OUT.cursor after every page; running the same
    command again continues from there (a half-written page is cut off first).
    """
    state_path = out.with_name(out.name + ".cursor")
    state = read_state(state_path) or {"cursor": None, "offset": 0, "exported": 0}
    identity = {"tenant_id": tenant, "resource_id": resource, "thread_id": thread}

    async def run() -> int:
        stores, memory, total = await _thread_memory(url, schema, table, identity, None)
        try:
            with out.open("ab") as handle, progress_bar() as progress:
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
                    write_state(state_path, state)
                    progress.update(task, completed=min(total, state["exported"]))
                    if page.next_cursor is None:
                        return int(state["exported"])
        finally:
            await memory.aclose()
            await stores.close()

    exported = resumable(run(), state_path)
    console.print(f"exported {exported} entries to {out}")


def rebuild(
    tenant: Tenant,
    resource: Resource,
    thread: Thread,
    url: Url = "",
    embedder: VectorEmbedder = "",
    state_file: Annotated[
        Path, typer.Option("--state", help="where the cursor is kept between runs")
    ] = Path("prism-memory-rebuild.json"),
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
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
    saved = read_state(state_file)
    if saved is not None and saved.get("identity") != identity:
        from ..errors import ConfigurationError

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
            with progress_bar() as progress:
                task = progress.add_task("rebuild", total=total, completed=state["done"])
                while True:
                    state.update(
                        cursor=page.next_cursor,
                        rebuilt=state["rebuilt"] + page.rebuilt,
                        done=min(total, state["done"] + max(page.rebuilt, 1)),
                    )
                    write_state(state_file, state)
                    progress.update(task, completed=state["done"])
                    if page.next_cursor is None:
                        return int(state["rebuilt"])
                    page = await next_page()
        finally:
            await memory.aclose()
            await stores.close()

    rebuilt = resumable(run(), state_file)
    console.print(f"re-embedded {rebuilt} entries of {tenant}/{resource}/{thread}")
