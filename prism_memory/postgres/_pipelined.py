"""Reads behind a transaction pooler in one round trip, on psycopg 3, on the server's cached plans.

asyncpg cannot send an unnamed statement's Parse, Bind and Execute in one flight: it parses and
describes first (one Sync), then binds and executes (another). Behind a transaction-mode pooler
(PgBouncer ``pool_mode = transaction``) the server connection may change between the two Syncs, so
:class:`~prism_memory.postgres._executor.Executor` wrapped every lone read in its own ``BEGIN;
SET LOCAL …`` / ``COMMIT``: four round trips per recall, and a parse and a plan of the whole
recall statement on every call -- the larger cost (measured: 1.3x direct on the same URL without
the round trips, as long as every call is parsed and planned again).

:class:`PipelinedReads` sends a read in **one flight** under one Sync -- one implicit transaction,
which the pooler hands back at its Sync -- as a **content-named prepared statement**:

* ``Bind`` and ``Execute`` of ``prism_memory_<hash of the text and parameter types>``: on a server
  connection that has it, the server reuses its plan (a generic one once ``plan_cache_mode``
  allows), like asyncpg's statement cache on a direct connection;
* when that server connection lacks it (SQLSTATE 26000: the pooler gave another one, or it is
  new) -- and the first time this process sends the text -- a second flight closes,
  parses, binds and executes it. ``Close`` first, so a server connection that already has
  the name (another client prepared it: same name, same text) never refuses the ``Parse``.

A name means one text and one set of parameter types, so any client of the pooler that finds it
on a server connection finds the same statement. Up to :data:`NAMED` texts per process are named
(each server connection keeps the plans of those it ran, as asyncpg's cache keeps 100 per
connection); past them a read goes unnamed (parsed and planned each call, still one flight).

The planner setting: when the deploy set ``max_parallel_workers_per_gather = 0`` on the role or
the database (``ALTER ROLE … SET``; ``prism-memory doctor`` reports it), the read is sent alone;
else ``set_config('max_parallel_workers_per_gather', '0', true)`` rides in the same flight, before
it (local to that implicit transaction; ``SET LOCAL`` warns outside a ``BEGIN`` block). With
row-level security on, the tenant is set inside the read itself (the executor's in-statement
gate, :func:`~prism_memory.postgres.statements.tenancy.tenant_gate`), so it travels in the same
flight and the same transaction.

**The same values as asyncpg.** Parameters are sent the way asyncpg lets the server type them:
with no type (``unknown``), so the server infers each from its context -- numbers, booleans, UUIDs
and arrays as text, vectors and ``bytes`` in binary (pgvector's ``vector_recv`` reads the encoded
vector). Results arrive in binary and decode to what asyncpg's would: ``vector`` to ``float32``
numpy arrays (the engine's codec), ``json``/``jsonb`` to their text, ``timestamptz`` in UTC. Rows
are :class:`Row`: by position and by column name, like asyncpg's ``Record``, so the repositories do
not care which driver read them.

**Connections**: kept between reads (up to :data:`KEEP` idle), opened on demand, autocommit (no
``BEGIN`` of psycopg's own), psycopg's own statement preparation off (``prepare_threshold=None``:
its names are per client and would collide on the pooler's server connections). A read whose
connection turns out dead is retried once on a new one (and every idle one is dropped: the server
restarted or failed over); a read cancelled midway drops its connection. Errors are translated
like every driver error (:func:`~prism_memory.postgres._errors.translate`), in one database span.

psycopg is the optional extra ``prism-memory[pooled]``; without it, :func:`require_psycopg` raises
:class:`~prism_memory.errors.ConfigurationError` naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import hashlib
import uuid
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any, ClassVar

import numpy as np
from sqlalchemy.engine import URL

from .. import _telemetry as otel
from ..errors import ConfigurationError, StorageError, StoreClosedError
from ._codec import decode_vector, encode_vector
from ._engine import transaction_pooled
from ._errors import translate, wrap_db_errors
from .statements.session import CONNECTION_FACTS, SET_PLANNER_LOCAL

__all__ = [
    "EXTRA",
    "PipelinedReads",
    "Row",
    "conninfo_of",
    "one_flight",
    "pipelined_reads",
    "require_psycopg",
]

EXTRA = "pooled"
"""The optional dependency group that brings psycopg: ``pip install 'prism-memory[pooled]'``."""

KEEP = 8
"""How many idle psycopg connections a :class:`PipelinedReads` keeps."""


class Row(tuple[Any, ...]):
    """A row read through psycopg: by position (``row[0]``) and by column name (``row["id"]``),
    like an asyncpg ``Record``; ``keys()``/``values()``/``items()``/``get()`` as a mapping's."""

    __slots__ = ()
    _index: ClassVar[dict[str, int]] = {}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of column ``key``, or ``default``."""
        at = self._index.get(key)
        return default if at is None else tuple.__getitem__(self, at)

    def keys(self) -> Iterator[str]:
        """The column names, in order."""
        return iter(self._index)

    def values(self) -> Iterator[Any]:
        """The values, in order."""
        return iter(tuple(self))

    def items(self) -> Iterator[tuple[str, Any]]:
        """``(name, value)`` pairs, in order."""
        return zip(self._index, tuple(self), strict=True)


@functools.lru_cache(maxsize=512)
def _row_class(names: tuple[str, ...]) -> type[Row]:
    """The :class:`Row` class of one result shape (its column index made once)."""
    return type("Row", (Row,), {"__slots__": (), "_index": {n: i for i, n in enumerate(names)}})


def _array_literal(values: Sequence[Any]) -> str:
    """``values`` as a PostgreSQL array literal (text), each element quoted."""
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
        elif isinstance(value, list | tuple):
            parts.append(_array_literal(value))
        else:
            text = _text(value)
            parts.append('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "{" + ",".join(parts) + "}"


def _text(value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return "t" if value else "f"
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return str(value)


def _adapters() -> Any:
    """The dumpers and loaders of every :class:`PipelinedReads` connection (see the module
    docstring), and the ``timestamptz`` loader in UTC for a connection whose ``TimeZone`` is not
    UTC (else psycopg's own, in C); the ``vector`` loader is added per connection (its oid)."""
    import psycopg
    from psycopg.adapt import AdaptersMap, Dumper, Loader
    from psycopg.pq import Format
    from psycopg.types.datetime import TimestamptzBinaryLoader

    class Inferred(Dumper):
        oid = 0  # unknown: the server types it from its context, as for asyncpg

        def dump(self, obj: Any) -> bytes:
            return _text(obj).encode()

    class InferredArray(Dumper):
        oid = 0

        def dump(self, obj: Any) -> bytes:
            return _array_literal(obj).encode()

    class InferredBinary(Dumper):
        oid = 0
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            return encode_vector(obj)  # bytes as they are (pre-encoded vectors, bytea)

    class JsonText(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> str:
            return bytes(data).decode()

    class JsonbText(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> str:
            return bytes(data[1:]).decode()  # after jsonb's version byte

    class UtcTimestamptz(TimestamptzBinaryLoader):
        def load(self, data: Any) -> dt.datetime:
            return super().load(data).astimezone(dt.UTC)

    adapters = AdaptersMap(psycopg.adapters)
    kinds: dict[Any, Any] = {
        **dict.fromkeys((int, float, bool, Decimal, uuid.UUID, dt.date, np.generic), Inferred),
        **dict.fromkeys((dt.datetime,), Inferred),
        **dict.fromkeys((list, tuple), InferredArray),
        **dict.fromkeys((np.ndarray, bytes, bytearray, memoryview), InferredBinary),
    }
    for kind, dumper in kinds.items():
        adapters.register_dumper(kind, dumper)
    adapters.register_loader("json", JsonText)
    adapters.register_loader("jsonb", JsonbText)
    return adapters, UtcTimestamptz


def _vector_loader() -> Any:
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    class VectorLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> Any:
            return decode_vector(bytes(data))

    return VectorLoader


def _row_factory(cursor: Any) -> Any:
    description = cursor.description
    if description is None:
        return tuple
    return _row_class(tuple(column.name for column in description))


def _lost(exc: BaseException, connection: Any) -> bool:
    """Whether ``exc`` means ``connection`` is gone (the read may be retried on a new one)."""
    import psycopg

    if connection.closed or connection.broken:
        return True
    code = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, psycopg.OperationalError) and (
        not code or code.startswith(("08", "57P"))
    )


NAMED = 256
"""How many statement texts a :class:`PipelinedReads` prepares by name (the rest go unnamed)."""

_SET_PLANNER = SET_PLANNER_LOCAL.encode()

_PREPARE_AGAIN = frozenset({"26000", "0A000"})
"""Binding a named statement failed because the server connection lacks it (26000), or because
its result's columns changed since it was prepared (0A000, "cached plan must not change result
type": a migration altered a table under it): it is prepared again."""

_UTC_ZONES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal"})
"""Server ``TimeZone`` values in which psycopg's ``timestamptz`` values are already UTC."""


def _statement_name(statement: str, types: Sequence[int]) -> bytes:
    """The name of ``statement`` prepared with parameter ``types``: by its content, so that any
    client preparing it on a server connection means the same statement."""
    digest = hashlib.sha1(f"{statement}\x00{types}".encode(), usedforsecurity=False)
    return b"prism_memory_" + digest.hexdigest()[:32].encode()


def _until_sync(pgconn: Any) -> Any:
    """Flush a pipeline, then collect each statement's results up to its Sync."""
    from psycopg import generators
    from psycopg.pq import ExecStatus

    yield from generators.send(pgconn)
    groups: list[list[Any]] = []
    while True:
        results = yield from generators.fetch_many(pgconn)
        groups.append(results)
        if results and results[-1].status == ExecStatus.PIPELINE_SYNC:
            return groups


def _rows(tx: Any, result: Any, result_format: Any) -> list[Row]:
    """The rows of one result, as :class:`Row` (by position and by name)."""
    tx.set_pgresult(result, format=result_format)
    names = tuple(result.fname(i).decode() for i in range(result.nfields))
    return list(tx.load_rows(0, result.ntuples, _row_class(names)))


class PipelinedReads:
    """One-flight reads on psycopg connections to one URL (see the module docstring)."""

    def __init__(
        self, conninfo: str, *, keep: int = KEEP, limit: int = 15, connect_timeout: float = 10.0
    ) -> None:
        self._conninfo = conninfo
        self._slots = asyncio.Semaphore(limit)
        self._keep = keep
        self._connect_timeout = connect_timeout
        self._idle: list[Any] = []
        self._adapters, self._utc_loader = _adapters()
        self._vector_loader = _vector_loader()
        self._vector_oid: int | None = None
        self._role_sets_planner: bool | None = None
        self._closed = False
        self._named: set[bytes] = set()
        self._names: dict[tuple[str, tuple[int, ...]], bytes] = {}

    @property
    def role_sets_planner(self) -> bool | None:
        """Whether the role or database carries ``max_parallel_workers_per_gather = 0`` (then a
        read is sent alone); ``None`` before the first connection."""
        return self._role_sets_planner

    async def _connect(self) -> Any:
        import psycopg

        connection = await psycopg.AsyncConnection.connect(
            self._conninfo,
            autocommit=True,
            prepare_threshold=None,
            cursor_factory=psycopg.AsyncRawCursor,
            context=self._adapters,
            connect_timeout=max(1, round(self._connect_timeout)),
            application_name="prism_memory",
        )
        try:
            if self._vector_oid is None or self._role_sets_planner is None:
                cursor = await connection.execute(CONNECTION_FACTS)
                oid, planner = await cursor.fetchone() or (None, None)
                self._vector_oid = int(oid) if oid is not None else 0
                self._role_sets_planner = planner == "0"
            if self._vector_oid:
                connection.adapters.register_loader(self._vector_oid, self._vector_loader)
            if connection.info.parameter_status("TimeZone") not in _UTC_ZONES:
                connection.adapters.register_loader("timestamptz", self._utc_loader)
        except BaseException:
            await connection.close()
            raise
        return connection

    async def _take(self) -> Any:
        if self._closed:
            raise StoreClosedError()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        return await self._connect()

    async def _give(self, connection: Any) -> None:
        import psycopg

        idle = connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if self._closed or not idle or len(self._idle) >= self._keep:
            await connection.close()
        else:
            self._idle.append(connection)

    async def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.close()

    async def fetch(self, action: str, statement: str, args: Sequence[Any]) -> list[Row]:
        """The rows of ``statement`` (``$n`` placeholders) bound to ``args``, in one round trip;
        retried once on a new connection when its connection turns out dead. One database span,
        errors translated (:func:`~prism_memory.postgres._errors.wrap_db_errors`)."""
        with otel.db_span(action), wrap_db_errors(action):
            async with self._slots:
                return await self._fetch(action, statement, args)

    async def _fetch(self, action: str, statement: str, args: Sequence[Any]) -> list[Row]:
        import psycopg

        for attempt in (1, 2):
            try:
                connection = await self._take()
            except psycopg.Error as exc:
                raise translate(exc, action) from exc
            try:
                rows = await self._flight(connection, statement, args)
            except psycopg.Error as exc:
                if not _lost(exc, connection):
                    await self._give(connection)
                    raise translate(exc, action) from exc
                await connection.close()
                if attempt == 2:
                    raise translate(exc, action) from exc
                await self._drop_idle()  # the server restarted or failed over
                continue
            except BaseException:  # cancelled midway (or a value it could not send): unknown state
                await connection.close()
                raise
            await self._give(connection)
            return rows
        raise AssertionError("unreachable")  # pragma: no cover

    async def _flight(self, connection: Any, statement: str, args: Sequence[Any]) -> list[Row]:
        """One read in one flight: the statement's content-named prepared statement bound and
        executed -- or, the first time here or when this server connection lacks it, closed,
        prepared and executed (a second flight) -- behind the planner setting unless the role
        carries it. Past :data:`NAMED` statement texts, the statement goes unnamed."""
        from psycopg import adapt
        from psycopg.adapt import PyFormat
        from psycopg.pq import Format

        tx = adapt.Transformer(connection)
        params = tx.dump_sequence(args, [PyFormat.AUTO] * len(args))
        types, formats = tuple(tx.types or ()), list(tx.formats or ())
        name = self._names.get((statement, types))
        if name is None:
            if len(self._names) >= 4 * NAMED:
                self._names.clear()
            name = self._names[(statement, types)] = _statement_name(statement, types)
        if name not in self._named:
            if len(self._named) >= NAMED:
                return await self._unnamed(connection, statement, args)
            self._named.add(name)
        else:
            results = await self._send(connection, name, None, params, types, formats)
            if results is not None:
                return _rows(tx, results, Format.BINARY)
        results = await self._send(connection, name, statement, params, types, formats)
        if results is None:  # pragma: no cover - a prepared statement's execute has a result
            raise StorageError("the server answered a read with no result")
        return _rows(tx, results, Format.BINARY)

    async def _send(
        self,
        connection: Any,
        name: bytes,
        statement: str | None,
        params: Sequence[Any],
        types: Sequence[int],
        formats: Sequence[Any],
    ) -> Any:
        """One flight under one Sync: the planner setting (unless the role carries it), with
        ``statement`` a ``Close`` and ``Parse`` of ``name`` first, then its ``Bind`` and
        ``Execute``; the read's result, or ``None`` when ``name`` must be prepared (again) on the
        server connection the pooler chose (:data:`_PREPARE_AGAIN`)."""
        from psycopg import errors
        from psycopg.pq import ExecStatus, Format

        async with connection.lock:
            pgconn = connection.pgconn
            pgconn.enter_pipeline_mode()
            try:
                if not self._role_sets_planner:
                    pgconn.send_query_params(_SET_PLANNER, None)
                if statement is not None:
                    pgconn.send_close_prepared(name)
                    pgconn.send_prepare(name, statement.encode(), param_types=types)
                pgconn.send_query_prepared(
                    name, params, param_formats=formats, result_format=Format.BINARY
                )
                pgconn.pipeline_sync()
                groups = await connection.wait(_until_sync(pgconn))
            except BaseException:  # cut short: the caller closes the connection (or it is lost)
                with contextlib.suppress(Exception):
                    pgconn.exit_pipeline_mode()
                raise
            pgconn.exit_pipeline_mode()
        read = groups[-2] if len(groups) >= 2 else []
        for group in groups:
            for result in group:
                if result.status == ExecStatus.FATAL_ERROR:
                    error = errors.error_from_result(result, encoding=connection.info.encoding)
                    if statement is None and error.sqlstate in _PREPARE_AGAIN:
                        return None
                    raise error
        return read[-1] if read else None

    async def _unnamed(self, connection: Any, statement: str, args: Sequence[Any]) -> list[Row]:
        """A read as an unnamed statement in one flight (psycopg's own non-prepared execute)."""
        cursor = connection.cursor(binary=True, row_factory=_row_factory)
        if self._role_sets_planner:
            await cursor.execute(statement, args, prepare=False)
            return list(await cursor.fetchall())
        async with connection.pipeline():
            await connection.execute(SET_PLANNER_LOCAL, prepare=False)
            await cursor.execute(statement, args, prepare=False)
            return list(await cursor.fetchall())

    async def close(self) -> None:
        """Close every idle connection; connections in use close when their read ends."""
        self._closed = True
        await self._drop_idle()


def conninfo_of(url: URL) -> str:
    """A libpq URI for ``url`` (an engine's ``postgresql+asyncpg`` URL): the same host, port,
    database, user and password; asyncpg's ``ssl`` query parameter as libpq's ``sslmode``."""
    query = dict(url.query)
    ssl = query.pop("ssl", None)
    if isinstance(ssl, str):
        query.setdefault("sslmode", ssl)
    plain = url.set(drivername="postgresql", query=query)
    return plain.render_as_string(hide_password=False)


def require_psycopg() -> None:
    """:class:`ConfigurationError` naming the ``pooled`` extra when psycopg 3 is not installed."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            "pooling='transaction' reads through psycopg 3, which is not installed: "
            f"pip install 'prism-memory[{EXTRA}]'"
        ) from exc


def pipelined_reads(engine: Any) -> PipelinedReads:
    """A :class:`PipelinedReads` on the URL of ``engine`` (an ``AsyncEngine``), with as many
    reads at once as its pool hands out connections (``pool_size`` + ``max_overflow``; more wait);
    :func:`require_psycopg` first."""
    require_psycopg()
    pool = engine.sync_engine.pool
    size = getattr(pool, "_pool", None)
    overflow = getattr(pool, "_max_overflow", 0)
    limit = (size.maxsize if size is not None else KEEP) + max(int(overflow), 0)
    return PipelinedReads(conninfo_of(engine.url), limit=max(limit, 1))


def one_flight(engine: Any, pooling: str) -> bool:
    """Whether reads on ``engine`` go through :class:`PipelinedReads`: in transaction pooling, on
    an engine :func:`~prism_memory.postgres._engine.create_engine` made for it (a host's engine
    keeps asyncpg, each read in its own ``BEGIN … COMMIT``)."""
    return pooling == "transaction" and transaction_pooled(engine)
