"""The PostgreSQL read path: one round trip, no transaction, a dead pooled connection retried once,
and the candidate re-fetch planned on the primary key."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from prism_memory.errors import StorageError
from prism_memory.models import MemoryIdentity
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres._engine import sets_plans
from prism_memory.postgres.statements import EntrySql, search_statement, to_positional
from prism_memory.stores.base import NewEntry, RecallFilter, SearchRequest

pytestmark = pytest.mark.postgres

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-1")


def _entry(i: int) -> NewEntry:
    return NewEntry(
        id=f"e{i}",
        text=f"text {i}",
        role="user",
        metadata={"n": i},
        consent=None,
        sequence=None,
        occurred_at=NOW,
        importance=1.0,
        lineage=None,
    )


async def _generate_rows(
    conn: Any,
    names: Any,
    count: int,
    *,
    thread: str,
    status: str = "'indexed'",
    vector: str = "CAST(:v AS vector)",
    params: dict[str, Any] | None = None,
    analyze: bool = True,
) -> None:
    """``count`` rows ``e1``… of tenant-a/user-1 made by the server (``generate_series`` as ``g``);
    ``thread``, ``status`` and ``vector`` are SQL expressions of ``g``. With ``analyze`` the
    table's statistics are gathered afterwards."""
    await conn.execute(
        text(
            f'INSERT INTO "{names.schema}"."{names.entries}" (tenant_id, resource_id, thread_id, '
            "id, text, role, metadata, consent_explicit, consent_source, consent_scope, "
            "consent_visible, sequence, occurred_at, created_at, written_at, importance, "
            "legal_hold, status, revision, attempts, embedding, term_count, text_tsv) "
            f"SELECT 'tenant-a', 'user-1', {thread}, 'e' || g, 'text ' || g, 'user', "
            "'{}'::jsonb, false, 'user', 'thread', true, g, now(), now(), now(), 1.0, false, "
            f"{status}, 1, 0, {vector}, 2, array_to_tsvector(ARRAY['text', g::text]) "
            f"FROM generate_series(1, {count}) AS g"
        ),
        params or {},
    )
    if analyze:
        await conn.execute(text(f'ANALYZE "{names.schema}"."{names.entries}"'))


def _request(vector: np.ndarray, limit: int = 3) -> SearchRequest:
    return SearchRequest(
        vector=vector, terms=frozenset(), limit=limit, filter=RecallFilter(now=NOW)
    )


def test_named_binds_become_positional_and_casts_stay():
    sql, names = to_positional(
        "SELECT CAST(:a AS text[]), 'NaN'::float8, :b::text, :a FROM t WHERE x = :c"
    )
    assert names == ("a", "b", "c")
    assert sql == "SELECT CAST($1 AS text[]), 'NaN'::float8, $2::text, $1 FROM t WHERE x = $3"


async def test_a_dead_pooled_connection_is_retried_once(postgres_url):
    schema = f"pm_test_{uuid.uuid4().hex[:12]}"
    stores = await create_postgres_memory_stores(postgres_url, schema=schema, dimension=4)
    libpq = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    try:
        store = stores.vector_store
        assert sets_plans(stores.engine)
        await store.put_entries(SCOPE, [_entry(i) for i in range(3)], now=NOW)
        rng = np.random.default_rng(1)
        vectors = {f"e{i}": rng.standard_normal(4).astype(np.float32) for i in range(3)}
        await store.store_vectors(SCOPE, [(k, 1, v) for k, v in vectors.items()], now=NOW)
        query = vectors["e1"]
        first = (await store.search(SCOPE, _request(query))).candidates
        assert {c.record.id for c in first} == {"e0", "e1", "e2"}
        # the backend of the connection the store reads on dies (a failover, an idle timeout, an
        # admin): the connection it keeps between operations, which the next read takes
        pid = await store.executor.fetchval("pid", "SELECT pg_backend_pid()")
        killer = await asyncpg.connect(libpq)
        try:
            assert await killer.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await killer.close()
        again = (await store.search(SCOPE, _request(query))).candidates
        assert [c.record.id for c in again] == [c.record.id for c in first]
        assert again[0].record.metadata == first[0].record.metadata
    finally:
        async with stores.engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await stores.close()


