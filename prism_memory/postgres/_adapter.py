"""The connection side of the PostgreSQL adapters: the unit of work, the driver path, and the
width of the stored vectors.

Two ways to execute, and the rule between them:

* **the asyncpg driver** of a kept pooled connection (:meth:`_Adapter._driver`), for the named
  statements of :mod:`prism_memory.postgres.statements` on the hot paths -- one read
  (:meth:`_Adapter._fetch`), one writing statement in its own transaction (:meth:`_Adapter._write`),
  or a locked multi-statement transaction (:meth:`_Adapter._transaction`: remember's insert, the
  bulk import): statements prepared once per connection, no ORM or ``Connection`` layer around
  them (see ``benchmarks/README.md``);
* **a SQLAlchemy session** (:meth:`_Adapter._unit`, ``async with session.begin()``) for everything
  that goes through :mod:`prism_memory.postgres.repositories` -- Core and ORM statements, and named
  statements on paths where one more layer costs nothing measurable -- and for units that combine
  several statements (governance, the working document, share grants, the RAG transaction).

Both wrap every driver error into a :class:`~prism_memory.errors.PrismMemoryError`
(:func:`~prism_memory.postgres._errors.wrap_db_errors`), so a call applies entirely or not at all.

Two decisions are taken here for every statement:

* **pooler mode** (``pooling="transaction"``): a statement that would run alone runs inside its
  own ``BEGIN … COMMIT`` (:meth:`_Adapter._alone`), so a statement prepared unnamed on one server
  connection of a transaction pooler is executed on the same one;
* **where a read runs** (a :class:`ReadReplica`): :meth:`_Adapter._read_unit` and
  ``_fetch(..., replica=True)`` go to the replica once it has replayed the primary's WAL past this
  store's last write (:meth:`_Adapter._replica_ready`), else to the primary; every other unit is
  the primary's, and one that may write counts as a write (:meth:`_Adapter._wrote`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import asyncpg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.util.concurrency import greenlet_spawn

from .. import _telemetry as otel
from ..embedding import assert_finite_vector
from ..models import Vector
from ._engine import POOLED_BEGIN, KeptConnections, Pooling
from ._errors import sqlstate_of, translate, wrap_db_errors
from .repositories import EntryRepository
from .statements import EntrySql, to_positional
from .statements.catalog import CUSTOM_PLANS, PRIMARY_LSN, REPLAYED_LSN
from .tables import PrismTables

__all__ = ["ReadConsistency", "ReadReplica"]


ReadConsistency = Literal["session", "strict"]
"""What a replica read waits for: ``"session"`` -- every write this store made (read your own
writes); ``"strict"`` -- everything the primary had committed when the read began."""


@dataclass(frozen=True, slots=True)
class ReadReplica:
    """Where a store sends its reads (recall, export, ``index_status``, counts, RAG queries): a
    streaming replica's engine, how long a read waits for the replica to replay what it must see
    before it reads from the primary instead, and what it must see (:data:`ReadConsistency`)."""

    engine: AsyncEngine
    wait_seconds: float = 0.25
    consistency: ReadConsistency = "session"


class _Endpoint:
    """One server's engine, its session factory and the connections kept between operations."""

    __slots__ = ("engine", "kept", "sessions")

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessions = async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
        self.kept = KeptConnections(engine)


class _Replica(_Endpoint):
    """The read endpoint, and the primary's WAL position it must have replayed to answer."""

    __slots__ = ("config", "covered", "needed", "writes")

    def __init__(self, config: ReadReplica) -> None:
        super().__init__(config.engine)
        self.config = config
        self.writes = 0
        """Writes this store finished on the primary (each may change what a read sees)."""
        self.covered = 0
        """How many of them :attr:`needed` covers."""
        self.needed: int | None = None
        """A WAL position of the primary after those writes; ``None``: nothing to wait for."""


