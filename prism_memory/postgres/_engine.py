"""Engines, URLs and the registration of the vector codec.

Vectors travel in pgvector's binary wire format: every connection an engine hands out gets
prism_memory's own asyncpg type codec for ``vector`` (``format="binary"``; the functions of
:mod:`prism_memory.postgres._codec`, re-exported here) that encodes numpy arrays (or pre-encoded
``bytes``) and decodes to ``float32`` numpy arrays. pgvector's Python package registers nothing.
Nothing is ever formatted as text.
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal, cast

import asyncpg
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool, Pool, PoolProxiedConnection, QueuePool
from sqlalchemy.util.concurrency import greenlet_spawn

from ..errors import ConfigurationError, StoreClosedError
from ._codec import decode_vector, encode_vector, encode_vectors
from ._errors import sqlstate_of
from .statements.session import POOLED_BEGIN, VECTOR_TYPE_SCHEMA

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "IDLE_PING_SECONDS",
    "KEEP_SECONDS",
    "KEPT_CONNECTIONS",
    "POOLED_BEGIN",
    "POOLING_ENV",
    "POOLING_PARAMETER",
    "SERVER_SETTINGS",
    "KeptConnections",
    "Pooling",
    "checked_pooling",
    "connection_lost",
    "create_engine",
    "decode_vector",
    "encode_vector",
    "encode_vectors",
    "install_vector_codec",
    "normalize_url",
    "pooling_of",
    "register_vector_codec",
    "resolve_pooling",
    "sets_plans",
    "transaction_pooled",
]

Pooling = Literal["session", "transaction"]
"""How the URL reaches PostgreSQL: ``"session"`` -- directly, or through a pooler in session mode
(a server connection stays with its client) -- or ``"transaction"``, through a pooler in
transaction mode (PgBouncer's ``pool_mode = transaction``, the "pooled connection string" of managed
services): a client holds a server connection only for one transaction. See :func:`create_engine`."""

POOLING_ENV = "PRISM_MEMORY_POOLING"
"""The environment variable naming the pooling mode when no ``pooling=`` argument does."""

POOLING_PARAMETER = "prism_pooling"
"""The URL query parameter naming the pooling mode (``…/db?prism_pooling=transaction``); it is
taken out of the URL before it reaches the driver."""

SERVER_SETTINGS = {
    "application_name": "prism_memory",
    # asyncpg prepares and caches statements. The recall statements are written so that one plan
    # fits every thread size (benchmarks/README.md), so PostgreSQL may keep a generic plan for them
    # and skip planning (~0.4 ms a call); the RAG queries still ask for custom plans per transaction.
    "plan_cache_mode": "auto",
    # Per-thread queries touch a few thousand rows at most: a parallel worker's start-up costs more
    # than it saves (measured with the benchmarks' per-thread recall).
    "max_parallel_workers_per_gather": "0",
}
_CODEC_FLAG = "prism_memory_vector_codec"
_LAST_USED = "prism_memory_last_used"
_KEPT_SINCE = "prism_memory_kept_since"
_PLANNED_ENGINES: weakref.WeakSet[Any] = weakref.WeakSet()
_TRANSACTION_POOLED: weakref.WeakSet[Any] = weakref.WeakSet()


def transaction_pooled(engine: AsyncEngine) -> bool:
    """Whether :func:`create_engine` made ``engine`` for a transaction-mode pooler."""
    return engine.sync_engine in _TRANSACTION_POOLED


def pooling_of(engine: AsyncEngine, pooling: Pooling | None) -> Pooling:
    """The pooling mode a store on ``engine`` runs in: ``pooling`` when given, else the mode
    :func:`create_engine` made the engine for, else :data:`POOLING_ENV`, else ``"session"``."""
    if pooling is not None:
        return _checked_pooling(pooling, "pooling")
    if transaction_pooled(engine):
        return "transaction"
    return _checked_pooling(os.environ.get(POOLING_ENV) or "session", POOLING_ENV)


def _checked_pooling(value: str, where: str) -> Pooling:
    if value not in ("session", "transaction"):
        raise ConfigurationError(f"{where} must be 'session' or 'transaction'")
    return cast("Pooling", value)


def checked_pooling(value: str | None) -> Pooling | None:
    """``value`` (a command-line option) as a pooling mode; ``None`` stays ``None``."""
    return None if value is None else _checked_pooling(value, "--pooling")


def resolve_pooling(url: str | URL, pooling: Pooling | None) -> tuple[str, Pooling]:
    """``url`` without :data:`POOLING_PARAMETER`, and the pooling mode: the ``pooling`` argument,
    else the URL's parameter, else :data:`POOLING_ENV`, else ``"session"``."""
    parsed = make_url(normalize_url(url))
    named = parsed.query.get(POOLING_PARAMETER)
    if isinstance(named, tuple):
        raise ConfigurationError(f"the URL names {POOLING_PARAMETER} more than once")
    parsed = parsed.difference_update_query([POOLING_PARAMETER])
    if pooling is not None:
        mode = _checked_pooling(pooling, "pooling")
    elif named is not None:
        mode = _checked_pooling(named, f"the URL's {POOLING_PARAMETER}")
    else:
        mode = _checked_pooling(os.environ.get(POOLING_ENV) or "session", POOLING_ENV)
    return parsed.render_as_string(hide_password=False), mode


