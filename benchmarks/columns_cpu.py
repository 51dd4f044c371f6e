"""Client CPU of recall's decoding and re-rank: candidates as objects (before issue 50) vs as
columns, on the rows real PostgreSQL searches returned (speed.py's dataset and queries).

Each recall's search rows are captured once; then, per query, the best of five runs of (a) the old
path -- ``decode_vectors``, a ``row_candidate`` per row, the object re-rank kept as the reference in
``tests/property/test_columnar_rerank.py`` -- and (b) today's ``search_result`` + ``rerank`` on
columns, checked to return the same hits. CPU is the thread's (``time.thread_time_ns``).

    python benchmarks/columns_cpu.py --rows 10000 --queries 200
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = (
    os.path.abspath(sys.argv[sys.argv.index("--library") + 1])
    if "--library" in sys.argv
    else os.path.dirname(HERE)
)
sys.path.insert(0, ROOT)
sys.path.insert(1, HERE)
sys.path.insert(2, os.path.join(ROOT, "tests", "property"))  # that checkout's reference re-rank

import numpy as np  # noqa: E402


def _cpu(run: Callable[[], Any]) -> float:
    start = time.thread_time_ns()
    run()
    return (time.thread_time_ns() - start) / 1e3


async def main(args: argparse.Namespace) -> None:
    import asyncpg
    import speed
    from _common import DIM, database
    from recall_ab import PRIMARY, ModelEmbedder, speed_key
    from test_columnar_rerank import _object_rerank

    from prism_memory import create_memory
    from prism_memory.importing import import_entries
    from prism_memory.postgres import create_postgres_memory_stores
    from prism_memory.postgres import rows as decoding
    from prism_memory.postgres._codec import decode_vectors
    from prism_memory.postgres._engine import register_vector_codec
    from prism_memory.postgres.repositories import entries
    from prism_memory.postgres.rows import row_candidate
    from prism_memory.postgres.statements import to_positional
    from prism_memory.ranking import rerank

    data = speed.build_dataset(args.rows, max(10, args.rows // 100))
    table = dict(data.table)
    queries = [(q.thread, q.text) for q in speed.build_queries(data, args.queries, table)]
    captured: list[tuple[Any, Any]] = []
    statements: list[tuple[str, list[Any]]] = []
    real, real_statement = entries.search_result, entries.search_statement

    def capture(rows: Any, terms: Any) -> Any:
        captured.append((rows, terms))
        return real(rows, terms)

    def capture_statement(*given: Any, **options: Any) -> Any:
        statement, params, terms = real_statement(*given, **options)
        positional, names = to_positional(statement)
        statements.append((positional, [params[name] for name in names]))
        return statement, params, terms

    entries.search_result = capture  # type: ignore[assignment]
    entries.search_statement = capture_statement  # type: ignore[assignment]
    with database(args.url) as (url, libpq):
        stores = await create_postgres_memory_stores(url, dimension=DIM)

        def items() -> Any:
            for r in speed.arrival_order(data):
                yield {"id": r.id, "text": r.text, "vector": r.vector, **speed_key(speed, r.thread)}

        await import_entries(stores.vector_store, items(), model=PRIMARY, batch_size=1000)
        embedder = ModelEmbedder(table, PRIMARY)
        now = datetime.now(UTC)
        connection = await asyncpg.connect(libpq)
        await register_vector_codec(connection)
        for k in (10, 32):
            captured.clear()
            statements.clear()
            for t, text in queries:
                memory = create_memory(
                    **speed_key(speed, t), embedder=embedder,
                    vector_store=stores.vector_store, working_store=stores.working_store,
                )  # fmt: skip
                await memory.recall(text, top_k=k)
            fetch_us = []
            for positional, values in statements:

                async def fetch(positional: str = positional, values: Any = values) -> float:
                    start = time.thread_time_ns()
                    await connection.fetch(positional, *values)
                    return (time.thread_time_ns() - start) / 1e3

                await fetch()  # prepared once
                fetch_us.append(min([await fetch() for _ in range(5)]))
            old_us, new_us, sizes = [], [], []
            for (rows, terms), (_, text) in zip(captured, queries, strict=True):
                query = (await embedder.embed([text]))[0]
                stats = real(rows, terms).stats
                found = [r for r in rows if r["id"] is not None]
                sizes.append(len(found))
                options = {"query_vector": query, "query_text": text, "top_k": k, "now": now}

                def old(found: Any = found, stats: Any = stats, options: Any = options) -> Any:
                    vectors = decode_vectors([r["embedding"] for r in found])
                    made = [row_candidate(v, r, None) for r, v in zip(found, vectors, strict=True)]
                    hits = _object_rerank(
                        made, stats=stats, scoring=None, shared_thread_id=None, **options
                    )
                    return [hit.record.id for hit in hits]

                def new(rows: Any = rows, terms: Any = terms, options: Any = options) -> Any:
                    result = decoding.search_result(rows, terms)
                    hits = rerank(result.candidates, stats=result.stats, **options)
                    return [hit.record.id for hit in hits]

                if old() != new():
                    raise SystemExit("the two paths returned different hits")
                old_us.append(min(_cpu(old) for _ in range(5)))
                new_us.append(min(_cpu(new) for _ in range(5)))
            print(
                f"K={k}: candidates per recall median {statistics.median(sizes):.0f}; "
                f"decode + re-rank CPU median objects {statistics.median(old_us):.0f} µs, "
                f"columns {statistics.median(new_us):.0f} µs; p90 {np.percentile(old_us, 90):.0f} "
                f"/ {np.percentile(new_us, 90):.0f} µs; fetching the rows (driver) median "
                f"{statistics.median(fetch_us):.0f} µs, p90 {np.percentile(fetch_us, 90):.0f} µs",
                flush=True,
            )
        await connection.close()
        await stores.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--url", help="PostgreSQL URL (default: an embedded server)")
    parser.add_argument("--library", help="import prism_memory from this checkout instead")
    asyncio.run(main(parser.parse_args()))
