"""Column types and column helpers the table modules share: pgvector's ``vector`` without its text
conversion, the timestamp column, and the entries table's columns made from the entry's
declaration (:mod:`prism_memory._entry_fields`)."""

from __future__ import annotations

from typing import Any

from pgvector.sqlalchemy import VECTOR
from sqlalchemy import BigInteger, Boolean, Column, DateTime, Double, Integer, Text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from .._entry_fields import ENTRY_FIELDS

__all__ = ["BinaryVector", "entry_columns", "timestamp_column"]


class BinaryVector(VECTOR):
    """pgvector's ``vector`` column type, without the text conversion.

    pgvector's SQLAlchemy type turns every value into text. prism_memory registers its own asyncpg
    codec of pgvector's binary format on each connection instead (:mod:`prism_memory.postgres._codec`,
    registered by :mod:`prism_memory.postgres._engine`; the one encoder and decoder of the adapter),
    so values pass through untouched: numpy ``float32`` arrays in, numpy ``float32`` arrays out.
    """

    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> None:
        """No conversion: the driver's binary codec encodes numpy arrays."""
        return

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        """No conversion: the driver's binary codec decodes to numpy arrays."""
        return


def timestamp_column(name: str, *, nullable: bool = False) -> Column[Any]:
    """A ``timestamptz`` column."""
    return Column(name, DateTime(timezone=True), nullable=nullable)


def _column_type(sql: str, dimension: int | None) -> TypeEngine[Any]:
    """The SQLAlchemy type of a declared SQL type (``vector``: of width ``dimension``)."""
    types: dict[str, TypeEngine[Any]] = {
        "text": Text(),
        "jsonb": JSONB(),
        "boolean": Boolean(),
        "timestamptz": DateTime(timezone=True),
        "bigint": BigInteger(),
        "double precision": Double(),
        "integer": Integer(),
        "vector": BinaryVector(dimension),
        "vector[]": ARRAY(BinaryVector(None)),
        "tsvector": TSVECTOR(),
    }
    return types[sql]


def entry_columns(dimension: int | None) -> list[Column[Any]]:
    """The entries table's columns, one per declared field in its order (``embedding`` pinned to
    ``vector(dimension)`` when ``dimension`` is given; the windows' vectors never are)."""
    return [
        Column(f.name, _column_type(f.sql, dimension), nullable=f.nullable) for f in ENTRY_FIELDS
    ]
