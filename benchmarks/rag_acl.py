"""On-demand RAG benchmark: authorisation inside the query, HNSW iterative scans vs an exact scan.

Loads N chunks (384-d clustered vectors, fixed seed) from N/10 sources into the PostgreSQL RAG store
(``create_postgres_vector_store(dimension=384)``), grants a fraction of the sources (5% by default)
to one group, and asks top-10 queries as a member of that group. For each query it records:

* the store's ``query`` (HNSW with ``hnsw.iterative_scan = strict_order`` and a per-query
  ``ef_search``; exact fallback if short) -- does it return ``top_k`` hits, recall@10 against an exact
  scan over the authorised rows, latency;
* the HNSW statement alone (no fallback) at several ``ef_search`` values -- the same figures, so the
  iterative scan is measured on its own;
* the exact scan (the authorised rows ordered by ``distance + 0``) -- latency, and the truth.

Then it prints where an exact scan would cost as much as the HNSW query (the scope size below which
the store searches exactly). See benchmarks/README.md.

    .venv/bin/python benchmarks/rag_acl.py                  # embedded PostgreSQL, ~2-3 minutes
    .venv/bin/python benchmarks/rag_acl.py --url postgresql://app@localhost/app
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"

import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse
import asyncio
import platform
import re
import statistics
import time
import uuid
from typing import Any

import numpy as np
from sqlalchemy import text

from prism_memory.postgres import create_postgres_vector_store
from prism_memory.postgres.rag_store import RagSql, ef_search_for, exact_scan_max_rows
from prism_memory.rag import AccessConstraint, Chunk, RagScope

DIM = 384
TOP_K = 10
SEED = 20261201
CHUNKS_PER_SOURCE = 10
TOPICS = 200
BATCH = 2000


def _vectors(rng: np.random.Generator, centers: np.ndarray, count: int) -> np.ndarray:
    topics = rng.integers(0, len(centers), size=count)
    noisy = centers[topics] + rng.normal(0.0, 0.6 / np.sqrt(DIM), size=(count, DIM))
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _run(url: str, chunks: int, selectivity: float, queries: int) -> None:
    schema = f"rag_bench_{uuid.uuid4().hex[:8]}"
    store = await create_postgres_vector_store(url, schema=schema, dimension=DIM)
    names = store.tables.names
    scope = RagScope("bench-tenant", "corpus")
    rng = np.random.default_rng(SEED)
    centers = rng.normal(size=(TOPICS, DIM))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    vectors = _vectors(rng, centers, chunks)
    sources = chunks // CHUNKS_PER_SOURCE
    granted = set(rng.choice(sources, size=max(1, round(sources * selectivity)), replace=False))
    try:
        # Bulk load as a host would: drop the HNSW index, load, build it once afterwards.
        async with store.engine.begin() as conn:
            await conn.execute(text(f'DROP INDEX "{schema}"."{names.ix_rag_chunks_hnsw}"'))
        started = time.perf_counter()
        rows = [
            Chunk(
                source_id=f"src-{n // CHUNKS_PER_SOURCE:05d}",
                index=n % CHUNKS_PER_SOURCE,
                text=f"chunk {n} of source {n // CHUNKS_PER_SOURCE}",
                embedding=vectors[n],
            )
            for n in range(chunks)
        ]
        for start in range(0, chunks, BATCH):
            await store.upsert(scope, rows[start : start + BATCH])
        load = time.perf_counter() - started
        started = time.perf_counter()
        async with store.engine.connect() as conn:
            await conn.execute(text("SET maintenance_work_mem = '256MB'"))
            await conn.execute(
                text(
                    f'CREATE INDEX "{names.ix_rag_chunks_hnsw}" ON "{schema}"."{names.rag_chunks}" '
                    "USING hnsw (embedding vector_cosine_ops)"
                )
            )
            await conn.commit()
        async with store.engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await autocommit.execute(text(f'VACUUM ANALYZE "{schema}"."{names.rag_chunks}"'))
        build = time.perf_counter() - started
        for source in sorted(granted):
            await store.set_source_access(
                scope, f"src-{source:05d}", group_ids=["analysts"], access_version=1
            )
        print(
            f"loaded {chunks} chunks in {load:.1f} s, HNSW built in {build:.1f} s; "
            f"{len(granted)} of {sources} sources granted ({len(granted) / sources:.1%})"
        )
        who = AccessConstraint("ana", ("analysts",))
        sql = RagSql.for_tables(store.tables)
        acl_flags = {"acl": True, "versioned": False, "filtered": False}
        open_flags = {"acl": False, "versioned": False, "filtered": False}
        base = {"tenant": scope.tenant_id, "scope": scope.key, "generation": None, "limit": TOP_K}
        acl_params = {**base, "principal": "ana", "groups": ["analysts"]}
        query_vectors = _vectors(rng, centers, queries)
        ef_values = sorted({40, ef_search_for(TOP_K), 200, 400})

        async def statement(
            sql_text: str, params: dict[str, Any], settings: dict[str, str]
        ) -> tuple[list[Any], float]:
            async with store.engine.connect() as conn, conn.begin():
                for name, value in settings.items():
                    await conn.execute(
                        text("SELECT set_config(:name, :value, true)"),
                        {"name": name, "value": value},
                    )
                began = time.perf_counter()
                found = list(await conn.execute(text(sql_text), params))
                return found, (time.perf_counter() - began) * 1000

        def hnsw_settings(ef: int, forced: bool) -> dict[str, str]:
            settings = {"hnsw.iterative_scan": "strict_order", "hnsw.ef_search": str(ef)}
            if forced:  # no Sort node allowed: the ORDER BY must come from the HNSW index
                settings["enable_sort"] = "off"
            return settings

        rows_out: dict[str, dict[str, list[float]]] = {}

        def record(name: str, ms: float, full: bool, recall: float) -> None:
            entry = rows_out.setdefault(name, {"ms": [], "full": [], "recall": []})
            entry["ms"].append(ms)
            entry["full"].append(1.0 if full else 0.0)
            entry["recall"].append(recall)

        for number, q in enumerate(query_vectors):
            for label, flags, params, auth in (
                ("5% ACL", acl_flags, acl_params, who),
                ("no ACL", open_flags, base, None),
            ):
                params = {**params, "query": q}
                truth_rows, ms = await statement(sql.nearest(exact=True, **flags), params, {})
                truth = {(r.source_id, r.chunk_index) for r in truth_rows}
                record(f"{label}: exact scan", ms, len(truth) == TOP_K, 1.0)
                began = time.perf_counter()
                hits = await store.query(scope, embedding=q, top_k=TOP_K, authorization=auth)
                ms = (time.perf_counter() - began) * 1000
                found = {h.key for h in hits}
                record(
                    f"{label}: store `query` (one transaction, all round trips)",
                    ms,
                    len(hits) == TOP_K,
                    len(truth & found) / len(truth),
                )
                store.rag_exact_scan_max_rows = 0  # the store's HNSW path, whatever the count
                began = time.perf_counter()
                hits = await store.query(scope, embedding=q, top_k=TOP_K, authorization=auth)
                ms = (time.perf_counter() - began) * 1000
                store.rag_exact_scan_max_rows = None
                record(
                    f"{label}: store `query` forced onto its HNSW path",
                    ms,
                    len(hits) == TOP_K,
                    len(truth & {h.key for h in hits}) / len(truth),
                )
                ef = ef_search_for(TOP_K, restricted=auth is not None)
                plans = [(f"planner's choice, ef_search={ef}", ef, False)]
                plans += [(f"HNSW forced, ef_search={ef}", ef, True) for ef in ef_values]
                for name, ef, forced in plans:
                    got, ms = await statement(
                        sql.nearest(exact=False, **flags), params, hnsw_settings(ef, forced)
                    )
                    keys = {(r.source_id, r.chunk_index) for r in got}
                    record(
                        f"{label}: statement, {name}",
                        ms,
                        len(got) == TOP_K,
                        len(truth & keys) / len(truth),
                    )
                if number == 0:
                    for forced in (False, True):
                        async with store.engine.connect() as conn, conn.begin():
                            ef = ef_search_for(TOP_K, restricted=auth is not None)
                            for key, value in hnsw_settings(ef, forced).items():
                                await conn.execute(
                                    text("SELECT set_config(:name, :value, true)"),
                                    {"name": key, "value": value},
                                )
                            plan = await conn.execute(
                                text(
                                    "EXPLAIN (ANALYZE, COSTS OFF) "
                                    + sql.nearest(exact=False, **flags)
                                ),
                                params,
                            )
                            kind = "HNSW forced" if forced else "planner's choice"
                            print(f"\nEXPLAIN ANALYZE, {label}, {kind} (first query):")
                            for line in plan.scalars():
                                if "Buffers" in line or "Index Searches" in line:
                                    continue
                                print("   ", re.sub(r"'\[[-0-9.,e]+\]'", "'[…]'", line))

        print(
            f"\n{queries} queries, top_k={TOP_K}, {chunks} chunks in one scope, "
            f"{len(granted)} of {sources} sources granted ({len(granted) / sources:.1%}), "
            f"PostgreSQL {await _version(store)}, Python {platform.python_version()}\n"
        )
        print("| path | len(hits)==top_k | recall@10 vs exact | p50 ms | p95 ms |")
        print("| --- | --- | --- | --- | --- |")
        for name, data in rows_out.items():
            print(
                f"| {name} | {statistics.fmean(data['full']):.1%} | "
                f"{statistics.fmean(data['recall']):.3f} | {_p(data['ms'], 0.5):.2f} | "
                f"{_p(data['ms'], 0.95):.2f} |"
            )
        for label, restricted in (("no ACL", False), ("5% ACL", True)):
            ef = ef_search_for(TOP_K, restricted=restricted)
            exact = _p(rows_out[f"{label}: exact scan"]["ms"], 0.5)
            hnsw = _p(rows_out[f"{label}: statement, HNSW forced, ef_search={ef}"]["ms"], 0.5)
            admitted = chunks * (len(granted) / sources if restricted else 1.0)
            per_row = exact / admitted
            print(
                f"{label}: exact costs ~{per_row * 1000:.2f} µs per admitted row; HNSW at "
                f"ef_search={ef} takes {hnsw:.2f} ms, so exact is cheaper below "
                f"~{hnsw / per_row:,.0f} admitted rows "
                f"(the store's threshold: {exact_scan_max_rows(restricted=restricted)})."
            )
        rtt: list[float] = []
        for _ in range(50):
            async with store.engine.connect() as conn:
                began = time.perf_counter()
                await conn.execute(text("SELECT 1"))
                rtt.append((time.perf_counter() - began) * 1000)
        print(
            f"One round trip (SELECT 1 on a checked-out connection): p50 {_p(rtt, 0.5):.2f} ms; "
            "a store query makes five (pool pre-ping, BEGIN, count + SET LOCAL, query, COMMIT)."
        )

    finally:
        async with store.engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await store.close()


async def _version(store: Any) -> str:
    async with store.engine.connect() as conn:
        pg = (await conn.execute(text("SHOW server_version"))).scalar_one()
        vector = (
            await conn.execute(text("SELECT extversion FROM pg_extension WHERE extname='vector'"))
        ).scalar_one()
    return f"{pg} + pgvector {vector}"


def main() -> None:
    """Parse flags, start an embedded server unless ``--url`` is given, run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--selectivity", type=float, default=0.05)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        from prism_memory.postgres.embedded import start_embedded_postgres

        server = start_embedded_postgres()
        url = server.url
    try:
        asyncio.run(_run(url, args.chunks, args.selectivity, args.queries))
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
