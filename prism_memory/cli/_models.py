"""``prism-memory models``: change the embedding model without downtime (docs/operations.md,
"Switching models"): start a shadow generation, backfill it, compare, switch, roll back, promote,
drop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .._clock import utcnow
from .._defaults import DEFAULT_SCHEMA, DEFAULT_TABLE
from ._embedder import load_embedder
from ._options import Schema, TableName, Url, VectorEmbedder
from ._output import console, progress_bar, resumable

if TYPE_CHECKING:
    from ..generations import GateReport
    from ..models import MemoryIdentity
    from ..postgres import PostgresVectorStore
    from ..stores.base import Generation, GenerationProgress, VectorGenerations

models_app = typer.Typer(
    help="Change the embedding model without downtime: start, backfill, compare, switch, "
    "rollback, promote, drop (docs/operations.md, 'Switching models').",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _require_next(value: str | None) -> str:
    if not value:
        raise typer.BadParameter(
            "name the new model's embedder (module:factory)", param_hint="--next-embedder"
        )
    return value


NextEmbedder = Annotated[
    str,
    typer.Option(
        "--next-embedder",
        callback=_require_next,
        help="module:factory of the Embedder of the new model (required)",
    ),
]
OldEmbedder = Annotated[
    str | None,
    typer.Option(
        "--embedder", help="module:factory of the Embedder of the model recall answers from now"
    ),
]
Queries = Annotated[
    Path | None,
    typer.Option(
        "--queries",
        help='JSON Lines of labelled queries: {"tenant_id", "resource_id", "thread_id", '
        '"query", "expected_ids": [...]}',
    ),
]
MaxDrop = Annotated[
    float,
    typer.Option("--max-drop", help="the largest recall@K drop the gate accepts (0.02: 2 points)"),
]
MinOverlap = Annotated[
    float | None,
    typer.Option("--min-overlap", help="refuse when overlap@K of sampled entries is lower"),
]
TopK = Annotated[int, typer.Option("--k", help="K of recall@K and overlap@K")]
SampleThreads = Annotated[
    int, typer.Option("--sample-threads", help="threads whose entries serve as queries")
]
Seed = Annotated[int, typer.Option("--seed", help="the sampling's seed")]


@asynccontextmanager
async def _store(
    url: str, schema: str, table: str
) -> AsyncIterator[tuple[PostgresVectorStore, VectorGenerations]]:
    """The table's store, and the same as its generations role (revision 0011 and later)."""
    from ..errors import ConfigurationError
    from ..postgres import create_postgres_vector_store
    from ..stores.base import VectorGenerations

    store = await create_postgres_vector_store(
        url, schema=schema, table=table, skip_migrations=True
    )
    try:
        if not isinstance(store, VectorGenerations):
            raise ConfigurationError("this store cannot hold vectors of a second model")
        yield store, store
    finally:
        await store.close()


async def _threads(store: PostgresVectorStore, limit: int = 10_000) -> list[MemoryIdentity]:
    """Up to ``limit`` threads holding indexed entries: those the gate samples from."""
    from ..postgres.repositories import EntryRepository

    return await EntryRepository(store.executor, store.tables).indexed_threads(limit)


async def generation_report(url: str, schema: str, table: str) -> tuple[list[str], int]:
    """What ``stats`` and ``doctor`` show of the generations: one line per generation (its
    role, whether recall answers from it, how many indexed entries hold a current vector of it)
    and how many indexed entries the active one lacks (a forced switch's backlog); and, while the
    entries' own vectors are of more than the primary's model (a promotion under way, or a
    writer of the old model after it), which models they are."""
    async with _store(url, schema, table) as (store, gens):
        now = utcnow()
        lines, missing = [], 0
        registered = await gens.generations()
        for generation in registered:
            progress = await gens.generation_progress(generation.model, now=now)
            active = ", active" if generation.active else ""
            leased = f", {progress.leased} leased" if progress.leased else ""
            lines.append(
                f"{generation.model} ({generation.role}{active}, width {generation.width}): "
                f"{progress.current}/{progress.entries} entries{leased}"
            )
            missing += progress.missing if generation.active else 0
        primary = next((g.model for g in registered if g.role == "primary"), None)
        own = sorted(await store.embedding_models(None))
        if primary is not None and own not in ([], [primary]):
            target = next((g.model for g in registered if g.active), primary)
            lines.append(
                f"the entries' own vectors are of {', '.join(own)} (a promotion is not finished: "
                f"`prism-memory models promote {target}`)"
            )
        return lines, missing


