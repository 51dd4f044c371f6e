"""Recall (and remember) latency of two checkouts of prism_memory side by side, on one PostgreSQL
and one dataset.

Both libraries are named ``prism_memory``, so each runs in its own worker process (this script
with ``--worker DIR``); the driver loads the data once (with the ``--branch`` checkout's library,
by default this one, which migrates the schema to its head), then asks the workers for rounds of
the same calls in turn, the first one alternating, so a change in the machine's load falls on
both alike. ``--calls`` chooses what a round times: ``recall`` (the queries, K=``--top-k``)
and/or ``remember`` (``Memory.remember(entry, wait=True)``, one fresh chat-length entry per call,
``--writes`` per round, into threads with data drawn by their size, so they interleave; each
worker writes its own entries of the same shape, embedded by the same lookup table). Each call's
rounds run for both workers before the next call's, so both recall the same data. Three
scenarios, in this order (``--scenarios N``: the first N): no vector generation registered; a
shadow generation registered and fully backfilled (the primary active); the shadow active
(``switch_generation``). A checkout that predates generations ignores their tables and keeps
ranking the entries' own vectors. See benchmarks/README.md, "Recall cost of vector generations
(issue 38)" and its subsection "``remember(wait=True)`` and recall before/after (issue 49)".

    .venv/bin/python benchmarks/recall_ab.py --base ../other-checkout            # 15k rows
    .venv/bin/python benchmarks/recall_ab.py --base ../other-checkout --rounds 12 --queries 400
    # issue 49's check: recall and remember(wait=True), no generations, before vs after (~40 s)
    .venv/bin/python benchmarks/recall_ab.py --base ../before --branch ../after \
        --calls recall,remember --scenarios 1
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"

import sys

# the worker's library goes first on the path (the driver's: --branch, else this checkout)
sys.path.insert(
    0,
    os.path.abspath(
        next(
            (sys.argv[sys.argv.index(f) + 1] for f in ("--worker", "--branch") if f in sys.argv),
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
    ),
)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

import argparse
import asyncio
import gc
import itertools
import json
import pickle
import statistics
import subprocess
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from _common import DIM, LookupEmbedder, database, unit_vectors

LIBRARY = sys.path[0]  # the checkout whose prism_memory this process imports

PRIMARY, SHADOW = "bench-primary", "bench-shadow"
SCENARIOS = ("no generation", "shadow complete, primary active", "shadow active")


class ModelEmbedder(LookupEmbedder):
    """A lookup embedder that names its model (the generations choose by model)."""

    def __init__(self, table: dict[str, np.ndarray], model: str) -> None:
        super().__init__(table)
        self.model = model


def load(path: str) -> Any:
    return pickle.loads(Path(path).read_bytes())


def save(path: str, value: object) -> None:
    Path(path).write_bytes(pickle.dumps(value))


# ---- worker -------------------------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> None:
    """Answer JSON lines on stdin: ``{"scenario": i, "warm": bool}`` runs every query once;
    ``{"scenario": i, "call": "remember", "entries": [[thread, text], ...]}`` remembers each entry
    by its own ``remember(..., wait=True)``."""
    from prism_memory import create_memory
    from prism_memory.postgres import create_postgres_memory_stores, migrate

    # a checkout older than the schema would refuse it; it reads the tables it knows
    migrate.head_revision = lambda: args.head  # type: ignore[assignment]
    queries, table, key = load(args.data)
    primary, shadow = ModelEmbedder(table, PRIMARY), ModelEmbedder(table, SHADOW)
    stores = await create_postgres_memory_stores(
        args.url, schema=args.schema, dimension=DIM, skip_migrations=True,
        engine_options={"pool_size": 2},
    )  # fmt: skip
    import inspect

    has_next = "next_embedder" in inspect.signature(create_memory).parameters
    memories: dict[tuple[int, int], Any] = {}

    async def memory(scenario: int, thread: int) -> Any:
        found = memories.get((scenario, thread))
        if found is None:
            extra = {"next_embedder": shadow} if has_next and scenario > 0 else {}
            found = create_memory(
                **key[thread], embedder=primary, vector_store=stores.vector_store,
                working_store=stores.working_store, **extra,
            )  # fmt: skip
            await found.__aenter__()
            memories[(scenario, thread)] = found
        return found

    import prism_memory

    print(json.dumps({"library": os.path.dirname(prism_memory.__file__)}), flush=True)
    for line in sys.stdin:
        order = json.loads(line)
        scenario = order["scenario"]
        wall: list[float] = []
        cpu: list[float] = []
        hits: list[list[str]] = []
        if order.get("call", "recall") == "remember":
            for thread, text in order["entries"]:
                m = await memory(scenario, thread)
                c0, t0 = time.thread_time(), time.perf_counter()
                await m.remember({"text": text}, wait=True)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)
        else:
            for thread, text in queries:
                m = await memory(scenario, thread)
                c0, t0 = time.thread_time(), time.perf_counter()
                result = await m.recall(text, top_k=order.get("top_k", 10))
                wall.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)
                hits.append([hit.record.id for hit in result.hits])
        if order.get("warm"):
            gc.collect()
            gc.freeze()
        print(json.dumps({"wall": wall, "cpu": cpu, "hits": hits}), flush=True)
    for m in memories.values():
        await m.aclose()
    await stores.close()


# ---- driver -------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q))


class Worker:
    def __init__(self, name: str, library: str, url: str, schema: str, head: str, data: str):
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", library, "--url", url,
             "--schema", schema, "--head", head, "--data", data],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.library = self.ask(None)["library"]

    def ask(self, order: dict[str, Any] | None) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        if order is not None:
            self.process.stdin.write(json.dumps(order) + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.name} ended")
        return dict(json.loads(line))

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


async def prepare(
    args: argparse.Namespace, url: str, schema: str, path: str
) -> tuple[str, list[list[list[list[tuple[int, str]]]]]]:
    """Load the dataset with the driver's library (schema at its head); the head revision and
    the entries each worker remembers (:func:`plan_writes`)."""
    import speed

    from prism_memory import MemoryConsent, create_memory
    from prism_memory.importing import import_entries
    from prism_memory.postgres import create_postgres_memory_stores, migrate

    data = speed.build_dataset(args.rows, args.threads or max(10, args.rows // 100))
    table = dict(data.table)
    queries = speed.build_queries(data, args.queries, table)
    writes = plan_writes(args, speed, data.sizes, table)
    stores = await create_postgres_memory_stores(url, schema=schema, dimension=DIM)
    primary = ModelEmbedder(table, PRIMARY)

    def items() -> Any:
        for r in speed.arrival_order(data):
            item: dict[str, Any] = {"id": r.id, "text": r.text, "vector": r.vector}
            if not r.visible:
                item["consent"] = MemoryConsent(visible=False)
            if r.source is not None:
                item["lineage"] = {"source_ids": [r.source]}
            item.update(speed_key(speed, r.thread))
            yield item

    async with stores.vector_store.deferred_vector_index():
        await import_entries(stores.vector_store, items(), model=PRIMARY, batch_size=1000)
    texts = {r.id: r.text for r in data.rows}
    for t, source in data.corrected:
        async with create_memory(
            **speed_key(speed, t), embedder=primary, vector_store=stores.vector_store,
            working_store=stores.working_store,
        ) as memory:  # fmt: skip
            await memory.correct(source, texts[source] + " (corrected)")
    async with stores.vector_store.engine.connect() as conn:
        from sqlalchemy import text

        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text(f'VACUUM (ANALYZE) "{schema}".semantic_memory'))
        await conn.execute(text(f'ANALYZE "{schema}".semantic_memory_invalidation'))
    await stores.close()
    keys = {t: speed_key(speed, t) for t in range(len(data.sizes))}
    save(path, ([(q.thread, q.text) for q in queries], table, keys))
    sizes = {c: sum(q.cls == c for q in queries) for c in ("small", "medium", "largest", "lexical")}
    print(f"{args.rows:,} rows over {len(data.sizes)} threads; queries {sizes}", flush=True)
    return migrate.head_revision(), writes


def plan_writes(
    args: argparse.Namespace, speed: Any, sizes: list[int], table: dict[str, np.ndarray]
) -> list[list[list[list[tuple[int, str]]]]]:
    """``[scenario][worker][round]`` (round 0 the warm-up): ``--writes`` fresh ``(thread, text)``,
    the threads drawn in proportion to their size (seeded; the same sequence for both workers),
    texts of 25-60 vocabulary words (~180-420 characters: a chat message), each worker's own,
    their vectors put in ``table``."""
    rng = np.random.default_rng(49)
    words = speed.vocabulary()
    weights = np.asarray(sizes, dtype=np.float64)
    plan: list[list[list[list[tuple[int, str]]]]] = []
    for s, k in itertools.product(range(args.scenarios), range(args.rounds + 1)):
        if k == 0:
            plan.append([[], []])
        threads = rng.choice(len(sizes), size=args.writes, p=weights / weights.sum())
        lengths = rng.integers(25, 61, size=args.writes)
        for w in (0, 1):
            batch = []
            for i, (t, n) in enumerate(zip(threads, lengths, strict=True)):
                said = " ".join(words[int(j)] for j in rng.integers(len(words), size=int(n)))
                text = f"chat s{s} w{w} r{k:03d} n{i:04d} {said}"
                table[text] = unit_vectors(rng, 1)[0]
                batch.append((int(t), text))
            plan[s][w].append(batch)
    return plan


def speed_key(speed: Any, t: int) -> dict[str, str]:
    return {
        "tenant_id": speed.tenant_of(t),
        "resource_id": speed.resource_of(t),
        "thread_id": speed.thread_id(t),
    }


async def enter(scenario: int, url: str, schema: str, path: str) -> None:
    """Put the store in ``scenario`` (this checkout's library)."""
    if scenario == 0:
        return
    from prism_memory.generations import backfill_generation
    from prism_memory.postgres import create_postgres_memory_stores

    _, table, _ = load(path)
    stores = await create_postgres_memory_stores(url, schema=schema, dimension=DIM)
    store = stores.vector_store
    now = datetime.now(UTC)
    if scenario == 1:
        await store.start_generation(
            primary=PRIMARY, primary_width=DIM, model=SHADOW, width=DIM, now=now
        )
        start = time.perf_counter()
        report = await backfill_generation(store, SHADOW, ModelEmbedder(table, SHADOW))
        print(f"  backfill: {report} in {time.perf_counter() - start:.1f} s", flush=True)
        async with store.engine.connect() as conn:
            from sqlalchemy import text

            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(f'VACUUM (ANALYZE) "{schema}".semantic_memory_vectors'))
    else:
        await store.switch_generation(SHADOW, force=False, now=now)
    await stores.close()


