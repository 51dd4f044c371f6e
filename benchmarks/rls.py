"""What row-level security costs: recall p50 and ``remember`` throughput with it on and off, side
by side in one run (issue 51).

Two schemas hold the same rows (``--entries`` 384-d unit vectors over ``--threads`` Zipf-sized
threads spread over ``--tenants`` tenants, loaded by the server's owner); revision 0014's policies
are on both, enabled and forced on one (``rls on``) and not on the other (``rls off``). One
application role -- no SUPERUSER, no BYPASSRLS, the deploy the feature is for -- opens both on
pooled engines made from its URL (the factory's defaults): on the ``on`` schema its stores set the
tenant of every statement (a read in the statement itself, a write transaction in its ``BEGIN``),
on the ``off`` schema they set nothing. Each round asks both the same recalls (a thread drawn with
its size's weight, a stored row's vector plus noise, K=10), the first route rotating between
rounds; then ``--writes`` ``remember(wait=True)`` calls of ``--batch`` rows, in turn on one open
memory per tenant (a fresh thread each round), the routes alternating.
A lookup embedder: embedding costs nothing, so the figures are the library's and the server's.

    .venv/bin/python benchmarks/rls.py                 # 10,000 rows, about two minutes
    .venv/bin/python benchmarks/rls.py --entries 50000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import DIM, LookupEmbedder, database, unit_vectors, zipf_sizes
from prism_memory import IndexingPolicy, create_memory
from prism_memory.memory import Memory
from prism_memory.postgres import PostgresMemoryStores, create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres.rls import row_security_url
from tests.rls_support import grant_schema, role_url

ROUTES = ("rls off", "rls on")
SCHEMAS = {"rls off": "prism_bench_rls_off", "rls on": "prism_bench_rls_on"}
ROLE = "prism_bench_app"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def memory_on(
    stores: PostgresMemoryStores, tenant: str, thread: str, embedder: Any, *, reads_only: bool
) -> Memory:
    return create_memory(
        tenant_id=tenant,
        resource_id="user",
        thread_id=thread,
        embedder=embedder,
        vector_store=stores.vector_store,
        working_store=stores.working_store,
        indexing=IndexingPolicy(in_process=not reads_only),
    )


def tenant_of(thread: int, tenants: int) -> str:
    return f"tenant-{thread % tenants}"


async def load(
    stores: PostgresMemoryStores, sizes: list[int], table: dict[str, np.ndarray], tenants: int
) -> None:
    embedder = LookupEmbedder(table)
    start = 0
    for thread, size in enumerate(sizes):
        tenant = tenant_of(thread, tenants)
        async with memory_on(stores, tenant, f"thread-{thread}", embedder, reads_only=False) as m:
            for at in range(0, size, 128):
                batch = [
                    {"id": f"r{row}", "text": f"row {row}"}
                    for row in range(start + at, start + min(size, at + 128))
                ]
                await m.remember(batch, wait=True)
        start += size


async def prepare(url: str) -> None:
    """The application role, and the two schemas' grants and switches (as the owner)."""
    engine = create_engine(url, pooled=False)
    try:
        async with engine.begin() as conn:
            exists = await conn.execute(
                text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": ROLE}
            )
            if exists.scalar() is None:
                await conn.execute(text(f"CREATE ROLE {ROLE} LOGIN NOSUPERUSER NOBYPASSRLS"))
    finally:
        await engine.dispose()
    for route, schema in SCHEMAS.items():
        await grant_schema(url, schema, ROLE)
        await row_security_url(url, schema=schema, enable=route == "rls on")


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    sizes = zipf_sizes(args.entries, args.threads)
    vectors = unit_vectors(rng, args.entries)
    table = {f"row {i}": vectors[i] for i in range(args.entries)}
    for schema in SCHEMAS.values():
        loader = await create_postgres_memory_stores(url, schema=schema, dimension=DIM)
        try:
            await load(loader, sizes, table, args.tenants)
        finally:
            await loader.close()
    await prepare(url)
    app = role_url(url, ROLE)
    routes = {
        name: await create_postgres_memory_stores(
            app, schema=SCHEMAS[name], dimension=DIM, skip_migrations=True
        )
        for name in ROUTES
    }
    assert not routes["rls off"].vector_store.executor.sets_tenant
    assert routes["rls on"].vector_store.executor.sets_tenant
    try:
        starts = np.cumsum([0, *sizes])
        weights = np.array(sizes, dtype=float) / sum(sizes)
        queries: list[tuple[int, str]] = []
        for i in range(args.queries):
            thread = int(rng.choice(len(sizes), p=weights))
            row = int(rng.integers(starts[thread], starts[thread + 1]))
            noisy = vectors[row] + rng.standard_normal(DIM).astype(np.float32) * 0.05
            probe = f"probe {i}"
            table[probe] = noisy / np.linalg.norm(noisy)
            queries.append((thread, probe))
        embedder = LookupEmbedder(table)
        memories = {
            name: {
                t: memory_on(
                    stores, tenant_of(t, args.tenants), f"thread-{t}", embedder, reads_only=True
                )
                for t, _ in queries
            }
            for name, stores in routes.items()
        }
        for name in ROUTES:  # warm-up: every route answers every query once
            for thread, probe in queries:
                hits = (await memories[name][thread].recall(probe, top_k=10)).hits
                assert hits, f"{name}: a recall found nothing"
        gc.collect()
        gc.freeze()
        single: dict[str, list[float]] = {name: [] for name in ROUTES}
        order = list(ROUTES)
        for _ in range(args.rounds):
            for name in order:
                for thread, probe in queries:
                    began = time.perf_counter()
                    await memories[name][thread].recall(probe, top_k=10)
                    single[name].append((time.perf_counter() - began) * 1000)
            order = order[1:] + order[:1]
        writes: dict[str, list[float]] = {name: [] for name in ROUTES}
        fresh = rng.standard_normal((args.batch, DIM)).astype(np.float32)
        for i in range(args.batch):
            table[f"new {i}"] = fresh[i] / np.linalg.norm(fresh[i])
        for round_ in range(args.rounds):
            for name in order:
                writers = [
                    memory_on(
                        routes[name],
                        tenant_of(t, args.tenants),
                        f"w{round_}-{t}",
                        embedder,
                        reads_only=False,
                    )
                    for t in range(args.tenants)
                ]
                began = time.perf_counter()
                for call in range(args.writes):
                    batch = [{"id": f"c{call}-n{i}", "text": f"new {i}"} for i in range(args.batch)]
                    await writers[call % args.tenants].remember(batch, wait=True)
                writes[name].append(args.writes * args.batch / (time.perf_counter() - began))
                for writer in writers:
                    await writer.aclose()
            order = order[1:] + order[:1]
        gc.unfreeze()
    finally:
        for stores in routes.values():
            await stores.close()
    base_p50 = statistics.median(single[ROUTES[0]])
    base_rows = statistics.median(writes[ROUTES[0]])
    return {
        "entries": args.entries,
        "threads": args.threads,
        "tenants": args.tenants,
        "queries": args.queries,
        "rounds": args.rounds,
        "writes": f"{args.writes} calls x {args.batch} rows per round",
        "machine": f"{platform.machine()}, {platform.processor() or platform.system()}",
        "routes": {
            name: {
                "p50_ms": round(statistics.median(single[name]), 3),
                "p95_ms": round(percentile(single[name], 0.95), 3),
                "p50_ratio": round(statistics.median(single[name]) / base_p50, 3),
                "remember_rows_per_s": round(statistics.median(writes[name]), 1),
                "remember_ratio": round(statistics.median(writes[name]) / base_rows, 3),
            }
            for name in ROUTES
        },
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['entries']:,} rows over {result['threads']} Zipf-sized threads of "
        f"{result['tenants']} tenants, {result['queries']} queries x {result['rounds']} rounds, "
        f"K=10; remember(wait=True): {result['writes']}",
        "",
        "| route | recall p50 | p95 | p50 / off | remember (rows/s) | / off |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in result["routes"].items():
        lines.append(
            f"| {name} | {row['p50_ms']:.3f} ms | {row['p95_ms']:.3f} ms | "
            f"{row['p50_ratio']:.3f}x | {row['remember_rows_per_s']:.0f} | "
            f"{row['remember_ratio']:.3f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a PostgreSQL URL (default: an embedded server)")
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--writes", type=int, default=40, help="remember calls per round")
    parser.add_argument("--batch", type=int, default=16, help="rows per remember call")
    parser.add_argument("--json", type=Path, help="also write the result as JSON here")
    args = parser.parse_args()
    with database(args.url) as (url, _):
        result = asyncio.run(run(args, url))
    print(markdown(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
