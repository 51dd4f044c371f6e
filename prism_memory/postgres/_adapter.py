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
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.util.concurrency import greenlet_spawn

from ..embedding import assert_finite_vector
from ..models import Vector
from ._engine import POOLED_BEGIN, KeptConnections, Pooling
from ._errors import sqlstate_of, translate, wrap_db_errors
from .repositories import EntryRepository
from .statements import EntrySql, to_positional
from .statements.catalog import CUSTOM_PLANS
from .tables import PrismTables

__all__: list[str] = []


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
    ) -> None:
        self._engine = engine
        self._pooling: Pooling = pooling
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
    def pooling(self) -> Pooling:
        """``"transaction"`` when this adapter runs behind a transaction-mode pooler (every
        statement inside a transaction, nothing prepared for reuse, no ``LISTEN``)."""
        return self._pooling

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
                    await session.execute(text(CUSTOM_PLANS))
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
                    async with self._driver() as driver, self._alone(driver):
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
            async with self._driver() as driver, self._alone(driver):
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

    def _alone(self, driver: Any) -> contextlib.AbstractAsyncContextManager[None]:
        """Around a statement that runs outside any transaction of ours: nothing, or behind a
        transaction pooler its own transaction (:data:`POOLED_BEGIN`) -- there a statement
        prepared on one server connection could otherwise be bound and run on another."""
        if self._pooling == "transaction":
            return self._transaction(driver, POOLED_BEGIN)
        return contextlib.nullcontext()

    @staticmethod
    @asynccontextmanager
    async def _transaction(driver: Any, begin: str) -> AsyncIterator[None]:
        """A transaction on the asyncpg ``driver``: ``begin`` (``BEGIN ...``, and whatever must
        run with it in the same round trip), the body, ``COMMIT``; rolled back when the body
        raises (a connection left in a transaction is then dropped by :meth:`_driver`)."""
        try:
            await driver.execute(begin)
            yield
            await driver.execute("COMMIT")
        except BaseException:
            if not driver.is_closed() and driver.is_in_transaction():
                with contextlib.suppress(Exception):
                    await driver.execute("ROLLBACK")
            raise

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
