"""The speed suite: prism_memory vs the same query by hand on asyncpg vs LangGraph's store.

One run on one PostgreSQL (the embedded one unless ``--url``): a seeded dataset (random unit 384-d
vectors, Zipf-sized threads, consent and lineage-invalidation filters active) is loaded through
``Memory.remember``, by COPY into a table of the same shape, and into LangGraph's
``AsyncPostgresStore``; then per-thread recall is timed for every contender on the same queries,
interleaved, with truth from numpy (exact top-K over the rows the rules allow). With PgBouncer
installed (``--pgbouncer``, the default when the program is found), the same recall also runs
through a PgBouncer in transaction mode in front of the same database, interleaved with the direct
one. Writes JSON and Markdown (``--out``) after each leg, marked partial until the run ends (a
stopped run keeps what it measured); the Markdown's first table is every ratio of issue 50 against
its target. See benchmarks/README.md.

This module is the command line and the run's order; its parts are ``_speed_data.py`` (the dataset,
the queries, the loads), ``_speed_contenders.py`` (the hand-written statements),
``_speed_legs.py`` (the timed legs) and ``_speed_report.py`` (the tables, the files).

    .venv/bin/python benchmarks/speed.py                  # 10k rows, ~2-3 minutes
    .venv/bin/python benchmarks/speed.py --rows 100000 --queries 500 --no-langgraph   # issue 50
    .venv/bin/python benchmarks/speed.py --rows 1000000 --i-mean-it
"""

from __future__ import annotations

import os

# Pin BLAS before numpy loads: matrix products must not fight the database for the two cores.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse
import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _targets
import asyncpg
from _common import DIM, LookupEmbedder, database, pgbouncer, pgbouncer_program
from _speed_contenders import (
    Contender,
    bare_sql,
    hand_fuse,
    hand_hybrid_sql,
    hand_sql,
    hand_terms,
    scope_args,
)
from _speed_data import (
    BATCH,
    SEED,
    SHAPE,
    SMALL,
    Dataset,
    Query,
    apply_corrections,
    arrival_order,
    build_dataset,
    build_queries,
    copy_baseline,
    load_interleaved,
    load_prism,
    resource_of,
    tenant_of,
    thread_id,
    vocabulary,
)
from _speed_legs import in_memory_targets, time_recall, time_throughput
from _speed_report import LEGS, versions, write_results
from pgvector.asyncpg import register_vector

from prism_memory import InMemoryVectorStore, Memory, create_memory
from prism_memory.postgres import create_postgres_memory_stores

# what other benchmarks take from here (recall_ab.py, columns_cpu.py): the dataset and its scopes
__all__ = [
    "arrival_order", "build_dataset", "build_queries", "main", "resource_of", "tenant_of",
    "thread_id", "vocabulary",
]  # fmt: skip


# ---- main ---------------------------------------------------------------------------------------


