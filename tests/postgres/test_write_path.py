"""The shape of remember's insert on PostgreSQL: its cost per batch must not grow with the thread.

The exact insert (:attr:`EntrySql.insert`) looked the batch's ids up first, in a probe whose plan
the planner picked; on a table without statistics -- a new install, or a thread far above the
average size -- it walked the thread's whole ``(scope, sequence)`` range, filtering every row
against the batch (measured: 8 ms for the second 128-row batch of a thread, 36 ms for the
twenty-third). :attr:`EntrySql.insert_new`, the form the store runs first, probes the primary key
once per row, whatever the statistics.

The bulk import's two probes -- ``known_keys`` (which rows of a batch are stored) and the import
insert (which staged rows are new) -- were plain correlated equalities: the planner estimated a
thread at one row for both B-trees that lead with its three columns and took the ``(scope,
sequence)`` one, so each probe walked the key's whole thread (measured: 97 ms for a 1,000-key
batch in 90-row threads, a 100k-row import at 0.26x of ``COPY``). Both now ask for the first
stored key at or after the probed one (:meth:`TableSql.stored_key`), which only the primary key
can answer without a sort.

The same held for every lookup of a thread's ids by ``id = ANY(...)``: the exact insert's, a
replay's read-back of its stored rows (and ``get_entries``), ``known_ids``, and the check of a
derived entry's lineage sources each walked the whole thread (3,000 rows filtered out for ten
ids). They now descend the primary key once per id (:meth:`TableSql.stored_of_ids`).

Those descents also named the tenant as a plain equality (for a shard router) *before* the row
comparison on the whole key, and the B-tree then started each descent at the tenant's first key
and tested every key after it up to the id: 16,000 ids in a 100,000-row tenant took 15 s. No row
count shows that (the keys walked are not rows returned nor rows filtered), so the tests of these
lookups count the pages a plan touches (``EXPLAIN (ANALYZE, BUFFERS)``) in a tenant whose other
rows sort before the thread.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from prism_memory.models import MemoryIdentity
from prism_memory.postgres.rows import STAGE_COLUMNS, insert_params, scope_params, stage_records
from prism_memory.postgres.statements import EntrySql, RowSql, to_positional
from prism_memory.stores.base import ImportRow, NewEntry

pytestmark = pytest.mark.postgres

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="tenant-a", resource_id="user-1", thread_id="thread-1")


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found += _nodes(child)
    return found


def _new(entry_id: str) -> NewEntry:
    return NewEntry(
        id=entry_id,
        text=f"note {entry_id}",
        role="user",
        metadata={},
        consent=None,
        sequence=None,
        occurred_at=NOW,
        importance=1.0,
        lineage=None,
    )


ROWS = 3000


async def _big_thread(stores: Any, *, before: int = 0) -> str:
    """One 3,000-row thread of :data:`SCOPE`, and no ``ANALYZE``: the planner has no statistics
    of the table. ``before``: that many more rows of the tenant in a resource that sorts before
    the thread's (``user-0``), which a descent starting at the tenant's first key walks past.
    Returns the entries table's name."""
    names = stores.vector_store.tables.names
    entries = f'"{names.schema}"."{names.entries}"'
    async with stores.engine.begin() as conn:
        for resource, rows in (("user-1", ROWS), ("user-0", before)):
            await conn.execute(
                text(
                    f"INSERT INTO {entries} (tenant_id, resource_id, thread_id, id, text, role, "
                    "metadata, consent_explicit, consent_source, consent_scope, consent_visible, "
                    "sequence, occurred_at, created_at, written_at, importance, legal_hold, "
                    "status, revision, attempts, term_count) "
                    f"SELECT 'tenant-a', '{resource}', 'thread-1', 'e' || g, 'text ' || g, "
                    "'user', '{}'::jsonb, false, 'user', 'thread', true, g, now(), now(), now(), "
                    f"1.0, false, 'pending', 1, 0, 2 FROM generate_series(0, {rows - 1}) AS g"
                )
            )
    return entries


OTHER_ROWS = 20_000


