"""A lookup by id costs what was asked for, never the rest of the tenant (issue 46, item 2).

The same 16,000-row thread in two tenants: one where it is all the tenant holds, one where the
tenant holds ``--others`` more rows in other resources and threads (half sorting before the
thread's keys, half after). Each asks ``index_status``, ``get_entries`` and ``known_ids`` for all
16,000 ids of the thread; the figure is the median of ``--rounds`` runs after a warm-up, and the
ratio of the big tenant to the lone one (the target: at most 2x). With ``--old`` the statement
shape before the fix (``e.tenant_id = :tenant AND ROW(e.tenant_id, ...) >= ROW(...)``) is run
once on each tenant too, straight on the driver, for comparison.

    .venv/bin/python benchmarks/lookup_by_id.py            # 100,000 rows, about a minute
    .venv/bin/python benchmarks/lookup_by_id.py --old      # and the old statement (+ ~40 s)
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import database
from prism_memory.models import MemoryIdentity
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres.rows import scope_params
from prism_memory.postgres.statements import RowSql, to_positional

THREAD = 16_000
LONE = MemoryIdentity(tenant_id="lone", resource_id="user-m", thread_id="thread-1")
BIG = MemoryIdentity(tenant_id="big", resource_id="user-m", thread_id="thread-1")
NEW = "ROW(e.resource_id, e.thread_id, e.id) >= ROW(CAST(:resource AS text), CAST(:thread AS text), k.id)"
OLD = (
    "ROW(e.tenant_id, e.resource_id, e.thread_id, e.id) >= ROW(CAST(:tenant AS text), "
    "CAST(:resource AS text), CAST(:thread AS text), k.id)"
)


def _insert(entries: str, tenant: str, resource: str, thread: str, rows: int) -> str:
    return (
        f"INSERT INTO {entries} (tenant_id, resource_id, thread_id, id, text, role, metadata, "
        "consent_explicit, consent_source, consent_scope, consent_visible, sequence, occurred_at, "
        "created_at, written_at, importance, legal_hold, status, revision, attempts, term_count) "
        f"SELECT '{tenant}', '{resource}', '{thread}', 'e' || g, 'text ' || g, 'user', "
        "'{}'::jsonb, false, 'user', 'thread', true, g, now(), now(), now(), 1.0, false, "
        f"'indexed', 1, 0, 2 FROM generate_series(0, {rows - 1}) AS g"
    )


async def _load(driver: Any, entries: str, others: int) -> None:
    for scope in (LONE, BIG):
        await driver.execute(
            _insert(entries, scope.tenant_id, scope.resource_id, scope.thread_id, THREAD)
        )
    threads = max(1, others // 1000)
    for k in range(threads):  # 1,000-row threads, half in resources before the thread's
        resource = f"user-a{k:04d}" if k % 2 == 0 else f"user-z{k:04d}"
        await driver.execute(_insert(entries, BIG.tenant_id, resource, "t", others // threads))
    await driver.execute(f"ANALYZE {entries}")


async def _timed(call: Any, rounds: int) -> float:
    await call()  # warm-up
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--url", help="a PostgreSQL URL (default: an embedded server)")
    parser.add_argument("--others", type=int, default=100_000 - THREAD, help="rows beside it")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--old", action="store_true", help="also run the old statement once")
    args = parser.parse_args()
    ids = [f"e{k}" for k in range(THREAD)]
    with database(args.url) as (url, _):
        stores = await create_postgres_memory_stores(url, schema="pm_bench_lookup", dimension=4)
        store = stores.vector_store
        names = store.tables.names
        entries = f'"{names.schema}"."{names.entries}"'
        try:
            async with stores.engine.connect() as conn:
                driver = (await conn.get_raw_connection()).driver_connection
                started = time.perf_counter()
                await _load(driver, entries, args.others)
                loaded = time.perf_counter() - started
                total = await driver.fetchval(
                    f"SELECT count(*) FROM {entries} WHERE tenant_id = 'big'"
                )
            print(
                f"{platform.processor() or platform.machine()}, {THREAD:,} ids; tenant 'big' holds "
                f"{total:,} rows (loaded in {loaded:.1f} s); median of {args.rounds}",
                flush=True,
            )
            print(
                "| lookup of 16,000 ids | alone in its tenant | tenant of "
                f"{total:,} rows | ratio |\n| --- | --- | --- | --- |"
            )
            calls = {
                "index_status": lambda scope: store.index_status(scope, ids),
                "get_entries": lambda scope: store.get_entries(scope, ids),
                "known_ids": lambda scope: store.known_ids(scope, ids),
            }
            for name, call in calls.items():
                lone = await _timed(lambda c=call: c(LONE), args.rounds)
                big = await _timed(lambda c=call: c(BIG), args.rounds)
                print(
                    f"| `{name}` | {lone * 1000:.0f} ms | {big * 1000:.0f} ms | {big / lone:.2f}x |",
                    flush=True,
                )
            if args.old:
                sql = RowSql.for_tables(store.tables).index_status
                assert NEW in sql
                old, order = to_positional(sql.replace(NEW, OLD))
                async with stores.engine.connect() as conn:
                    driver = (await conn.get_raw_connection()).driver_connection
                    figures = []
                    for scope in (LONE, BIG):
                        values = {**scope_params(scope), "ids": ids}
                        started = time.perf_counter()
                        await driver.fetch(old, *(values[n] for n in order))
                        figures.append(time.perf_counter() - started)
                print(
                    f"| `index_status`, the old statement (once) | {figures[0] * 1000:.0f} ms | "
                    f"{figures[1] * 1000:.0f} ms | {figures[1] / figures[0]:.2f}x |"
                )
        finally:
            async with stores.engine.begin() as conn:
                await (await conn.get_raw_connection()).driver_connection.execute(
                    f'DROP SCHEMA "{names.schema}" CASCADE'
                )
            await stores.close()


if __name__ == "__main__":
    asyncio.run(main())
