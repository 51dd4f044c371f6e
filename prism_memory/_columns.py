"""Recall candidates as columns: what the re-rank reads of ``n`` candidates, one array or list per
field, with no Python object per candidate.

A store that decodes rows (PostgreSQL) hands :class:`CandidateColumns` to the re-rank
(:func:`prism_memory.ranking.rerank`): the ids, threads, texts, sequences, importances and times
as columns, the vectors as one float64 ``(n, width)`` matrix decoded from one buffer, and the rows
themselves, from which a record is read only for what becomes a hit (a store may send only the
ranked fields of most candidates as plain columns and the rest of the record in one cheap value,
which ``expand`` turns into the record's columns for the few hits among them). A store that makes
:class:`~prism_memory.models.Candidate` objects (the in-memory one, a host's adapter) keeps doing
so: :meth:`CandidateColumns.of` turns them into columns once, at the re-rank's boundary.

:class:`CandidateColumns` is also a read-only sequence of :class:`Candidate` (each made on
access), so code that reads a search result's candidates one by one keeps working.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from ._results import Candidate, MemoryRecord, Vector, record_from_row, row_candidate

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
    only when a :class:`Candidate` is made of one). :meth:`record` builds the record of candidate
    ``i``; for a store's rows it is :func:`~prism_memory._results.record_from_row` of row ``i``
    (through ``expand`` first: the row with every record column, when the store sent some of them
    in another form).
    """

    __slots__ = (
        "_candidates",
        "_expand",
        "_rows",
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
        windows: Sequence[Vector | None] | None = None,
        profiles: list[Profile | None] | None = None,
        rows: Sequence[Mapping[Any, Any]] | None = None,
        candidates: Sequence[Candidate] | None = None,
        expand: Callable[[Mapping[Any, Any]], Mapping[Any, Any]] | None = None,
    ) -> None:
        self.matrix = matrix
        self.thread_ids, self.ids, self.texts = thread_ids, ids, texts
        self.sequences, self.occurred_at, self.importances = sequences, occurred_at, importances
        self.embedding_models = embedding_models
        self.windows = windows
        """Each candidate's later windows (``None``: none), or ``None`` when no candidate has any."""
        self.profiles = profiles
        """Each candidate's kept term profile (``None``: tokenize its text), or ``None`` for none."""
        self._rows, self._candidates, self._expand = rows, candidates, expand

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[Mapping[Any, Any]],
        matrix: npt.NDArray[np.float64],
        windows: Sequence[Vector | None] | None = None,
        expand: Callable[[Mapping[Any, Any]], Mapping[Any, Any]] | None = None,
    ) -> CandidateColumns:
        """Columns of a store's rows of the record's columns (:func:`record_from_row`), with their
        vectors already decoded into ``matrix``; each hit's record is read from its row, through
        ``expand`` when given (a row holding :data:`RANKED_COLUMNS` as columns and the record's
        other columns in another form: ``expand`` returns the row with all of them)."""
        if rows:
            threads, ids, texts, sequences, times, importances, models = zip(
                *map(_RANKED, rows), strict=True
            )
        else:
            threads = ids = texts = sequences = times = importances = models = ()
        return cls(
            matrix=matrix,
            thread_ids=threads,
            ids=ids,
            texts=texts,
            sequences=sequences,
            occurred_at=times,
            importances=importances,
            embedding_models=models,
            windows=windows,
            rows=rows,
            expand=expand,
        )

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
            windows=windows if any(w is not None for w in windows) else None,
            profiles=profiles if any(p is not None for p in profiles) else None,
            candidates=given,
        )

    def record(self, at: int) -> MemoryRecord:
        """The record of candidate ``at`` (read from its row now, for a store's rows)."""
        if self._candidates is not None:
            return self._candidates[at].record
        assert self._rows is not None
        return record_from_row(self._row(at))

    def _row(self, at: int) -> Mapping[Any, Any]:
        """Row ``at`` with every record column (through ``expand``)."""
        assert self._rows is not None
        row = self._rows[at]
        return row if self._expand is None else self._expand(row)

    def take(self, positions: Sequence[int]) -> CandidateColumns:
        """The candidates at ``positions``, in that order (a re-rank keeps each record once)."""
        pick: Callable[[Sequence[Any]], list[Any]] = lambda column: [column[i] for i in positions]  # noqa: E731
        return CandidateColumns(
            matrix=self.matrix[list(positions)],
            thread_ids=pick(self.thread_ids),
            ids=pick(self.ids),
            texts=pick(self.texts),
            sequences=pick(self.sequences),
            occurred_at=pick(self.occurred_at),
            importances=pick(self.importances),
            embedding_models=pick(self.embedding_models),
            windows=None if self.windows is None else pick(self.windows),
            profiles=None if self.profiles is None else pick(self.profiles),
            rows=None if self._rows is None else pick(self._rows),
            candidates=None if self._candidates is None else pick(self._candidates),
            expand=self._expand,
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
        if self._candidates is not None:
            return self._candidates[at]
        assert self._rows is not None
        at = range(len(self))[at]  # negative positions; IndexError past the end
        windows = None if self.windows is None else self.windows[at]
        vector: Vector = self.matrix[at].astype(np.float32)
        candidate = row_candidate(vector, self._row(at), windows)
        if self.profiles is not None:
            candidate.profile = self.profiles[at]
        return candidate

    def __iter__(self) -> Iterator[Candidate]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"CandidateColumns(n={len(self)})"


_RANKED = operator.itemgetter(*RANKED_COLUMNS)
"""A row's fields the re-rank reads (one C call per row)."""


def _float64_rows(vectors: Sequence[Vector]) -> npt.NDArray[np.float64]:
    """The vectors as one float64 ``(n, width)`` matrix (``(0, 0)`` for none)."""
    if not vectors:
        return np.zeros((0, 0), dtype=np.float64)
    return np.array(vectors, dtype=np.float64)
