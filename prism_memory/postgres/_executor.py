"""The one executor of the PostgreSQL adapter: every statement of every store runs through an
:class:`Executor`, and so does every decision about where and how it runs.

It hands out *units*, each the same small surface -- ``fetch``, ``fetchval``, ``execute`` of a
named statement of :mod:`prism_memory.postgres.statements` -- over one of two carriers:

* **the asyncpg driver** of a kept pooled connection, for single statements
  (:meth:`Executor.fetch`, :meth:`Executor.write`: prepared once per connection, no ORM or
  ``Connection`` layer around them; see ``benchmarks/README.md``) and for locked multi-statement
  transactions (:meth:`Executor.transaction` yields a :class:`DriverUnit`: remember's insert, the
  bulk import);
* **a SQLAlchemy session** (:meth:`Executor.unit` yields a :class:`SessionUnit`,
  ``async with session.begin()``) for the units whose repositories build Core and ORM statements
  (governance, the working document, share grants, the RAG operations) -- and for a read that
  needs custom plans on a host's engine, whose connections prism_memory did not configure.

The repositories of :mod:`prism_memory.postgres.repositories` are the one API the stores call;
they hold an executor (each call its own unit) or a unit (a call inside a caller's transaction).
Nothing else runs SQL.

The decisions taken here for every statement:

* **pooler mode** (``pooling="transaction"``): a read on the primary goes in one flight through
  psycopg (:mod:`~prism_memory.postgres._pipelined`, on engines prism_memory made); any other
  statement that would run alone runs inside its own ``BEGIN … COMMIT``
  (:data:`~prism_memory.postgres.statements.session.POOLED_BEGIN`), so a statement prepared
  unnamed on one server connection of a transaction pooler is executed on the same one;
* **where a read runs** (a :class:`ReadReplica`): ``fetch(..., replica=True)`` and
  ``unit(..., read=True)`` go to the replica once it has replayed the primary's WAL past this
  store's last write (:meth:`Executor._replica_ready`), else to the primary; every other unit is
  the primary's, and one that may write counts as a write (:meth:`Executor.wrote`);
* **a replica that fails** (``prism_memory.postgres._replica``): every replica read -- its
  connection, its replay check, its statement -- is bounded by ``timeout_seconds``; past it, or
  on a failure of the replica's own, the read goes to the primary and the replica is avoided for
  a back-off; when the primary fails too, the error names the replica;
* **a lost connection**: a single read is retried once on a fresh connection; nothing else is;
* **errors and traces**: every unit is one database span (``otel.db_span``, named by its action,
  never by its SQL) inside :func:`~prism_memory.postgres._errors.wrap_db_errors`, so every driver
  error reaches the caller as a :class:`~prism_memory.errors.PrismMemoryError` and a call applies
  entirely or not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from .. import _telemetry as otel
from ..errors import ConfigurationError, StorageError
from ._engine import Pooling, connection_lost
from ._errors import translate, wrap_db_errors
from ._pipelined import one_flight, pipelined_reads
from ._replica import (
    REPLICA_RETRY_MAX_SECONDS,
    REPLICA_RETRY_SECONDS,
    REPLICA_TIMEOUT_SECONDS,
    Endpoint,
    ReadConsistency,
    ReadReplica,
    ReplicaDownError,
    ReplicaEndpoint,
    abandon,
    describe_endpoint,
    failure_reason,
)
from ._tenancy import TenantScoping, per_tenant, unit_settings
from .statements import to_positional
from .statements.catalog import PRIMARY_LSN, REPLAYED_LSN
from .statements.session import BEGIN, COMMIT, POOLED_BEGIN, ROLLBACK
from .statements.tenancy import begin_for, tenant_gate, tenant_of

__all__ = [
    "REPLICA_RETRY_MAX_SECONDS",
    "REPLICA_RETRY_SECONDS",
    "REPLICA_TIMEOUT_SECONDS",
    "DriverUnit",
    "Executor",
    "ReadConsistency",
    "ReadReplica",
    "SessionUnit",
    "describe_endpoint",
]

Params = Mapping[str, Any] | None


def _bound(statement: str, params: Params) -> tuple[str, list[Any]]:
    """``statement`` with ``$n`` binds for the driver, and its arguments in order."""
    positional, names = to_positional(statement)
    values = params or {}
    return positional, [values[name] for name in names]


class DriverUnit:
    """Statements inside one transaction on an asyncpg connection (:meth:`Executor.transaction`)."""

    __slots__ = ("driver", "tenancy")

    def __init__(self, driver: Any, tenancy: TenantScoping | None = None) -> None:
        self.driver = driver
        self.tenancy = tenancy

    async def fetch(self, statement: str, params: Params = None) -> list[Any]:
        """The rows of one named statement."""
        if self.tenancy is not None:
            self.tenancy.note(params)
        positional, args = _bound(statement, params)
        return list(await self.driver.fetch(positional, *args))

    async def fetchval(self, statement: str, params: Params = None) -> Any:
        """The first column of the first row, or ``None``."""
        positional, args = _bound(statement, params)
        return await self.driver.fetchval(positional, *args)

    async def column(self, statement: str, params: Params = None) -> list[Any]:
        """The first column of every row."""
        return [row[0] for row in await self.fetch(statement, params)]

    async def execute(self, statement: str, params: Params = None) -> int:
        """Run one statement; how many rows it changed."""
        positional, args = _bound(statement, params)
        status = await self.driver.execute(positional, *args)
        return _changed(status)

    async def copy(self, table: str, records: Iterable[Any], columns: Sequence[str]) -> None:
        """A binary ``COPY`` of ``records`` into the temporary ``table``."""
        await self.driver.copy_records_to_table(
            table, schema_name="pg_temp", records=records, columns=columns
        )


class SessionUnit:
    """Statements inside one SQLAlchemy session's transaction (:meth:`Executor.unit`); its
    :attr:`session` runs the repositories' Core and ORM statements."""

    __slots__ = ("session",)

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def fetch(self, statement: str, params: Params = None) -> Sequence[Any]:
        """The rows of one named statement (mappings)."""
        return (await self.session.execute(text(statement), params or {})).mappings().all()

    async def fetchval(self, statement: str, params: Params = None) -> Any:
        """The first column of the only row, or ``None``."""
        return (await self.session.execute(text(statement), params or {})).scalar_one_or_none()

    async def column(self, statement: str, params: Params = None) -> list[Any]:
        """The first column of every row."""
        return list((await self.session.execute(text(statement), params or {})).scalars())

    async def execute(self, statement: str, params: Params = None) -> int:
        """Run one statement; how many rows it changed."""
        return rowcount(await self.session.execute(text(statement), params or {}))


