"""Column types and column helpers the table modules share: pgvector's ``vector`` without its text
conversion, and the timestamp column."""

from __future__ import annotations

from typing import Any

from pgvector.sqlalchemy import VECTOR
from sqlalchemy import Column, DateTime
from sqlalchemy.engine import Dialect

__all__ = ["BinaryVector", "timestamp_column"]


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