def _statement_name() -> str:
    """The name SQLAlchemy gives a statement it prepares behind a transaction pooler: none. An
    unnamed statement lives until the next one is prepared on that server connection, inside the
    same transaction (SQLAlchemy's units always run in one), so nothing prepared outlives its
    transaction -- where unique names would pile up on the server connections for good."""
    return ""


def sets_plans(engine: AsyncEngine) -> bool:
    """Whether :func:`create_engine` made ``engine``: then every connection carries
    :data:`SERVER_SETTINGS` and recall reads go to the driver directly, with no transaction-local
    planner settings."""
    return engine.sync_engine in _PLANNED_ENGINES


CONNECT_TIMEOUT_SECONDS = 10.0
"""How long opening one connection may take on an engine :func:`create_engine` makes (asyncpg's
``timeout``: the socket, the start-up and authentication) before it fails with
:class:`~prism_memory.errors.StorageError`; ``connect_args={"timeout": …}`` changes it.
asyncpg's own default is 60 s. Statements on the primary have no client-side bound (a migration,
an import or a retention sweep may rightly run long): set ``command_timeout`` in ``connect_args``,
or PostgreSQL's ``statement_timeout``, for one."""

IDLE_PING_SECONDS = 10.0
"""An engine prism_memory creates pings a pooled connection on checkout only when it sat idle this
long: a connection used a moment ago is alive, so the hot path (recall) sends no extra round trip.
Reads also retry once on a connection that turns out dead."""


async def register_vector_codec(connection: Any) -> bool:
    """Register pgvector's binary ``vector`` codec (numpy ``float32`` in and out) on an asyncpg
    connection; ``False`` when the database has no ``vector`` type."""
    # in one transaction: behind a transaction pooler, a statement outside one may be prepared on
    # one server connection and run on another
    async with connection.transaction():
        schema = await connection.fetchval(VECTOR_TYPE_SCHEMA)
        if schema is None:
            return False
        await connection.set_type_codec(
            "vector", schema=schema, encoder=encode_vector, decoder=decode_vector, format="binary"
        )
    return True


def _on_connect(dbapi_connection: Any, record: Any) -> None:
    record.info[_CODEC_FLAG] = bool(dbapi_connection.run_async(register_vector_codec))


def _on_checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    # A connection opened before ``CREATE EXTENSION vector`` (or pooled by the host before this
    # engine was handed to prism_memory) gets the codec on its next checkout.
    if not record.info.get(_CODEC_FLAG):
        record.info[_CODEC_FLAG] = bool(dbapi_connection.run_async(register_vector_codec))