async def test_a_read_opens_no_transaction(make_postgres_stores):
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    names = store.tables.names
    # VACUUM refuses to run inside a transaction block: sent the way reads are sent, it runs,
    # so nothing wraps a read in BEGIN/COMMIT.
    vacuum = f'VACUUM "{names.schema}"."{names.entries}"'
    await store.executor.fetch("probe", vacuum, {})
    with pytest.raises(StorageError, match="transaction block"):
        async with store.executor.unit("probe") as unit:
            await unit.execute(vacuum)


async def test_refetch_reads_the_chosen_rows_by_address(make_postgres_stores):
    """The re-fetch of the chosen candidates is a TID scan, for a custom and a generic plan, before
    the table has statistics (a host's first minutes after a bulk load) and after: it never walks
    an index range (a merge join on the primary key walked the resource from its first thread;
    without statistics the planner read the resource's scope range and filtered it by address)."""
    stores = await make_postgres_stores(dimension=8)
    store = stores.vector_store
    names = store.tables.names
    rng = np.random.default_rng(3)
    scope = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-3")
    sql, params, _ = search_statement(
        EntrySql.for_tables(store.tables).recall, scope, _request(rng.standard_normal(8), limit=40)
    )
    async with stores.engine.begin() as conn:
        await _generate_rows(
            conn,
            names,
            20000,
            thread="'thread-' || (g % 5)",
            params={"v": rng.standard_normal(8).astype(np.float32)},
            analyze=False,
        )
    for statistics in (False, True):
        if statistics:
            async with stores.engine.begin() as conn:
                await conn.execute(text(f'ANALYZE "{names.schema}"."{names.entries}"'))
        for mode in ("force_custom_plan", "force_generic_plan"):
            nodes = await _plan_nodes(stores.engine, sql, params, mode)
            scans = [n for n in nodes if n.get("Relation Name") == names.entries]
            where = (statistics, mode, nodes)
            # the chosen rows are read by their address, and only by it
            assert "Tid Scan" in {n["Node Type"] for n in scans}, where
            assert not any("ctid" in n.get("Filter", "") for n in scans), where
            assert not any(n["Node Type"] == "Merge Join" for n in nodes), where
            assert names.ix_hnsw not in json.dumps(nodes), where


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found += _nodes(child)
    return found


def _plan_tree(plan: Any) -> list[dict[str, Any]]:
    """``EXPLAIN (FORMAT JSON)`` output as a list (a driver may hand it over decoded or as text)."""
    return json.loads(plan) if isinstance(plan, str) else plan


async def _plan_nodes(engine: Any, sql: str, params: dict[str, Any], mode: str) -> list[Any]:
    """Every node of ``sql``'s plan under ``plan_cache_mode = mode`` (custom or generic)."""
    async with engine.connect() as conn:
        await conn.execute(text(f"SET plan_cache_mode = {mode}"))
        plan = (await conn.execute(text(f"EXPLAIN (FORMAT JSON) {sql}"), params)).scalar_one()
        await conn.rollback()
    return _nodes(_plan_tree(plan)[0]["Plan"])