class _Adapter:
    """Engine, session factory and the unit-of-work helper shared by both adapters."""

    def __init__(
        self,
        engine: AsyncEngine,
        tables: PrismTables,
        *,
        owns_engine: bool,
        engine_sets_plans: bool = False,
        pooling: Pooling = "session",
        replica: ReadReplica | None = None,
        owns_replica_engine: bool = False,
    ) -> None:
        self._engine = engine
        self._pooling: Pooling = pooling
        self._tables = tables
        self._owns_engine = owns_engine
        self._primary = _Endpoint(engine)
        self._kept = self._primary.kept
        self._replica = None if replica is None else _Replica(replica)
        self._owns_replica_engine = owns_replica_engine
        # Engines prism_memory creates set the planner settings per connection (SERVER_SETTINGS)
        # and recall reads go to the asyncpg driver directly (see ``_fetch``); on a host's engine
        # they run in units that ask for custom plans transaction-locally, like the RAG queries.
        self._direct_reads = engine_sets_plans

    @property
    def engine(self) -> AsyncEngine:
        """The engine this adapter runs on."""
        return self._engine

    @property
    def pooling(self) -> Pooling:
        """``"transaction"`` when this adapter runs behind a transaction-mode pooler (every
        statement inside a transaction, nothing prepared for reuse, no ``LISTEN``)."""
        return self._pooling

    @property
    def tables(self) -> PrismTables:
        """The tables this adapter reads and writes."""
        return self._tables

    @property
    def read_replica(self) -> ReadReplica | None:
        """Where this adapter sends its reads, if not to the primary."""
        return None if self._replica is None else self._replica.config

    @asynccontextmanager
    async def _unit(
        self, action: str, *, custom_plans: bool = False, writes: bool = True
    ) -> AsyncIterator[AsyncSession]:
        """One unit of work on the primary; ``writes=False`` says it only reads (a replica read
        that follows then need not wait for it)."""
        try:
            async with self._session(self._primary, action, custom_plans) as session:
                yield session
        finally:
            if writes:
                self._wrote()

    @asynccontextmanager
    async def _read_unit(
        self, action: str, *, custom_plans: bool = False
    ) -> AsyncIterator[AsyncSession]:
        """A unit that only reads: on the replica when it has replayed what it must
        (:meth:`_replica_ready`), else on the primary."""
        endpoint = self._replica if await self._replica_ready(action) else self._primary
        async with self._session(endpoint or self._primary, action, custom_plans) as session:
            yield session

    @staticmethod
    @asynccontextmanager
    async def _session(
        endpoint: _Endpoint, action: str, custom_plans: bool
    ) -> AsyncIterator[AsyncSession]:
        with otel.db_span(action), wrap_db_errors(action):
            async with endpoint.sessions() as session, session.begin():
                if custom_plans:
                    await session.execute(text(CUSTOM_PLANS))
                yield session

    def _wrote(self) -> None:
        """A write on the primary finished (or may have): the next replica read must see it."""
        if self._replica is not None:
            self._replica.writes += 1

    async def _replica_ready(self, action: str) -> bool:
        """Whether a read may go to the replica: it has replayed the primary's WAL past this
        store's last write (``"strict"``: past what the primary had when the read began) --
        waiting up to ``wait_seconds`` for it -- else the read goes to the primary. A forgotten
        or revoked entry is therefore never read from a replica that has not replayed the
        change, once the call that made it has returned."""
        replica = self._replica
        if replica is None:
            return False
        strict = replica.config.consistency == "strict"
        target = replica.writes
        needed = replica.needed
        if strict or replica.covered < target:
            (row,) = await self._fetch_on(self._primary, action, PRIMARY_LSN)
            needed = int(row[0]) if needed is None or strict else max(needed, int(row[0]))
            if not strict:
                replica.needed = needed if replica.needed is None else max(needed, replica.needed)
                replica.covered = max(replica.covered, target)
        if needed is None:
            return True
        deadline = time.monotonic() + replica.config.wait_seconds
        delay = 0.002
        while True:
            (row,) = await self._fetch_on(replica, action, REPLAYED_LSN)
            if row[0] is not None and int(row[0]) >= needed:
                if replica.needed == needed:
                    replica.needed = None  # replayed: later reads need not ask until a write
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(delay, left))
            delay *= 2

    async def _fetch(
        self,
        action: str,
        statement: str,
        params: Mapping[str, Any],
        *,
        replica: bool = False,
    ) -> list[Any]:
        """One read in one round trip, on the primary -- or, with ``replica``, on the read
        replica when :meth:`_replica_ready` allows."""
        endpoint: _Endpoint = self._primary
        if replica and self._replica is not None and await self._replica_ready(action):
            endpoint = self._replica
        return await self._fetch_on(endpoint, action, statement, params)

    async def _fetch_on(
        self,
        endpoint: _Endpoint,
        action: str,
        statement: str,
        params: Mapping[str, Any] | None = None,
    ) -> list[Any]:
        """One read on ``endpoint``: the statement goes straight to the pooled connection's
        asyncpg driver -- no transaction around it, prepared once per connection and cached by
        asyncpg -- and is retried once on a fresh connection if the pooled one turns out dead. A
        read cancelled midway drops its connection, like a write (:meth:`_driver`)."""
        positional, names = to_positional(statement)
        args = [(params or {})[name] for name in names]
        for attempt in (1, 2):
            with otel.db_span(action), wrap_db_errors(action):
                driver: Any = None
                try:
                    async with self._driver(endpoint) as driver, self._alone(driver):
                        return list(await driver.fetch(positional, *args))
                except Exception as exc:  # _driver has dropped a lost connection already
                    if driver is None or not _connection_lost(exc, driver):
                        raise
                    if attempt == 2:
                        raise translate(exc, action) from exc
                # the server restarted or failed over: every pooled connection is suspect
                await endpoint.kept.release()
                await endpoint.engine.dispose()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write(
        self,
        action: str,
        statement: str,
        params: Mapping[str, Any],
        *,
        count: bool = False,
        visible: bool = True,
    ) -> list[Any]:
        """One writing statement in one round trip: straight to the pooled connection's asyncpg
        driver, in its own transaction (no ``BEGIN``/``COMMIT`` around it: a single statement
        applies entirely or not at all), prepared once per connection. Returns its rows, or with
        ``count`` the number of rows it changed (as a one-item list). Never retried: a connection
        lost mid-statement leaves it applied or not, and the caller's next attempt decides.
        ``visible=False``: no read sees what it changes (a claim's lease), so a replica read
        after it need not wait for it."""
        positional, names = to_positional(statement)
        args = [params[name] for name in names]
        try:
            with otel.db_span(action), wrap_db_errors(action):
                async with self._driver() as driver, self._alone(driver):
                    if count:
                        status = await driver.execute(positional, *args)
                        return [int(status.rsplit(" ", 1)[-1])]
                    return list(await driver.fetch(positional, *args))
        finally:
            if visible:
                self._wrote()

    @asynccontextmanager
    async def _driver(self, endpoint: _Endpoint | None = None) -> AsyncIterator[Any]:
        """The asyncpg driver of a pooled connection (no SQLAlchemy ``Connection`` around it),
        kept for the next operation afterwards (:class:`KeptConnections`) -- or dropped, never
        pooled again, when it was lost, is left inside a transaction, or an operation on it was
        cancelled midway."""
        kept = (endpoint or self._primary).kept
        pooled = await kept.take()
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
            await kept.give(pooled)

    def _alone(self, driver: Any) -> contextlib.AbstractAsyncContextManager[None]:
        """Around a statement that runs outside any transaction of ours: nothing, or behind a
        transaction pooler its own transaction (:data:`POOLED_BEGIN`) -- there a statement
        prepared on one server connection could otherwise be bound and run on another."""
        if self._pooling == "transaction":
            return self._transaction(driver, POOLED_BEGIN)
        return contextlib.nullcontext()

    @asynccontextmanager
    async def _transaction(
        self, driver: Any, begin: str, action: str | None = None
    ) -> AsyncIterator[None]:
        """A transaction on the asyncpg ``driver``: ``begin`` (``BEGIN ...``, and whatever must
        run with it in the same round trip), the body, ``COMMIT``; rolled back when the body
        raises (a connection left in a transaction is then dropped by :meth:`_driver`). A named
        ``action`` is traced as one database span (the pooler's own wrap is inside one already)."""
        with otel.db_span(action) if action is not None else contextlib.nullcontext():
            async with self._transaction_body(driver, begin):
                yield

    @asynccontextmanager
    async def _transaction_body(self, driver: Any, begin: str) -> AsyncIterator[None]:
        try:
            await driver.execute(begin)
            yield
            await driver.execute("COMMIT")
        except BaseException:
            if not driver.is_closed() and driver.is_in_transaction():
                with contextlib.suppress(Exception):
                    await driver.execute("ROLLBACK")
            raise
        finally:
            self._wrote()

    async def _close_replica(self) -> None:
        """Return the replica's kept connections; dispose of its engine if it was made here."""
        if self._replica is not None:
            await self._replica.kept.close()
            if self._owns_replica_engine:
                self._owns_replica_engine = False
                await self._replica.engine.dispose()

    async def _dispose(self) -> None:
        await self._kept.close()
        await self._close_replica()
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


class _VectorAdapter(_Adapter):
    """An adapter over the entries table, which knows the width of its vectors: the pinned
    ``dimension``, else the width of the first vector stored (unpinned tables keep one width)."""

    _dimension: int | None
    _width: int | None

    async def _known_width(self, session: AsyncSession) -> int | None:
        if self._width is None:
            self._width = await EntryRepository(session, self._tables).any_width()
        return self._width

    async def _read_width(self) -> int | None:
        rows = await self._fetch("search", EntrySql.for_tables(self._tables).any_width, {})
        if rows:
            self._width = int(rows[0][0])
        return self._width

    @staticmethod
    def _check_vectors(
        vectors: Iterable[tuple[object, str]], width: int | None
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
