"""What pooler mode costs per recall: the same recalls, side by side in one run, on three routes.

* **direct** -- the URL straight to PostgreSQL, the default mode (prepared statements cached per
  connection, the planner settings at connection start-up): the baseline;
* **direct, transaction mode** -- the same URL with ``pooling="transaction"``: what the mode itself
  costs (each read in its own ``BEGIN; SET LOCAL …`` / ``COMMIT``, nothing prepared for reuse);
* **PgBouncer, transaction mode** -- through a real PgBouncer (``pool_mode = transaction``) in
  front of the same database: the mode plus the pooler's hop, as a managed "pooled URL" runs.

Data: ``--entries`` rows (384-d unit vectors, a lookup embedder so embedding costs nothing) over
``--threads`` Zipf-sized threads of one tenant. Each round asks every route the same queries
(a thread drawn with its size's weight, a stored row's vector plus noise), the first route rotating
between rounds; p50/p95 of single recalls, and throughput with 8 recalls in flight. Needs the
``pgbouncer`` program (Debian's package) and the embedded server (or ``--url``).

    .venv/bin/python benchmarks/pooler.py                      # 20,000 rows, a minute or two
    .venv/bin/python benchmarks/pooler.py --entries 100000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.topology_fixtures

from benchmarks._common import DIM, LookupEmbedder, database, unit_vectors, zipf_sizes
from prism_memory import IndexingPolicy, create_memory
from prism_memory.memory import Memory
from prism_memory.postgres import PostgresMemoryStores, create_postgres_memory_stores
from tests.topology_fixtures import find_pgbouncer, start_pgbouncer

SCHEMA = "prism_bench_pooler"
ROUTES = ("direct", "direct, transaction mode", "PgBouncer, transaction mode")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def load(
    stores: PostgresMemoryStores, sizes: list[int], table: dict[str, np.ndarray]
) -> None:
    embedder = LookupEmbedder(table)
    start = 0
    for thread, size in enumerate(sizes):
        async with memory_on(stores, thread, embedder) as memory:
            for at in range(0, size, 128):
                batch = [
                    {"id": f"r{row}", "text": f"row {row}"}
                    for row in range(start + at, start + min(size, at + 128))
                ]
                await memory.remember(batch, wait=True)
        start += size


def memory_on(
    stores: PostgresMemoryStores, thread: int, embedder: Any, *, reads_only: bool = False
) -> Memory:
    return create_memory(
        tenant_id="bench",
        resource_id="user",
        thread_id=f"thread-{thread}",
        embedder=embedder,
        vector_store=stores.vector_store,
        working_store=stores.working_store,
        # the timed memories only recall: no indexing queue of their own
        indexing=IndexingPolicy(in_process=not reads_only),
    )


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    program = find_pgbouncer()
    if program is None:
        raise SystemExit("pgbouncer is not installed (apt-get install pgbouncer)")
    rng = np.random.default_rng(7)
    sizes = zipf_sizes(args.entries, args.threads)
    vectors = unit_vectors(rng, args.entries)
    table = {f"row {i}": vectors[i] for i in range(args.entries)}
    loader = await create_postgres_memory_stores(url, schema=SCHEMA, dimension=DIM)
    try:
        await load(loader, sizes, table)
    finally:
        await loader.close()
    bouncer = start_pgbouncer(url, program)
    options = {"schema": SCHEMA, "dimension": DIM, "skip_migrations": True}
    routes = {
        ROUTES[0]: await create_postgres_memory_stores(url, **options),
        ROUTES[1]: await create_postgres_memory_stores(url, pooling="transaction", **options),
        ROUTES[2]: await create_postgres_memory_stores(
            bouncer.url, pooling="transaction", **options
        ),
    }
    try:
        starts = np.cumsum([0, *sizes])
        weights = np.array(sizes, dtype=float) / sum(sizes)
        queries: list[tuple[int, str]] = []
        for i in range(args.queries):
            thread = int(rng.choice(len(sizes), p=weights))
            row = int(rng.integers(starts[thread], starts[thread + 1]))
            noisy = vectors[row] + rng.standard_normal(DIM).astype(np.float32) * 0.05
            text = f"probe {i}"
            table[text] = noisy / np.linalg.norm(noisy)
            queries.append((thread, text))
        embedder = LookupEmbedder(table)
        memories = {
            name: {t: memory_on(stores, t, embedder, reads_only=True) for t, _ in queries}
            for name, stores in routes.items()
        }
        for name in ROUTES:  # warm-up: every route answers every query once
            for thread, text in queries:
                await memories[name][thread].recall(text, top_k=10)
        gc.collect()
        gc.freeze()
        single: dict[str, list[float]] = {name: [] for name in ROUTES}
        order = list(ROUTES)
        for _ in range(args.rounds):
            for name in order:
                for thread, text in queries:
                    began = time.perf_counter()
                    await memories[name][thread].recall(text, top_k=10)
                    single[name].append((time.perf_counter() - began) * 1000)
            order = order[1:] + order[:1]
        throughput: dict[str, list[float]] = {name: [] for name in ROUTES}
        for _ in range(args.rounds):
            for name in order:
                pending = list(queries)
                random.Random(1).shuffle(pending)
                began = time.perf_counter()

                async def lane(work: list[tuple[int, str]], route: str = name) -> None:
                    while work:
                        thread, text = work.pop()
                        await memories[route][thread].recall(text, top_k=10)

                await asyncio.gather(*(lane(pending) for _ in range(8)))
                throughput[name].append(len(queries) / (time.perf_counter() - began))
            order = order[1:] + order[:1]
        gc.unfreeze()
    finally:
        for stores in routes.values():
            await stores.close()
        bouncer.close()
    base_p50 = statistics.median(single[ROUTES[0]])
    base_qps = statistics.median(throughput[ROUTES[0]])
    return {
        "entries": args.entries,
        "threads": args.threads,
        "queries": args.queries,
        "rounds": args.rounds,
        "machine": f"{platform.machine()}, {platform.processor() or platform.system()}",
        "routes": {
            name: {
                "p50_ms": round(statistics.median(single[name]), 3),
                "p95_ms": round(percentile(single[name], 0.95), 3),
                "p50_ratio": round(statistics.median(single[name]) / base_p50, 2),
                "qps_8_in_flight": round(statistics.median(throughput[name]), 1),
                "qps_ratio": round(statistics.median(throughput[name]) / base_qps, 2),
            }
            for name in ROUTES
        },
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['entries']:,} rows over {result['threads']} Zipf-sized threads, "
        f"{result['queries']} queries x {result['rounds']} rounds, K=10",
        "",
        "| route | recall p50 | p95 | p50 / direct | 8 in flight (recalls/s) | / direct |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in result["routes"].items():
        lines.append(
            f"| {name} | {row['p50_ms']:.2f} ms | {row['p95_ms']:.2f} ms | "
            f"{row['p50_ratio']:.2f}x | {row['qps_8_in_flight']:.0f} | {row['qps_ratio']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a PostgreSQL URL (default: an embedded server)")
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the result as JSON here")
    args = parser.parse_args()
    if shutil.which("pgbouncer") is None and find_pgbouncer() is None:
        raise SystemExit("pgbouncer is not installed (apt-get install pgbouncer)")
    with database(args.url) as (url, _):
        result = asyncio.run(run(args, url))
    print(markdown(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