async def test_a_big_thread_reads_its_tombstones_once(make_postgres_stores):
    """The plan-shape regression: the exclusion rules read the thread's tombstones once and test
    each row by a lookup, never by a probe or a join per row (which walked the tombstones once per
    row with lineage and anti-joined per row), and the generic plan has the same shape."""
    stores = await make_postgres_stores(dimension=8)
    store = stores.vector_store
    names = store.tables.names
    entries = f'"{names.schema}"."{names.entries}"'
    invalidation = f'"{names.schema}"."{names.invalidation}"'
    rng = np.random.default_rng(5)
    async with stores.engine.begin() as conn:
        # one 3,000-row thread: e1, e11, e21, ... revoked, and e10, e20, ... derived from them
        await conn.execute(
            text(
                f"INSERT INTO {entries} (tenant_id, resource_id, thread_id, id, text, role, metadata, "
                "consent_explicit, consent_source, consent_scope, consent_visible, sequence, "
                "occurred_at, created_at, written_at, importance, legal_hold, status, revision, "
                "attempts, embedding, term_count, text_tsv) "
                "SELECT 'tenant-a', 'user-1', 'thread-1', 'e' || g, 'text ' || g, 'user', "
                "CASE WHEN g % 10 = 0 THEN jsonb_build_object('_lineage', "
                "jsonb_build_object('sourceIds', jsonb_build_array('e' || (g - 9)))) "
                "ELSE '{}'::jsonb END, false, 'user', 'thread', true, g, now(), now(), now(), 1.0, "
                "false, 'indexed', 1, 0, CAST(:v AS vector), 2, "
                "array_to_tsvector(ARRAY['text', g::text]) FROM generate_series(1, 3000) AS g"
            ),
            {"v": rng.standard_normal(8).astype(np.float32)},
        )
        await conn.execute(
            text(
                f"INSERT INTO {invalidation} (tenant_id, resource_id, thread_id, entry_id, "
                "cause_id, reason, created_at) SELECT 'tenant-a', 'user-1', 'thread-1', "
                "'e' || g, 'e' || g, 'revoked', now() FROM generate_series(1, 3000, 10) AS g"
            )
        )
        await conn.execute(text(f"ANALYZE {entries}"))
        await conn.execute(text(f"ANALYZE {invalidation}"))
    request = SearchRequest(
        vector=rng.standard_normal(8).astype(np.float32),
        terms=frozenset({"text"}),
        limit=40,
        filter=RecallFilter(now=NOW),
    )
    sql, params, _ = search_statement(
        EntrySql.for_tables(store.tables).recall, scope_of_thread(), request
    )
    found = await store.search(scope_of_thread(), request)
    # 300 rows hold a revoked tombstone and 300 derive from one: 2,400 remain
    assert found.stats.documents == 2400
    assert found.pending == 0
    positional, names_in_order = to_positional(sql)
    args = [params[name] for name in names_in_order]
    async with stores.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        analyzed = await driver.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {positional}", *args)
        # the plan a prepared statement keeps: PREPARE under force_generic_plan, run with literals
        await driver.execute("SET plan_cache_mode = force_generic_plan")
        try:
            await driver.execute(f"PREPARE shape AS {positional}")
            generic = await driver.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE shape("
                + ", ".join(_literal(value) for value in args)
                + ")"
            )
        finally:
            await driver.execute("DEALLOCATE ALL; RESET plan_cache_mode")
    for plan, what in ((analyzed, "custom"), (generic, "generic")):
        nodes = _nodes(_plan_tree(plan)[0]["Plan"])
        on_tombstones = [n for n in nodes if n.get("Relation Name") == names.invalidation]
        assert len(on_tombstones) == 1, f"{what}: the tombstones are read once"
        assert all(n.get("Actual Loops", 1) == 1 for n in on_tombstones), f"{what}: not per row"
        assert not any(n.get("Index Name") == names.ix_hnsw for n in nodes), what


def _literal(value: object) -> str:
    """``value`` as an SQL literal (the few types the search binds)."""
    if isinstance(value, np.ndarray):
        return "'[" + ",".join(repr(float(x)) for x in value) + "]'"
    if isinstance(value, list):
        return "'{" + ",".join('"' + str(x).replace("'", "''") + '"' for x in value) + "}'"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def scope_of_thread() -> MemoryIdentity:
    return MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-1")


async def test_count_pending_keeps_the_pending_index_in_a_generic_plan(make_postgres_stores):
    """``count_pending`` names its status as a constant, so the plan PostgreSQL caches (generic
    after five runs on the factory's engines) can use the partial pending index; with a bound
    status the generic plan walked the whole thread's scope range."""
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    names = store.tables.names
    async with stores.engine.begin() as conn:  # one big thread of indexed rows, a few pending
        pending = "g % 1000 = 0"
        await _generate_rows(
            conn,
            names,
            20000,
            thread="'thread-1'",
            status=f"CASE WHEN {pending} THEN 'pending' ELSE 'indexed' END",
            vector=f"CASE WHEN {pending} THEN NULL ELSE CAST('[1,0,0,0]' AS vector) END",
        )
    seen: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if "count(" in statement:
            seen.append((statement, parameters))

    sync_engine = stores.engine.sync_engine
    event.listen(sync_engine, "before_cursor_execute", capture)
    try:
        assert await store.count_pending(SCOPE) == 20
    finally:
        event.remove(sync_engine, "before_cursor_execute", capture)
    ((statement, parameters),) = seen
    async with stores.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        # the plan a prepared statement runs once PostgreSQL caches the generic one
        values = ", ".join(_literal(value) for value in parameters)
        await driver.execute(f"PREPARE counted AS {statement}")
        await driver.execute("SET plan_cache_mode = force_generic_plan")
        plan = await driver.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE counted({values})")
        await driver.execute("RESET plan_cache_mode; DEALLOCATE counted")
    used = {n.get("Index Name") for n in _nodes(_plan_tree(plan)[0]["Plan"])}
    assert used & {names.ix_pending, names.ix_pending_tenant, names.ix_pending_scope}, plan