def status(
    url: Url = "", schema: Schema = DEFAULT_SCHEMA, table: TableName = DEFAULT_TABLE
) -> None:
    """The registered generations: role, width, which one recall answers from, backfill progress."""

    async def run() -> list[tuple[Generation, GenerationProgress]]:
        async with _store(url, schema, table) as (_, gens):
            now = utcnow()
            return [
                (g, await gens.generation_progress(g.model, now=now))
                for g in await gens.generations()
            ]

    found = asyncio.run(run())
    if not found:
        console.print("no generations: the store never started a model change")
        return
    for generation, progress in found:  # one line each: a long model name never wraps
        switched = generation.switched_at
        console.print(
            f"{generation.model}: {generation.role}"
            + (", active" if generation.active else "")
            + f", width {generation.width}, {progress.current}/{progress.entries} vectors, "
            f"{progress.missing} missing, {progress.leased} leased"
            + ("" if switched is None else f", switched {switched.isoformat(timespec='seconds')}"),
            highlight=False,
        )


def start(
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    embedder: VectorEmbedder = "",
    next_embedder: NextEmbedder = "",
) -> None:
    """Register the new model as a shadow generation beside the one the table's vectors hold.

    --embedder is the model the table's vectors hold, --next-embedder the new one. Idempotent.
    """
    from ..embedding import embedder_model

    async def run() -> Generation:
        async with _store(url, schema, table) as (store, gens):
            old = load_embedder(embedder, store.dimension)
            new = load_embedder(next_embedder, None)
            return await gens.start_generation(
                primary=str(embedder_model(old)),
                primary_width=old.dimensions,
                model=str(embedder_model(new)),
                width=new.dimensions,
                now=utcnow(),
            )

    generation = asyncio.run(run())
    console.print(
        f"started generation {generation.model} (width {generation.width}); next: deploy the "
        "hosts with next_embedder, then `prism-memory models backfill`"
    )


def backfill(
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    next_embedder: NextEmbedder = "",
    batch_size: Annotated[int, typer.Option("--batch-size", help="entries per claim")] = 64,
    lease_seconds: Annotated[
        float, typer.Option("--lease-seconds", help="how long a claimed entry stays leased")
    ] = 60.0,
    follow: Annotated[
        bool, typer.Option("--follow", help="keep polling for new entries until Ctrl-C")
    ] = False,
) -> None:
    """Embed every indexed entry with the new model; several may run at once; Ctrl-C is safe.

    Walks the store until a whole pass finds nothing left (entries written meanwhile included).
    An interrupted run stores the batch it embedded; the next run continues where the store is.
    """
    from ..embedding import embedder_model
    from ..generations import BackfillProgress, BackfillReport, backfill_generation

    async def run() -> BackfillReport:
        async with _store(url, schema, table) as (_, gens):
            chosen = load_embedder(next_embedder, None)
            with progress_bar() as progress:
                task = progress.add_task("backfill", total=None)
                started: list[bool] = []

                def advance(now: BackfillProgress) -> None:
                    if started:
                        progress.update(task, completed=now.done, total=now.total)
                    else:  # the first call: what was done before this run, not in its rate
                        started.append(True)
                        progress.reset(task, completed=now.done, total=now.total, base=now.done)

                return await backfill_generation(
                    gens,
                    str(embedder_model(chosen)),
                    chosen,
                    batch_size=batch_size,
                    lease_seconds=lease_seconds,
                    follow=follow,
                    on_progress=advance,
                )

    report = resumable(run(), None)
    console.print(
        f"stored {report.stored} vectors of {report.model} ({report.rate:.1f}/s, "
        f"{report.passes} passes); {report.remaining} entries still without one"
    )


