"""Driver errors translated once, by SQLSTATE, into prism_memory's error tree."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from asyncpg import InterfaceError
from asyncpg.exceptions import InternalClientError
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ..errors import (
    ConfigurationError,
    ConflictError,
    DimensionMismatchError,
    PrismMemoryError,
    StorageError,
    ValidationError,
)

__all__ = ["pooler_refusal", "server_terminated", "sqlstate_of", "translate", "wrap_db_errors"]

_MISSING_OBJECT = {
    "42P01",  # undefined_table
    "42704",  # undefined_object
    "3F000",  # invalid_schema_name
    "42883",  # undefined_function (for example the vector operators without pgvector)
    "42703",  # undefined_column
}


# The server process ended under the connection: it crashed (a signal, an out-of-memory kill), was
# shut down or restarted, or an administrator terminated the backend. Class 08 is connection
# exceptions (08003: the connection is gone, as asyncpg reports a backend that died mid-statement).
_TERMINATED = {"57P01", "57P02", "57P03"}  # admin_shutdown, crash_shutdown, cannot_connect_now

_ARGUMENT = re.compile(r"(query argument \$\d+:).*")


def sqlstate_of(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver error wrapped by SQLAlchemy, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for candidate in (current, getattr(current, "orig", None)):
            code = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
            if isinstance(code, str) and len(code) == 5:
                return code
        current = current.__cause__ or getattr(current, "orig", None)
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every error behind it (``__cause__``, ``__context__``, SQLAlchemy's ``orig``)."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        behind = (current.__cause__, current.__context__, getattr(current, "orig", None))
        pending.extend(nxt for nxt in behind if isinstance(nxt, BaseException))


def server_terminated(exc: BaseException) -> str | None:
    """The SQLSTATE saying the server process went away under ``exc`` (anywhere in its chain).

    SQLAlchemy reports the *next* use of such a connection as "Can't reconnect until invalid
    transaction is rolled back"; the error that explains it sits behind, as its context.
    """
    for current in _chain(exc):
        for candidate in (current, getattr(current, "orig", None)):
            code = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
            if isinstance(code, str) and (code.startswith("08") or code in _TERMINATED):
                return code
    return None


SERVER_LOGS: dict[Path, Path] = {}
"""Data directory -> server log of every embedded server this process started and has not closed
(:mod:`~prism_memory.postgres.embedded` keeps it), so an error about a server process that died can
say where its log is."""


def _terminated_message(action: str, code: str) -> str:
    logs = tuple(SERVER_LOGS.values())
    where = (
        f"the embedded server's log is {', '.join(str(path) for path in logs)}"
        if logs
        else "the server's log says why"
    )
    return (
        f"{action} failed: the PostgreSQL server process terminated or dropped the connection "
        f"(SQLSTATE {code}); {where}"
    )


_REFUSED_PARAMETER = re.compile(r"unsupported startup parameter: ([A-Za-z0-9_.]+)")

_POOLER_HINT = (
    "behind a transaction-mode pooler (PgBouncer and the like) open the stores with "
    "pooling='transaction' (docs/postgres.md, 'Behind a connection pooler')"
)


def pooler_refusal(exc: BaseException) -> str | None:
    """The startup parameter a connection pooler refused, when that is what ``exc`` says."""
    for current in _chain(exc):
        found = _REFUSED_PARAMETER.search(str(current))
        if found is not None:
            return found.group(1)
    return None


def translate(exc: BaseException, action: str) -> PrismMemoryError:
    """The :class:`PrismMemoryError` that stands for driver error ``exc``."""
    refused = pooler_refusal(exc)
    if refused is not None:
        return ConfigurationError(
            f"{action} failed: the connection pooler refused the startup parameter "
            f"{refused!r}; {_POOLER_HINT}"
        )
    terminated = server_terminated(exc)
    if terminated is not None:
        return StorageError(_terminated_message(action, terminated))
    code = sqlstate_of(exc) or ""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines() if str(exc) else []
    detail = lines[0] if lines else ""  # a driver error may carry no text at all
    # the driver quotes a value it could not encode: never repeat input (it may be a secret)
    detail = _ARGUMENT.sub(r"\1 (value not shown)", detail)
    message = f"{action} failed: {detail}" if detail else f"{action} failed"
    if code == "23505":
        return ConflictError(message)
    if code == "26000" and "prepared statement" in detail:
        # a statement prepared on one server connection, run on another: a transaction pooler
        return StorageError(f"{message}; {_POOLER_HINT}")
    if code in _MISSING_OBJECT:
        return ConfigurationError(
            f"{message} (is the schema migrated? run the prism_memory Alembic revisions, "
            "or drop skip_migrations=True)"
        )
    if code.startswith("22"):
        if "dimensions" in detail:
            return DimensionMismatchError(message)
        return ValidationError(message)
    if code.startswith("23"):
        return ValidationError(message)
    return StorageError(message)


@contextmanager
def wrap_db_errors(action: str) -> Iterator[None]:
    """Re-raise driver and SQLAlchemy errors raised inside as :class:`PrismMemoryError`, chained.

    Works around ``async with``/``await`` code too: the translation happens when the exception
    propagates through the block.
    """
    try:
        yield
    except PrismMemoryError:
        raise
    except (DBAPIError, SQLAlchemyError, OSError, InterfaceError, InternalClientError) as exc:
        # InterfaceError: the asyncpg driver's own, such as a call on a connection that died;
        # InternalClientError: its state error on a connection the server ended a moment ago
        raise translate(exc, action) from exc
    except Exception as exc:
        if sqlstate_of(exc) is not None:  # an asyncpg error that bypassed SQLAlchemy
            raise translate(exc, action) from exc
        raise