async def test_a_small_thread_reads_its_range_in_a_table_of_few_big_threads(make_postgres_stores):
    """With few threads in the table the planner took "one thread" for a third of it and scanned
    the whole table for a 100-row thread; revision 0009 makes it estimate a thread at a few rows,
    so the thread's range is read through its index, for the custom and the generic plan."""
    stores = await make_postgres_stores(dimension=8)
    store = stores.vector_store
    names = store.tables.names
    rng = np.random.default_rng(9)
    async with stores.engine.begin() as conn:
        await _generate_rows(
            conn,
            names,
            11100,
            thread="CASE WHEN g <= 100 THEN 'small' WHEN g <= 1100 THEN 'medium' ELSE 'big' END",
            params={"v": rng.standard_normal(8).astype(np.float32)},
        )
    scope = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="small")
    sql, params, _ = search_statement(
        EntrySql.for_tables(store.tables).recall, scope, _request(rng.standard_normal(8), limit=40)
    )
    for mode in ("force_custom_plan", "force_generic_plan"):
        nodes = await _plan_nodes(stores.engine, sql, params, mode)
        scans = {n["Node Type"] for n in nodes if n.get("Relation Name") == names.entries}
        assert "Seq Scan" not in scans, (mode, nodes)


async def test_a_read_cancelled_midway_drops_its_connection(postgres_url):
    """A recall cancelled while its statement runs never hands that connection out again (its
    server process may still be running the statement): the next read gets a new connection."""
    schema = f"pm_test_{uuid.uuid4().hex[:12]}"
    stores = await create_postgres_memory_stores(
        postgres_url,
        schema=schema,
        dimension=4,
        engine_options={"pool_size": 1, "max_overflow": 0},
    )
    libpq = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    watcher = await asyncpg.connect(libpq)
    try:
        store = stores.vector_store
        ((before,),) = await store.executor.fetch("pid", "SELECT pg_backend_pid()", {})
        sleeping = asyncio.ensure_future(store.executor.fetch("sleep", "SELECT pg_sleep(30)", {}))
        running = "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)'"
        for _ in range(3000):  # until the statement runs (or 30 s)
            if await watcher.fetchval(running):
                break
            await asyncio.sleep(0.01)
        sleeping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sleeping
        ((after,),) = await store.executor.fetch("pid", "SELECT pg_backend_pid()", {})
        assert after != before
    finally:
        await watcher.close()
        async with stores.engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await stores.close()


def test_a_row_decodes_each_record_field_from_its_own_column():
    """record_from_row builds the record positionally (a microsecond per hit): every field must
    still come from the column of its name, whatever order the dataclass declares them in."""
    from dataclasses import fields

    from prism_memory.models import MemoryRecord
    from prism_memory.postgres.rows import RECORD_COLUMNS, record_from_row

    row: dict[str, Any] = {name: f"value of {name}" for name in RECORD_COLUMNS}
    numbers = ("sequence", "importance", "revision", "attempts")
    row.update({name: n for n, name in enumerate(numbers, start=11)})
    row.update(metadata="{}", consent_explicit=False, legal_hold=True)
    record = record_from_row(row)
    for field in fields(MemoryRecord):
        if field.name in ("metadata", "consent", "lineage"):
            continue
        assert getattr(record, field.name) == row[field.name], field.name
    assert (record.metadata, record.consent, record.lineage) == ({}, None, None)
