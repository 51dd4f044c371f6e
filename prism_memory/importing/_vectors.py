"""The vectors an import's new entries came with, checked as one batch: finite, of one width."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from ..embedding import assert_finite_vector
from ..errors import PrismMemoryError
from ..models import Vector
from ._entry import RawVector

__all__ = ["checked_vectors"]


def checked_vectors(
    given: list[tuple[int, object, tuple[int, str]]],
    width: int | None,
    refuse: Callable[[str, int], PrismMemoryError],
) -> tuple[dict[int, Vector], int | None]:
    """``given`` -- ``(position, vector as given, (line, how messages name it))`` -- checked:
    finite and of ``width`` (``None``: the first vector's); the vectors by position, and the
    width. Vectors a reader left as JSON text (:class:`RawVector`) are parsed together, converted
    and checked by numpy in one pass; when that pass finds anything wrong, or for vectors given
    otherwise, each is checked on its own, in stream order, and the first bad one raises
    ``refuse(message, line)`` (an :class:`~prism_memory.importing.ImportLineError`): the message
    names the line and the rule, never a value."""
    if not given:
        return {}, width
    texts = [vector.text for _, vector, _ in given if isinstance(vector, RawVector)]
    if len(texts) == len(given):
        matrix = _matrix(texts, width)
        if matrix is not None:
            return {at: row for (at, _, _), row in zip(given, matrix, strict=True)}, matrix.shape[1]
    checked: dict[int, Vector] = {}
    for at, vector, (line, where) in given:
        value = vector
        if isinstance(vector, RawVector):
            try:
                value = json.loads(vector.text)
            except ValueError:
                raise refuse(f"{where}: not valid JSON", line) from None
        try:
            checked[at] = assert_finite_vector(value, "vector", expected_length=width)
        except PrismMemoryError as exc:
            raise refuse(f"{where}: {exc}", line) from exc
        width = checked[at].shape[0]
    return checked, width


def _matrix(texts: list[str], width: int | None) -> Vector | None:
    """JSON arrays of numbers as one finite float32 matrix (of ``width`` columns when given), or
    ``None`` when they are not that (bad JSON, ragged, empty, not finite, too large for float32):
    then each is checked on its own, so that the error names the first bad one."""
    try:
        lists = json.loads("[" + ",".join(texts) + "]")
        widths = set(map(len, lists))
        if len(lists) != len(texts) or len(widths) != 1 or width not in (None, *widths):
            return None
        with np.errstate(over="ignore"):
            matrix = np.array(lists, dtype=np.float64).astype(np.float32)
    except (ValueError, TypeError, OverflowError):
        return None
    if matrix.ndim != 2 or matrix.shape[1] == 0 or not np.isfinite(matrix).all():
        return None
    return matrix
