"""Async repositories over prism_memory's tables.

A repository is *given* an :class:`~sqlalchemy.ext.asyncio.AsyncSession` and the tables; it builds
statements and executes them, and never commits: the unit of work (``async with session.begin()``)
belongs to the adapter one layer up (:mod:`prism_memory.postgres.store`).

Two styles, chosen per path:

* **ORM, where it is natural and not a hot path.** :class:`WorkingRepository`,
  :class:`ShareGrantRepository` and :class:`TombstoneRepository` go through the typed mapped classes
  of the table set (``tables.orm.WorkingMemory``, ``.ShareGrant``, ``.Tombstone``; see
  :mod:`prism_memory.postgres.orm`): ``session.get`` by primary key; ORM-enabled
  ``insert ... on_conflict``, ``update`` and ``delete`` on the mapped class, rows returned as mapped
  objects (``RETURNING``, ``populate_existing``). Writes stay single statements -- upserts, and the
  working document's conditional ``UPDATE ... WHERE version = :expected`` -- so concurrent writers
  neither collide nor lose updates.
* **Core and hand-written SQL on the hot paths.** :class:`EntryRepository` and
  :class:`IndexingRepository` never build ORM objects: a batch of new entries is one hand-written
  ``INSERT ... SELECT FROM unnest(...)`` (one array parameter per column), other updates are Core
  statements over the Core table; search, neighbours, lineage lookups, claims and vector
  writes are hand-written SQL whose text is built once per table set
  (:class:`~prism_memory.postgres.sql.EntrySql`), apart from execution, with bound parameters;
  identifiers come only from validated names and are always quoted. Rows become records in
  :mod:`prism_memory.postgres.rows`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Table,
    Text,
    any_,
    bindparam,
    delete,
    func,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from ..models import (
    IndexStatus,
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    ShareGrant,
    TombstoneReason,
    Vector,
    WorkingMemoryRecord,
)
from ..stores.base import (
    ClaimedEntry,
    RecallFilter,
    SearchRequest,
    SearchResult,
    Tombstone,
)
from ._engine import encode_vector
from .orm import ShareGrantRow, WorkingMemoryRow
from .rows import (
    RECORD_COLUMNS,
    claimed_entries,
    consent_values,
    lexical_values,
    record_from_row,
    scope_params,
    search_result,
)
from .sql import (
    EntrySql,
    claim_in_statement,
    claim_statement,
    neighbors_statement,
    search_statement,
    thread_lock_key,
)
from .tables import PrismTables

__all__ = [
    "EntryRepository",
    "IndexingRepository",
    "ShareGrantRepository",
    "TombstoneRepository",
    "WorkingRepository",
]

_WORKING_NO_THREAD = ""


class _Repository:
    """Base: a session to execute on, the tables and their SQL."""

    __slots__ = ("session", "sql", "tables")

    def __init__(self, session: AsyncSession, tables: PrismTables) -> None:
        self.session = session
        self.tables = tables
        self.sql = EntrySql.for_tables(tables)


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

    async def lock_thread(self, scope: MemoryIdentity) -> None:
        """Serialise writers of one thread until the transaction ends (sequence assignment)."""
        await self.session.execute(text(self.sql.lock_thread), {"key": thread_lock_key(scope)})

    async def get(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` in scope, in the order of ``ids`` (each once)."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        # ``= ANY(array)``: one statement (prepared once) whatever the number of ids
        stmt = self._record_select().where(
            self._scoped(scope), _in_array(self.tables.entries.c.id, wanted)
        )
        rows = (await self.session.execute(stmt)).mappings()
        found = {row["id"]: record_from_row(row) for row in rows}
        return [found[i] for i in wanted if i in found]

    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist as entries in scope."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return set()
        e = self.tables.entries
        stmt = select(e.c.id).where(self._scoped(scope), _in_array(e.c.id, wanted))
        return set((await self.session.execute(stmt)).scalars())

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
        row = (await self.session.execute(stmt)).mappings().one_or_none()
        return None if row is None else record_from_row(row)

    async def replace_text(
        self,
        scope: MemoryIdentity,
        entry_id: str,
        new_text: str,
        vector: Vector,
        now: datetime,
        model: str | None = None,
    ) -> MemoryRecord | None:
        """New text and vector at once; ``None`` if the entry does not exist."""
        params: dict[str, Any] = {
            **scope_params(scope),
            "id": entry_id,
            "text": new_text,
            "embedding": vector,
            "now": now,
            "model": model,
            **lexical_values(new_text),
        }
        result = await self.session.execute(text(self.sql.replace_text), params)
        row = result.mappings().one_or_none()
        return None if row is None else record_from_row(row)

    async def set_legal_hold(self, scope: MemoryIdentity, ids: Sequence[str], hold: bool) -> int:
        """Set or clear legal hold; return how many of ``ids`` exist."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        t = self.tables.entries
        stmt = (
            update(t).where(self._scoped(scope), _in_array(t.c.id, wanted)).values(legal_hold=hold)
        )
        return _rowcount(await self.session.execute(stmt))

    async def delete(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        """Really delete ``ids`` in scope; return how many rows went."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        t = self.tables.entries
        stmt = delete(t).where(self._scoped(scope), _in_array(t.c.id, wanted))
        return _rowcount(await self.session.execute(stmt))

    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``, ordered by id."""
        wanted = list(dict.fromkeys(source_ids))
        if not wanted or limit == 0:
            return []
        params = {**scope_params(scope), "ids": wanted, "limit": limit}
        rows = (await self.session.execute(text(self.sql.dependents), params)).all()
        return [(row[0], tuple(row[1] or ())) for row in rows]

    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        """Candidate selection for recall, with the corpus statistics (see :meth:`EntrySql.search`)."""
        statement, params, terms = search_statement(self.sql, scope, request)
        rows = (await self.session.execute(text(statement), params)).mappings().all()
        return search_result(rows, terms)

    async def neighbors(
        self, scope: MemoryIdentity, ranges: Sequence[tuple[int, int]], flt: RecallFilter
    ) -> list[MemoryRecord]:
        """Recallable records of the thread within any inclusive sequence range."""
        if not ranges:
            return []
        statement, params = neighbors_statement(self.sql, scope, ranges, flt)
        rows = (await self.session.execute(text(statement), params)).mappings()
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
        return [record_from_row(row) for row in (await self.session.execute(stmt)).mappings()]

    async def count(self, scope: MemoryIdentity, status: IndexStatus | None = None) -> int:
        """How many entries the thread holds (with ``status``, only those in it)."""
        t = self.tables.entries
        stmt = select(func.count()).select_from(t).where(self._scoped(scope))
        if status is not None:
            # a constant, not a bound value: the plan PostgreSQL caches for the statement (generic
            # after five runs) can then use the partial ``status = 'pending'`` indexes -- with a
            # bound status the generic plan walked the whole thread (3.7x slower on 4,879 rows)
            stmt = stmt.where(t.c.status == literal_column(f"'{_STATUS_SQL[status]}'"))
        return int((await self.session.execute(stmt)).scalar_one())

    async def embedding_models(self, scope: MemoryIdentity | None) -> set[str]:
        """The distinct non-NULL ``embedding_model`` values of the thread (of the table: ``None``)."""
        t = self.tables.entries
        stmt = select(t.c.embedding_model).where(t.c.embedding_model.is_not(None)).distinct()
        if scope is not None:
            stmt = stmt.where(self._scoped(scope))
        return {str(model) for model in (await self.session.execute(stmt)).scalars()}

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
        return [record_from_row(row) for row in (await self.session.execute(stmt)).mappings()]

    async def any_width(self) -> int | None:
        """The width of some stored vector, or ``None`` when none is stored."""
        found = (await self.session.execute(text(self.sql.any_width))).scalar_one_or_none()
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
        await self.session.execute(stmt)

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
        return _rowcount(await self.session.execute(stmt))


class ShareGrantRepository(_Repository):
    """Parent -> child share grants, through the mapped class ``tables.orm.ShareGrant``."""

    __slots__ = ()

    @staticmethod
    def _grant(row: ShareGrantRow) -> ShareGrant:
        return ShareGrant(
            tenant_id=row.tenant_id,
            resource_id=row.resource_id,
            parent_thread_id=row.parent_thread_id,
            child_thread_id=row.child_thread_id,
            source_ids=tuple(row.source_ids),
            created_at=row.created_at,
            expires_at=row.expires_at,
        )

    async def put(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant.

        One ORM-enabled ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``, so concurrent writers
        of the same grant never collide; the returned row lands in the session's identity map.
        """
        model = self.tables.orm.ShareGrant
        stmt = pg_insert(model).values(
            tenant_id=grant.tenant_id,
            resource_id=grant.resource_id,
            parent_thread_id=grant.parent_thread_id,
            child_thread_id=grant.child_thread_id,
            source_ids=list(grant.source_ids),
            created_at=grant.created_at,
            expires_at=grant.expires_at,
        )
        upsert = stmt.on_conflict_do_update(
            index_elements=_primary_key(model.__table__),
            set_={
                "source_ids": stmt.excluded.source_ids,
                "created_at": stmt.excluded.created_at,
                "expires_at": stmt.excluded.expires_at,
            },
        ).returning(model)
        row = (await self.session.scalars(upsert, execution_options=_POPULATE)).one()
        return self._grant(row)

    async def get(self, tenant: str, resource: str, parent: str, child: str) -> ShareGrant | None:
        """The grant, expired or not (``session.get`` by primary key)."""
        row = await self.session.get(self.tables.orm.ShareGrant, (tenant, resource, parent, child))
        return None if row is None else self._grant(row)

    async def delete(self, tenant: str, resource: str, parent: str, child: str) -> int:
        """Delete the grant; 1 if there was one."""
        model = self.tables.orm.ShareGrant
        stmt = delete(model).where(
            model.tenant_id == tenant,
            model.resource_id == resource,
            model.parent_thread_id == parent,
            model.child_thread_id == child,
        )
        return _rowcount(await self.session.execute(stmt))


class IndexingRepository(_Repository):
    """The deferred-indexing ledger on the entries table: claims, results, failures."""

    __slots__ = ()

    async def claim(
        self,
        scope: MemoryIdentity | None,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
        tenant_id: str | None = None,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` due pending rows (of ``scope``, else of ``tenant_id``, else of any
        scope), ordered by sequence then id."""
        if limit == 0:
            return []
        statement, params = claim_statement(
            self.sql,
            scope,
            limit=limit,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
            tenant_id=tenant_id,
        )
        return claimed_entries((await self.session.execute(text(statement), params)).mappings())

    async def claim_in(
        self,
        scopes: Sequence[MemoryIdentity],
        *,
        limit: int,
        per_scope: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` due rows of ``scopes``, at most ``per_scope`` each, in one
        statement; the scopes are served in the order given, each scope's rows by sequence."""
        if limit == 0 or per_scope == 0 or not scopes:
            return []
        statement, params = claim_in_statement(
            self.sql,
            scopes,
            limit=limit,
            per_scope=per_scope,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
        )
        rows = (await self.session.execute(text(statement), params)).mappings()
        return claimed_entries(rows, scopes)

    async def complete(
        self,
        items: Sequence[tuple[ClaimedEntry, Vector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors where lease and revision match (one statement); count them."""
        if not items:
            return 0
        params = {
            "tenants": [item.scope.tenant_id for item, _ in items],
            "resources": [item.scope.resource_id for item, _ in items],
            "threads": [item.scope.thread_id for item, _ in items],
            "ids": [item.id for item, _ in items],
            "revisions": [item.revision for item, _ in items],
            "embeddings": [encode_vector(vector) for _, vector in items],
            "leases": [item.lease_until for item, _ in items],
            "worker": worker_id,
            "now": now,
            "model": model,
        }
        return _rowcount(await self.session.execute(text(self.sql.complete), params))

    async def fail(
        self,
        item: ClaimedEntry,
        *,
        worker_id: str,
        error: str,
        retry_at: datetime | None,
        now: datetime,
    ) -> None:
        """Record a failure while the lease matches; release the lease either way."""
        params = {
            **scope_params(item.scope),
            "id": item.id,
            "revision": item.revision,
            "worker": worker_id,
            "error": error,
            "retry_at": retry_at,
            "new_status": "pending" if retry_at is not None else "failed",
            "now": now,
        }
        await self.session.execute(text(self.sql.fail), params)

    async def release(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds; count them."""
        return _rowcount(await self.session.execute(text(self.sql.release), {"worker": worker_id}))

    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None) -> int:
        """Failed rows (all of the thread's, or ``ids``) become pending with attempts 0."""
        t = self.tables.entries
        stmt = update(t).where(
            t.c.tenant_id == scope.tenant_id,
            t.c.resource_id == scope.resource_id,
            t.c.thread_id == scope.thread_id,
            t.c.status == "failed",
        )
        if ids is not None:
            wanted = list(dict.fromkeys(ids))
            if not wanted:
                return 0
            stmt = stmt.where(_in_array(t.c.id, wanted))
        stmt = stmt.values(
            status="pending",
            attempts=0,
            last_error=None,
            next_attempt_at=None,
            claimed_by=None,
            claimed_until=None,
        )
        return _rowcount(await self.session.execute(stmt))

    async def status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        t = self.tables.entries
        stmt = select(t.c.id, t.c.status, t.c.last_error).where(
            t.c.tenant_id == scope.tenant_id,
            t.c.resource_id == scope.resource_id,
            t.c.thread_id == scope.thread_id,
            # one array parameter, however many ids are watched (no bind-parameter limit)
            _in_array(t.c.id, wanted),
        )
        return {row.id: (row.status, row.last_error) for row in await self.session.execute(stmt)}

    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, Vector]],
        model: str | None = None,
    ) -> int:
        """Set vectors where the revision matches (one statement); count them."""
        if not items:
            return 0
        params = {
            **scope_params(scope),
            "ids": [entry_id for entry_id, _, _ in items],
            "revisions": [int(revision) for _, revision, _ in items],
            "embeddings": [encode_vector(vector) for _, _, vector in items],
            "model": model,
        }
        return _rowcount(await self.session.execute(text(self.sql.store_vectors), params))


class WorkingRepository(_Repository):
    """Versioned working-memory documents (one per tenant, resource and thread or none), through
    the mapped class ``tables.orm.WorkingMemory``.

    Writes stay single statements so concurrent writers never lose an update: an ORM-enabled
    ``INSERT ... ON CONFLICT`` (unconditional write, or create at version 0) or a conditional
    ``UPDATE ... WHERE version = :expected`` (optimistic concurrency), each ``RETURNING`` the
    mapped row.
    """

    __slots__ = ()

    @staticmethod
    def _key(tenant: str, resource: str, thread: str | None) -> tuple[str, str, str]:
        return (tenant, resource, _WORKING_NO_THREAD if thread is None else thread)

    @staticmethod
    def _record(row: WorkingMemoryRow | None) -> WorkingMemoryRecord | None:
        if row is None:
            return None
        return WorkingMemoryRecord(
            version=int(row.version), data=dict(row.data), updated_at=row.updated_at
        )

    async def get(
        self, tenant: str, resource: str, thread: str | None
    ) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` (``session.get`` by primary key, re-read)."""
        row = await self.session.get(
            self.tables.orm.WorkingMemory,
            self._key(tenant, resource, thread),
            populate_existing=True,
        )
        return self._record(row)

    async def put(
        self,
        tenant: str,
        resource: str,
        thread: str | None,
        data: Mapping[str, Any],
        *,
        expected_version: int | None,
        now: datetime,
    ) -> WorkingMemoryRecord | None:
        """Write the next version atomically; ``None`` when ``expected_version`` did not match."""
        model = self.tables.orm.WorkingMemory
        tenant, resource, thread_key = self._key(tenant, resource, thread)
        document = dict(data)
        if expected_version is None or expected_version == 0:
            stmt = pg_insert(model).values(
                tenant_id=tenant,
                resource_id=resource,
                thread_key=thread_key,
                version=1,
                data=document,
                updated_at=now,
            )
            index = _primary_key(model.__table__)
            if expected_version is None:
                upsert = stmt.on_conflict_do_update(
                    index_elements=index,
                    set_={
                        "version": model.version + 1,
                        "data": stmt.excluded.data,
                        "updated_at": stmt.excluded.updated_at,
                    },
                )
            else:
                upsert = stmt.on_conflict_do_nothing(index_elements=index)
            written = await self.session.scalars(
                upsert.returning(model), execution_options=_POPULATE
            )
            return self._record(written.one_or_none())
        conditional = (
            update(model)
            .where(
                model.tenant_id == tenant,
                model.resource_id == resource,
                model.thread_key == thread_key,
                model.version == expected_version,
            )
            .values(version=model.version + 1, data=document, updated_at=now)
            .returning(model)
        )
        found = await self.session.scalars(conditional, execution_options=_POPULATE)
        return self._record(found.one_or_none())

    async def version(self, tenant: str, resource: str, thread: str | None) -> int:
        """The current version, 0 when there is no document."""
        found = await self.get(tenant, resource, thread)
        return 0 if found is None else found.version


_POPULATE: dict[str, Any] = {"populate_existing": True}
"""Rows an ORM statement returns replace what the identity map held (the database wins)."""


def _primary_key(table: Table) -> list[str]:
    """The primary-key column names of ``table`` (the ``ON CONFLICT`` target)."""
    return [column.name for column in table.primary_key]


def _in_array(column: Any, values: Sequence[str]) -> Any:
    """``column = ANY(:array)``: one bound parameter however many values (``IN`` binds one each,
    and a statement may bind at most 32,767)."""
    return column == any_(bindparam(None, list(values), type_=ARRAY(Text)))


def _rowcount(result: Any) -> int:
    count = getattr(result, "rowcount", -1)
    return max(int(count), 0)


_STATUS_SQL: dict[str, str] = {"pending": "pending", "indexed": "indexed", "failed": "failed"}
"""The statuses an SQL text may hold as constants (a key error for anything else)."""