def _on_checkin(dbapi_connection: Any, record: Any) -> None:
    if record is not None:
        # a connection a store kept (KeptConnections) was last used when it was kept
        record.info[_LAST_USED] = record.info.pop(_KEPT_SINCE, None) or time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    # SQLAlchemy's pool_pre_ping costs BEGIN / ; / ROLLBACK on *every* checkout. Ping only a
    # connection that sat idle; a DisconnectionError makes the pool replace it and retry.
    last = record.info.get(_LAST_USED)
    if last is None or time.monotonic() - last < IDLE_PING_SECONDS:
        return
    try:
        dbapi_connection.ping()
    except Exception as exc:
        raise DisconnectionError("pooled connection is dead") from exc


def install_idle_ping(engine: AsyncEngine) -> None:
    """Ping pooled connections of ``engine`` on checkout only after :data:`IDLE_PING_SECONDS` idle."""
    sync_engine = engine.sync_engine
    if not event.contains(sync_engine, "checkin", _on_checkin):
        event.listen(sync_engine, "checkin", _on_checkin)
    if not event.contains(sync_engine, "checkout", _ping_if_idle):
        event.listen(sync_engine, "checkout", _ping_if_idle)


KEPT_CONNECTIONS = 2
"""How many pooled connections a store on an engine :func:`create_engine` made keeps checked out
between its single-statement operations (see :class:`KeptConnections`)."""

KEEP_SECONDS = 1.0
"""How long a kept connection may sit unused before it goes back to the pool."""