async def run(
    args: argparse.Namespace,
    url: str,
    libpq_url: str,
    pooled_url: str | None = None,
    save: Callable[[dict[str, Any], list[str]], None] | None = None,
) -> dict[str, Any]:
    """The whole run; ``pooled_url``: PgBouncer (transaction mode) in front of ``url``'s database,
    whose recall becomes contender ``pooled``. ``save``: called after each leg but the last with
    the result so far and the legs done (:data:`LEGS`), to keep what a stopped run measured."""
    threads = args.threads or max(10, args.rows // 100)
    data = build_dataset(args.rows, threads, args.long_words)
    table = dict(data.table)
    queries = build_queries(data, args.queries, table)
    embedder = LookupEmbedder(table)
    result: dict[str, Any] = {"load": {}, "recall": {}, "throughput": {}, "in_memory": {}}
    done: list[str] = []

    def checkpoint(leg: str) -> None:
        done.append(leg)
        if save is not None:
            partial = {k: v for k, v in result.items() if k != "load_average_timed"}
            save({**partial, "dataset": dataset_summary(args, data, len(queries), result)}, done)

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    # as many pooled connections as the hand-written contenders' pool (8 in flight at most)
    stores = await create_postgres_memory_stores(
        url, schema=schema, dimension=DIM, engine_options={"pool_size": 8}
    )
    raw = await asyncpg.connect(libpq_url)
    await register_vector(raw)
    mem_store = InMemoryVectorStore(dimension=DIM)
    routes: dict[str, Any] = {}  # the pooled contenders' stores, opened after the load
    lg_cm: Any = None
    lg_store: Any = None
    try:

        def pg_memory(t: int) -> Memory:
            return create_memory(
                tenant_id=tenant_of(t), resource_id=resource_of(t), thread_id=thread_id(t),
                embedder=embedder, vector_store=stores.vector_store,
                working_store=stores.working_store,
            )  # fmt: skip

        def routed_memory(route: str, t: int) -> Memory:
            return create_memory(
                tenant_id=tenant_of(t), resource_id=resource_of(t), thread_id=thread_id(t),
                embedder=embedder, vector_store=routes[route].vector_store,
                working_store=routes[route].working_store,
            )  # fmt: skip

        def mem_memory(t: int) -> Memory:
            return create_memory(
                tenant_id=tenant_of(t), resource_id=resource_of(t), thread_id=thread_id(t),
                embedder=embedder, vector_store=mem_store,
            )  # fmt: skip

        async def load(make: Callable[[int], Memory], store: Any) -> float:
            if args.load == "interleaved":
                return await load_interleaved(data, store)
            return await load_prism(data, make)

        # ---- load
        print(f"loading {args.rows:,} rows over {threads} threads ...", flush=True)
        deferred = getattr(stores.vector_store, "deferred_vector_index", None)
        if deferred is not None and not args.keep_hnsw:
            async with deferred():
                seconds = await load(pg_memory, stores.vector_store)
                build_start = time.perf_counter()
            index_seconds = time.perf_counter() - build_start
        else:
            seconds = await load(pg_memory, stores.vector_store)
            index_seconds = 0.0
        result["load"]["prism_rows_per_s"] = args.rows / (seconds + index_seconds)
        result["load"]["prism_load_rows_per_s"] = args.rows / seconds
        result["load"]["prism_seconds"] = seconds
        result["load"]["hnsw_build_seconds"] = index_seconds
        result["load"]["hnsw_deferred"] = deferred is not None and not args.keep_hnsw
        await apply_corrections(data, pg_memory)
        mem_seconds = await load(mem_memory, mem_store)
        await apply_corrections(data, mem_memory)
        result["load"]["in_memory_rows_per_s"] = args.rows / mem_seconds
        await raw.execute(f'VACUUM (ANALYZE) "{schema}".semantic_memory')
        await raw.execute(f'ANALYZE "{schema}".semantic_memory_invalidation')
        copy_rates = await copy_baseline(raw, schema, data)
        result["load"]["copy_rows_per_s"], result["load"]["copy_build_rows_per_s"] = copy_rates
        print(
            f"  prism {result['load']['prism_load_rows_per_s']:,.0f} rows/s "
            f"({result['load']['prism_rows_per_s']:,.0f} with the HNSW build), "
            f"COPY {result['load']['copy_rows_per_s']:,.0f} rows/s "
            f"({result['load']['copy_build_rows_per_s']:,.0f} with the HNSW build)",
            flush=True,
        )

        if args.langgraph:
            try:
                from langgraph.store.base import PutOp
                from langgraph.store.postgres import AsyncPostgresStore
            except ImportError:
                print("  langgraph-checkpoint-postgres not installed: skipping LangGraph")
                args.langgraph = False
        if args.langgraph:

            async def lg_embed(texts: list[str]) -> list[list[float]]:
                return [table[t].tolist() for t in texts]

            lg_cm = AsyncPostgresStore.from_conn_string(
                libpq_url,
                pool_config={"min_size": 1, "max_size": 8},
                index={"dims": DIM, "embed": lg_embed, "fields": ["text"]},
            )
            lg_store = await lg_cm.__aenter__()
            await lg_store.setup()
            eligible_rows = [r for r in data.rows if r.visible and not r.invalid]
            start = time.perf_counter()
            for lo in range(0, len(eligible_rows), BATCH):
                await lg_store.abatch(
                    [
                        PutOp(("bench", thread_id(r.thread)), r.id, {"text": r.text})
                        for r in eligible_rows[lo : lo + BATCH]
                    ]
                )
            result["load"]["langgraph_rows_per_s"] = len(eligible_rows) / (
                time.perf_counter() - start
            )
            print(f"  LangGraph {result['load']['langgraph_rows_per_s']:,.0f} rows/s", flush=True)
        checkpoint("load")

        # ---- the same stores opened in transaction-pooling mode: through PgBouncer, and (with
        # --transaction-direct) on the direct URL, which tells the mode's cost from the pooler's hop
        pooled_options: dict[str, Any] = {
            "schema": schema, "dimension": DIM, "skip_migrations": True,
            "pooling": "transaction", "engine_options": {"pool_size": 8},
        }  # fmt: skip
        if pooled_url is not None:
            routes["pooled"] = await create_postgres_memory_stores(pooled_url, **pooled_options)
        if args.transaction_direct:
            routes["txn_direct"] = await create_postgres_memory_stores(url, **pooled_options)

        # ---- contenders
        sql = hand_sql(schema)
        stmt = await raw.prepare(sql)
        bare = bare_sql(schema)
        bare_stmt = await raw.prepare(bare)
        hybrid = hand_hybrid_sql(schema)
        hybrid_stmt = await raw.prepare(hybrid)
        memories: dict[tuple[str, int], Memory] = {}

        def memory_of(kind: str, t: int) -> Memory:
            key = (kind, t)
            if key not in memories:
                if kind in routes:
                    memories[key] = routed_memory(kind, t)
                else:
                    memories[key] = (pg_memory if kind == "pg" else mem_memory)(t)
            return memories[key]

        def routed(route: str) -> Callable[[Query, int], Awaitable[list[str]]]:
            async def recall(q: Query, k: int) -> list[str]:
                hits = (await memory_of(route, q.thread).recall(q.text, top_k=k)).hits
                return [h.record.id for h in hits]

            return recall

        async def c_pg(q: Query, k: int) -> list[str]:
            return [
                h.record.id for h in (await memory_of("pg", q.thread).recall(q.text, top_k=k)).hits
            ]

        async def c_mem(q: Query, k: int) -> list[str]:
            return [
                h.record.id for h in (await memory_of("mem", q.thread).recall(q.text, top_k=k)).hits
            ]

        async def c_raw(q: Query, k: int) -> list[str]:
            rows = await stmt.fetch(q.vector, *scope_args(q), k)
            return [r["id"] for r in rows]

        async def c_bare(q: Query, k: int) -> list[str]:
            rows = await bare_stmt.fetch(q.vector, *scope_args(q), k)
            return [r["id"] for r in rows]

        async def c_hand(q: Query, k: int) -> list[str]:
            # what recall does around its statement, by hand: terms, the statement, the fusion
            terms, quoted, any_term = hand_terms(q.text)
            rows = await hybrid_stmt.fetch(q.vector, *scope_args(q), 4 * k, quoted, any_term)
            return hand_fuse(rows, q.vector, terms, k)

        async def c_lg(q: Query, k: int) -> list[str]:
            items = await lg_store.asearch(("bench", thread_id(q.thread)), query=q.text, limit=k)
            return [item.key for item in items]

        contenders = [
            Contender("prism", "prism_memory `Memory.recall` (PostgreSQL)", c_pg),
            Contender("hand", "hand-written asyncpg, same work (prepared, binary)", c_hand),
            Contender("asyncpg", "hand-written asyncpg, vector-only, no lexical leg", c_raw),
            Contender("bare", "bare vector query, no rules (the targets' reference)", c_bare),
            Contender("in_memory", "prism_memory `Memory.recall` (in-memory)", c_mem),
        ]
        if args.langgraph:
            contenders.append(Contender("langgraph", "LangGraph `AsyncPostgresStore`", c_lg))
        labels = {
            "pooled": "prism_memory `Memory.recall` through PgBouncer (transaction mode)",
            "txn_direct": 'prism_memory `Memory.recall`, direct URL, `pooling="transaction"`',
        }
        contenders += [Contender(route, labels[route], routed(route)) for route in routes]

        # ---- timed, interleaved
        await time_recall(contenders, queries, routes, result)
        checkpoint("recall")

        # ---- throughput: 8 in flight, K=10 and K=32
        others: dict[str, Callable[[Query, int], Awaitable[list[str]]]] = {}
        if args.langgraph:
            others["langgraph"] = c_lg
        others.update((route, routed(route)) for route in routes)
        result["throughput"] = await time_throughput(
            libpq_url, (sql, bare, hybrid), c_pg, others, queries, args.throughput_rounds
        )
        checkpoint("throughput")

        # ---- in-memory micro targets
        result["in_memory"] = await in_memory_targets(embedder, table)
    finally:
        if lg_cm is not None:
            with contextlib.suppress(Exception):
                async with lg_store.conn.connection() as conn:  # type: ignore[union-attr]
                    await conn.execute(
                        "DROP TABLE IF EXISTS store_vectors, store, store_migrations, vector_migrations"
                    )
            await lg_cm.__aexit__(None, None, None)
        await raw.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await raw.close()
        for opened in routes.values():
            await opened.close()
        await stores.close()

    result["dataset"] = dataset_summary(args, data, len(queries), result)
    result.pop("load_average_timed", None)
    return result


def dataset_summary(
    args: argparse.Namespace, data: Dataset, queries: int, result: dict[str, Any]
) -> dict[str, Any]:
    """The run's dataset, its load and the load averages (at the timing's start, and now)."""
    largest = max(data.sizes)
    return {
        "rows": args.rows,
        "long_words": args.long_words,
        "threads": len(data.sizes),
        "largest_thread": largest,
        "small_threads": sum(1 for s in data.sizes if s <= SMALL),
        "medium_threads": sum(1 for s in data.sizes if SMALL < s < largest),
        "queries": queries,
        "hidden_by_consent": sum(1 for r in data.rows if not r.visible),
        "invalidated_by_lineage": sum(1 for r in data.rows if r.invalid),
        "dimension": DIM,
        "seed": SEED,
        "tenants": SHAPE["tenants"],
        "resources": SHAPE["resources"],
        "load": "interleaved across threads (import_entries, vectors given)"
        if args.load == "interleaved"
        else "thread by thread (remember)",
        "load_average_timed": result.get("load_average_timed", "-"),
        "load_average": " / ".join(f"{v:.2f}" for v in os.getloadavg()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="10000 (default), 100000, 1000000")
    parser.add_argument("--threads", type=int, default=0, help="default: rows / 100")
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument(
        "--long-words", type=int, default=0, help="words added to every row's text (long entries)"
    )
    parser.add_argument("--throughput-rounds", type=int, default=6)
    parser.add_argument("--tenants", type=int, default=10, help="threads spread over tenants ...")
    parser.add_argument("--resources", type=int, default=10, help="... x resources per tenant")
    parser.add_argument(
        "--load", choices=("interleaved", "threads"), default="interleaved",
        help="rows arrive interleaved across threads (import_entries, the default) or thread by "
        "thread (remember)",
    )  # fmt: skip
    parser.add_argument("--no-langgraph", dest="langgraph", action="store_false")
    parser.add_argument(
        "--pgbouncer", action=argparse.BooleanOptionalAction, default=None,
        help="time recall through PgBouncer (transaction mode) beside the direct one (default: "
        "when the pgbouncer program is installed)",
    )  # fmt: skip
    parser.add_argument(
        "--transaction-direct", action="store_true",
        help="also time recall with pooling='transaction' on the direct URL (the mode's own cost)",
    )  # fmt: skip
    parser.add_argument("--keep-hnsw", action="store_true", help="maintain HNSW during the load")
    parser.add_argument("--i-mean-it", action="store_true", help="allow --rows above 100,000")
    parser.add_argument("--url", help="PostgreSQL URL (default: an embedded server)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    # SIGTERM stops the run as Ctrl-C does: the schema dropped, the embedded server stopped
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    SHAPE.update(tenants=max(1, args.tenants), resources=max(1, args.resources))
    if args.rows > 100_000 and not args.i_mean_it:
        raise SystemExit("--rows above 100,000 takes hours on a small machine: add --i-mean-it")
    program = pgbouncer_program() if args.pgbouncer is not False else None
    if args.pgbouncer and program is None:
        raise SystemExit("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"speed-{args.rows}" + (f"-long{args.long_words}" if args.long_words else "")
    with database(args.url) as (url, libpq_url), contextlib.ExitStack() as stack:
        pooled_url, bouncer_version = (
            stack.enter_context(pgbouncer(url, program)) if program else (None, "-")
        )

        async def go() -> dict[str, Any]:
            conn = await asyncpg.connect(libpq_url)
            try:
                server_version = await conn.fetchval("SHOW server_version")
                pgv = await conn.fetchval(
                    "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
                )
            finally:
                await conn.close()
            info = versions(str(server_version), str(pgv))
            info["pgbouncer"] = bouncer_version

            def save(partial: dict[str, Any], done: list[str]) -> None:
                partial["versions"] = info
                partial["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
                if "recall" in done:
                    partial["targets"] = _targets.targets(partial)
                missing = [leg for leg in LEGS if leg not in done]
                write_results(out, stem, partial, missing)
                print(f"  saved {out / stem}.json/.md, partial: {', '.join(missing)} to come")

            result = await run(args, url, libpq_url, pooled_url, save)
            result["versions"] = info
            return result

        result = asyncio.run(go())
    result["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    result["targets"] = _targets.targets(result)
    table = write_results(out, stem, result, [])
    print()
    print(table)


if __name__ == "__main__":
    main()
