"""The values of long entries that ranking and the stores share (a leaf: :mod:`prism_memory.windows`
re-exports them with the embedding side)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from ._results import Vector
from .embedding import assert_finite_vector
from .errors import InvalidVectorError

__all__ = [
    "WINDOW_MARGIN",
    "OwnVector",
    "WindowedVector",
    "checked_own",
    "effective_cosine",
    "own_parts",
]

WINDOW_MARGIN: Final = 0.15
"""δ: what a later window's cosine gives up against the entry's first window's
(:mod:`prism_memory.windows`)."""


@dataclass(frozen=True, slots=True)
class WindowedVector:
    """The vectors of an entry longer than its embedder's window: ``vector``, its first window's
    (the entry's main vector, 1-D float32), and ``windows``, the later windows' vectors as a
    ``(k, width)`` float32 matrix, ``k >= 1``, in text order.

    Stores take it wherever they take an entry's own vector (a plain vector: an entry within the
    window) and keep the windows with the entry's own vector: replaced with it, gone with it."""

    vector: Vector
    windows: Vector


OwnVector = Vector | WindowedVector
"""An entry's own vector as the stores take it: a vector, or a :class:`WindowedVector`."""


def own_parts(vector: OwnVector) -> tuple[Vector, Vector | None]:
    """An entry's own vector as given to a store -- a vector, or a :class:`WindowedVector` --
    as its main vector and its later windows (``None``: none); nothing is checked here."""
    if isinstance(vector, WindowedVector):
        return vector.vector, vector.windows
    return vector, None


def effective_cosine(first: float, later: Sequence[float]) -> float:
    """``max(first, max(later) - WINDOW_MARGIN)``: an entry's dense similarity from the cosine of
    its first window and those of its later windows (none: ``first`` as it is)."""
    if not later:
        return first
    return max(first, max(later) - WINDOW_MARGIN)


def checked_own(vector: object, label: str, width: int | None) -> tuple[Vector, Vector | None]:
    """An entry's own vector as given to a store, checked: its main vector finite and of
    ``width`` (any width when ``None``; :func:`~prism_memory.embedding.assert_finite_vector`),
    each later window finite and of the main vector's width; the windows as one ``(k, width)``
    float32 matrix, or ``None``."""
    main, later = (
        (vector.vector, vector.windows) if isinstance(vector, WindowedVector) else (vector, None)
    )
    first = assert_finite_vector(main, label, expected_length=width)
    if later is None:
        return first, None
    if not isinstance(later, np.ndarray) or later.ndim != 2 or later.shape[0] == 0:
        raise InvalidVectorError(f"{label}: the later windows must be a non-empty matrix")
    size = first.shape[0]
    rows = [
        assert_finite_vector(row, f"{label}'s window {at + 1}", expected_length=size)
        for at, row in enumerate(later)
    ]
    return first, np.stack(rows).astype(np.float32, copy=False)
