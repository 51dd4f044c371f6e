"""``speed.py``'s timed legs: recall interleaved over the contenders, throughput 8 in flight, and
the in-memory micro targets. Not a benchmark itself."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np
from _common import DIM, LookupEmbedder, unit_vectors
from _speed_contenders import Contender, hand_fuse, hand_terms, percentile, scope_args
from _speed_data import KS, RESOURCE, SEED, TENANT, Query
from pgvector.asyncpg import register_vector

from prism_memory import InMemoryVectorStore, create_memory

Runner = Callable[[Query, int], Awaitable[list[str]]]


async def time_recall(
    contenders: list[Contender], queries: list[Query], routes: Any, result: dict[str, Any]
) -> None:
    """Warm every contender up, then time each on every query interleaved; the figures go to
    ``result["recall"]`` (and the load average at the timing's start to
    ``result["load_average_timed"]``). ``routes``: the pooled contenders' keys."""
    # warm-up: every contender once on every query (steady state, as in a long-running host:
    # each thread's Memory exists, every pooled connection has prepared its statements and
    # PostgreSQL has settled on its plans), then the heap built so far (the dataset) is frozen
    # out of the garbage collector's way, for every contender alike
    for q in queries:
        for c in contenders:
            for k in KS:
                await c.run(q, k)
    gc.collect()
    gc.freeze()

    result["load_average_timed"] = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    # ---- timed, interleaved, rotating the first contender
    print(
        f"timing {len(queries)} queries x {len(KS)} K x {len(contenders)} contenders ...",
        flush=True,
    )
    for q in queries:
        for k in KS:
            shift = (q.n + k) % len(contenders)
            answers: dict[str, list[str]] = {}
            for c in contenders[shift:] + contenders[:shift]:
                cpu_start, start = time.thread_time(), time.perf_counter()
                ids = await c.run(q, k)
                elapsed = time.perf_counter() - start
                answers[c.key] = ids
                c.samples.setdefault((q.cls, k), []).append(elapsed)
                c.cpu.setdefault((q.cls, k), []).append(time.thread_time() - cpu_start)
                if q.cls != "lexical":  # cosine truth; a query with stored words has none
                    want = q.truth[k]
                    c.recall.setdefault((q.cls, k), []).append(
                        len(set(ids[:k]) & set(want)) / max(1, len(want))
                    )
                if c.key != "bare" and len(ids) < min(k, q.eligible):
                    c.short += 1
            # the library and its hand-written twin must agree id for id, in order
            for key in ("prism", "in_memory"):
                if answers[key] != answers["hand"]:
                    contender_by_key = next(c for c in contenders if c.key == key)
                    contender_by_key.mismatches += 1
            # a pooled route must answer what the direct one answers
            for c in contenders:
                if c.key in routes and answers[c.key] != answers["prism"]:
                    c.differs_from_direct += 1

    for c in contenders:
        entry: dict[str, Any] = {
            "label": c.label,
            "short_results": c.short,
            "mismatches_vs_hand": c.mismatches if c.key in ("prism", "in_memory") else None,
        }
        if c.key in routes:
            entry["differs_from_direct"] = c.differs_from_direct
        for k in KS:  # every class together: the headline figures
            c.samples[("all", k)] = [
                v for (cls, kk), vs in c.samples.items() if kk == k and cls != "all" for v in vs
            ]
            c.cpu[("all", k)] = [
                v for (cls, kk), vs in c.cpu.items() if kk == k and cls != "all" for v in vs
            ]
        for (cls, k), values in sorted(c.samples.items()):
            entry[f"{cls}_k{k}"] = {
                "p50_ms": percentile(values, 50),
                "p95_ms": percentile(values, 95),
                "cpu_p50_us": percentile(c.cpu[(cls, k)], 50) * 1000.0,
                "recall_at_k": float(np.mean(c.recall[(cls, k)])) if (cls, k) in c.recall else None,
                "n": len(values),
            }
        result["recall"][c.key] = entry


