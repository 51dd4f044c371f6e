"""Driver errors translated once, by SQLSTATE, into prism_memory's error tree."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from asyncpg import InterfaceError
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ..errors import (
    ConfigurationError,
    ConflictError,
    DimensionMismatchError,
    PrismMemoryError,
    StorageError,
    ValidationError,
)

__all__ = ["sqlstate_of", "translate", "wrap_db_errors"]

_MISSING_OBJECT = {
    "42P01",  # undefined_table
    "42704",  # undefined_object
    "3F000",  # invalid_schema_name
    "42883",  # undefined_function (for example the vector operators without pgvector)
    "42703",  # undefined_column
}


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


def translate(exc: BaseException, action: str) -> PrismMemoryError:
    """The :class:`PrismMemoryError` that stands for driver error ``exc``."""
    code = sqlstate_of(exc) or ""
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0] if str(exc) else ""
    # the driver quotes a value it could not encode: never repeat input (it may be a secret)
    detail = _ARGUMENT.sub(r"\1 (value not shown)", detail)
    message = f"{action} failed: {detail}" if detail else f"{action} failed"
    if code == "23505":
        return ConflictError(message)
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
    except (DBAPIError, SQLAlchemyError, OSError, InterfaceError) as exc:
        # InterfaceError: the asyncpg driver's own, such as a call on a connection that died
        raise translate(exc, action) from exc
    except Exception as exc:
        if sqlstate_of(exc) is not None:  # an asyncpg error that bypassed SQLAlchemy
            raise translate(exc, action) from exc
        raise
