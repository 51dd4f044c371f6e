"""pgvector's binary ``vector`` format, encoded and decoded with numpy: the one codec of the
adapter, and PostgreSQL's binary ``record`` format (``record_send``; :func:`decode_record`).
:func:`~prism_memory.postgres._engine.register_vector_codec` registers the vector's functions as
the asyncpg type codec of ``vector`` on every connection (nothing is formatted as text); the row
helpers use them for what the driver does not convert (pre-encoded arrays of vectors). A leaf: it
imports nothing of the package."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from ..models import Vector

__all__ = [
    "decode_matrix",
    "decode_record",
    "decode_vector",
    "decode_vectors",
    "encode_vector",
    "encode_vectors",
]

_HEADER = struct.Struct(">HH")


def encode_vector(value: Any) -> bytes:
    """pgvector's binary ``vector`` format: ``dim``, ``unused`` (uint16 BE), then float32 BE."""
    if isinstance(value, bytes):
        return value
    array = np.asarray(value, dtype=">f4")
    if array.ndim != 1:
        raise ValueError("a vector must be one-dimensional")
    return _HEADER.pack(array.shape[0], 0) + array.tobytes()


def encode_vectors(vectors: Sequence[Any]) -> list[bytes]:
    """:func:`encode_vector` of each row of ``vectors``; rows of one width are converted to
    big-endian float32 in one pass (a matrix, or a list of 1-D arrays)."""
    if not len(vectors):
        return []
    try:
        matrix = np.asarray(vectors, dtype=">f4")
    except (TypeError, ValueError):  # ragged rows, or pre-encoded bytes
        return [encode_vector(vector) for vector in vectors]
    if matrix.ndim != 2:
        return [encode_vector(vector) for vector in vectors]
    header = _HEADER.pack(matrix.shape[1], 0)
    return [header + row.tobytes() for row in matrix]


def decode_vector(data: bytes) -> Vector:
    """Decode pgvector's binary ``vector`` format into a native ``float32`` numpy array."""
    dim, _ = _HEADER.unpack_from(data)
    return np.frombuffer(data, dtype=">f4", count=dim, offset=_HEADER.size).astype(np.float32)


def decode_vectors(sent: Sequence[bytes]) -> Sequence[Vector]:
    """:func:`decode_vector` of each of ``sent`` (recall's candidates, sent as ``vector_send``
    bytes): one array for the whole batch when their dimensions agree (they do in a table of one
    embedding model)."""
    if not sent:
        return []
    size = len(sent[0])
    if len(set(map(len, sent))) > 1:
        return [decode_vector(data) for data in sent]
    # each row: dim and an unused word (4 bytes, one float's width), then dim big-endian floats
    matrix = np.frombuffer(b"".join(sent), dtype=">f4").reshape(len(sent), size // 4)
    return list(matrix[:, 1:].astype(np.float32))


def decode_matrix(sent: Sequence[bytes]) -> npt.NDArray[np.float64]:
    """The vectors of ``sent`` (``vector_send`` bytes of one width) as one float64 ``(n, width)``
    matrix, converted from the joined buffer in one pass (recall's candidates); rows of mixed
    widths raise ``ValueError`` (a table holds one model's vectors per search)."""
    if not sent:
        return np.zeros((0, 0), dtype=np.float64)
    size = len(sent[0])
    if len(set(map(len, sent))) > 1:
        raise ValueError("the candidates' vectors differ in width")
    # each row: dim and an unused word (4 bytes, one float's width), then dim big-endian floats
    matrix = np.frombuffer(b"".join(sent), dtype=">f4").reshape(len(sent), size // 4)
    return matrix[:, 1:].astype(np.float64)


_FIELD = struct.Struct(">Ii")
"""A field's header in the binary ``record`` format: its type's OID and its length (-1: NULL)."""
_INT2, _INT4, _INT8, _FLOAT8 = (struct.Struct(f) for f in (">h", ">i", ">q", ">d"))
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_INFINITY, _NEGATIVE_INFINITY = 2**63 - 1, -(2**63)


def _timestamptz(micros: int) -> datetime:
    """A ``timestamptz`` (microseconds since 2000-01-01 UTC) as asyncpg decodes it: aware, in
    UTC; the infinities as asyncpg's naive ``datetime.max`` and ``datetime.min``."""
    if micros == _INFINITY:
        return datetime.max
    if micros == _NEGATIVE_INFINITY:
        return datetime.min
    return _EPOCH + timedelta(microseconds=micros)


_FIXED: dict[int, struct.Struct] = {20: _INT8, 21: _INT2, 23: _INT4, 701: _FLOAT8, 1184: _INT8}
"""The fixed-width field types :func:`decode_record` reads, by OID: bigint, smallint, integer,
double precision and timestamptz (then made a ``datetime``)."""
_TEXTS = frozenset({25, 1043})
"""text and varchar."""
_BOOLEAN, _TIMESTAMPTZ = 16, 1184


def decode_record(data: bytes) -> list[Any]:
    """The fields of a row sent by ``record_send`` (PostgreSQL's binary ``record`` format: the
    field count, then each field's type OID, length and bytes), each decoded as asyncpg decodes
    its type -- text, boolean, integers, ``double precision``, ``timestamptz`` -- and
    ``ValueError`` for a field of another type. Python-level: for the few rows read this way."""
    (count,) = _INT4.unpack_from(data, 0)
    values: list[Any] = []
    append = values.append
    at = 4
    for _ in range(count):
        oid, size = _FIELD.unpack_from(data, at)
        at += 8
        if size < 0:
            append(None)
            continue
        if oid in _TEXTS:
            append(data[at : at + size].decode())
        elif oid == _BOOLEAN:
            append(data[at] != 0)
        elif (fixed := _FIXED.get(oid)) is not None:
            (value,) = fixed.unpack_from(data, at)
            append(_timestamptz(value) if oid == _TIMESTAMPTZ else value)
        else:
            raise ValueError("a record field of a type this decoder does not read")
        at += size
    return values