async def time_throughput(
    libpq_url: str,
    sqls: tuple[str, str, str],
    prism: Runner,
    others: dict[str, Runner],
    queries: list[Query],
    rounds: int,
) -> dict[str, dict[str, float]]:
    """Queries per second at 8 in flight, K=10 and K=32, of ``prism``, of the hand-written
    statements (``sqls``: vector-only with the rules, bare, the same work) on a pool of their own,
    then of ``others``."""
    sql, bare, hybrid = sqls
    throughput: dict[str, dict[str, float]] = {}
    flight = 8
    pool = await asyncpg.create_pool(
        libpq_url, min_size=flight, max_size=flight, init=register_vector
    )
    try:

        async def c_raw_pool(q: Query, k: int) -> list[str]:
            async with pool.acquire() as conn:
                rows = await conn.fetch(sql, q.vector, *scope_args(q), k)
            return [r["id"] for r in rows]

        async def c_bare_pool(q: Query, k: int) -> list[str]:
            async with pool.acquire() as conn:
                rows = await conn.fetch(bare, q.vector, *scope_args(q), k)
            return [r["id"] for r in rows]

        async def c_hand_pool(q: Query, k: int) -> list[str]:
            terms, quoted, any_term = hand_terms(q.text)
            async with pool.acquire() as conn:
                rows = await conn.fetch(
                    hybrid, q.vector, *scope_args(q), 4 * k, quoted, any_term,
                )  # fmt: skip
            return hand_fuse(rows, q.vector, terms, k)

        runners = {
            "prism": prism, "hand": c_hand_pool, "asyncpg": c_raw_pool, "bare": c_bare_pool,
        }  # fmt: skip
        runners.update(others)
        # rounds alternate between the contenders, so a change in the shared machine's load
        # falls on all of them alike; each round runs every query once, 8 in flight
        busy = {(key, k): 0.0 for key in runners for k in KS}
        for _ in range(max(1, rounds)):
            for k in KS:
                for key, runner in runners.items():
                    semaphore = asyncio.Semaphore(flight)

                    async def one(
                        q: Query, runner: Any = runner, semaphore: Any = semaphore, k: int = k
                    ) -> None:
                        async with semaphore:
                            await runner(q, k)

                    start = time.perf_counter()
                    await asyncio.gather(*(one(q) for q in queries))
                    busy[(key, k)] += time.perf_counter() - start
        for (key, k), seconds in busy.items():
            rate = len(queries) * max(1, rounds) / seconds
            throughput.setdefault(key, {})[f"k{k}"] = rate
    finally:
        await pool.close()
    return throughput


async def in_memory_targets(
    embedder: LookupEmbedder, table: dict[str, np.ndarray]
) -> dict[str, Any]:
    """A 100-row thread's store search, and remember-then-recall on a 13,000-row thread.

    The search asks for 40 candidates (a recall's 4 × K at K = 10), once with terms the thread does
    not hold (the dense leg alone: the target's figure) and once with the recall query's own terms,
    which occur in every row (both legs, ~64 candidates).
    """
    from prism_memory.lexical import query_terms
    from prism_memory.models import MemoryIdentity
    from prism_memory.stores.base import RecallFilter, SearchRequest

    rng = np.random.default_rng(SEED + 2)
    store = InMemoryVectorStore(dimension=DIM)
    out: dict[str, Any] = {}
    for size, name in ((100, "t100"), (13_000, "t13k")):
        vecs = unit_vectors(rng, size + 200)
        for i in range(size + 200):
            table[f"mem {name} {i}"] = vecs[i]
        memory = create_memory(
            tenant_id=TENANT, resource_id=RESOURCE, thread_id=name, embedder=embedder,
            vector_store=store,
        )  # fmt: skip
        async with memory:
            for lo in range(0, size, 256):
                await memory.remember(
                    [{"text": f"mem {name} {i}"} for i in range(lo, min(size, lo + 256))], wait=True
                )
            scope = MemoryIdentity(tenant_id=TENANT, resource_id=RESOURCE, thread_id=name)
            if size == 100:
                search, lexical, recall = [], [], []
                for j in range(1000):
                    text = f"mem {name} {size + j % 200}"
                    for terms, into in (("probe x", search), (text, lexical)):
                        request = SearchRequest(
                            vector=table[text], terms=query_terms(terms), limit=40,
                            filter=RecallFilter(now=datetime.now(UTC)),
                        )  # fmt: skip
                        start = time.perf_counter()
                        await store.search(scope, request)
                        into.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    await memory.recall(text, top_k=10)
                    recall.append(time.perf_counter() - start)
                out["t100_search_p50_us"] = percentile(search, 50) * 1000
                out["t100_search_lexical_p50_us"] = percentile(lexical, 50) * 1000
                out["t100_recall_p50_us"] = percentile(recall, 50) * 1000
            else:
                both, alone = [], []
                for j in range(100):
                    text = f"mem {name} {size + j}"
                    start = time.perf_counter()
                    await memory.remember({"text": text}, wait=True)
                    await memory.recall(text, top_k=10)
                    both.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    await memory.recall(f"mem {name} {j}", top_k=10)
                    alone.append(time.perf_counter() - start)
                out["t13k_remember_recall_p50_ms"] = percentile(both, 50)
                out["t13k_recall_p50_ms"] = percentile(alone, 50)
    return out