class KeptConnections:
    """Pooled connections of one engine kept checked out between single-statement operations.

    A recall or a one-statement write takes its connection from here and gives it back, with no
    trip through SQLAlchemy's pool: its checkout and checkin cost ~40 µs warm and ~150 µs with
    cold caches, a seventh of a small thread's recall; at 8 recalls in flight on 10k rows,
    throughput rose by about 15 % without them (benchmarks/README.md). Up to
    :data:`KEPT_CONNECTIONS` are kept, and only on pooled engines :func:`create_engine` made
    without ``pool_pre_ping``; on any other engine every connection goes straight back to the pool.

    A connection is kept only while the pool could still hand out another without waiting (an
    idle one, or room to open one) -- when an operation ends with the pool out of room, every
    kept connection goes back -- and only for :data:`KEEP_SECONDS` after its last use: a store
    holds connections through a burst of operations, not while it sits idle. A task returns them
    (it holds the last reference of a store dropped without ``close()``); when the event loop
    shuts down first (``asyncio.run`` cancels what is still pending as a script ends), the
    cancelled task returns every kept connection before the loop closes, so none is left to the
    garbage collector.

    A kept connection is not idle in the pool, so its idle ping is kept here: it goes back to the
    pool marked with when it was last used, and the pool pings it on its next checkout after
    :data:`IDLE_PING_SECONDS`. :meth:`release` hands every kept connection back (before the engine
    is disposed of after a lost connection); :meth:`close` also stops keeping (the stores call it
    when they close).
    """

    def __init__(self, engine: AsyncEngine, *, terminate: bool = False) -> None:
        self._engine = engine
        self._terminate = terminate
        """Whether a dropped connection is closed at once, not gracefully (:meth:`lend`)."""
        sync_engine = engine.sync_engine
        keeps = sync_engine in _PLANNED_ENGINES and event.contains(
            sync_engine, "checkout", _ping_if_idle
        )
        self._size = KEPT_CONNECTIONS if keeps else 0
        self._idle: list[tuple[float, PoolProxiedConnection]] = []  # (kept since, connection)
        self._keeper: asyncio.Task[None] | None = None
        self.closed = False
        """Whether :meth:`close` ran: its store takes no connection any more."""

    def check_open(self) -> None:
        """Raise :class:`StoreClosedError` once :meth:`close` ran (the engine, even disposed of,
        would open a new connection)."""
        if self.closed:
            raise StoreClosedError()

    async def take(self) -> PoolProxiedConnection:
        """The connection kept last, if it was used a moment ago; else one from the pool
        (:class:`StoreClosedError` once closed)."""
        self.check_open()
        while self._idle:
            since, pooled = self._idle.pop()
            if time.monotonic() - since < min(KEEP_SECONDS, IDLE_PING_SECONDS):
                return pooled
            await self._return(pooled, since)
        return await self._engine.raw_connection()

    async def give(self, pooled: PoolProxiedConnection) -> None:
        """Keep ``pooled`` (in a clean state: no transaction open) for the next operation, or
        return it to the pool when enough are kept."""
        room = _has_room(self._engine.sync_engine.pool)
        if room and len(self._idle) < self._size:
            self._idle.append((time.monotonic(), pooled))
            if self._keeper is None:
                self._keeper = asyncio.get_running_loop().create_task(
                    self._return_when_unused(), name="prism_memory: return kept connections"
                )
            return
        await greenlet_spawn(pooled.close)
        if not room:  # others may be waiting for a connection: hand back every kept one
            await self.release()

    @asynccontextmanager
    async def lend(self) -> AsyncIterator[Any]:
        """The asyncpg driver of a connection (:meth:`take`; no SQLAlchemy ``Connection`` around
        it), kept for the next operation afterwards (:meth:`give`) -- or dropped, never pooled
        again, when it was lost, is left inside a transaction, or an operation on it was
        cancelled midway. A replica's connections (``terminate``) are dropped at once: a replica
        that did not answer may be hung, and a graceful close would wait for it (up to 2 s
        more); the primary's close gracefully."""
        pooled = await self.take()
        driver: Any = pooled.driver_connection
        try:
            yield driver
        except BaseException as exc:
            if (
                isinstance(exc, asyncio.CancelledError | TimeoutError)
                or connection_lost(exc, driver)
                or driver.is_in_transaction()
            ):
                if self._terminate:
                    driver.terminate()
                await greenlet_spawn(pooled.invalidate, exc)
            await greenlet_spawn(pooled.close)  # back to the pool (it may close it: I/O)
            raise
        if driver.is_in_transaction():  # never handed on with a transaction open
            await greenlet_spawn(pooled.invalidate)
            await greenlet_spawn(pooled.close)
        else:
            await self.give(pooled)

    async def release(self) -> None:
        """Return every kept connection to the pool."""
        idle, self._idle = self._idle, []
        for since, pooled in idle:
            await self._return(pooled, since)

    async def close(self) -> None:
        """Return every kept connection, keep none and take none from now on (an operation
        still running when its store closes hands its connection back to the pool)."""
        self.closed = True
        self._size = 0
        await self.release()

    async def _return_when_unused(self) -> None:
        """Keeper task, running while connections are kept: returns each once unused for
        :data:`KEEP_SECONDS`; cancelled (the event loop shutting down), returns them all."""
        try:
            while self._idle:
                oldest = self._idle[0][0]  # kept in order of their last use
                await asyncio.sleep(oldest + KEEP_SECONDS - time.monotonic())
                now = time.monotonic()
                unused = [
                    (since, pooled) for since, pooled in self._idle if now - since >= KEEP_SECONDS
                ]
                self._idle = [
                    (since, pooled) for since, pooled in self._idle if now - since < KEEP_SECONDS
                ]
                for since, pooled in unused:
                    await self._return(pooled, since)
        except asyncio.CancelledError:
            await self.release()
            raise
        finally:
            self._keeper = None

    @staticmethod
    async def _return(pooled: PoolProxiedConnection, since: float) -> None:
        pooled.info[_KEPT_SINCE] = since
        await greenlet_spawn(pooled.close)  # the pool may close it: I/O


def _has_room(pool: Pool) -> bool:
    """Whether ``pool`` can hand out a connection without waiting: an idle one, or room to open
    one (``pool_size`` not reached, or overflow left)."""
    if not isinstance(pool, QueuePool):
        return False
    limit = getattr(pool, "_max_overflow", 0)  # -1: unbounded
    return pool.checkedin() > 0 or limit < 0 or pool.overflow() < limit


