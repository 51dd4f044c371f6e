"""PostgreSQL adapters of the store contracts, and the factories that open them.

Each adapter method is one unit of work: ``async with session.begin()`` around repository calls,
inside :func:`~prism_memory.postgres._errors.wrap_db_errors`, so a call applies entirely or not at
all and every driver error reaches the caller as a :class:`~prism_memory.errors.PrismMemoryError`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from types import TracebackType
from typing import Any

import asyncpg
import numpy as np
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.util.concurrency import greenlet_spawn

from ..embedding import assert_finite_vector
from ..errors import (
    ConfigurationError,
    ConflictError,
    DimensionMismatchError,
    NotFoundError,
)
from ..lexical import CorpusStats
from ..models import (
    IndexStatus,
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    ShareGrant,
    TombstoneReason,
    Vector,
    WorkingMemoryRecord,
    check_id_collection,
)
from ..stores.base import (
    ClaimedEntry,
    EntryLease,
    GovernanceChange,
    GovernanceResult,
    ImportRow,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SearchResult,
    StoredEntries,
    Tombstone,
    VectorStore,
    WorkingStore,
    check_entry_vectors,
    check_lease,
    check_limit,
    check_lineage_sources,
    expand_walk,
    lineage_source_ids,
)
from ..stores.rules import inherited_tombstones
from ._engine import KeptConnections, create_engine, install_vector_codec, sets_plans
from ._errors import sqlstate_of, translate, wrap_db_errors
from .rag_store import PostgresRagOperations
from .repositories import (
    EntryRepository,
    IndexingRepository,
    ShareGrantRepository,
    TombstoneRepository,
    WorkingRepository,
)
from .rows import (
    STAGE_COLUMNS,
    claimed_entries,
    insert_params,
    inserted_record,
    record_from_row,
    scope_params,
    search_result,
    stage_records,
)
from .sql import (
    EntrySql,
    begin_locked_statement,
    claim_in_statement,
    claim_statement,
    neighbors_statement,
    records_statement,
    search_statement,
    thread_lock_key,
    to_positional,
)
from .tables import (
    DEFAULT_SCHEMA,
    DEFAULT_TABLE,
    Names,
    PrismTables,
    build_metadata,
    names_for,
    validate_dimension,
)

__all__ = [
    "PostgresMemoryStores",
    "PostgresVectorStore",
    "PostgresWorkingStore",
    "create_postgres_memory_stores",
    "create_postgres_vector_store",
]


class _Adapter:
    """Engine, session factory and the unit-of-work helper shared by both adapters."""

    def __init__(
        self,
        engine: AsyncEngine,
        tables: PrismTables,
        *,
        owns_engine: bool,
        engine_sets_plans: bool = False,
    ) -> None:
        self._engine = engine
        self._tables = tables
        self._owns_engine = owns_engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
        self._kept = KeptConnections(engine)
        # Engines prism_memory creates set the planner settings per connection (SERVER_SETTINGS)
        # and recall reads go to the asyncpg driver directly (see ``_fetch``); on a host's engine
        # they run in units that ask for custom plans transaction-locally, like the RAG queries.
        self._direct_reads = engine_sets_plans

    @property
    def engine(self) -> AsyncEngine:
        """The engine this adapter runs on."""
        return self._engine

    @property
    def tables(self) -> PrismTables:
        """The tables this adapter reads and writes."""
        return self._tables

    @asynccontextmanager
    async def _unit(
        self, action: str, *, custom_plans: bool = False
    ) -> AsyncIterator[AsyncSession]:
        with wrap_db_errors(action):
            async with self._sessions() as session, session.begin():
                if custom_plans:
                    await session.execute(
                        text(
                            "SELECT set_config('plan_cache_mode', 'force_custom_plan', true), "
                            "set_config('max_parallel_workers_per_gather', '0', true)"
                        )
                    )
                yield session

    async def _fetch(self, action: str, statement: str, params: Mapping[str, Any]) -> list[Any]:
        """One read in one round trip: the statement goes straight to the pooled connection's
        asyncpg driver -- no transaction around it, prepared once per connection and cached by
        asyncpg -- and is retried once on a fresh connection if the pooled one turns out dead. A
        read cancelled midway drops its connection, like a write (:meth:`_driver`)."""
        positional, names = to_positional(statement)
        args = [params[name] for name in names]
        for attempt in (1, 2):
            with wrap_db_errors(action):
                driver: Any = None
                try:
                    async with self._driver() as driver:
                        return list(await driver.fetch(positional, *args))
                except Exception as exc:  # _driver has dropped a lost connection already
                    if driver is None or not _connection_lost(exc, driver):
                        raise
                    if attempt == 2:
                        raise translate(exc, action) from exc
                # the server restarted or failed over: every pooled connection is suspect
                await self._kept.release()
                await self._engine.dispose()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write(
        self, action: str, statement: str, params: Mapping[str, Any], *, count: bool = False
    ) -> list[Any]:
        """One writing statement in one round trip: straight to the pooled connection's asyncpg
        driver, in its own transaction (no ``BEGIN``/``COMMIT`` around it: a single statement
        applies entirely or not at all), prepared once per connection. Returns its rows, or with
        ``count`` the number of rows it changed (as a one-item list). Never retried: a connection
        lost mid-statement leaves it applied or not, and the caller's next attempt decides."""
        positional, names = to_positional(statement)
        args = [params[name] for name in names]
        with wrap_db_errors(action):
            async with self._driver() as driver:
                if count:
                    status = await driver.execute(positional, *args)
                    return [int(status.rsplit(" ", 1)[-1])]
                return list(await driver.fetch(positional, *args))

    @asynccontextmanager
    async def _driver(self) -> AsyncIterator[Any]:
        """The asyncpg driver of a pooled connection (no SQLAlchemy ``Connection`` around it),
        kept for the next operation afterwards (:class:`KeptConnections`) -- or dropped, never
        pooled again, when it was lost, is left inside a transaction, or an operation on it was
        cancelled midway."""
        pooled = await self._kept.take()
        driver: Any = pooled.driver_connection
        try:
            yield driver
        except BaseException as exc:
            if (
                isinstance(exc, asyncio.CancelledError)
                or _connection_lost(exc, driver)
                or driver.is_in_transaction()
            ):
                await greenlet_spawn(pooled.invalidate, exc)
            await greenlet_spawn(pooled.close)  # back to the pool (it may close it: I/O)
            raise
        if driver.is_in_transaction():  # never handed on with a transaction open
            await greenlet_spawn(pooled.invalidate)
            await greenlet_spawn(pooled.close)
        else:
            await self._kept.give(pooled)

    async def _dispose(self) -> None:
        await self._kept.close()
        if self._owns_engine:
            self._owns_engine = False
            await self._engine.dispose()


