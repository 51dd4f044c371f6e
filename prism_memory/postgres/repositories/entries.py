"""Entries and their tombstones: the batch insert and the bulk import's statements, reads by key,
recall's search and neighbours, consent, legal hold, deletes, lineage."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Self

from sqlalchemy import (
    DateTime,
    Integer,
    bindparam,
    cast,
    delete,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert

from ..._entry_fields import RECORD_COLUMNS, STAGE_COLUMNS
from ..._windowed import OwnVector, own_parts
from ...models import (
    IndexStatus,
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    TombstoneReason,
)
from ...stores.base import MetadataPatch, RecallFilter, SearchRequest, SearchResult, Tombstone
from .._codec import encode_vectors
from .._executor import DriverUnit, Executor, Unit
from ..rows import consent_values, lexical_values, record_from_row, scope_params, search_result
from ..statements import (
    SchemaSql,
    begin_locked_statement,
    neighbors_statement,
    search_statement,
    thread_lock_key,
)
from ._base import _STATUS_SQL, _in_array, _primary_key, _Repository, _rowcount

__all__ = ["EntryRepository", "TombstoneRepository"]


class EntryRepository(_Repository):
    """Entries: upserts, reads, consent, deletes, lineage and recall queries."""

    __slots__ = ()

    def _scoped(self, scope: MemoryIdentity) -> Any:
        t = self.tables.entries.c
        return (
            (t.tenant_id == scope.tenant_id)
            & (t.resource_id == scope.resource_id)
            & (t.thread_id == scope.thread_id)
        )

    def _record_select(self) -> Any:
        t = self.tables.entries
        return select(*(t.c[name] for name in RECORD_COLUMNS))

    def within(self, unit: Unit) -> Self:
        """This repository inside ``unit`` (each call then runs in it; the caller commits): the
        same tables and statements, without looking them up again."""
        inside = object.__new__(type(self))
        inside.on = unit
        inside.tables = self.tables
        inside.sql = self.sql
        return inside

    @asynccontextmanager
    async def locked(self, action: str, scope: MemoryIdentity) -> AsyncIterator[Self]:
        """A transaction of the store's executor holding ``scope``'s thread lock, and this
        repository inside it: ``BEGIN ISOLATION LEVEL READ COMMITTED`` and the thread's advisory
        lock in one round trip (:func:`begin_locked_statement`), so the writers of one thread are
        serialised until it ends and each statement sees what the writer before committed."""
        assert isinstance(self.on, Executor)
        begin = begin_locked_statement(scope)
        async with self.on.transaction(action, begin, tenant=scope.tenant_id) as unit:
            yield self.within(unit)

    async def lock_thread(self, scope: MemoryIdentity) -> None:
        """Serialise writers of one thread until the transaction ends (sequence assignment)."""
        await self._rows("lock_thread", self.sql.rows.lock_thread, {"key": thread_lock_key(scope)})

    async def lock_threads(self, keys: Sequence[str]) -> None:
        """The advisory locks of many threads (:attr:`ImportSql.lock_threads`, in one order)."""
        await self._value("lock_threads", self.sql.importing.lock_threads, {"keys": list(keys)})

    async def insert_batch(
        self, params: Mapping[str, Any], *, appended: bool, exact: bool
    ) -> Sequence[Any]:
        """remember's batch insert (``put_entries``) with its values; its rows:
        :attr:`RowSql.insert` when ``exact`` (every id, stored ones numbered too), else
        :attr:`RowSql.insert_new` -- or :attr:`RowSql.insert_new_appended` when ``appended``
        (no entry gives a sequence: one row, how many it inserted and from which sequence)."""
        sql = self.sql.rows
        statement = sql.insert_new_appended if appended else sql.insert if exact else sql.insert_new
        on = self.on
        if isinstance(on, Executor):  # a unit of its own (put_entries runs it in a transaction)
            return await on.write("put_entries", statement, params)
        return await on.fetch(statement, params)

    async def insert_staged(self, params: Mapping[str, Any]) -> Any:
        """The bulk import's one set-based insert from the staging table
        (:attr:`ImportSql.import_insert`); its one row (``inserted``, ``pending``)."""
        (row,) = await self._written("import_entries", self.sql.importing.import_insert, params)
        return row

    async def stage(self, records: Iterable[Any]) -> None:
        """A binary ``COPY`` of an import batch into the staging table (:attr:`ImportSql.stage`;
        only inside the import's driver transaction, which created it)."""
        if not isinstance(self.on, DriverUnit):
            raise TypeError("the staging table lives in the import's driver transaction")
        await self.on.copy(
            self.sql.importing.stage.split(".", 1)[1].strip('"'), records, STAGE_COLUMNS
        )

    async def lineage_sources(self, scope: MemoryIdentity, ids: Sequence[str]) -> dict[str, Any]:
        """Which of ``ids`` the thread holds, each with its tombstones (``id -> [Tombstone]``,
        empty for a source without one) -- :attr:`LineageSql.lineage_sources`."""
        params = {**scope_params(scope), "ids": list(ids)}
        found: dict[str, list[Tombstone]] = {}
        for row in await self._rows("lineage_sources", self.sql.lineage.lineage_sources, params):
            marks = found.setdefault(row["id"], [])
            if row["cause_id"] is not None:
                marks.append(
                    Tombstone(row["id"], row["cause_id"], row["reason"], row["created_at"])
                )
        return found

    async def inherit(self, scope: MemoryIdentity, inherited: Sequence[Tombstone]) -> None:
        """Store the tombstones new rows of ``scope`` inherit (:attr:`LineageSql.inherit`)."""
        values = {
            **scope_params(scope),
            "entries": [t.entry_id for t in inherited],
            "causes": [t.cause_id for t in inherited],
            "reasons": [t.reason for t in inherited],
            "times": [t.created_at for t in inherited],
        }
        await self._changed("inherit", self.sql.lineage.inherit, values)

    async def known_keys(
        self, keys: Sequence[tuple[MemoryIdentity, str]]
    ) -> set[tuple[MemoryIdentity, str]]:
        """Those ``(scope, id)`` of ``keys`` that exist, in one read (:attr:`RowSql.known_keys`)."""
        if not keys:
            return set()
        params = {
            "tenants": [scope.tenant_id for scope, _ in keys],
            "resources": [scope.resource_id for scope, _ in keys],
            "threads": [scope.thread_id for scope, _ in keys],
            "ids": [entry_id for _, entry_id in keys],
        }
        rows = await self._rows("known_keys", self.sql.rows.known_keys, params)
        return {keys[int(row["ord"]) - 1] for row in rows}

    async def models_of(self, scopes: Sequence[MemoryIdentity]) -> dict[MemoryIdentity, set[str]]:
        """The recorded models of many threads in one read (:attr:`RowSql.models_of`)."""
        unique = list(dict.fromkeys(scopes))
        if not unique:
            return {}
        params = {
            "tenants": [scope.tenant_id for scope in unique],
            "resources": [scope.resource_id for scope in unique],
            "threads": [scope.thread_id for scope in unique],
        }
        found: dict[MemoryIdentity, set[str]] = {}
        for row in await self._rows("embedding_models_of", self.sql.rows.models_of, params):
            found.setdefault(unique[int(row["ord"]) - 1], set()).add(str(row["embedding_model"]))
        return found

    async def get(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` in scope, in the order of ``ids`` (each once)."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        # one primary-key descent per id, whatever the statistics (RowSql.records)
        params = {**scope_params(scope), "ids": wanted}
        rows = await self._rows("get_entries", self.sql.rows.records, params)
        found = {row["id"]: record_from_row(row) for row in rows}
        return [found[i] for i in wanted if i in found]

    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist as entries in scope."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return set()
        params = {**scope_params(scope), "ids": wanted}
        return {row["id"] for row in await self._rows("known_ids", self.sql.rows.known_ids, params)}

    async def set_consent(
        self, scope: MemoryIdentity, entry_id: str, consent: MemoryConsent
    ) -> MemoryRecord | None:
        """Replace the consent of one entry; ``None`` if it does not exist."""
        t = self.tables.entries
        stmt = (
            update(t)
            .where(self._scoped(scope), t.c.id == entry_id)
            .values(consent_values(consent))
            .returning(*(t.c[name] for name in RECORD_COLUMNS))
        )
        async with self._session("set_consent") as session:
            row = (await session.execute(stmt)).mappings().one_or_none()
        return None if row is None else record_from_row(row)

    async def replace_text(
        self,
        scope: MemoryIdentity,
        entry_id: str,
        new_text: str,
        vector: OwnVector,
        now: datetime,
        model: str | None = None,
    ) -> MemoryRecord | None:
        """New text and vector at once (and its later windows'); ``None`` if the entry does not
        exist."""
        later = own_parts(vector)[1]
        params: dict[str, Any] = {
            **scope_params(scope),
            "id": entry_id,
            "text": new_text,
            "embedding": own_parts(vector)[0],
            "window_embeddings": None if later is None else encode_vectors(list(later)),
            "now": now,
            "model": model,
            **lexical_values(new_text),
        }
        rows = await self._written("replace_text", self.sql.rows.replace_text, params)
        return record_from_row(rows[0]) if rows else None

    async def set_legal_hold(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        """Put ``ids`` under legal hold; return how many of them exist."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        t = self.tables.entries
        stmt = (
            update(t).where(self._scoped(scope), _in_array(t.c.id, wanted)).values(legal_hold=True)
        )
        async with self._session("set_legal_hold") as session:
            return _rowcount(await session.execute(stmt))

    async def merge_metadata(
        self, scope: MemoryIdentity, patches: Mapping[str, MetadataPatch]
    ) -> int:
        """Merge each patch into its entry's metadata (``metadata || patch``) where the entry is
        still the version the patch names and not under legal hold, in one statement; return how
        many entries changed. The patches and versions travel as two JSON objects keyed by id."""
        if not patches:
            return 0
        t = self.tables.entries
        values = bindparam("patches", {i: dict(p.values) for i, p in patches.items()}, type_=JSONB)
        versions = bindparam(
            "versions",
            {i: [p.revision, p.written_at.isoformat()] for i, p in patches.items()},
            type_=JSONB,
        )
        version = versions.op("->")(t.c.id)
        stmt = (
            update(t)
            .where(
                self._scoped(scope),
                _in_array(t.c.id, list(patches)),
                t.c.legal_hold.is_(False),
                t.c.revision == cast(version.op("->>")(0), Integer),
                t.c.written_at == cast(version.op("->>")(1), DateTime(timezone=True)),
            )
            .values(metadata=t.c.metadata.op("||")(values.op("->")(t.c.id)))
        )
        async with self._session("merge_metadata") as session:
            return _rowcount(await session.execute(stmt))

    async def delete(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        """Really delete ``ids`` in scope; return how many rows went."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        t = self.tables.entries
        stmt = delete(t).where(self._scoped(scope), _in_array(t.c.id, wanted))
        async with self._session("delete") as session:
            return _rowcount(await session.execute(stmt))

    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``, ordered by id."""
        wanted = list(dict.fromkeys(source_ids))
        if not wanted or limit == 0:
            return []
        params = {**scope_params(scope), "ids": wanted, "limit": limit}
        rows = await self._rows("dependents", self.sql.lineage.dependents, params)
        return [(row["id"], tuple(row["sources"] or ())) for row in rows]

    async def search(
        self, scope: MemoryIdentity, request: SearchRequest, *, by_model: bool = False
    ) -> SearchResult:
        """Candidate selection for recall, with the corpus statistics (see :meth:`RecallSql.search`),
        in one round trip -- on the read replica when it may answer; ``by_model``: ranking each
        row's vector of ``request.model``, its own or the one kept beside it."""
        statement, params, terms = search_statement(
            self.sql.recall, scope, request, by_model=by_model
        )
        on = self.on  # recall's hot read: straight to the executor (as _rows would)
        if isinstance(on, Executor):
            rows = await on.fetch("search", statement, params, replica=True, custom_plans=True)
        else:
            rows = await on.fetch(statement, params)
        return search_result(rows, terms)

    async def neighbors(
        self, scope: MemoryIdentity, ranges: Sequence[tuple[int, int]], flt: RecallFilter
    ) -> list[MemoryRecord]:
        """Recallable records of the thread within any inclusive sequence range."""
        if not ranges:
            return []
        statement, params = neighbors_statement(self.sql.recall, scope, ranges, flt)
        rows = await self._rows("neighbors", statement, params, replica=True, custom_plans=True)
        return [record_from_row(row) for row in rows]

    async def list_by_thread(
        self, scope: MemoryIdentity, after: tuple[int, str] | None, limit: int
    ) -> list[MemoryRecord]:
        """Records after ``(sequence, id)``, ordered by both."""
        if limit == 0:
            return []
        t = self.tables.entries
        stmt = self._record_select().where(self._scoped(scope))
        if after is not None:
            stmt = stmt.where(
                (t.c.sequence > after[0]) | ((t.c.sequence == after[0]) & (t.c.id > after[1]))
            )
        stmt = stmt.order_by(t.c.sequence, t.c.id).limit(limit)
        async with self._session("list_by_thread", read=True) as session:
            return [record_from_row(row) for row in (await session.execute(stmt)).mappings()]

    async def count(self, scope: MemoryIdentity, status: IndexStatus | None = None) -> int:
        """How many entries the thread holds (with ``status``, only those in it)."""
        t = self.tables.entries
        stmt = select(func.count()).select_from(t).where(self._scoped(scope))
        if status is not None:
            # a constant, not a bound value: the plan PostgreSQL caches for the statement (generic
            # after five runs) can then use the partial ``status = 'pending'`` indexes -- with a
            # bound status the generic plan walked the whole thread (3.7x slower on 4,879 rows)
            stmt = stmt.where(t.c.status == literal_column(f"'{_STATUS_SQL[status]}'"))
        action = "count_by_thread" if status is None else f"count_{status}"
        async with self._session(action, read=True) as session:
            return int((await session.execute(stmt)).scalar_one())

    async def indexed_threads(self, limit: int) -> list[MemoryIdentity]:
        """Up to ``limit`` threads of the whole table that hold indexed entries (any tenant: a
        model change's gate samples the store's threads)."""
        t = self.tables.entries
        stmt = (
            select(t.c.tenant_id, t.c.resource_id, t.c.thread_id)
            .where(t.c.status == "indexed")
            .distinct()
            .limit(limit)
        )
        async with self._session("indexed_threads", writes=False) as session:
            rows = (await session.execute(stmt)).all()
        return [MemoryIdentity(tenant_id=a, resource_id=r, thread_id=h) for a, r, h in rows]

    async def embedding_models(self, scope: MemoryIdentity | None) -> set[str]:
        """The distinct non-NULL ``embedding_model`` values of the thread (of the table: ``None``)."""
        t = self.tables.entries
        stmt = select(t.c.embedding_model).where(t.c.embedding_model.is_not(None)).distinct()
        if scope is not None:
            stmt = stmt.where(self._scoped(scope))
        async with self._session("embedding_models", writes=False) as session:
            return {str(model) for model in (await session.execute(stmt)).scalars()}

    async def list_oldest(
        self,
        scope: MemoryIdentity,
        limit: int,
        occurred_before: datetime | None,
        include_held: bool,
    ) -> list[MemoryRecord]:
        """Records ordered by ``(occurred_at, sequence, id)``."""
        if limit == 0:
            return []
        t = self.tables.entries
        stmt = self._record_select().where(self._scoped(scope))
        if occurred_before is not None:
            stmt = stmt.where(t.c.occurred_at < occurred_before)
        if not include_held:
            stmt = stmt.where(t.c.legal_hold.is_(False))
        stmt = stmt.order_by(t.c.occurred_at, t.c.sequence, t.c.id).limit(limit)
        async with self._session("list_oldest", writes=False) as session:
            return [record_from_row(row) for row in (await session.execute(stmt)).mappings()]

    async def analyze(self) -> None:
        """Gather the table's statistics (``ANALYZE``, outside any transaction block: the store's
        executor, never a unit)."""
        if not isinstance(self.on, Executor):
            raise TypeError("a table is analysed outside any transaction block")
        statement = SchemaSql(self.tables.names).analyze_entries
        await self.on.run_alone("analysing the loaded table", statement)

    async def any_width(self) -> int | None:
        """The width of some stored vector, or ``None`` when none is stored."""
        found = await self._value("vector_width", self.sql.rows.any_width)
        return None if found is None else int(found)


class TombstoneRepository(_Repository):
    """Lineage invalidation tombstones, through the mapped class ``tables.orm.Tombstone``."""

    __slots__ = ()

    async def upsert(self, scope: MemoryIdentity, tombstones: Sequence[Tombstone]) -> None:
        """Insert tombstones; an existing ``(entry_id, cause_id, reason)`` takes the new time.

        One ORM-enabled ``INSERT ... ON CONFLICT DO UPDATE`` for the whole batch.
        """
        latest: dict[tuple[str, str, str], Tombstone] = {}
        for tombstone in tombstones:
            latest[(tombstone.entry_id, tombstone.cause_id, tombstone.reason)] = tombstone
        if not latest:
            return
        model = self.tables.orm.Tombstone
        stmt = pg_insert(model).values(
            [
                {
                    "tenant_id": scope.tenant_id,
                    "resource_id": scope.resource_id,
                    "thread_id": scope.thread_id,
                    "entry_id": tombstone.entry_id,
                    "cause_id": tombstone.cause_id,
                    "reason": tombstone.reason,
                    "created_at": tombstone.created_at,
                }
                for tombstone in latest.values()
            ]
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=_primary_key(model.__table__),
            set_={"created_at": stmt.excluded.created_at},
        )
        async with self._session("upsert_tombstones") as session:
            await session.execute(stmt)

    async def remove(self, scope: MemoryIdentity, cause_id: str, reason: TombstoneReason) -> int:
        """Delete the tombstones ``cause_id`` caused with ``reason``; count them."""
        model = self.tables.orm.Tombstone
        stmt = delete(model).where(
            model.tenant_id == scope.tenant_id,
            model.resource_id == scope.resource_id,
            model.thread_id == scope.thread_id,
            model.cause_id == cause_id,
            model.reason == reason,
        )
        async with self._session("remove_tombstones") as session:
            return _rowcount(await session.execute(stmt))