async def _gate(
    url: str,
    schema: str,
    table: str,
    embedder: str | None,
    next_embedder: str,
    queries: Path | None,
    k: int,
    sample_threads: int,
    seed: int,
) -> GateReport:
    from ..errors import ConfigurationError
    from ..generations import compare_generations, read_gate_queries_file

    if embedder is None:
        raise ConfigurationError(
            "--embedder: the gate needs the embedder of the model recall answers from now"
        )
    labelled = None if queries is None else read_gate_queries_file(queries)
    async with _store(url, schema, table) as (store, _):
        return await compare_generations(
            store,
            load_embedder(embedder, store.dimension),
            load_embedder(next_embedder, None),
            k=k,
            sample_threads=sample_threads,
            queries=labelled,
            threads=await _threads(store),
            seed=seed,
        )


def compare(
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    embedder: OldEmbedder = None,
    next_embedder: NextEmbedder = "",
    queries: Queries = None,
    k: TopK = 10,
    sample_threads: SampleThreads = 20,
    seed: Seed = 0,
    max_drop: MaxDrop = 0.02,
    min_overlap: MinOverlap = None,
) -> None:
    """Rank the same recalls with both models (as recall ranks) and print the gate's table.

    Exits 1 when the gate would refuse the switch (recall@K drop over --max-drop, overlap@K
    under --min-overlap).
    """
    report = asyncio.run(
        _gate(url, schema, table, embedder, next_embedder, queries, k, sample_threads, seed)
    )
    print(report.table())
    failures = report.failures(max_drop=max_drop, min_overlap=min_overlap)
    for failure in failures:
        print(f"refused: {failure}")
    if failures:
        raise typer.Exit(1)
    print("ok: the gate passes")


def switch(
    model: Annotated[str, typer.Argument(help="the model recall answers from after the switch")],
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    embedder: OldEmbedder = None,
    next_embedder: Annotated[
        str | None,
        typer.Option("--next-embedder", help="module:factory of MODEL's Embedder (the gate)"),
    ] = None,
    queries: Queries = None,
    gate: Annotated[
        bool, typer.Option("--gate", help="run the gate on sampled entries (overlap@K)")
    ] = False,
    k: TopK = 10,
    sample_threads: SampleThreads = 20,
    seed: Seed = 0,
    max_drop: MaxDrop = 0.02,
    min_overlap: MinOverlap = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="switch even while entries lack a vector of MODEL or the gate refuses",
        ),
    ] = False,
    max_lag: Annotated[
        float,
        typer.Option(
            "--max-lag",
            help="seconds: entries written this recently may still lack MODEL's vector (what "
            "a running `models backfill --follow` has not reached yet); default 0: none may",
        ),
    ] = 0.0,
) -> None:
    """Make MODEL the generation recall answers from, for every host at once (one statement).

    Refused while an indexed entry written over --max-lag seconds ago lacks a vector of MODEL;
    with --queries (or --gate) the quality gate runs first and refuses when recall@K drops by
    more than --max-drop. --force overrides both. Entries without MODEL's vector are not recalled
    until the backfill reaches them.
    """
    from ..errors import ConfigurationError

    if queries is not None or gate or min_overlap is not None:
        if next_embedder is None:
            raise ConfigurationError("--next-embedder: the gate needs MODEL's embedder")
        report = asyncio.run(
            _gate(url, schema, table, embedder, next_embedder, queries, k, sample_threads, seed)
        )
        if report.new_model != model:
            raise ConfigurationError("--next-embedder is not MODEL's embedder")
        print(report.table())
        failures = report.failures(max_drop=max_drop, min_overlap=min_overlap)
        for failure in failures:
            print(f"refused: {failure}")
        if failures and not force:
            print("the switch was refused by the gate (--force to switch anyway)")
            raise typer.Exit(1)

    async def run() -> tuple[Generation, int]:
        async with _store(url, schema, table) as (_, gens):
            switched = await gens.switch_generation(
                model, force=force, now=utcnow(), max_lag_seconds=max_lag
            )
            return switched, (await gens.generation_progress(model, now=utcnow())).missing

    switched, missing = asyncio.run(run())
    console.print(f"recall now answers from {switched.model} ({switched.role})")
    if missing:
        console.print(
            f"{missing} indexed entries have no vector of {switched.model} yet and are not "
            "recalled until the backfill reaches them (keep `prism-memory models backfill "
            "--follow` running)"
        )


