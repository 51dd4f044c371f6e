"""Per-thread recall flatness: the same threads' recall p50 at 10k, 100k and 1M rows in the table.

Issue 8 asks that per-thread recall stay flat (p50 within 1.3x) from 10k to 1M total rows: a
thread's recall must cost what its own rows cost, not what the table holds. This script loads three
probe threads (100, 1,000 and 10,000 rows) through ``Memory.remember``, times ``Memory.recall`` on
them, then grows the table around them with filler threads and times the same queries again.

Filler rows are copies of a probe thread's rows into other threads of the same tenant and resource
(``INSERT ... SELECT`` with a new ``thread_id``): every column, index entry and statistic is the
library's own, and a million rows arrive in about a minute instead of the hour ``remember()`` would
take on two cores (the load rate is what ``speed.py`` measures). The HNSW index is dropped at the
start and never rebuilt: per-thread recall sorts exactly over the thread's B-tree range and never
reads it, and building it over 1M rows would take longer than the whole run.

    .venv/bin/python benchmarks/flatness.py                       # 10k -> 100k, a few minutes
    .venv/bin/python benchmarks/flatness.py --max-rows 1000000    # 10k -> 100k -> 1M
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
import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from _common import DIM, LookupEmbedder, database, unit_vectors

from prism_memory import Memory, create_memory
from prism_memory.postgres import create_postgres_memory_stores

SEED = 20261202
TENANT = "bench-tenant"
RESOURCE = "bench-user"
PROBES = (100, 1_000, 10_000)
FILLER_SOURCE = 1_000  # filler threads copy the 1,000-row probe: 1,000 rows each
LEVELS = (10_000, 100_000, 1_000_000)
BATCH = 128
K = 10


def probe_thread(size: int) -> str:
    return f"probe-{size:06d}"


async def load_probes(make: Any, table: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    for size in PROBES:
        vectors = unit_vectors(rng, size)
        texts = [f"flat {size} e{i:06d}" for i in range(size)]
        table.update(zip(texts, vectors, strict=True))
        async with make(probe_thread(size)) as memory:
            for lo in range(0, size, BATCH):
                batch = [
                    {"id": f"e{i:06d}", "text": texts[i]} for i in range(lo, min(size, lo + BATCH))
                ]
                await memory.remember(batch, wait=True)


def build_queries(
    table: dict[str, np.ndarray], rng: np.random.Generator, per_probe: int
) -> list[tuple[int, str]]:
    """``per_probe`` queries per probe thread, near one of its rows (interleaved by probe)."""
    out: list[tuple[int, str]] = []
    for n in range(per_probe):
        for size in PROBES:
            anchor = table[f"flat {size} e{int(rng.integers(size)):06d}"]
            v = anchor + 0.9 * unit_vectors(rng, 1)[0]
            text = f"flat query {size} {n:05d}"
            table[text] = (v / np.linalg.norm(v)).astype(np.float32)
            out.append((size, text))
    return out


async def grow(
    conn: asyncpg.Connection, entries: str, columns: list[str], rows: int, at: int
) -> int:
    """Copy the filler-source probe into new threads until the table holds ``rows``; returns the
    next filler thread number."""
    current = await conn.fetchval(f"SELECT count(*) FROM {entries}")
    select = ", ".join("$1" if c == "thread_id" else f'"{c}"' for c in columns)
    names = ", ".join(f'"{c}"' for c in columns)
    statement = (
        f"INSERT INTO {entries} ({names}) SELECT {select} FROM {entries} "
        f"WHERE tenant_id = $2 AND resource_id = $3 AND thread_id = $4"
    )
    while current + FILLER_SOURCE <= rows:
        await conn.execute(
            statement, f"filler-{at:06d}", TENANT, RESOURCE, probe_thread(FILLER_SOURCE)
        )
        current += FILLER_SOURCE
        at += 1
    await conn.execute(f"VACUUM (ANALYZE) {entries}")
    return at


async def measure(
    memories: dict[int, Memory], queries: list[tuple[int, str]]
) -> dict[str, dict[str, float]]:
    samples: dict[int, list[float]] = {size: [] for size in PROBES}
    for size, text in queries[: 3 * len(PROBES)]:  # warm-up
        await memories[size].recall(text, top_k=K)
    for size, text in queries:
        start = time.perf_counter()
        hits = (await memories[size].recall(text, top_k=K)).hits
        samples[size].append(time.perf_counter() - start)
        if len(hits) != K:
            raise SystemExit(f"probe {size}: {len(hits)} hits, expected {K}")
    return {
        str(size): {
            "p50_ms": float(np.percentile(np.asarray(s) * 1000, 50)),
            "p95_ms": float(np.percentile(np.asarray(s) * 1000, 95)),
        }
        for size, s in samples.items()
    }


async def run(args: argparse.Namespace, url: str, libpq_url: str) -> dict[str, Any]:
    rng = np.random.default_rng(SEED)
    table: dict[str, np.ndarray] = {}
    embedder = LookupEmbedder(table)
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    stores = await create_postgres_memory_stores(url, schema=schema, dimension=DIM)
    names = stores.vector_store.tables.names
    entries = f'"{schema}"."{names.entries}"'
    conn = await asyncpg.connect(libpq_url)
    levels = [level for level in LEVELS if level <= args.max_rows]
    result: dict[str, Any] = {"levels": {}, "queries_per_probe": args.queries}
    try:
        await conn.execute(f'DROP INDEX IF EXISTS "{schema}"."{names.ix_hnsw}"')

        def make(thread: str) -> Memory:
            return create_memory(
                tenant_id=TENANT, resource_id=RESOURCE, thread_id=thread, embedder=embedder,
                vector_store=stores.vector_store, working_store=stores.working_store,
            )  # fmt: skip

        print("loading the probe threads ...", flush=True)
        await load_probes(make, table, rng)
        queries = build_queries(table, rng, args.queries)
        columns = [
            r["column_name"]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
                schema,
                names.entries,
            )
        ]
        memories = {size: make(probe_thread(size)) for size in PROBES}
        filler = 0
        for level in levels:
            start = time.perf_counter()
            filler = await grow(conn, entries, columns, level, filler)
            total = await conn.fetchval(f"SELECT count(*) FROM {entries}")
            print(
                f"{total:,} rows (filled in {time.perf_counter() - start:.0f} s); timing ...",
                flush=True,
            )
            result["levels"][str(level)] = {
                "rows": int(total),
                "probes": await measure(memories, queries),
            }
        for memory in memories.values():
            await memory.aclose()
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
        await stores.close()
    return result


def markdown(result: dict[str, Any]) -> str:
    levels = list(result["levels"])
    head = " | ".join(f"{result['levels'][lv]['rows']:,} rows" for lv in levels)
    lines = [
        f"Per-thread `Memory.recall` p50 / p95 (ms), K={K}, {result['queries_per_probe']} queries per "
        f"probe and level; {result['date']}",
        "",
        f"| probe thread | {head} | p50 last / first (target <= 1.3) |",
        "| --- | " + " | ".join("---" for _ in levels) + " | --- |",
    ]
    for size in PROBES:
        by_level = [result["levels"][lv]["probes"][str(size)] for lv in levels]
        cells = " | ".join(f"{p['p50_ms']:.2f} / {p['p95_ms']:.2f}" for p in by_level)
        ratio = by_level[-1]["p50_ms"] / by_level[0]["p50_ms"]
        lines.append(f"| {size:,} rows | {cells} | {ratio:.2f}x |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-rows", type=int, default=100_000, help="100000 (default) or 1000000")
    parser.add_argument("--queries", type=int, default=200, help="per probe thread and level")
    parser.add_argument("--url", help="PostgreSQL URL (default: an embedded server)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    with database(args.url) as (url, libpq_url):
        result = asyncio.run(run(args, url, libpq_url))
    result["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"flatness-{args.max_rows}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (out / f"{stem}.md").write_text(table)
    print()
    print(table)


if __name__ == "__main__":
    main()