Unit = DriverUnit | SessionUnit


def rowcount(result: Any) -> int:
    """How many rows a SQLAlchemy result changed (0 when it does not say)."""
    return max(int(getattr(result, "rowcount", -1) or 0), 0)


def _changed(status: str) -> int:
    """How many rows an asyncpg command status (``"UPDATE 3"``) names."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


class Executor:
    """Where every statement of a store runs: the engine (and replica), the pooling mode, the
    connections kept between operations, and the units of work (see the module docstring)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        owns_engine: bool,
        sets_plans: bool = False,
        pooling: Pooling = "session",
        replica: ReadReplica | None = None,
        owns_replica_engine: bool = False,
    ) -> None:
        self._pooling: Pooling = pooling
        self._owns_engine = owns_engine
        self._primary = Endpoint(engine)
        self._pipelined = pipelined_reads(engine) if one_flight(engine, pooling) else None
        self._replica = None if replica is None else ReplicaEndpoint(replica)
        self._owns_replica_engine = owns_replica_engine
        # Engines prism_memory creates set the planner settings per connection (SERVER_SETTINGS),
        # so a read that needs custom plans goes to the driver directly; on a host's engine it runs
        # in a unit that asks for them transaction-locally.
        self._sets_plans = sets_plans
        self.sets_tenant = False
        """Row-level security is on (docs/postgres.md): every tenant-scoped statement sets
        ``prism_memory.tenant_id`` transaction-locally (:mod:`.statements.tenancy`)."""
        self.tenancy = TenantScoping()

    @property
    def engine(self) -> AsyncEngine:
        """The primary's engine."""
        return self._primary.engine

    @property
    def pooling(self) -> Pooling:
        """``"transaction"`` behind a transaction-mode pooler (every statement inside a
        transaction, nothing prepared for reuse, no ``LISTEN``)."""
        return self._pooling

    @property
    def sets_plans(self) -> bool:
        """Whether the engine's connections carry prism_memory's planner settings (then every
        read goes to the driver directly)."""
        return self._sets_plans

    @property
    def read_replica(self) -> ReadReplica | None:
        """Where reads go, if not to the primary."""
        return None if self._replica is None else self._replica.config

    # ---- units on a session ---------------------------------------------------------------

    @asynccontextmanager
    async def unit(
        self,
        action: str,
        *,
        writes: bool = True,
        read: bool = False,
        custom_plans: bool = False,
        tenant: str | None = None,
    ) -> AsyncIterator[SessionUnit]:
        """One unit of work in a SQLAlchemy session. ``read``: it only reads, on the replica when
        it has replayed what it must (:meth:`_replica_ready`) and answers in time (else on the
        primary); else on the primary, where ``writes=False`` says it only reads (a replica read
        that follows need not wait for it). ``tenant``: what it acts for (row-level security)."""
        tenant = tenant if self.sets_tenant else None
        replica = self._usable_replica() if read else None
        try:
            if replica is not None:
                session = await self._replica_session(replica, action)
                if session is not None:
                    async with self._replica_named(replica, action):
                        with otel.db_span(action), wrap_db_errors(action):
                            async with session:  # its transaction began with its connection
                                await unit_settings(session, custom_plans, tenant, self.sets_tenant)
                                yield SessionUnit(session)
                                await session.commit()
                    return
            with otel.db_span(action), wrap_db_errors(action):
                async with self._primary.sessions() as session, session.begin():
                    await unit_settings(session, custom_plans, tenant, self.sets_tenant)
                    yield SessionUnit(session)
        finally:
            if writes and not read:
                self.wrote()

    async def _replica_session(self, replica: ReplicaEndpoint, action: str) -> AsyncSession | None:
        """A session on the replica with its connection checked out, within the replica's time
        bound -- or ``None`` (the unit goes to the primary) when the replica must not or cannot
        answer."""
        try:
            if not await self._replica_ready(action):
                return None
            session = replica.sessions()
            try:
                async with asyncio.timeout(replica.config.timeout_seconds):
                    with otel.db_span(action), wrap_db_errors(action):
                        await session.connection()  # checks a connection out (or opens one)
            except BaseException:
                await abandon(session)
                raise
            return session
        except ReplicaDownError as down:
            replica.failed(down.reason)
        except (TimeoutError, StorageError, ConfigurationError) as exc:
            replica.failed(failure_reason(exc, replica))
        return None

    @asynccontextmanager
    async def _replica_named(self, replica: ReplicaEndpoint, action: str) -> AsyncIterator[None]:
        """Around a unit running on the replica: a storage failure (a statement past the replica
        engine's ``command_timeout``, a lost connection) names the replica, and it is avoided for
        a while (the unit cannot be run again: its body already ran in part)."""
        try:
            yield
        except (StorageError, ConfigurationError) as exc:
            replica.failed(failure_reason(exc, replica))
            raise StorageError(
                f"{action} failed on the read replica {replica.name}: {failure_reason(exc, replica)}; "
                "reads go to the primary until it answers again"
            ) from exc
        else:
            replica.failures = 0

    # ---- single statements on the driver --------------------------------------------------

    async def fetch(
        self,
        action: str,
        statement: str,
        params: Params = None,
        *,
        replica: bool = False,
        custom_plans: bool = False,
    ) -> Sequence[Any]:
        """One read in one round trip, on the primary -- or, with ``replica``, on the read replica
        when :meth:`_replica_ready` allows and it answers within its time bound, else on the
        primary. ``custom_plans`` on a host's engine: inside a unit that asks for them
        (:attr:`sets_plans`)."""
        if custom_plans and not self._sets_plans:
            tenant = tenant_of(params)
            async with self.unit(
                action, read=replica, writes=False, custom_plans=True, tenant=tenant
            ) as unit:
                return await unit.fetch(statement, params)
        target = self._usable_replica() if replica else None
        if target is None:
            return await self._fetch_on(self._primary, action, statement, params)
        try:
            if await self._replica_ready(action):
                rows = await self._on_replica(target, action, statement, params)
                target.failures = 0
                return rows
        except ReplicaDownError as down:
            target.failed(down.reason)
            return await self._primary_after(target, down.reason, action, statement, params)
        return await self._fetch_on(self._primary, action, statement, params)

    async def _on_replica(
        self, replica: ReplicaEndpoint, action: str, statement: str, params: Params = None
    ) -> list[Any]:
        """One read on the replica within its time bound (connection included), or
        :class:`ReplicaDownError`: it timed out, lost or could not open its connection, or the
        replica refused it for a reason of its own (a recovery conflict, a schema behind). A
        mistake of the read itself (a bad value) is raised as it is: the primary would refuse it
        too."""
        try:
            async with asyncio.timeout(replica.config.timeout_seconds):
                return await self._fetch_on(replica, action, statement, params)
        except (TimeoutError, StorageError, ConfigurationError) as exc:
            raise ReplicaDownError(failure_reason(exc, replica)) from exc

    async def _primary_after(
        self, replica: ReplicaEndpoint, reason: str, action: str, statement: str, params: Params
    ) -> list[Any]:
        """The read on the primary after the replica failed; when the primary fails too, a
        :class:`StorageError` naming both failures (the replica by host, port and database)."""
        try:
            return await self._fetch_on(self._primary, action, statement, params)
        except (StorageError, ConfigurationError) as exc:
            raise StorageError(
                f"{action} failed on the read replica {replica.name} ({reason}) and then on the "
                f"primary: {failure_reason(exc, None)}"
            ) from exc

    async def fetchval(self, action: str, statement: str, params: Params = None) -> Any:
        """The first column of the first row of one read on the primary, or ``None``."""
        return next(iter(await self._fetch_on(self._primary, action, statement, params)), [None])[0]

    async def _fetch_on(
        self, endpoint: Endpoint, action: str, statement: str, params: Params = None
    ) -> list[Any]:
        """One read on ``endpoint``, straight to a pooled connection's asyncpg driver (no
        transaction around it, prepared and cached per connection; behind a transaction pooler, in
        one flight on psycopg), retried once on a fresh connection if the pooled one is dead; one
        cancelled midway drops its connection (:meth:`~._engine.KeptConnections.lend`). With
        row-level security on, a read for one tenant sets it in the same statement
        (:func:`tenant_gate`)."""
        if self.sets_tenant and (each := self.tenancy.split(params)) is not None:
            return await per_tenant(
                each, lambda one: self._fetch_on(endpoint, action, statement, one)
            )
        tenant = self.tenancy.noted(params) if self.sets_tenant else None
        if tenant is not None:
            statement, params = tenant_gate(statement), {**(params or {}), "rls_tenant": tenant}
        positional, args = _bound(statement, params)
        if self._pipelined is not None and endpoint is self._primary:  # a transaction pooler
            return await self._pipelined.fetch(action, positional, args)
        for attempt in (1, 2):
            with otel.db_span(action), wrap_db_errors(action):
                driver: Any = None
                try:
                    async with endpoint.kept.lend() as driver, self._alone(driver):
                        return list(await driver.fetch(positional, *args))
                except Exception as exc:  # lend has dropped a lost connection already
                    if driver is None or not connection_lost(exc, driver):
                        raise
                    if attempt == 2:
                        raise translate(exc, action) from exc
                # the server restarted or failed over: every pooled connection is suspect
                await endpoint.kept.release()
                await endpoint.engine.dispose()
        raise AssertionError("unreachable")  # pragma: no cover

    async def write(
        self,
        action: str,
        statement: str,
        params: Params = None,
        *,
        count: bool = False,
        visible: bool = True,
    ) -> list[Any]:
        """One writing statement in one round trip, in its own transaction (a single statement
        applies entirely or not at all), on the driver. Returns its rows, or with ``count`` the
        number of rows it changed (as a one-item list). Never retried: a connection lost
        mid-statement leaves it applied or not, and the caller's next attempt decides.
        ``visible=False``: no read sees what it changes (a claim's lease), so a replica read
        after it need not wait for it."""
        if self.sets_tenant and (each := self.tenancy.split(params)) is not None:
            run = functools.partial(self.write, action, statement, count=count, visible=visible)
            return await per_tenant(each, run, count=count)
        positional, args = _bound(statement, params)
        tenant = self.tenancy.noted(params) if self.sets_tenant else None
        try:
            with otel.db_span(action), wrap_db_errors(action):
                async with self._primary.kept.lend() as driver, self._alone(driver, tenant):
                    if count:
                        return [_changed(await driver.execute(positional, *args))]
                    return list(await driver.fetch(positional, *args))
        finally:
            if visible:
                self.wrote()

    async def run_alone(self, action: str, statement: str) -> None:
        """A statement that must run outside any transaction block (``ANALYZE`` of a bulk load),
        on the driver, on the primary."""
        with otel.db_span(action), wrap_db_errors(action):
            async with self._primary.kept.lend() as driver:
                await driver.execute(statement)

    # ---- transactions on the driver -------------------------------------------------------

    @asynccontextmanager
    async def transaction(
        self, action: str, begin: str = BEGIN, *, tenant: str | None = None
    ) -> AsyncIterator[DriverUnit]:
        """A transaction on the asyncpg driver of a pooled connection: ``begin`` (``BEGIN ...``,
        and whatever must run with it in the same round trip), the body's statements, ``COMMIT``;
        rolled back when the body raises (a connection left in a transaction is then dropped).
        ``tenant``: with row-level security on, set in ``begin``'s round trip."""
        begin = begin_for(begin, tenant) if self.sets_tenant else begin  # RLS: in BEGIN
        try:
            with otel.db_span(action), wrap_db_errors(action):
                async with self._primary.kept.lend() as driver, self._begun(driver, begin):
                    yield DriverUnit(driver, self.tenancy if self.sets_tenant else None)
        finally:
            self.wrote()

    @asynccontextmanager
    async def _begun(self, driver: Any, begin: str) -> AsyncIterator[None]:
        try:
            await driver.execute(begin)
            yield
            await driver.execute(COMMIT)
        except BaseException:
            if not driver.is_closed() and driver.is_in_transaction():
                with contextlib.suppress(Exception):
                    await driver.execute(ROLLBACK)
            raise

    def _alone(
        self, driver: Any, tenant: str | None = None
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Around a statement outside any transaction of ours: nothing, or behind a transaction
        pooler its own (:data:`POOLED_BEGIN`: there a statement prepared on one server connection
        could otherwise run on another; not a write, :meth:`wrote`). A write for ``tenant``
        (row-level security on) runs in a transaction that sets it with its ``BEGIN``."""
        if tenant is not None or self._pooling == "transaction":
            begin = POOLED_BEGIN if self._pooling == "transaction" else BEGIN
            return self._begun(driver, begin_for(begin, tenant))
        return contextlib.nullcontext()

    # ---- replica routing ------------------------------------------------------------------

    def wrote(self) -> None:
        """A write on the primary finished (or may have): the next replica read must see it."""
        if self._replica is not None:
            self._replica.writes += 1

    def _usable_replica(self) -> ReplicaEndpoint | None:
        """The replica, unless there is none or it failed lately."""
        replica = self._replica
        return replica if replica is not None and replica.usable() else None

    async def _replica_ready(self, action: str) -> bool:
        """Whether a read may go to the replica: it has replayed the primary's WAL past this
        store's last write (``"strict"``: past what the primary had when the read began) --
        waiting up to ``wait_seconds`` for it -- else the read goes to the primary. A forgotten
        or revoked entry is therefore never read from a replica that has not replayed the
        change, once the call that made it has returned. Each question to the replica is bounded
        by its ``timeout_seconds`` (:class:`ReplicaDownError` past it)."""
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
            (row,) = await self._on_replica(replica, action, REPLAYED_LSN)
            if row[0] is not None and int(row[0]) >= needed:
                if replica.needed == needed:
                    replica.needed = None  # replayed: later reads need not ask until a write
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(delay, left))
            delay *= 2

    # ---- closing --------------------------------------------------------------------------

    async def close(self) -> None:
        """Return the connections kept between operations (primary and replica) to their pools,
        refuse every statement from now on (:class:`~prism_memory.errors.StoreClosedError`),
        then dispose of the engines this executor was told it owns."""
        await self._primary.kept.close()
        if self._pipelined is not None:
            await self._pipelined.close()
        if self._replica is not None:
            await self._replica.kept.close()
        if self._replica is not None and self._owns_replica_engine:
            self._owns_replica_engine = False
            await self._replica.engine.dispose()
        if self._owns_engine:
            self._owns_engine = False
            await self._primary.engine.dispose()
