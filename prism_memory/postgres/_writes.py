"""Writing new entries on PostgreSQL: ``put_entries`` (remember's hot path) and the bulk import,
each one transaction on the asyncpg driver under the threads' advisory locks
(:meth:`~prism_memory.postgres._executor.Executor.transaction`), every statement a call of
:class:`~prism_memory.postgres.repositories.EntryRepository` inside it. The write half of the
entries role (:class:`~prism_memory.postgres._entries.PostgresEntries`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from .._windowed import OwnVector, own_parts
from ..errors import DimensionMismatchError
from ..models import MemoryIdentity, MemoryRecord, Vector
from ..stores.base import (
    EntryLease,
    ImportRow,
    NewEntry,
    StoredEntries,
    Tombstone,
    check_entry_vectors,
    check_lineage_sources,
    lineage_source_ids,
)
from ..stores.rules import inherited_tombstones
from ._executor import Executor
from ._generations import VectorWidth
from .repositories import EntryRepository
from .rows import insert_params, inserted_record, stage_records, window_params
from .statements import EntrySql, thread_lock_key
from .tables import PrismTables

__all__: list[str] = []


def _finite_rows(vectors: object, rows: int, width: int | None) -> list[Vector] | None:
    """The rows of ``vectors`` if it is a finite ``float32`` matrix of ``rows`` rows (of ``width``
    columns when known) -- what an embedder's batch usually is, or a list of its rows (entries
    within their window: :func:`~prism_memory.windows.embed_entries`), checked in one pass --
    else ``None``: then each vector is checked on its own and a bad one named in the error."""
    if (
        isinstance(vectors, list)
        and vectors
        and all(type(row) is np.ndarray and row.ndim == 1 for row in vectors)
        and len({row.shape[0] for row in vectors}) == 1
    ):
        vectors = np.stack(vectors)
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
    """:attr:`RowSql.insert_new` met a batch of stored and new ids: written again exactly."""


class EntryWriter:
    """``put_entries`` and ``import_rows``: the write half of
    :class:`~prism_memory.postgres._entries.PostgresEntries`, which adds the reads."""

    def __init__(self, executor: Executor, tables: PrismTables, width: VectorWidth) -> None:
        self._executor = executor
        self._tables = tables
        self._width = width
        self._entries = EntryRepository(executor, tables)
        """The entries' repository, each call its own unit of work."""

    async def put_entries(
        self,
        scope: MemoryIdentity,
        entries: Sequence[NewEntry],
        *,
        now: datetime,
        lease: EntryLease | None = None,
        vectors: Sequence[OwnVector] | Vector | None = None,
        model: str | None = None,
    ) -> StoredEntries:
        """Insert the entries whose id is new, atomically (see :meth:`VectorStore.put_entries`).

        One transaction on the pooled connection's asyncpg driver (no ORM session; statements
        prepared once per connection), three round trips: ``BEGIN`` with a transaction-scoped
        advisory lock (:meth:`EntryRepository.locked`) serialises the writers of one thread, so
        sequence assignment (``max + 1``, 0 in an empty thread, in input order) never collides;
        then one statement inserts the new rows -- with their vectors, ``indexed``, when
        ``vectors`` are given (:attr:`RowSql.insert_new`, or without a window over the batch
        :attr:`RowSql.insert_new_appended` when no entry gives a sequence; a batch of stored
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
        checked: Sequence[OwnVector] | None = None
        width = self._width.value
        if vectors is not None:
            width = await self._width.known(self._entries, model)
            checked = _finite_rows(vectors, len(unique), width)
            if checked is not None:
                width = checked[0].shape[0]
            else:
                checked, width = self._width.check(
                    ((vectors[at], f"vectors[{at}]") for at in first.values()), width
                )
        params = insert_params(scope, unique, now=now, lease=lease, vectors=checked, model=model)
        # insert_new first (one primary-key probe per row, whatever the table's statistics); a
        # batch of stored and new ids again with the exact insert, so the sequences keep no gap
        indexed = checked is not None
        try:
            stored, inserted = await self._insert(
                scope, params, unique, now, indexed=indexed, model=model, exact=False
            )
        except _StoredAndNewError:
            stored, inserted = await self._insert(
                scope, params, unique, now, indexed=indexed, model=model, exact=True
            )
        if checked is not None and inserted:
            self._width.learn(width)
        return StoredEntries((stored[entry.id] for entry in entries), inserted=inserted)

    async def _insert(
        self,
        scope: MemoryIdentity,
        params: Mapping[str, Any],
        unique: Sequence[NewEntry],
        now: datetime,
        *,
        indexed: bool,
        model: str | None,
        exact: bool,
    ) -> tuple[dict[str, MemoryRecord], set[str]]:
        """:meth:`put_entries`' transaction: the records by id, and the ids it inserted
        (``indexed`` with their vectors, else pending). With :attr:`EntrySql.insert` when
        ``exact``; else with :attr:`RowSql.insert_new` (:attr:`~RowSql.insert_new_appended`
        when no entry gives a sequence), raising :class:`_StoredAndNewError` (the transaction
        rolled back) when that skipped some rows but not all."""
        appended = not exact and all(entry.sequence is None for entry in unique)
        # BEGIN and the thread's lock in one round trip. READ COMMITTED whatever the server's
        # default: the insert must see what the writer that held the lock before committed
        # (its own snapshot, taken after the lock is granted)
        async with self._entries.locked("put_entries", scope) as entries:
            sources = await _lineage_sources(entries, scope, unique)
            rows = await entries.insert_batch(params, appended=appended, exact=exact)
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
                await entries.inherit(scope, inherited)
            inserted = set(stored)
            existing = [entry.id for entry in unique if entry.id not in inserted]
            if existing:  # a replay: read back what is stored
                stored.update((record.id, record) for record in await entries.get(scope, existing))
        return stored, inserted

    async def import_rows(self, rows: Sequence[ImportRow], *, now: datetime) -> tuple[int, int]:
        """A bulk import batch in one transaction (see :meth:`VectorStore.import_rows`).

        On one pooled connection's asyncpg driver: ``BEGIN`` and the per-connection staging table
        (:attr:`EntrySql.import_begin`) in one round trip; the advisory lock of every thread of the
        batch (:attr:`EntrySql.lock_threads`, the lock :meth:`put_entries` takes, in one order);
        under them, per thread that holds lineage, its sources checked and their tombstones read
        (:func:`_import_lineage`); a binary ``COPY`` of the batch into the staging table (vectors
        pre-encoded in pgvector's binary format); one set-based ``INSERT ... SELECT``
        (:attr:`ImportSql.import_insert`); the tombstones the new derived rows inherit
        (:attr:`EntrySql.inherit`); ``COMMIT``. Nothing is written unless all of it is. The entries
        table has no index worth building afterwards instead (its B-trees and GIN indexes are kept
        up row by row, cheaply; there is no HNSW graph to maintain): ``deferred_vector_index()``
        around a long import analyses the table at the end.
        """
        if not rows:
            return 0, 0
        tenants = {row.scope.tenant_id for row in rows}
        if len(tenants) > 1 and self._executor.sets_tenant:
            # row-level security: a transaction acts for one tenant, so a batch is written per
            # tenant (each tenant's rows all or none; docs/postgres.md, "Row-level security")
            done = [
                await self.import_rows([r for r in rows if r.scope.tenant_id == tenant], now=now)
                for tenant in sorted(tenants)
            ]
            return sum(d[0] for d in done), sum(d[1] for d in done)
        sql = EntrySql.for_tables(self._tables).importing
        widths = {own_parts(row.vector)[0].shape[0] for row in rows if row.vector is not None}
        if len(widths) > 1:
            raise DimensionMismatchError(f"an import batch holds vectors of {len(widths)} widths")
        if widths:
            width = await self._width.known(self._entries)
            (given,) = widths
            if width is not None and given != width:
                raise DimensionMismatchError(
                    f"the vectors have width {given}, the store holds width {width}"
                )
        records = stage_records(rows)
        keys = sorted({thread_lock_key(row.scope) for row in rows})
        tenant = next(iter(tenants)) if len(tenants) == 1 else None
        async with self._executor.transaction(
            "import_entries", sql.import_begin, tenant=tenant
        ) as unit:
            entries = self._entries.within(unit)
            await entries.lock_threads(keys)
            inherited = await _import_lineage(entries, rows, now)
            await entries.stage(records)
            # the stage's ``ord`` is the row's place in the batch, from 0
            _, windows = window_params([row.vector for row in rows], first=0)
            row = await entries.insert_staged({"now": now, **windows})
            # after the insert, which cleared what a forgotten entry of the same id left
            for scope, tombstones in inherited.items():
                await entries.inherit(scope, tombstones)
        if widths and row["inserted"]:
            self._width.learn(next(iter(widths)))
        return int(row["inserted"]), int(row["pending"])


async def _lineage_sources(
    entries: EntryRepository, scope: MemoryIdentity, batch: Sequence[NewEntry]
) -> dict[str, list[Tombstone]]:
    """Inside :meth:`EntryWriter._insert`'s transaction, under the thread's lock (as governance
    walks lineage): check that every lineage source of ``batch`` exists, in the thread or among
    them (:func:`check_lineage_sources`), and return the stored ones' tombstones, for the new rows
    to inherit."""
    named = lineage_source_ids(batch)
    if not named:
        return {}
    found = await entries.lineage_sources(scope, named)
    check_lineage_sources(batch, set(found))
    return {entry_id: marks for entry_id, marks in found.items() if marks}


async def _import_lineage(
    entries: EntryRepository, rows: Sequence[ImportRow], now: datetime
) -> dict[MemoryIdentity, list[Tombstone]]:
    """Inside :meth:`EntryWriter.import_rows`' transaction, under the batch's thread locks (as
    :meth:`EntryWriter.put_entries` checks lineage): every lineage source of the batch exists, in
    its thread or in the batch -- a source forgotten since the import's own check fails the batch,
    whole -- and, per thread, the tombstones the batch's new derived rows take over from their
    sources (:func:`inherited_tombstones`; one read per thread that holds lineage, of the sources
    and of the derived ids, so that an id stored already inherits nothing)."""
    found: dict[MemoryIdentity, list[Tombstone]] = {}
    for scope, group in _lineage_scopes(rows).items():
        batch = [row.entry for row in group]
        derived = [entry for entry in batch if entry.lineage is not None]
        named = lineage_source_ids(batch)
        stored = await entries.lineage_sources(
            scope, sorted({*named, *(entry.id for entry in derived)})
        )
        check_lineage_sources(batch, set(stored))
        marks = {entry_id: marks for entry_id, marks in stored.items() if marks}
        new = [
            inserted_record(
                scope, row.entry, 0, now=now, indexed=row.vector is not None, model=row.model
            )
            for row in group
            if row.entry.lineage is not None and row.entry.id not in stored
        ]
        inherited = inherited_tombstones(new, marks) if marks else []
        if inherited:
            found[scope] = inherited
    return found