def run(args: argparse.Namespace) -> None:
    base = os.path.abspath(args.base)
    branch = LIBRARY
    calls = args.calls.split(",")
    if not set(calls) <= {"recall", "remember"}:
        raise SystemExit("--calls takes recall and/or remember")
    schema = f"ab_{uuid.uuid4().hex[:10]}"
    results: dict[str, Any] = {
        "base": base, "branch": branch, "rows": args.rows, "queries": args.queries,
        "writes": args.writes, "rounds": args.rounds, "top_k": args.top_k,
    }  # fmt: skip
    with database(args.url) as (url, _), tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.pickle")
        head, writes = asyncio.run(prepare(args, url, schema, path))
        for scenario, name in enumerate(SCENARIOS[: args.scenarios]):
            asyncio.run(enter(scenario, url, schema, path))
            workers = [
                Worker("base", base, url, schema, head, path),
                Worker("branch", branch, url, schema, head, path),
            ]

            def order(call: str, w: int, r: int, scenario: int = scenario) -> dict[str, Any]:
                if call == "remember":
                    return {"scenario": scenario, "call": call, "entries": writes[scenario][w][r]}
                return {"scenario": scenario, "top_k": args.top_k}

            results[name] = {}
            same: dict[str, int] = {}
            for call in calls:  # warm-up: both workers, one call after the other
                warm = [w.ask({**order(call, i, 0), "warm": True}) for i, w in enumerate(workers)]
                if call == "recall":
                    same[call] = sum(
                        a == b for a, b in zip(*(x["hits"] for x in warm), strict=True)
                    )
            wall = {c: {"base": [], "branch": []} for c in calls}
            cpu = {c: {"base": [], "branch": []} for c in calls}
            ratios: dict[str, list[float]] = {c: [] for c in calls}
            for r in range(1, args.rounds + 1):
                for call in calls:
                    got: dict[str, dict[str, Any]] = {}
                    for i in (0, 1) if r % 2 else (1, 0):
                        got[workers[i].name] = workers[i].ask(order(call, i, r))
                    for who, answer in got.items():
                        wall[call][who] += answer["wall"]
                        cpu[call][who] += answer["cpu"]
                    ratios[call].append(
                        statistics.median(got["branch"]["wall"])
                        / statistics.median(got["base"]["wall"])
                    )
            for w in workers:
                print(f"  {w.name}: {w.library}", flush=True)
                results.setdefault("libraries", {})[w.name] = w.library
                w.close()
            for call in calls:
                report(results[name], f"{name}, {call}", call, wall, cpu, ratios, same)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