def rollback(
    url: Url = "", schema: Schema = DEFAULT_SCHEMA, table: TableName = DEFAULT_TABLE
) -> None:
    """Make the primary generation (the entries' own vectors) the active one again."""
    from ..errors import ConfigurationError

    async def run() -> Generation:
        async with _store(url, schema, table) as (_, gens):
            primary = next((g for g in await gens.generations() if g.role == "primary"), None)
            if primary is None:
                raise ConfigurationError("no generations: nothing to roll back")
            return await gens.switch_generation(primary.model, force=False, now=utcnow())

    switched = asyncio.run(run())
    console.print(f"recall answers from {switched.model} again (the primary)")


def promote(
    model: Annotated[str, typer.Argument(help="the active generation to make the primary")],
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="entries moved per statement")
    ] = 1000,
) -> None:
    """Make the active generation the entries' own vectors, so the old model can be dropped.

    Moves batch by batch while recall keeps answering (the old vectors are kept beside the
    entries, so a rollback stays one command); at the end the old model becomes a shadow
    generation that `models drop` deletes. Ctrl-C is safe: the next run continues.
    """
    from ..generations import PromotionReport, promote_to_primary

    async def run() -> tuple[PromotionReport, str]:
        async with _store(url, schema, table) as (_, gens):
            old = next((g.model for g in await gens.generations() if g.model != model), "")
            # the bar's total: the indexed entries when the run starts (at most what is left
            # to move), raised to what was moved when writers add entries meanwhile
            total = (await gens.generation_progress(model, now=utcnow())).entries
            with progress_bar() as progress:
                task = progress.add_task("promote", total=total)

                def advance(moved: int) -> None:
                    progress.update(task, completed=moved, total=max(total, moved))

                report = await promote_to_primary(
                    gens, model, batch_size=batch_size, on_progress=advance
                )
                if report.promoted and not report.left:  # done: what this run moved, of itself
                    progress.update(task, completed=report.moved, total=report.moved)
            return report, old

    report, old = resumable(run(), None)
    if report.left or not report.promoted:  # not finished: `models drop` would be refused
        already = f"{report.model} is the primary generation, but " if report.promoted else ""
        console.print(
            f"moved {report.moved} entries; {already}{report.left} indexed entries have no "
            f"vector of {report.model} yet (a forced switch, or a writer of the old model "
            "since): run `prism-memory models backfill`, then promote again"
        )
        raise typer.Exit(1)
    console.print(
        f"{report.model} is the primary generation ({report.moved} entries moved, "
        f"{report.rate:.1f}/s); {old}'s vectors stay, a rollback away, until "
        f"`prism-memory models drop {old}` deletes them"
    )


def drop(
    model: Annotated[str, typer.Argument(help="the shadow generation to delete")],
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
) -> None:
    """Delete a shadow generation -- an abandoned one, or the old model after a promotion --:
    its vectors and its registration (asks first)."""
    if not yes:
        typer.confirm(f"Delete every vector of {model} in {schema}.{table}?", abort=True)

    async def run() -> int:
        async with _store(url, schema, table) as (_, gens):
            return await gens.drop_generation(model)

    console.print(f"dropped {model}: {asyncio.run(run())} vectors deleted")


for _command in (status, start, backfill, compare, switch, rollback, promote, drop):
    models_app.command()(_command)
