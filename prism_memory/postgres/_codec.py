"""pgvector's binary ``vector`` format, encoded and decoded with numpy: the one codec of the
adapter. :func:`~prism_memory.postgres._engine.register_vector_codec` registers these functions as
the asyncpg type codec of ``vector`` on every connection (nothing is formatted as text); the row
helpers use them for what the driver does not convert (pre-encoded arrays of vectors). A leaf: it
imports nothing of the package."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..models import Vector

__all__ = ["decode_matrix", "decode_vector", "decode_vectors", "encode_vector", "encode_vectors"]

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
