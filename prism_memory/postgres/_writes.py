"""Writing new entries on PostgreSQL: ``put_entries`` (remember's hot path) and the bulk import,
each one transaction on the asyncpg driver under the threads' advisory locks (see
:mod:`prism_memory.postgres._adapter` for the rule)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from ..errors import DimensionMismatchError
from ..models import MemoryIdentity, MemoryRecord, Vector, check_id_collection
from ..stores.base import (
    EntryLease,
    ImportRow,
    MetadataPatch,
    NewEntry,
    StoredEntries,
    Tombstone,
    check_entry_vectors,
    check_lineage_sources,
    lineage_source_ids,
)
from ..stores.rules import inherited_tombstones
from ._adapter import _VectorAdapter
from ._errors import wrap_db_errors
from .repositories import EntryRepository
from .rows import (
    STAGE_COLUMNS,
    insert_params,
    inserted_record,
    record_from_row,
    scope_params,
    stage_records,
)
from .statements import (
    EntrySql,
    begin_locked_statement,
    records_statement,
    thread_lock_key,
    to_positional,
)

__all__: list[str] = []


def _finite_rows(vectors: object, rows: int, width: int | None) -> list[Vector] | None:
    """The rows of ``vectors`` if it is a finite ``float32`` matrix of ``rows`` rows (of ``width``
    columns when known) -- what an embedder's batch usually is, checked in one pass -- else
    ``None``: then each vector is checked on its own and a bad one named in the error."""
    if (
        not isinstance(vectors, np.ndarray)
        or vectors.dtype != np.float32
        or vectors.ndim != 2
        or vectors.shape[0] != rows
        or vectors.shape[1] == 0
        or (width is not None and vectors.shape[1] != width)
        or not np.isfinite(vectors).all()
    ):
        return None
    return list(vectors)


def _lineage_scopes(rows: Sequence[ImportRow]) -> dict[MemoryIdentity, list[ImportRow]]:
    """The rows of every thread of an import batch that holds an entry with lineage."""
    by_scope: dict[MemoryIdentity, list[ImportRow]] = {}
    for row in rows:
        by_scope.setdefault(row.scope, []).append(row)
    return {
        scope: group
        for scope, group in by_scope.items()
        if any(row.entry.lineage is not None and row.entry.lineage.source_ids for row in group)
    }


class _StoredAndNewError(Exception):
    """:attr:`EntrySql.insert_new` met a batch of stored and new ids: written again exactly."""


class _EntryWrites(_VectorAdapter):
    """``put_entries``, ``known_keys`` and ``import_rows`` of
    :class:`~prism_memory.postgres.PostgresVectorStore`."""

    async def put_entries(
        self,
        scope: MemoryIdentity,
        entries: Sequence[NewEntry],
        *,
        now: datetime,
        lease: EntryLease | None = None,
        vectors: Sequence[Vector] | Vector | None = None,
        model: str | None = None,
    ) -> StoredEntries:
        """Insert the entries whose id is new, atomically (see :meth:`VectorStore.put_entries`).

        One transaction on the pooled connection's asyncpg driver (no ORM session; statements
        prepared once per connection), three round trips: ``BEGIN`` with a transaction-scoped
        advisory lock (:func:`begin_locked_statement`) serialises the writers of one thread, so
        sequence assignment (``max + 1``, 0 in an empty thread, in input order) never collides;
        then one statement inserts the new rows -- with their vectors, ``indexed``, when
        ``vectors`` are given (:attr:`EntrySql.insert_new`, or without a window over the batch
        :attr:`EntrySql.insert_new_appended` when no entry gives a sequence; a batch of stored
        and new ids is written again with :attr:`EntrySql.insert`). Only when some ids already
        exist are they read back, as stored; an existing id is never rewritten.
        """
        check_entry_vectors(entries, vectors)
        if not entries:
            return StoredEntries()
        first: dict[str, int] = {}  # the first occurrence of an id wins
        for at, entry in enumerate(entries):
            first.setdefault(entry.id, at)
        unique = [entries[at] for at in first.values()]
        with wrap_db_errors("put_entries"):
            async with self._driver() as driver:
                checked: list[Vector] | None = None
                width = self._width
                if vectors is not None:
                    if width is None:  # unpinned: the width of the vectors stored so far
                        async with self._alone(driver):
                            width = await driver.fetchval(
                                EntrySql.for_tables(self._tables).any_width
                            )
                    checked = _finite_rows(vectors, len(unique), width)
                    if checked is not None:
                        width = checked[0].shape[0]
                if vectors is not None and checked is None:
                    checked, width = self._check_vectors(
                        ((vectors[at], f"vectors[{at}]") for at in first.values()),
                        width,
                    )
                params = insert_params(
                    scope, unique, now=now, lease=lease, vectors=checked, model=model
                )
                # insert_new first (one primary-key probe per row, whatever the table's
                # statistics); a batch of stored and new ids again with the exact insert, so the
                # sequences keep no gap
                indexed = checked is not None
                try:
                    stored, inserted = await self._insert(
                        driver,
                        scope,
                        params,
                        unique,
                        now,
                        indexed=indexed,
                        model=model,
                        exact=False,
                    )
                except _StoredAndNewError:
                    stored, inserted = await self._insert(
                        driver, scope, params, unique, now, indexed=indexed, model=model, exact=True
                    )
        if checked is not None and inserted:
            self._remember_width(width)
        return StoredEntries((stored[entry.id] for entry in entries), inserted=inserted)

    async def _insert(
        self,
        driver: Any,
        scope: MemoryIdentity,
        params: Mapping[str, Any],
        unique: Sequence[NewEntry],
        now: datetime,
        *,
        indexed: bool,
        model: str | None,
        exact: bool,
    ) -> tuple[dict[str, MemoryRecord], set[str]]:
        """:meth:`put_entries`' transaction on the asyncpg ``driver``: the records by id, and the
        ids it inserted (``indexed`` with their vectors, else pending). With :attr:`EntrySql.insert`
        when ``exact``; else with :attr:`EntrySql.insert_new` (:attr:`~EntrySql.insert_new_appended`
        when no entry gives a sequence), raising :class:`_StoredAndNewError` (the transaction
        rolled back) when that skipped some rows but not all."""
        sql = EntrySql.for_tables(self._tables)
        appended = not exact and all(entry.sequence is None for entry in unique)
        statement = sql.insert_new_appended if appended else sql.insert if exact else sql.insert_new
        insert, names = to_positional(statement)
        # BEGIN and the thread's lock in one round trip. READ COMMITTED whatever the server's
        # default: the insert must see what the writer that held the lock before committed
        # (its own snapshot, taken after the lock is granted)
        async with self._transaction(driver, begin_locked_statement(scope), "put_entries"):
            sources = await self._lineage_sources(driver, scope, unique)
            rows = await driver.fetch(insert, *(params[name] for name in names))
            if appended:  # one row: how many it inserted, from which sequence on
                count, first = int(rows[0]["inserted"]), rows[0]["first"]
                numbered = unique if count else []
                sequences = [int(first) + at for at in range(count)]
            else:
                count = len(rows)
                by_id = {row["id"]: int(row["sequence"]) for row in rows}
                numbered = [entry for entry in unique if entry.id in by_id]
                sequences = [by_id[entry.id] for entry in numbered]
            if not exact and 0 < count < len(unique):
                raise _StoredAndNewError
            stored = {
                entry.id: inserted_record(
                    scope, entry, sequence, now=now, indexed=indexed, model=model
                )
                for entry, sequence in zip(numbered, sequences, strict=True)
            }
            inherited = inherited_tombstones(list(stored.values()), sources) if sources else []
            if inherited:
                await self._inherit(driver, scope, inherited)
            inserted = set(stored)
            existing = [entry.id for entry in unique if entry.id not in inserted]
            if existing:  # a replay: read back what is stored
                read, values = records_statement(self._tables, scope, existing)
                read, names = to_positional(read)
                found = await driver.fetch(read, *(values[name] for name in names))
                stored.update((row["id"], record_from_row(row)) for row in found)
        return stored, inserted

    async def _lineage_sources(
        self, driver: Any, scope: MemoryIdentity, entries: Sequence[NewEntry]
    ) -> dict[str, list[Tombstone]]:
        """Inside :meth:`_insert`'s transaction, under the thread's lock (as governance walks
        lineage): check that every lineage source of ``entries`` exists, in the thread or among
        them (:func:`check_lineage_sources`), and return the stored ones' tombstones, for the new
        rows to inherit."""
        named = lineage_source_ids(entries)
        if not named:
            return {}
        statement, binds = to_positional(EntrySql.for_tables(self._tables).lineage_sources)
        values = {**scope_params(scope), "ids": named}
        rows = await driver.fetch(statement, *(values[name] for name in binds))
        check_lineage_sources(entries, {row["id"] for row in rows})
        found: dict[str, list[Tombstone]] = {}
        for row in rows:
            if row["cause_id"] is not None:
                found.setdefault(row["id"], []).append(
                    Tombstone(row["id"], row["cause_id"], row["reason"], row["created_at"])
                )
        return found

    async def _import_lineage(
        self, driver: Any, rows: Sequence[ImportRow], now: datetime
    ) -> dict[MemoryIdentity, list[Tombstone]]:
        """Inside :meth:`import_rows`' transaction, under the batch's thread locks (as
        :meth:`put_entries` checks lineage): every lineage source of the batch exists, in its
        thread or in the batch -- a source forgotten since the import's own check fails the batch,
        whole -- and, per thread, the tombstones the batch's new derived rows take over from their
        sources (:func:`inherited_tombstones`; one read per thread that holds lineage, of the
        sources and of the derived ids, so that an id stored already inherits nothing)."""
        found: dict[MemoryIdentity, list[Tombstone]] = {}
        statement, binds = to_positional(EntrySql.for_tables(self._tables).lineage_sources)
        for scope, group in _lineage_scopes(rows).items():
            entries = [row.entry for row in group]
            derived = [entry for entry in entries if entry.lineage is not None]
            named = lineage_source_ids(entries)
            values = {
                **scope_params(scope),
                "ids": sorted({*named, *(entry.id for entry in derived)}),
            }
            stored = await driver.fetch(statement, *(values[name] for name in binds))
            present = {row["id"] for row in stored}
            check_lineage_sources(entries, present)
            marks: dict[str, list[Tombstone]] = {}
            for row in stored:
                if row["cause_id"] is not None:
                    marks.setdefault(row["id"], []).append(
                        Tombstone(row["id"], row["cause_id"], row["reason"], row["created_at"])
                    )
            new = [
                inserted_record(
                    scope, row.entry, 0, now=now, indexed=row.vector is not None, model=row.model
                )
                for row in group
                if row.entry.lineage is not None and row.entry.id not in present
            ]
            inherited = inherited_tombstones(new, marks) if marks else []
            if inherited:
                found[scope] = inherited
        return found

    async def _inherit(
        self, driver: Any, scope: MemoryIdentity, inherited: Sequence[Tombstone]
    ) -> None:
        """Store the tombstones new rows of ``scope`` inherit (:attr:`EntrySql.inherit`)."""
        inherit, binds = to_positional(EntrySql.for_tables(self._tables).inherit)
        values = {
            **scope_params(scope),
            "entries": [t.entry_id for t in inherited],
            "causes": [t.cause_id for t in inherited],
            "reasons": [t.reason for t in inherited],
            "times": [t.created_at for t in inherited],
        }
        await driver.execute(inherit, *(values[name] for name in binds))

    async def merge_metadata(
        self, scope: MemoryIdentity, patches: Mapping[str, MetadataPatch]
    ) -> int:
        """Merge each patch into its entry's metadata in one statement (see
        :meth:`VectorStore.merge_metadata`)."""
        check_id_collection(list(patches), "patches")
        if not patches:
            return 0
        async with self._unit("merge_metadata") as session:
            return await EntryRepository(session, self._tables).merge_metadata(scope, patches)

    async def known_keys(
        self, keys: Sequence[tuple[MemoryIdentity, str]]
    ) -> set[tuple[MemoryIdentity, str]]:
        """Those ``(scope, id)`` of ``keys`` that exist, in one read (:attr:`EntrySql.known_keys`)."""
        if not keys:
            return set()
        rows = await self._fetch(
            "known_keys",
            EntrySql.for_tables(self._tables).known_keys,
            {
                "tenants": [scope.tenant_id for scope, _ in keys],
                "resources": [scope.resource_id for scope, _ in keys],
                "threads": [scope.thread_id for scope, _ in keys],
                "ids": [entry_id for _, entry_id in keys],
            },
        )
        return {keys[int(row["ord"]) - 1] for row in rows}

    async def import_rows(self, rows: Sequence[ImportRow], *, now: datetime) -> tuple[int, int]:
        """A bulk import batch in one transaction (see :meth:`VectorStore.import_rows`).

        On one pooled connection's asyncpg driver: ``BEGIN`` and the per-connection staging table
        (:attr:`EntrySql.import_stage`) in one round trip; the advisory lock of every thread of the
        batch (:attr:`EntrySql.lock_threads`, the lock :meth:`put_entries` takes, in one order);
        under them, per thread that holds lineage, its sources checked and their tombstones read
        (:meth:`_import_lineage`); a binary ``COPY`` of the batch into the staging table (vectors
        pre-encoded in pgvector's binary format); one set-based ``INSERT ... SELECT``
        (:attr:`EntrySql.import_insert`); the tombstones the new derived rows inherit
        (:attr:`EntrySql.inherit`); ``COMMIT``. Nothing is written unless all of it is. The entries
        table has no index worth building afterwards instead (its B-trees and GIN indexes are kept
        up row by row, cheaply; there is no HNSW graph to maintain): ``deferred_vector_index()``
        around a long import analyses the table at the end.
        """
        if not rows:
            return 0, 0
        sql = EntrySql.for_tables(self._tables)
        widths = {row.vector.shape[0] for row in rows if row.vector is not None}
        if len(widths) > 1:
            raise DimensionMismatchError(f"an import batch holds vectors of {len(widths)} widths")
        with wrap_db_errors("import_rows"):
            async with self._driver() as driver:
                if widths:
                    width = self._width
                    if width is None:  # unpinned: the width of the vectors stored so far
                        async with self._alone(driver):
                            width = await driver.fetchval(sql.any_width)
                    (given,) = widths
                    if width is not None and given != width:
                        raise DimensionMismatchError(
                            f"the vectors have width {given}, the store holds width {width}"
                        )
                records = stage_records(rows)
                keys = sorted({thread_lock_key(row.scope) for row in rows})
                insert, names = to_positional(sql.import_insert)
                begin = f"BEGIN ISOLATION LEVEL READ COMMITTED; {sql.import_stage}"
                async with self._transaction(driver, begin, "import_entries"):
                    lock, _ = to_positional(sql.lock_threads)
                    await driver.fetchval(lock, keys)
                    inherited = await self._import_lineage(driver, rows, now)
                    await driver.copy_records_to_table(
                        sql.stage.split(".", 1)[1].strip('"'),
                        schema_name="pg_temp",
                        records=records,
                        columns=STAGE_COLUMNS,
                    )
                    row = await driver.fetchrow(insert, *({"now": now}[name] for name in names))
                    # after the insert, which cleared what a forgotten entry of the same id left
                    for scope, tombstones in inherited.items():
                        await self._inherit(driver, scope, tombstones)
        if widths and row["inserted"]:
            self._remember_width(next(iter(widths)))
        return int(row["inserted"]), int(row["pending"])