def _connection_lost(exc: BaseException, driver: Any) -> bool:
    """Whether ``exc`` means the connection is gone (so a read may be retried on a new one)."""
    if driver is None or driver.is_closed():
        return True
    if isinstance(
        exc,
        asyncpg.exceptions.ConnectionDoesNotExistError
        | asyncpg.exceptions.InternalClientError
        | ConnectionError,
    ):
        return True
    # connection exceptions (08xxx) and operator intervention (57P01 admin shutdown, ...)
    return (sqlstate_of(exc) or "").startswith(("08", "57P"))


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


class PostgresVectorStore(_Adapter, VectorStore, PostgresRagOperations):
    """:class:`~prism_memory.stores.base.VectorStore` and
    :class:`~prism_memory.stores.rag_base.RagStore` on PostgreSQL + pgvector.

    Open it with :func:`create_postgres_vector_store` or :func:`create_postgres_memory_stores`.
    The RAG operations (``upsert``, ``query``, ``lexical_query``, ``transaction()``, ...) work on
    ``<table>_rag_chunks`` and are documented in :mod:`prism_memory.postgres.rag_store`.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        tables: PrismTables,
        *,
        dimension: int | None,
        owns_engine: bool,
        engine_sets_plans: bool = False,
    ) -> None:
        super().__init__(
            engine, tables, owns_engine=owns_engine, engine_sets_plans=engine_sets_plans
        )
        self._dimension = dimension
        self._width = dimension

    def __repr__(self) -> str:
        names = self._tables.names
        return (
            f"PostgresVectorStore(schema={names.schema!r}, table={names.table!r}, "
            f"dimension={self._dimension})"
        )

    @property
    def dimension(self) -> int | None:
        """The pinned width of ``embedding`` (``vector(N)``), or ``None`` when unpinned."""
        return self._dimension

    async def close(self) -> None:
        """Dispose of the engine if this store created it (a host's engine is left alone)."""
        await self._dispose()

    @asynccontextmanager
    async def deferred_vector_index(self) -> AsyncIterator[None]:
        """For bulk loads: the table analysed (``ANALYZE``) once the body is done -- also when it
        raises -- so recalls are planned on statistics of the loaded rows from the first one on,
        not a minute or more later when autovacuum would gather them (until then the planner
        guesses: a recall that shares a parent thread's entries read the parent's whole range
        instead of its granted rows by key).

        There is no vector index to defer any more: the entries table has no HNSW index (memory
        recall is the exact per-scope path and never read it; revision ``prism_memory_0010``
        dropped the one ``prism_memory_0002`` built), so writes never pay for one.
        """
        names = self._tables.names
        try:
            yield
        finally:
            await self._autocommit(
                "analysing the loaded table", f'ANALYZE "{names.schema}"."{names.entries}"'
            )

    async def _autocommit(self, action: str, statement: str) -> None:
        with wrap_db_errors(action):
            async with self._engine.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await auto.execute(text(statement))

    # ---- helpers -------------------------------------------------------------------------

    async def _known_width(self, session: AsyncSession) -> int | None:
        if self._width is None:
            self._width = await EntryRepository(session, self._tables).any_width()
        return self._width

    def _check_vectors(
        self, vectors: Iterable[tuple[object, str]], width: int | None
    ) -> tuple[list[Vector], int | None]:
        checked: list[Vector] = []
        for vector, label in vectors:
            ok = assert_finite_vector(vector, label, expected_length=width)
            width = ok.shape[0]
            checked.append(ok)
        return checked, width

    def _remember_width(self, width: int | None) -> None:
        if self._width is None and width is not None:
            self._width = width

    # ---- entries -------------------------------------------------------------------------

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
        then one statement inserts the new rows -- with their vectors,
        ``indexed``, when ``vectors`` are given (:attr:`EntrySql.insert`). Only when some ids
        already exist are they read back, as stored; an existing id is never rewritten.
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
                        width = await driver.fetchval(EntrySql.for_tables(self._tables).any_width)
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
                stored, inserted = await self._insert(
                    driver, scope, params, unique, now, indexed=checked is not None, model=model
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
    ) -> tuple[dict[str, MemoryRecord], set[str]]:
        """:meth:`put_entries`' transaction on the asyncpg ``driver``: the records by id, and the
        ids it inserted (``indexed`` with their vectors, else pending)."""
        insert, names = to_positional(EntrySql.for_tables(self._tables).insert)
        try:
            # BEGIN and the thread's lock in one round trip. READ COMMITTED whatever the server's
            # default: the insert must see what the writer that held the lock before committed
            # (its own snapshot, taken after the lock is granted)
            await driver.execute(begin_locked_statement(scope))
            sources = await self._lineage_sources(driver, scope, unique)
            rows = await driver.fetch(insert, *(params[name] for name in names))
            sequences = {row["id"]: int(row["sequence"]) for row in rows}
            stored = {
                entry.id: inserted_record(
                    scope, entry, sequences[entry.id], now=now, indexed=indexed, model=model
                )
                for entry in unique
                if entry.id in sequences
            }
            inherited = inherited_tombstones(list(stored.values()), sources)
            if inherited:
                inherit, binds = to_positional(EntrySql.for_tables(self._tables).inherit)
                values = {
                    **scope_params(scope),
                    "entries": [t.entry_id for t in inherited],
                    "causes": [t.cause_id for t in inherited],
                    "reasons": [t.reason for t in inherited],
                    "times": [t.created_at for t in inherited],
                }
                await driver.execute(inherit, *(values[name] for name in binds))
            existing = [entry.id for entry in unique if entry.id not in sequences]
            if existing:  # a replay: read back what is stored
                read, values = records_statement(self._tables, scope, existing)
                read, names = to_positional(read)
                found = await driver.fetch(read, *(values[name] for name in names))
                stored.update((row["id"], record_from_row(row)) for row in found)
            await driver.execute("COMMIT")
        except BaseException:
            if not driver.is_closed() and driver.is_in_transaction():
                with contextlib.suppress(Exception):  # put_entries drops a connection left in one
                    await driver.execute("ROLLBACK")
            raise
        return stored, set(sequences)

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
        (:attr:`EntrySql.inherit`); ``COMMIT``. Nothing is written unless all of it is. The entries table has no index worth
        building afterwards instead (its B-trees and GIN indexes are kept up row by row, cheaply;
        there is no HNSW graph to maintain): ``deferred_vector_index()`` around a long import
        analyses the table at the end.
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
                        width = await driver.fetchval(sql.any_width)
                    (given,) = widths
                    if width is not None and given != width:
                        raise DimensionMismatchError(
                            f"the vectors have width {given}, the store holds width {width}"
                        )
                records = stage_records(rows)
                keys = sorted({thread_lock_key(row.scope) for row in rows})
                insert, names = to_positional(sql.import_insert)
                try:
                    await driver.execute(
                        f"BEGIN ISOLATION LEVEL READ COMMITTED; {sql.import_stage}"
                    )
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
                    await driver.execute("COMMIT")
                except BaseException:
                    if not driver.is_closed() and driver.is_in_transaction():
                        with contextlib.suppress(Exception):
                            await driver.execute("ROLLBACK")
                    raise
        if widths and row["inserted"]:
            self._remember_width(next(iter(widths)))
        return int(row["inserted"]), int(row["pending"])

    async def get_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` that exist in scope, in the order of ``ids`` (each id once)."""
        check_id_collection(ids, "ids")
        async with self._unit("get_entries") as session:
            return await EntryRepository(session, self._tables).get(scope, ids)

    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist in scope as entries (a forgotten id is not known)."""
        check_id_collection(ids, "ids")
        async with self._unit("known_ids") as session:
            return await EntryRepository(session, self._tables).known_ids(scope, ids)

    async def set_consent(
        self, scope: MemoryIdentity, entry_id: str, consent: MemoryConsent, *, now: datetime
    ) -> MemoryRecord:
        """Replace an entry's consent (no re-embed); :class:`NotFoundError` if absent."""
        async with self._unit("set_consent") as session:
            record = await EntryRepository(session, self._tables).set_consent(
                scope, entry_id, consent
            )
        if record is None:
            raise NotFoundError("the entry does not exist in this scope")
        return record

    async def replace_text(
        self,
        scope: MemoryIdentity,
        entry_id: str,
        text: str,
        vector: Vector,
        *,
        now: datetime,
        model: str | None = None,
    ) -> MemoryRecord:
        """Set new text and its vector at once: revision + 1, ``indexed``, ``written_at = now``."""
        async with self._unit("replace_text") as session:
            width = await self._known_width(session)
            (checked,), width = self._check_vectors([(vector, "the new text's vector")], width)
            record = await EntryRepository(session, self._tables).replace_text(
                scope, entry_id, text, checked, now, model
            )
        if record is None:
            raise NotFoundError("the entry does not exist in this scope")
        self._remember_width(width)
        return record

    async def set_legal_hold(self, scope: MemoryIdentity, ids: Sequence[str], hold: bool) -> int:
        """Set or clear legal hold on the ``ids`` that exist; return how many exist."""
        check_id_collection(ids, "ids")
        async with self._unit("set_legal_hold") as session:
            return await EntryRepository(session, self._tables).set_legal_hold(scope, ids, hold)

    async def delete_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        """Really delete the ``ids`` that exist in scope; return how many rows went."""
        check_id_collection(ids, "ids")
        async with self._unit("delete_entries") as session:
            return await EntryRepository(session, self._tables).delete(scope, ids)

    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], *, limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``, ordered by id."""
        check_id_collection(source_ids, "source_ids")
        check_limit(limit)
        async with self._unit("dependents") as session:
            return await EntryRepository(session, self._tables).dependents(scope, source_ids, limit)

    # ---- reads -----------------------------------------------------------------------------

    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        """Exact per-thread candidate selection and statistics (see :meth:`EntrySql.search`)."""
        check_limit(request.limit)
        if self._direct_reads:
            width = self._width if self._width is not None else await self._read_width()
            query = assert_finite_vector(request.vector, "query vector", expected_length=width)
            if request.limit == 0:
                return SearchResult([], CorpusStats())
            sql = EntrySql.for_tables(self._tables)
            statement, params, terms = search_statement(sql, scope, replace(request, vector=query))
            return search_result(await self._fetch("search", statement, params), terms)
        async with self._unit("search", custom_plans=True) as session:
            width = await self._known_width(session)
            query = assert_finite_vector(request.vector, "query vector", expected_length=width)
            if request.limit == 0:
                return SearchResult([], CorpusStats())
            return await EntryRepository(session, self._tables).search(
                scope, replace(request, vector=query)
            )

    async def _read_width(self) -> int | None:
        rows = await self._fetch("search", EntrySql.for_tables(self._tables).any_width, {})
        if rows:
            self._width = int(rows[0][0])
        return self._width

    async def neighbors(
        self,
        scope: MemoryIdentity,
        ranges: Sequence[tuple[int, int]],
        recall_filter: RecallFilter,
    ) -> list[MemoryRecord]:
        """Recallable records of the thread whose sequence lies in any inclusive ``(low, high)``."""
        if not ranges:
            return []
        if self._direct_reads:
            sql = EntrySql.for_tables(self._tables)
            statement, params = neighbors_statement(sql, scope, ranges, recall_filter)
            return [
                record_from_row(row) for row in await self._fetch("neighbors", statement, params)
            ]
        async with self._unit("neighbors", custom_plans=True) as session:
            return await EntryRepository(session, self._tables).neighbors(
                scope, ranges, recall_filter
            )

    async def list_by_thread(
        self,
        scope: MemoryIdentity,
        *,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records of the thread after ``(sequence, id)``, ordered by both."""
        check_limit(limit)
        async with self._unit("list_by_thread") as session:
            return await EntryRepository(session, self._tables).list_by_thread(scope, after, limit)

    async def count_by_thread(self, scope: MemoryIdentity) -> int:
        """How many entries the thread holds."""
        async with self._unit("count_by_thread") as session:
            return await EntryRepository(session, self._tables).count(scope)

    async def count_pending(self, scope: MemoryIdentity) -> int:
        """How many of the thread's entries still wait for their vector (one indexed count)."""
        async with self._unit("count_pending") as session:
            return await EntryRepository(session, self._tables).count(scope, "pending")

    async def embedding_models(self, scope: MemoryIdentity | None) -> set[str]:
        """The models whose vectors the thread's rows hold (rows without one left out); with
        ``scope=None``, every thread's (the all-scopes worker checks its embedder against it)."""
        async with self._unit("embedding_models") as session:
            return await EntryRepository(session, self._tables).embedding_models(scope)

    async def embedding_models_of(
        self, scopes: Sequence[MemoryIdentity]
    ) -> dict[MemoryIdentity, set[str]]:
        """The recorded models of many threads in one read (:attr:`EntrySql.models_of`)."""
        unique = list(dict.fromkeys(scopes))
        if not unique:
            return {}
        rows = await self._fetch(
            "embedding_models_of",
            EntrySql.for_tables(self._tables).models_of,
            {
                "tenants": [scope.tenant_id for scope in unique],
                "resources": [scope.resource_id for scope in unique],
                "threads": [scope.thread_id for scope in unique],
            },
        )
        found: dict[MemoryIdentity, set[str]] = {}
        for row in rows:
            found.setdefault(unique[int(row["ord"]) - 1], set()).add(str(row["embedding_model"]))
        return found

    async def list_oldest(
        self,
        scope: MemoryIdentity,
        *,
        limit: int,
        occurred_before: datetime | None = None,
        include_held: bool = True,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records ordered by ``(occurred_at, sequence, id)`` ascending."""
        check_limit(limit)
        async with self._unit("list_oldest") as session:
            return await EntryRepository(session, self._tables).list_oldest(
                scope, limit, occurred_before, include_held
            )

    # ---- tombstones and grants -------------------------------------------------------------

    async def add_tombstones(self, scope: MemoryIdentity, tombstones: Sequence[Tombstone]) -> None:
        """Insert tombstones; an existing ``(entry_id, cause_id, reason)`` takes the new time."""
        if not tombstones:
            return
        async with self._unit("add_tombstones") as session:
            await TombstoneRepository(session, self._tables).upsert(scope, tombstones)

    async def remove_tombstones(
        self, scope: MemoryIdentity, cause_id: str, reason: TombstoneReason
    ) -> int:
        """Delete the tombstones ``cause_id`` caused with ``reason``; return how many."""
        async with self._unit("remove_tombstones") as session:
            return await TombstoneRepository(session, self._tables).remove(scope, cause_id, reason)

    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        """Apply ``change`` in one transaction, serialised with the thread's writers.

        See :meth:`VectorStore.apply_governance`; a failure (or a lost connection) at any step
        rolls every step back.
        """
        async with self._unit("apply_governance") as session:
            entries = EntryRepository(session, self._tables)
            tombstones = TombstoneRepository(session, self._tables)
            await entries.lock_thread(scope)
            # the lineage walk runs under the lock, so no writer can add a dependent meanwhile
            change, dependents = await expand_walk(
                change,
                lambda ids, limit: entries.dependents(scope, ids, limit),
                lambda ids: entries.get(scope, ids),
                now,
            )
            await tombstones.upsert(scope, change.tombstones)
            record: MemoryRecord | None = None
            width: int | None = None
            if change.consent is not None:
                entry_id, consent = change.consent
                record = await entries.set_consent(scope, entry_id, consent)
                if record is None:
                    raise NotFoundError("the entry does not exist in this scope")
            if change.text is not None:
                entry_id, new_text, vector = change.text
                width = await self._known_width(session)
                (checked,), width = self._check_vectors([(vector, "the new text's vector")], width)
                record = await entries.replace_text(
                    scope, entry_id, new_text, checked, now, change.text_model
                )
                if record is None:
                    raise NotFoundError("the entry does not exist in this scope")
            held = await entries.set_legal_hold(scope, change.hold, True)
            deleted = await entries.delete(scope, change.delete)
            if change.untombstone is not None:
                await tombstones.remove(scope, *change.untombstone)
        self._remember_width(width)
        return GovernanceResult(
            record=record,
            held=held,
            deleted=deleted,
            dependents=dependents or (),
            walked=dependents is not None,
        )

    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant of ``(tenant, resource, parent, child)``."""
        async with self._unit("put_share_grant") as session:
            return await ShareGrantRepository(session, self._tables).put(grant)

    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        """The grant, expired or not, or ``None``."""
        async with self._unit("get_share_grant") as session:
            return await ShareGrantRepository(session, self._tables).get(
                tenant_id, resource_id, parent_thread_id, child_thread_id
            )

    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        """Delete the grant; return 1 if there was one, else 0."""
        async with self._unit("delete_share_grant") as session:
            return await ShareGrantRepository(session, self._tables).delete(
                tenant_id, resource_id, parent_thread_id, child_thread_id
            )

    # ---- indexing ledger -------------------------------------------------------------------

    async def claim_pending(
        self,
        scope: MemoryIdentity | None,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease due pending rows with ``FOR UPDATE SKIP LOCKED``, committed at once (one
        statement in its own transaction, on the driver: see :meth:`_write`)."""
        check_limit(limit)
        check_lease(lease_seconds)
        if limit == 0:
            return []
        statement, params = claim_statement(
            EntrySql.for_tables(self._tables),
            scope,
            limit=limit,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
        )
        return claimed_entries(await self._write("claim_pending", statement, params))

    async def claim_pending_in(
        self,
        scopes: Sequence[MemoryIdentity],
        *,
        limit: int,
        per_scope: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease due pending rows of many threads in one statement (``FOR UPDATE SKIP LOCKED``)."""
        check_limit(limit)
        check_limit(per_scope, "per_scope")
        check_lease(lease_seconds)
        wanted = list(dict.fromkeys(scopes))
        if not wanted or limit == 0 or per_scope == 0:
            return []
        statement, params = claim_in_statement(
            EntrySql.for_tables(self._tables),
            wanted,
            limit=limit,
            per_scope=per_scope,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
        )
        return claimed_entries(await self._write("claim_pending", statement, params), wanted)

    async def complete_indexing(
        self,
        items: Sequence[tuple[ClaimedEntry, Vector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors and mark ``indexed`` where the lease and revision still match; count them.

        Every vector is checked first (finite, the store's width): one bad vector rejects the call.
        """
        if not items:
            return 0
        async with self._unit("complete_indexing") as session:
            checked, width = self._check_vectors(
                ((vector, f"vectors[{at}]") for at, (_, vector) in enumerate(items)),
                await self._known_width(session),
            )
            pairs = [(item, vector) for (item, _), vector in zip(items, checked, strict=True)]
            done = await IndexingRepository(session, self._tables).complete(
                pairs, worker_id=worker_id, now=now, model=model
            )
        if done:
            self._remember_width(width)
        return done

    async def fail_indexing(
        self,
        item: ClaimedEntry,
        *,
        worker_id: str,
        error: str,
        retry_at: datetime | None,
        now: datetime,
    ) -> None:
        """Record a failure while the lease matches (attempts + 1, error, retry or ``failed``)."""
        async with self._unit("fail_indexing") as session:
            await IndexingRepository(session, self._tables).fail(
                item, worker_id=worker_id, error=error, retry_at=retry_at, now=now
            )

    async def release_claims(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds (expired ones included); count them."""
        sql = EntrySql.for_tables(self._tables).release
        return int((await self._write("release_claims", sql, {"worker": worker_id}, count=True))[0])

    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None = None) -> int:
        """Make ``failed`` entries pending again with attempts 0 (the last error is cleared)."""
        if ids is not None:
            check_id_collection(ids, "ids")
        async with self._unit("requeue_failed") as session:
            return await IndexingRepository(session, self._tables).requeue_failed(scope, ids)

    async def index_status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist, at their current revision."""
        check_id_collection(ids, "ids")
        async with self._unit("index_status") as session:
            return await IndexingRepository(session, self._tables).status(scope, ids)

    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, Vector]],
        *,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Re-index: set ``(id, revision, vector)`` and mark indexed where the revision matches."""
        if not items:
            return 0
        async with self._unit("store_vectors") as session:
            checked, width = self._check_vectors(
                ((vector, f"vectors[{at}]") for at, (_, _, vector) in enumerate(items)),
                await self._known_width(session),
            )
            rows = [
                (entry_id, revision, vector)
                for (entry_id, revision, _), vector in zip(items, checked, strict=True)
            ]
            stored = await IndexingRepository(session, self._tables).store_vectors(
                scope, rows, model
            )
        if stored:
            self._remember_width(width)
        return stored


class PostgresWorkingStore(_Adapter, WorkingStore):
    """:class:`~prism_memory.stores.base.WorkingStore` on PostgreSQL (optimistic versions)."""

    def __repr__(self) -> str:
        names = self._tables.names
        return f"PostgresWorkingStore(schema={names.schema!r}, table={names.table!r})"

    async def get_working(
        self, tenant_id: str, resource_id: str, thread_id: str | None
    ) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` when none was written."""
        async with self._unit("get_working") as session:
            return await WorkingRepository(session, self._tables).get(
                tenant_id, resource_id, thread_id
            )

    async def put_working(
        self,
        tenant_id: str,
        resource_id: str,
        thread_id: str | None,
        data: Mapping[str, Any],
        *,
        expected_version: int | None,
        now: datetime,
    ) -> WorkingMemoryRecord:
        """Write ``data`` as version ``current + 1`` in one statement (no lost updates).

        With ``expected_version`` the statement only applies at that version (``0``: no document
        yet); otherwise :class:`~prism_memory.errors.ConflictError`.
        """
        async with self._unit("put_working") as session:
            repo = WorkingRepository(session, self._tables)
            written = await repo.put(
                tenant_id,
                resource_id,
                thread_id,
                data,
                expected_version=expected_version,
                now=now,
            )
            if written is None:
                found = await repo.version(tenant_id, resource_id, thread_id)
                raise ConflictError(
                    f"working memory is at version {found}, expected {expected_version}"
                )
        return written

    async def close(self) -> None:
        """Dispose of the engine if this store created it."""
        await self._dispose()


@dataclass(slots=True)
class PostgresMemoryStores:
    """The two PostgreSQL stores of one schema, sharing one engine.

    ``close()`` disposes of the engine only when the factory created it from a URL.
    """

    vector_store: PostgresVectorStore
    working_store: PostgresWorkingStore
    engine: AsyncEngine
    owns_engine: bool

    async def close(self) -> None:
        """Dispose of the engine if the factory created it; a host's engine is left alone."""
        # the connections the stores keep between operations go back to the pool first
        await self.vector_store._kept.close()
        await self.working_store._kept.close()
        if self.owns_engine:
            self.owns_engine = False
            await self.engine.dispose()

    async def __aenter__(self) -> PostgresMemoryStores:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


# ---- opening -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _SchemaState:
    tables: frozenset[str]
    pinned: int | None
    """``atttypmod`` of ``embedding``: the pinned width, or ``None`` when unpinned or absent."""
    version_table: bool
    version: str | None


async def _schema_state(engine: AsyncEngine, names: Names) -> _SchemaState:
    relation = f'"{names.schema}"."{names.entries}"'
    with wrap_db_errors("inspecting the prism_memory schema"):
        async with engine.connect() as conn:
            found = (
                await conn.execute(
                    text(
                        "SELECT c.relname FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = :schema AND c.relname = ANY(CAST(:names AS text[])) "
                        "AND c.relkind IN ('r', 'p')"
                    ),
                    {"schema": names.schema, "names": [*names.tables, names.version_table]},
                )
            ).scalars()
            tables = frozenset(found)
            pinned: int | None = None
            if names.entries in tables:
                typmod = (
                    await conn.execute(
                        text(
                            "SELECT a.atttypmod FROM pg_attribute a "
                            "WHERE a.attrelid = to_regclass(:relation) "
                            "AND a.attname = 'embedding' AND NOT a.attisdropped"
                        ),
                        {"relation": relation},
                    )
                ).scalar_one_or_none()
                pinned = int(typmod) if typmod is not None and int(typmod) > 0 else None
            version: str | None = None
            has_version_table = names.version_table in tables
            if has_version_table:
                rows = await conn.execute(
                    text(f'SELECT version_num FROM "{names.schema}"."{names.version_table}"')  # noqa: S608
                )
                versions = list(rows.scalars())
                version = versions[0] if len(versions) == 1 else None
    return _SchemaState(
        tables=tables - {names.version_table},
        pinned=pinned,
        version_table=has_version_table,
        version=version,
    )


def _reconcile_dimension(requested: int | None, pinned: int | None, names: Names) -> int | None:
    """The effective pinned width, or :class:`DimensionMismatchError` (fail closed)."""
    where = f'"{names.schema}"."{names.entries}".embedding'
    if pinned is None:
        if requested is not None:
            raise DimensionMismatchError(
                f"{where} is not pinned to a dimension but dimension={requested} was requested; "
                "prism_memory does not re-type an existing column: pin it with a migration of your "
                "own (ALTER COLUMN embedding TYPE vector(N)) or pass "
                "dimension=None"
            )
        return None
    if requested is not None and requested != pinned:
        raise DimensionMismatchError(
            f"{where} is pinned to vector({pinned}) but dimension={requested} was requested"
        )
    return pinned


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


async def _open(
    url: str | URL | None,
    engine: AsyncEngine | None,
    schema: str,
    table: str,
    dimension: int | None,
    skip_migrations: bool,
    engine_options: Mapping[str, Any] | None = None,
) -> tuple[AsyncEngine, bool, PrismTables, int | None]:
    from . import migrate

    names = names_for(schema, table)
    dimension = validate_dimension(dimension)
    if (url is None) == (engine is None):
        raise ConfigurationError("pass exactly one of url= or engine=")
    if engine is not None:
        if engine_options is not None:
            raise ConfigurationError("engine_options= configure an engine made from url=")
        if not isinstance(engine, AsyncEngine):
            raise ConfigurationError("engine must be a SQLAlchemy AsyncEngine (postgresql+asyncpg)")
        install_vector_codec(engine)
        owned = False
    else:
        assert url is not None
        try:
            engine = create_engine(url, **_engine_options(engine_options))
        except (TypeError, ValueError, ArgumentError) as exc:
            raise ConfigurationError(f"cannot make an engine with these options: {exc}") from exc
        owned = True
    try:
        before = await _schema_state(engine, names)
        if names.entries in before.tables:
            # Fail closed before any revision runs: a drifted request changes nothing.
            _reconcile_dimension(dimension, before.pinned, names)
        if not skip_migrations:
            await migrate.upgrade(engine, schema=schema, table=table, dimension=dimension)
        after = await _schema_state(engine, names)
        missing = sorted(set(names.tables) - after.tables)
        if after.version_table:
            head = migrate.head_revision()
            if after.version != head:
                raise ConfigurationError(
                    f'"{schema}" is at revision {after.version!r}, not {head!r}: run the '
                    "prism_memory migrations (or drop skip_migrations=True)"
                )
        elif missing:
            raise ConfigurationError(
                f'"{schema}" lacks {", ".join(missing)}: run the prism_memory migrations '
                "(or drop skip_migrations=True)"
            )
        effective = _reconcile_dimension(dimension, after.pinned, names)
        tables = build_metadata(schema, table, effective)
    except BaseException:
        if owned:
            await engine.dispose()
        raise
    return engine, owned, tables, effective


def _engine_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise ConfigurationError("engine_options must be a mapping of keyword arguments")
    return dict(options)


async def create_postgres_memory_stores(
    url: str | URL | None = None,
    *,
    engine: AsyncEngine | None = None,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
    dimension: int | None = None,
    skip_migrations: bool = False,
    engine_options: Mapping[str, Any] | None = None,
) -> PostgresMemoryStores:
    """Open the PostgreSQL vector and working stores of ``schema``/``table``.

    Pass ``url`` (``postgresql+asyncpg://…``; ``postgresql://`` and unix-socket ``?host=/dir`` URLs
    are normalised) or the host's own ``engine`` (then the host owns its lifetime). Unless
    ``skip_migrations``, the Alembic revisions run first (serialised by an advisory lock); either
    way the schema must then be at head, else :class:`~prism_memory.errors.ConfigurationError`.

    ``dimension`` pins ``vector(N)``. A table pinned to another width, or an unpinned table when a
    width is requested, raises :class:`~prism_memory.errors.DimensionMismatchError` before anything
    is changed. With ``dimension=None`` the table's own pin (if any) is adopted and reported by
    ``vector_store.dimension``.

    ``engine_options`` are keyword arguments for the engine made from ``url`` (SQLAlchemy's
    ``create_async_engine``: ``pool_size``, ``max_overflow``, ``pool_recycle``, ``connect_args``…);
    size the pool to the recalls you run at once — the default pool holds 5 connections, and
    connections beyond it are opened and closed under load. prism_memory's own server settings
    stay unless ``connect_args["server_settings"]`` names them.
    """
    bound, owned, tables, effective = await _open(
        url, engine, schema, table, dimension, skip_migrations, engine_options
    )
    planned = sets_plans(bound)
    return PostgresMemoryStores(
        vector_store=PostgresVectorStore(
            bound, tables, dimension=effective, owns_engine=False, engine_sets_plans=planned
        ),
        working_store=PostgresWorkingStore(
            bound, tables, owns_engine=False, engine_sets_plans=planned
        ),
        engine=bound,
        owns_engine=owned,
    )


async def create_postgres_vector_store(
    url: str | URL | None = None,
    *,
    engine: AsyncEngine | None = None,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
    dimension: int | None = None,
    skip_migrations: bool = False,
    engine_options: Mapping[str, Any] | None = None,
) -> PostgresVectorStore:
    """Open the PostgreSQL vector store alone; same arguments as
    :func:`create_postgres_memory_stores`. Its ``close()`` disposes of an engine it created."""
    bound, owned, tables, effective = await _open(
        url, engine, schema, table, dimension, skip_migrations, engine_options
    )
    return PostgresVectorStore(
        bound,
        tables,
        dimension=effective,
        owns_engine=owned,
        engine_sets_plans=sets_plans(bound),
    )
