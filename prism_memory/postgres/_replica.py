"""Where a store's reads may go besides the primary: a streaming replica, its configuration, its
time bounds and its back-off after a failure (the routing itself is
:class:`~prism_memory.postgres._executor.Executor`'s)."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from ._engine import KeptConnections

__all__ = [
    "REPLICA_RETRY_MAX_SECONDS",
    "REPLICA_RETRY_SECONDS",
    "REPLICA_TIMEOUT_SECONDS",
    "Endpoint",
    "ReadConsistency",
    "ReadReplica",
    "ReplicaDownError",
    "ReplicaEndpoint",
    "abandon",
    "describe_endpoint",
    "failure_reason",
]

logger = logging.getLogger("prism_memory.postgres")

ReadConsistency = Literal["session", "strict"]
"""What a replica read waits for: ``"session"`` -- every write this store made (read your own
writes); ``"strict"`` -- everything the primary had committed when the read began."""


REPLICA_TIMEOUT_SECONDS = 3.0
"""How long one replica read (its connection, its replay-position check, its statement) may take
before the read goes to the primary (``replica_timeout_seconds``)."""

REPLICA_RETRY_SECONDS = 5.0
"""How long reads avoid a replica that failed before trying it again (``replica_retry_seconds``);
doubled after each failure in a row, up to :data:`REPLICA_RETRY_MAX_SECONDS`."""

REPLICA_RETRY_MAX_SECONDS = 60.0
"""The longest a failed replica is avoided."""


@dataclass(frozen=True, slots=True)
class ReadReplica:
    """Where a store sends its reads (recall, export, counts, RAG queries): a streaming replica's
    engine, how long a read waits for the replica to replay what it must see before it reads from
    the primary instead, and what it must see (:data:`ReadConsistency`); how long one replica read
    may take (``timeout_seconds``) before it goes to the primary, and how long a replica that
    failed is then avoided (``retry_seconds``, doubling)."""

    engine: AsyncEngine
    wait_seconds: float = 0.25
    consistency: ReadConsistency = "session"
    timeout_seconds: float = REPLICA_TIMEOUT_SECONDS
    retry_seconds: float = REPLICA_RETRY_SECONDS


def describe_endpoint(engine: AsyncEngine) -> str:
    """``engine``'s server as ``host:port/database`` (a unix socket: its directory), with no user,
    password or other parameter -- for an error message or a log line."""
    url = engine.url
    socket_dir = url.query.get("host")
    host = socket_dir if isinstance(socket_dir, str) else url.host or "localhost"
    port = url.port or url.query.get("port") or 5432
    return f"{host}:{port}/{url.database or ''}"


class ReplicaDownError(Exception):
    """The replica did not answer a read (in time): the read goes to the primary."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Endpoint:
    """One server's engine, its session factory and the connections kept between operations."""

    __slots__ = ("_sessions", "engine", "kept")

    def __init__(self, engine: AsyncEngine, *, replica: bool = False) -> None:
        self.engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
        self.kept = KeptConnections(engine, terminate=replica)

    def sessions(self) -> AsyncSession:
        """A new session on the engine (:class:`~prism_memory.errors.StoreClosedError` once the
        store closed)."""
        self.kept.check_open()
        return self._sessions()


class ReplicaEndpoint(Endpoint):
    """The read endpoint, the primary's WAL position it must have replayed to answer, and whether
    it failed lately (reads avoid it until :attr:`down_until`)."""

    __slots__ = ("config", "covered", "down_until", "failures", "name", "needed", "writes")

    def __init__(self, config: ReadReplica) -> None:
        super().__init__(config.engine, replica=True)
        self.config = config
        self.name = describe_endpoint(config.engine)
        self.failures = 0
        """Failures in a row (each doubles the time it is avoided)."""
        self.down_until = 0.0
        """``time.monotonic()`` before which reads go to the primary without trying it."""
        self.writes = 0
        """Writes this store finished on the primary (each may change what a read sees)."""
        self.covered = 0
        """How many of them :attr:`needed` covers."""
        self.needed: int | None = None
        """A WAL position of the primary after those writes; ``None``: nothing to wait for."""

    def usable(self) -> bool:
        """Whether reads may try it: it did not fail lately (else they go to the primary until
        its back-off ends)."""
        return time.monotonic() >= self.down_until

    def failed(self, reason: str) -> None:
        """It failed a read: avoid it for ``retry_seconds``, doubled for each failure in a row
        (up to :data:`REPLICA_RETRY_MAX_SECONDS`)."""
        self.failures += 1
        pause = min(
            self.config.retry_seconds * 2 ** min(self.failures - 1, 16),
            REPLICA_RETRY_MAX_SECONDS,
        )
        self.down_until = time.monotonic() + pause
        logger.warning(
            "read replica %s failed (%s): reads go to the primary for %.0f s",
            self.name,
            reason,
            pause,
        )


def failure_reason(exc: BaseException, replica: ReplicaEndpoint | None) -> str:
    """Why a read failed, for a message: past the replica's time bound, or the translated error's
    own words (never a bound value: :func:`translate` leaves them out) without its action."""
    if replica is not None and _timed_out(exc):
        return f"no answer within {replica.config.timeout_seconds:g} s"
    text = str(exc)
    _, colon, rest = text.partition(" failed: ")
    return (rest if colon else text) or type(exc).__name__


def _timed_out(exc: BaseException) -> bool:
    """Whether a time bound ended ``exc`` (our deadline, or asyncpg's ``command_timeout`` /
    connect ``timeout`` behind a translated error)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TimeoutError):
            return True
        current = current.__cause__ or current.__context__
    return False


async def abandon(session: AsyncSession) -> None:
    """Drop ``session``'s connection, if it has one, without a word to its server (it may be
    hung: the pool terminates an invalidated connection)."""
    with contextlib.suppress(BaseException):
        await session.invalidate()
