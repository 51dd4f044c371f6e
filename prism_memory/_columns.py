"""Recall candidates as columns: what the re-rank reads of ``n`` candidates, one array or list per
field, with no Python object per candidate.

The re-rank (:func:`prism_memory.ranking.rerank`) reads the ids, threads, texts, sequences,
importances and times as columns, the vectors as one float64 ``(n, width)`` matrix, and asks for a
record (:meth:`CandidateColumns.record`) only for what becomes a hit. A store that makes
:class:`~prism_memory.models.Candidate` objects (the in-memory one, a host's adapter) keeps doing
so: :meth:`CandidateColumns.of` turns them into columns once, at the re-rank's boundary. A store
that decodes rows hands over its own subclass, which keeps the rows and reads a record from one
only when asked (PostgreSQL's :class:`~prism_memory.postgres.rows.SearchedColumns`: its vectors
decoded from one buffer, and most rows' record columns sent as one cheap value decoded for the
few hits among them).

:class:`CandidateColumns` is also a read-only sequence of :class:`Candidate` (each made on
access, for a store's rows), so code that reads a search result's candidates one by one keeps
working.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Self, cast, overload

import numpy as np
import numpy.typing as npt

from ._results import Candidate, MemoryRecord, Vector

__all__ = ["RANKED_COLUMNS", "CandidateColumns"]

RANKED_COLUMNS: tuple[str, ...] = (
    "thread_id",
    "id",
    "text",
    "sequence",
    "occurred_at",
    "importance",
    "embedding_model",
)
"""The record's columns the re-rank reads of every candidate (besides its vectors): the thread and
id (a record counts once; a parent's rows are marked), the text (its term counts), the sequence
(ties), the time and importance (the opt-in blend) and the embedding model (never two models)."""

Profile = tuple[Mapping[str, int], int]
"""``(term counts, length)`` of a candidate's text (:func:`~prism_memory.lexical.term_profile`)."""


class CandidateColumns(Sequence[Candidate]):
    """``n`` recall candidates, field by field (see the module doc). Every column has ``n``
    entries, in the same candidate order.

    ``matrix`` is the stored vectors as float64 rows; ``vectors`` the same as float32 rows (read
    only when a :class:`Candidate` is made of one). ``source`` holds, per candidate, what its
    record is read from: here the :class:`Candidate` itself (:meth:`of`); a store's subclass keeps
    its rows there and says how a record and a candidate are read from one (:meth:`record`,
    :meth:`_candidate`).
    """

    __slots__ = (
        "_source",
        "embedding_models",
        "ids",
        "importances",
        "matrix",
        "occurred_at",
        "profiles",
        "sequences",
        "texts",
        "thread_ids",
        "windows",
    )

    def __init__(
        self,
        *,
        matrix: npt.NDArray[np.float64],
        thread_ids: Sequence[str],
        ids: Sequence[str],
        texts: Sequence[str],
        sequences: Sequence[int],
        occurred_at: Sequence[datetime],
        importances: Sequence[float],
        embedding_models: Sequence[str | None],
        source: Sequence[Any],
        windows: Sequence[Vector | None] | None = None,
        profiles: list[Profile | None] | None = None,
    ) -> None:
        self.matrix = matrix
        self.thread_ids, self.ids, self.texts = thread_ids, ids, texts
        self.sequences, self.occurred_at, self.importances = sequences, occurred_at, importances
        self.embedding_models = embedding_models
        self.windows = windows
        """Each candidate's later windows (``None``: none), or ``None`` when no candidate has any."""
        self.profiles = profiles
        """Each candidate's kept term profile (``None``: tokenize its text), or ``None`` for none."""
        self._source = source

    @classmethod
    def of(cls, candidates: Iterable[Candidate]) -> CandidateColumns:
        """Columns of :class:`Candidate` objects (a store that makes them): converted once; each
        hit's record is the candidate's own (built then, when the store deferred it)."""
        if isinstance(candidates, CandidateColumns):
            return candidates
        given = list(candidates)
        windows = [c.windows for c in given]
        profiles = [c.profile for c in given]
        return cls(
            matrix=_float64_rows([c.vector for c in given]),
            thread_ids=[c.thread_id for c in given],
            ids=[c.id for c in given],
            texts=[c.text for c in given],
            sequences=[c.sequence for c in given],
            occurred_at=[c.occurred_at for c in given],
            importances=[c.importance for c in given],
            embedding_models=[c.embedding_model for c in given],
            source=given,
            windows=windows if any(w is not None for w in windows) else None,
            profiles=profiles if any(p is not None for p in profiles) else None,
        )

    def record(self, at: int) -> MemoryRecord:
        """The record of candidate ``at`` (the re-rank reads it for the hits only)."""
        return cast("Candidate", self._source[at]).record

    def _candidate(self, at: int) -> Candidate:
        """Candidate ``at`` (``0 <= at < n``) as a :class:`Candidate`."""
        return cast("Candidate", self._source[at])

    def take(self, positions: Sequence[int]) -> Self:
        """The candidates at ``positions``, in that order (a re-rank keeps each record once)."""
        pick: Callable[[Sequence[Any]], list[Any]] = lambda column: [column[i] for i in positions]  # noqa: E731
        return type(self)(
            matrix=self.matrix[list(positions)],
            thread_ids=pick(self.thread_ids),
            ids=pick(self.ids),
            texts=pick(self.texts),
            sequences=pick(self.sequences),
            occurred_at=pick(self.occurred_at),
            importances=pick(self.importances),
            embedding_models=pick(self.embedding_models),
            source=pick(self._source),
            windows=None if self.windows is None else pick(self.windows),
            profiles=None if self.profiles is None else pick(self.profiles),
        )

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, at: int) -> Candidate: ...

    @overload
    def __getitem__(self, at: slice) -> Sequence[Candidate]: ...

    def __getitem__(self, at: int | slice) -> Candidate | Sequence[Candidate]:
        if isinstance(at, slice):
            return [self[i] for i in range(*at.indices(len(self)))]
        return self._candidate(range(len(self))[at])  # negative positions; IndexError past the end

    def __iter__(self) -> Iterator[Candidate]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={len(self)})"


def _float64_rows(vectors: Sequence[Vector]) -> npt.NDArray[np.float64]:
    """The vectors as one float64 ``(n, width)`` matrix (``(0, 0)`` for none)."""
    if not vectors:
        return np.zeros((0, 0), dtype=np.float64)
    return np.array(vectors, dtype=np.float64)