def install_vector_codec(engine: AsyncEngine) -> None:
    """Register pgvector's binary codec on every connection ``engine`` hands out (idempotent)."""
    if engine.dialect.driver != "asyncpg":
        raise ConfigurationError(
            f"prism_memory needs the asyncpg driver (postgresql+asyncpg://), not {engine.dialect.driver!r}"
        )
    sync_engine = engine.sync_engine
    if not event.contains(sync_engine, "connect", _on_connect):
        event.listen(sync_engine, "connect", _on_connect)
    if not event.contains(sync_engine, "checkout", _on_checkout):
        event.listen(sync_engine, "checkout", _on_checkout)


def normalize_url(url: str | URL) -> str:
    """Return ``url`` as a ``postgresql+asyncpg://`` URL string (passwords kept).

    Accepts ``postgres://``, ``postgresql://`` and ``postgresql+<driver>://`` URLs, including the
    unix-socket form ``postgresql://user:@/db?host=/socket/dir``.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigurationError("invalid database URL") from exc
    backend = parsed.get_backend_name()
    if backend not in {"postgresql", "postgres"}:
        raise ConfigurationError(f"prism_memory needs a PostgreSQL URL, not {backend!r}")
    parsed = parsed.set(drivername="postgresql+asyncpg")
    return parsed.render_as_string(hide_password=False)


def create_engine(
    url: str | URL, *, pooled: bool = True, pooling: Pooling | None = None, **kwargs: Any
) -> AsyncEngine:
    """An asyncpg engine for ``url`` with the binary vector codec and custom plans for searches.

    ``pooled=False`` uses ``NullPool`` (one connection per checkout; for tests and one-off runs);
    a pooled engine reuses its most recently used connection first (``pool_use_lifo``).
    Pooled connections are pinged on checkout only after :data:`IDLE_PING_SECONDS` idle (pass
    ``pool_pre_ping=True`` to ping on every checkout instead).

    ``pooling="transaction"`` (or ``?prism_pooling=transaction`` in the URL, or the
    :data:`POOLING_ENV` variable) makes the engine for a transaction-mode pooler: no start-up
    parameter but ``application_name`` (a pooler refuses the others), no statement prepared for
    reuse (asyncpg's ``statement_cache_size=0``, SQLAlchemy's ``prepared_statement_cache_size=0``,
    every statement unnamed), and the stores run every statement inside a transaction.
    """
    url, mode = resolve_pooling(url, pooling)
    connect_args = dict(kwargs.pop("connect_args", None) or {})
    connect_args.setdefault("timeout", CONNECT_TIMEOUT_SECONDS)
    settings = SERVER_SETTINGS if mode == "session" else {"application_name": "prism_memory"}
    server_settings = {**settings, **(connect_args.get("server_settings") or {})}
    if mode == "transaction":
        connect_args.setdefault("statement_cache_size", 0)
        connect_args.setdefault("prepared_statement_cache_size", 0)
        connect_args.setdefault("prepared_statement_name_func", _statement_name)
    options: dict[str, Any] = {
        "connect_args": {**connect_args, "server_settings": server_settings},
        **kwargs,
    }
    # bound values (entry text, metadata) never reach logs or error messages
    options.setdefault("hide_parameters", True)
    if not pooled:
        options["poolclass"] = NullPool
    else:
        # the connection used last is reused first: its server process and its prepared statements
        # are warm (sequential recall p50 5-15 % lower than round-robin over the pool in
        # benchmarks/speed.py), and connections left idle can be closed by the server's timeouts
        options.setdefault("pool_use_lifo", True)
    engine = create_async_engine(url, **options)
    install_vector_codec(engine)
    _PLANNED_ENGINES.add(engine.sync_engine)
    if mode == "transaction":
        _TRANSACTION_POOLED.add(engine.sync_engine)
    if pooled and not options.get("pool_pre_ping"):
        install_idle_ping(engine)
    return engine


def connection_lost(exc: BaseException, driver: Any) -> bool:
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