def report(
    into: dict[str, Any],
    title: str,
    call: str,
    wall: dict[str, dict[str, list[float]]],
    cpu: dict[str, dict[str, list[float]]],
    ratios: dict[str, list[float]],
    same: dict[str, int],
) -> None:
    """Put ``call``'s figures into ``into`` and print them."""
    row: dict[str, Any] = {
        who: {
            "calls": len(wall[call][who]),
            "p50_ms": pct(wall[call][who], 50),
            "p95_ms": pct(wall[call][who], 95),
            "cpu_p50_ms": pct(cpu[call][who], 50),
        }
        for who in ("base", "branch")
    }
    row["round_p50_ratios"] = ratios[call]
    if call in same:
        row["same_hits"] = same[call]
    into[call] = row
    b, n, rs = row["base"], row["branch"], ratios[call]
    print(
        f"{title}: base p50 {b['p50_ms']:.2f} p95 {b['p95_ms']:.2f} cpu {b['cpu_p50_ms']:.2f}"
        f" | branch p50 {n['p50_ms']:.2f} p95 {n['p95_ms']:.2f} cpu {n['cpu_p50_ms']:.2f}"
        f" | p50 ratio {n['p50_ms'] / b['p50_ms']:.3f}, p95 ratio {n['p95_ms'] / b['p95_ms']:.3f},"
        f" median of rounds {statistics.median(rs):.3f} (min {min(rs):.3f}, max {max(rs):.3f});"
        f" {b['calls']} calls each"
        + (
            f"; same hits {same[call]}/{len(wall[call]['base']) // len(rs)}" if call in same else ""
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="the other checkout (measured as 'base': before)")
    parser.add_argument(
        "--branch",
        help="the checkout measured as 'branch' (after), which also loads and migrates the data"
        " (default: this one; give it as '--branch DIR')",
    )
    parser.add_argument(
        "--calls", default="recall", help="what a round times: recall, remember or recall,remember"
    )
    parser.add_argument(
        "--writes", type=int, default=100, help="remember(wait=True) calls per round and worker"
    )
    parser.add_argument("--rows", type=int, default=15000)
    parser.add_argument("--threads", type=int, default=0, help="default: rows / 100")
    parser.add_argument("--queries", type=int, default=300, help="recalls per round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--top-k", type=int, default=10, help="recall's top_k (default 10)")
    parser.add_argument(
        "--scenarios", type=int, default=len(SCENARIOS), help="the first N store states only"
    )
    parser.add_argument("--url", help="PostgreSQL URL (default: an embedded server)")
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    parser.add_argument("--head", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args))
    elif not args.base:
        parser.error("--base is required")
    else:
        run(args)


if __name__ == "__main__":
    main()
