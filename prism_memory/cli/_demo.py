"""``prism-memory demo``: remember → recall → working memory → the prompt block, end to end."""

from __future__ import annotations

import asyncio
import inspect
import sys
from typing import Annotated, Any

import typer

from .. import HashEmbedder, Memory, create_memory

_MEMORIES = [
    {"id": "m1", "text": "Ada prefers concise answers with code first", "role": "user"},
    {"id": "m2", "text": "Ada is migrating the billing service to PostgreSQL", "role": "user"},
    {"id": "m3", "text": "Ada's cat is called Turing", "role": "user"},
    {"id": "m4", "text": "Ada asked for PostgreSQL index advice for pgvector", "role": "user"},
]


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

    from ..postgres import create_postgres_memory_stores

    server: Any = None
    if url is None:
        from ..postgres.embedded import start_embedded_postgres

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