def _pages(plan: Any, table: str) -> int:
    """Shared buffers (hit or read) the plan's scans of ``table`` touched, its index pages and
    heap pages (``EXPLAIN (ANALYZE, BUFFERS)``; a scan node has no child to count twice)."""
    nodes = _nodes((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    return sum(
        int(n.get("Shared Hit Blocks", 0)) + int(n.get("Shared Read Blocks", 0))
        for n in nodes
        if n.get("Relation Name") == table
    )


PAGES_PER_ID = 5
"""Pages one primary-key descent and its row may touch: the B-tree's root, inner and leaf pages
(three levels at these sizes) and a heap page, with one to spare."""


def _reads(plan: Any, table: str) -> tuple[int, int]:
    """Rows the plan read from ``table``, and rows it read there only to filter them out."""
    nodes = _nodes((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    on_table = [n for n in nodes if n.get("Relation Name") == table]
    read = sum(int(n.get("Actual Rows", 0)) * int(n.get("Actual Loops", 1)) for n in on_table)
    filtered = sum(int(n.get("Rows Removed by Filter", 0)) for n in on_table)
    return read, filtered


async def _explained(
    stores: Any, statement: str, values: dict[str, Any], then: str | None = None
) -> tuple[Any, list[Any]]:
    """``EXPLAIN ANALYZE`` of ``statement`` with ``values`` and the rows of ``then`` read after
    it, in a transaction rolled back afterwards (EXPLAIN ANALYZE runs a write)."""
    positional, order = to_positional(statement)
    async with stores.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        await driver.execute("BEGIN")
        try:
            plan = await driver.fetchval(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {positional}", *(values[n] for n in order)
            )
            return plan, [] if then is None else list(await driver.fetch(then))
        finally:
            await driver.execute("ROLLBACK")


async def _plan(stores: Any, statement: str, values: dict[str, Any]) -> Any:
    """``EXPLAIN ANALYZE`` of ``statement`` with ``values``, rolled back."""
    plan, _ = await _explained(stores, statement, values)
    return plan


async def test_a_batch_into_a_big_thread_of_an_unanalysed_table_reads_no_range(
    make_postgres_stores,
):
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    names = store.tables.names
    entries = await _big_thread(stores)
    batch = [_new(f"n{k}") for k in range(128)]
    vectors = list(np.eye(4, dtype=np.float32)[np.arange(128) % 4])
    params = insert_params(SCOPE, batch, now=NOW, lease=None, vectors=vectors, model="m")
    plan, counted = await _explained(
        stores,
        EntrySql.for_tables(store.tables).rows.insert_new,
        params,
        then=f"SELECT count(*) FROM {entries} WHERE sequence >= 3000 AND id LIKE 'n%'",
    )
    inserted = counted[0][0]
    nodes = _nodes((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    assert inserted == 128, "the batch went in, numbered after the thread's rows"
    on_entries = [n for n in nodes if n.get("Relation Name") == names.entries]
    filtered = sum(int(n.get("Rows Removed by Filter", 0)) for n in nodes)
    read = sum(int(n.get("Actual Rows", 0)) * int(n.get("Actual Loops", 1)) for n in on_entries)
    assert filtered == 0, f"no row of the thread is filtered: {filtered}"
    # the insert node itself, and one row for the thread's largest sequence
    assert read <= len(batch) + 1, f"rows read from the entries table: {read}"


async def test_known_keys_descend_the_primary_key_once_per_key(make_postgres_stores):
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    await _big_thread(stores)
    stored = [(SCOPE, f"e{k}") for k in range(0, ROWS, 97)]  # 31 keys spread over the thread
    new = [(SCOPE, f"n{k}") for k in range(33)]
    keys = [key for pair in zip(stored, new, strict=False) for key in pair] + new[len(stored) :]
    assert await store.known_keys(keys) == set(stored)

    statement, order = to_positional(EntrySql.for_tables(store.tables).rows.known_keys)
    values = {
        "tenants": [scope.tenant_id for scope, _ in keys],
        "resources": [scope.resource_id for scope, _ in keys],
        "threads": [scope.thread_id for scope, _ in keys],
        "ids": [entry_id for _, entry_id in keys],
    }
    async with stores.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        plan = await driver.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", *(values[n] for n in order)
        )
    read, filtered = _reads(plan, store.tables.names.entries)
    assert filtered == 0, f"rows of the thread read only to be filtered out: {filtered}"
    assert read <= len(keys), f"rows read from the entries table for {len(keys)} keys: {read}"


async def test_the_import_insert_descends_the_primary_key_once_per_staged_row(
    make_postgres_stores,
):
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    entries = await _big_thread(stores)
    batch = [
        ImportRow(scope=SCOPE, entry=_new(f"n{k}"), vector=None, model=None) for k in range(64)
    ]
    batch.append(ImportRow(scope=SCOPE, entry=_new("e5"), vector=None, model=None))  # stored
    sql = EntrySql.for_tables(store.tables).importing
    insert, order = to_positional(sql.import_insert)
    async with stores.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        await driver.execute(f"BEGIN; {sql.import_stage}")
        try:  # EXPLAIN ANALYZE runs the insert: rolled back afterwards
            await driver.copy_records_to_table(
                sql.stage.split(".", 1)[1].strip('"'),
                schema_name="pg_temp",
                records=stage_records(batch),
                columns=STAGE_COLUMNS,
            )
            plan = await driver.fetchval(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {insert}",
                *({"now": NOW, "windows": [], "window_rows": []}[n] for n in order),
            )
            added = await driver.fetch(
                f"SELECT id, sequence FROM {entries} WHERE sequence >= {ROWS} ORDER BY sequence"
            )
        finally:
            await driver.execute("ROLLBACK")
    assert [(row["id"], row["sequence"]) for row in added] == [
        (f"n{k}", ROWS + k) for k in range(64)
    ], "the new rows went in after the thread's, in staging order; the stored one did not"
    read, filtered = _reads(plan, store.tables.names.entries)
    assert filtered == 0, f"rows of the thread read only to be filtered out: {filtered}"
    # the insert node's rows, one descent per staged row and the thread's largest sequence
    assert read <= 2 * len(batch) + 1, f"rows read from the entries table: {read}"


_STORED = [f"e{k}" for k in range(0, ROWS, 300)]  # ten ids spread over the thread


async def test_reading_stored_records_back_descends_the_primary_key_once_per_id(
    make_postgres_stores,
):
    """A replay reads its stored rows back (:attr:`RowSql.records`, also ``get_entries``),
    ``known_ids`` asks which exist, and a watcher polls ``index_status``: each walked the
    thread, then the tenant's keys before each id."""
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    await _big_thread(stores, before=OTHER_ROWS)
    found = await store.get_entries(SCOPE, [*_STORED, "missing"])
    assert sorted(r.id for r in found) == sorted(_STORED)

    assert await store.known_ids(SCOPE, [*_STORED, "missing"]) == set(_STORED)
    statuses = await store.index_status(SCOPE, [*_STORED, "missing"])
    assert statuses == dict.fromkeys(_STORED, ("pending", None))

    ids = [*_STORED, "missing", _STORED[0]]  # an unknown id and a repeat read nothing more
    sql = RowSql.for_tables(store.tables)
    # a replay's read-back and get_entries, known_ids, and the status a watcher polls
    for statement in (sql.records, sql.known_ids, sql.index_status):
        plan = await _plan(stores, statement, {**scope_params(SCOPE), "ids": ids})
        read, filtered = _reads(plan, store.tables.names.entries)
        assert filtered == 0, f"rows of the thread read only to be filtered out: {filtered}"
        assert read <= len(ids), f"rows read from the entries table for {len(ids)} ids: {read}"
        pages = _pages(plan, store.tables.names.entries)
        assert pages <= PAGES_PER_ID * len(ids), f"pages touched for {len(ids)} ids: {pages}"


async def test_checking_lineage_sources_descends_the_primary_key_once_per_source(
    make_postgres_stores,
):
    """Remembering a derived entry looks its sources up (:attr:`EntrySql.lineage_sources`)."""
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    await _big_thread(stores, before=OTHER_ROWS)
    ids = [*_STORED, "missing"]
    sql = EntrySql.for_tables(store.tables).lineage
    plan = await _plan(stores, sql.lineage_sources, {**scope_params(SCOPE), "ids": ids})
    read, filtered = _reads(plan, store.tables.names.entries)
    assert filtered == 0, f"rows of the thread read only to be filtered out: {filtered}"
    assert read <= len(ids), f"rows read from the entries table for {len(ids)} sources: {read}"
    pages = _pages(plan, store.tables.names.entries)
    assert pages <= PAGES_PER_ID * len(ids), f"pages touched for {len(ids)} sources: {pages}"


async def test_the_exact_insert_descends_the_primary_key_once_per_row(make_postgres_stores):
    """A batch of stored and new ids is written again with :attr:`EntrySql.insert`, whose
    lookup of the stored ids once walked the thread."""
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    entries = await _big_thread(stores)
    batch = [_new(f"n{k}") for k in range(64)] + [_new(i) for i in _STORED]
    params = insert_params(SCOPE, batch, now=NOW, lease=None, vectors=None, model=None)
    plan, added = await _explained(
        stores,
        EntrySql.for_tables(store.tables).rows.insert,
        params,
        then=f"SELECT id, sequence FROM {entries} WHERE sequence >= {ROWS} ORDER BY sequence",
    )
    assert [(row["id"], row["sequence"]) for row in added] == [
        (f"n{k}", ROWS + k) for k in range(64)
    ], "the new rows went in after the thread's, in input order, without a gap"
    read, filtered = _reads(plan, store.tables.names.entries)
    assert filtered == 0, f"rows of the thread read only to be filtered out: {filtered}"
    # the insert node's rows, one descent per row and the thread's largest sequence
    assert read <= 2 * len(batch) + 1, f"rows read from the entries table: {read}"
