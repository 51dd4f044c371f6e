"""Rows and records: what a :class:`~prism_memory.models.MemoryRecord` is read from and written as.

The columns a record is read from (:data:`RECORD_COLUMNS`) and a row's decoding into a record
(:func:`record_from_row`: the metadata document with its ``_lineage`` key, explicit or default
consent) follow from the entry's declaration (:mod:`prism_memory._entry_fields`); this module
also holds the bound values of a
batch of new entries (:func:`insert_params`, one array per column) and the decoding of the search
statement's rows into candidates and corpus statistics (:func:`search_result`). No SQL text here
(:mod:`prism_memory.postgres.sql`) and no execution (:mod:`prism_memory.postgres.repositories`).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from .._columns import RANKED_COLUMNS, CandidateColumns
from .._entry_fields import ENTRY_FIELDS, LINEAGE_KEY, RECORD_COLUMNS, STAGE_COLUMNS
from .._results import Candidate
from .._windowed import OwnVector, WindowedVector, own_parts
from ..lexical import CorpusStats, text_terms, tokenize
from ..models import (
    Lineage,
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    Vector,
)
from ..stores.base import (
    ClaimedEntry,
    EntryLease,
    ImportRow,
    NewEntry,
    SearchResult,
)
from ._codec import decode_matrix, decode_record, decode_vectors, encode_vectors

__all__ = [
    "DEFERRED_COLUMNS",
    "RECORD_COLUMNS",
    "STAGE_COLUMNS",
    "SearchedColumns",
    "claimed_entries",
    "consent_values",
    "insert_params",
    "inserted_record",
    "lexical_values",
    "lineage_metadata",
    "record_from_row",
    "row_candidate",
    "scope_params",
    "search_result",
    "stage_records",
]

DEFERRED_COLUMNS: tuple[str, ...] = tuple(c for c in RECORD_COLUMNS if c not in RANKED_COLUMNS)
"""The record's columns the re-rank does not read: a recall's search sends them typed for its
likeliest hits only, and as one ``record_send`` value (``deferred``) for the other candidates,
in this order (:meth:`~prism_memory.postgres.statements.RecallSql.search`)."""

_CONSENT_COLUMNS = tuple(f.name for f in ENTRY_FIELDS if f.record == ("consent",))
"""The consent columns (:mod:`prism_memory._entry_fields`)."""


def _record_sources() -> tuple[str, ...]:
    """For each field of :class:`MemoryRecord`, in its order, the first declared column read into it."""
    first: dict[str, str] = {}
    for declared in ENTRY_FIELDS:
        for name in declared.record:
            first.setdefault(name, declared.name)
    return tuple(first[f.name] for f in fields(MemoryRecord))


_RECORD_VALUES = operator.itemgetter(*_record_sources())
"""A row's values in :class:`MemoryRecord`'s field order (one C call for all of them)."""
_AT = {f.name: at for at, f in enumerate(fields(MemoryRecord))}
_METADATA, _LINEAGE, _CONSENT = _AT["metadata"], _AT["lineage"], _AT["consent"]
_CONSENT_FIELDS = tuple(
    (declared.name.removeprefix("consent_"), declared.name)
    for declared in ENTRY_FIELDS
    if declared.record == ("consent",) and declared.name != "consent_explicit"
)
"""``(MemoryConsent field, column)`` of the consent columns (``consent_explicit`` says whether the
entry has a consent of its own at all)."""


def record_from_row(row: Mapping[Any, Any]) -> MemoryRecord:
    """The :class:`MemoryRecord` of a stored entry's row: a mapping of the record's columns
    (:data:`RECORD_COLUMNS`, as :mod:`prism_memory._entry_fields` declares them), ``metadata`` as the decoded document or
    its JSON text, with the lineage under its ``_lineage`` key; consent from the consent columns
    when ``consent_explicit`` (``None``: the default consent)."""
    # positionally, in the dataclass's field order: 20 keywords cost a microsecond per record
    values = list(_RECORD_VALUES(row))
    stored = values[_METADATA]
    if isinstance(stored, str):
        stored = json.loads(stored) if stored != "{}" else None
    values[_METADATA], values[_LINEAGE] = _split_metadata(stored) if stored else ({}, None)
    if values[_CONSENT]:
        values[_CONSENT] = MemoryConsent(**{key: row[column] for key, column in _CONSENT_FIELDS})
    else:
        values[_CONSENT] = None
    return MemoryRecord(*values)


def _split_metadata(stored: Mapping[str, Any]) -> tuple[dict[str, Any], Lineage | None]:
    """The entry's metadata and its lineage, from the stored ``metadata`` document."""
    metadata = dict(stored)
    raw = metadata.pop(LINEAGE_KEY, None)
    if not isinstance(raw, Mapping) or not raw.get("sourceIds"):
        return metadata, None
    return metadata, Lineage(source_ids=tuple(raw["sourceIds"]), reason=raw.get("reason"))


class RowCandidate(Candidate):
    """A candidate of a stored entry's row (the record's columns, :func:`record_from_row`): ranking
    reads its few fields, copied from the row, and its record is read from the row on first use
    -- for the hits only."""

    __slots__ = ("_row",)

    _row: Mapping[Any, Any]

    @property
    def record(self) -> MemoryRecord:
        """The candidate's record, read from its row on first use."""
        if self._record is None:
            self._record = record_from_row(self._row)
        return self._record


def row_candidate(
    vector: Vector, row: Mapping[Any, Any], windows: Vector | None = None
) -> Candidate:
    """The :class:`RowCandidate` of a stored entry's row. No profile: ranking tokenizes the text
    (its memo makes it once per text)."""
    candidate = _new_row_candidate(RowCandidate)
    candidate._record, candidate._build, candidate._row = None, None, row
    candidate.vector, candidate.profile, candidate.windows = vector, None, windows
    candidate.thread_id, candidate.id, candidate.text = row["thread_id"], row["id"], row["text"]
    candidate.sequence, candidate.occurred_at = row["sequence"], row["occurred_at"]
    candidate.importance, candidate.embedding_model = row["importance"], row["embedding_model"]
    return candidate


_new_row_candidate = RowCandidate.__new__


def lineage_metadata(metadata: Mapping[str, Any], lineage: Lineage | None) -> dict[str, Any]:
    """The stored ``metadata`` document: the entry's metadata plus ``_lineage`` when it has one."""
    stored = json.loads(json.dumps(dict(metadata)))
    if lineage is not None:
        stored[LINEAGE_KEY] = {"sourceIds": list(lineage.source_ids), "reason": lineage.reason}
    return dict(stored)


def _metadata_json(metadata: Mapping[str, Any], lineage: Lineage | None) -> str:
    """:func:`lineage_metadata` as JSON text, serialised once."""
    if not metadata and lineage is None:
        return "{}"
    stored = dict(metadata)
    if lineage is not None:
        stored[LINEAGE_KEY] = {"sourceIds": list(lineage.source_ids), "reason": lineage.reason}
    return json.dumps(stored)


def consent_values(consent: MemoryConsent | None) -> dict[str, Any]:
    """The consent columns of ``consent`` (the default consent's, not explicit, when ``None``)."""
    effective = consent if consent is not None else MemoryConsent()
    return {
        "consent_explicit": consent is not None,
        "consent_source": effective.source,
        "consent_scope": effective.scope,
        "consent_visible": effective.visible,
        "consent_granted_at": effective.granted_at,
        "consent_revoked_at": effective.revoked_at,
    }


_DEFAULT_CONSENT = consent_values(None)
"""The consent columns of an entry remembered without explicit consent."""


def lexical_values(body: str) -> dict[str, Any]:
    """``lexical_terms`` (distinct terms, sorted) and ``term_count`` of a text, for ``text_tsv``."""
    terms = tokenize(body)
    return {"lexical_terms": sorted(set(terms)), "term_count": len(terms)}


def scope_params(scope: MemoryIdentity) -> dict[str, str]:
    """The bound values ``:tenant``, ``:resource`` and ``:thread`` of ``scope``."""
    return {"tenant": scope.tenant_id, "resource": scope.resource_id, "thread": scope.thread_id}


INSERT_COLUMNS: tuple[tuple[str, str, str, bool], ...] = (
    ("ids", "id", "text", False),
    ("texts", "text", "text", False),
    ("roles", "role", "text", True),
    ("metadata", "metadata", "jsonb", True),
    ("consent_explicit", "consent_explicit", "boolean", True),
    ("consent_source", "consent_source", "text", True),
    ("consent_scope", "consent_scope", "text", True),
    ("consent_visible", "consent_visible", "boolean", True),
    ("consent_granted_at", "consent_granted_at", "timestamptz", True),
    ("consent_revoked_at", "consent_revoked_at", "timestamptz", True),
    ("sequences", "sequence", "bigint", True),
    ("occurred_at", "occurred_at", "timestamptz", True),
    ("importance", "importance", "double precision", True),
    ("terms", "terms", "text", False),
    ("term_counts", "term_count", "integer", False),
    ("leased", "leased", "boolean", True),
    ("embeddings", "embedding", "vector", False),
)
"""The input columns of :attr:`~prism_memory.postgres.statements.RowSql.insert`: ``(parameter,
column, type, uniform)``; a ``uniform`` column may come as one value (``:all_<parameter>``) for
every row instead of an array."""


def window_params(
    vectors: Sequence[OwnVector | None], *, first: int = 1
) -> tuple[list[Vector | None], dict[str, Any]]:
    """The main vectors of ``vectors`` (``None`` stays ``None``) and the bound values of
    :func:`~prism_memory.postgres.statements._base.windows_of`: ``windows``, every later window
    of the batch pre-encoded, in order, and ``window_rows``, the ordinal of the vector each
    belongs to (the first vector's is ``first``)."""
    if not any(isinstance(vector, WindowedVector) for vector in vectors):  # no long entry
        return cast("list[Vector | None]", list(vectors)), {"windows": [], "window_rows": []}
    mains: list[Vector | None] = []
    windows: list[Vector] = []
    owners: list[int] = []
    for at, vector in enumerate(vectors, start=first):
        if vector is None:
            mains.append(None)
            continue
        main, later = own_parts(vector)
        mains.append(main)
        if later is not None:
            windows.extend(later)
            owners.extend([at] * later.shape[0])
    return mains, {"windows": encode_vectors(windows), "window_rows": owners}


def insert_params(
    scope: MemoryIdentity,
    entries: Sequence[NewEntry],
    *,
    now: datetime,
    lease: EntryLease | None,
    vectors: Sequence[OwnVector] | None,
    model: str | None,
) -> dict[str, Any]:
    """The bound values of :attr:`RowSql.insert` for ``entries`` (each id once) and their
    checked ``vectors`` (one per entry, or ``None``)."""
    terms: list[str] = []
    counts: list[int] = []
    for entry in entries:  # the write path's terms, else tokenized once, here
        made = entry.terms if entry.terms is not None else text_terms(entry.text)
        terms.append(made.joined)
        counts.append(made.length)
    consents = [
        _DEFAULT_CONSENT if entry.consent is None else consent_values(entry.consent)
        for entry in entries
    ]
    columns: dict[str, list[Any]] = {
        "ids": [entry.id for entry in entries],
        "texts": [entry.text for entry in entries],
        "roles": [entry.role for entry in entries],
        "metadata": [_metadata_json(entry.metadata, entry.lineage) for entry in entries],
        **{name: [c[name] for c in consents] for name in _CONSENT_COLUMNS},
        "sequences": [entry.sequence for entry in entries],
        "occurred_at": [entry.occurred_at for entry in entries],
        "importance": [float(entry.importance) for entry in entries],
        "terms": terms,
        "term_counts": counts,
        "leased": [  # a row stored with its vector is never leased
            vectors is None and lease is not None and lease.covers(entry.id) for entry in entries
        ],
    }
    mains, windows = window_params(vectors or [])
    params: dict[str, Any] = {
        **scope_params(scope),
        **windows,
        "embeddings": None if vectors is None else encode_vectors(mains),
        "now": now,
        "worker": None if lease is None else lease.worker_id,
        "until": None if lease is None else lease.until,
        "model": model,
    }
    for name, _, _, uniform in INSERT_COLUMNS:
        if name == "embeddings":
            continue
        values = columns[name]
        # one value for every row is bound once, not as an array of equal values: asyncpg
        # encodes an array element by element (the statement coalesces the NULL array)
        alike = uniform and values.count(values[0]) == len(values)
        if uniform:
            params[f"all_{name}"] = values[0] if alike else None
        params[name] = None if alike else values
    return params


def stage_records(rows: Sequence[ImportRow]) -> list[tuple[Any, ...]]:
    """The staging rows of a bulk import batch, for a binary ``COPY`` (:data:`STAGE_COLUMNS`):
    ``metadata`` as JSON text with its ``_lineage``, the consent columns (the default consent's
    when none is given), the distinct lexical terms and their count, the vector pre-encoded."""
    vectors = [own_parts(row.vector)[0] for row in rows if row.vector is not None]
    encoded = iter(encode_vectors(vectors))
    records: list[tuple[Any, ...]] = []
    for ord_, row in enumerate(rows):
        entry = row.entry
        consent = _DEFAULT_CONSENT if entry.consent is None else consent_values(entry.consent)
        words = row.terms if row.terms is not None else tokenize(entry.text)
        records.append(
            (
                row.scope.tenant_id,
                row.scope.resource_id,
                row.scope.thread_id,
                entry.id,
                entry.text,
                entry.role,
                _metadata_json(entry.metadata, entry.lineage),
                *(consent[name] for name in _CONSENT_COLUMNS),
                entry.sequence,
                entry.occurred_at,
                float(entry.importance),
                None if row.vector is None else next(encoded),
                row.model if row.vector is not None else None,
                " ".join(sorted(set(words))),
                len(words),
                ord_,
            )
        )
    return records


def claimed_entries(
    rows: Iterable[Mapping[Any, Any]], scopes: Sequence[MemoryIdentity] | None = None
) -> list[ClaimedEntry]:
    """The rows a claim returned, in claim order: by sequence, then id (then scope); with
    ``scopes`` (:attr:`IndexingSql.claim_in`), scope by scope in their order first."""
    if scopes is None:
        order = sorted(
            rows,
            key=lambda r: (
                r["sequence"],
                r["id"],
                r["tenant_id"],
                r["resource_id"],
                r["thread_id"],
            ),
        )
    else:
        turn = {(s.tenant_id, s.resource_id, s.thread_id): i for i, s in enumerate(scopes)}
        order = sorted(
            rows,
            key=lambda r: (
                turn[(r["tenant_id"], r["resource_id"], r["thread_id"])],
                r["sequence"],
                r["id"],
            ),
        )
    return [
        ClaimedEntry(
            scope=MemoryIdentity(
                tenant_id=row["tenant_id"],
                resource_id=row["resource_id"],
                thread_id=row["thread_id"],
            ),
            id=row["id"],
            revision=int(row["revision"]),
            text=row["text"],
            attempts=int(row["attempts"]),
            lease_until=row["claimed_until"],
        )
        for row in order
    ]


def inserted_record(
    scope: MemoryIdentity,
    entry: NewEntry,
    sequence: int,
    *,
    now: datetime,
    indexed: bool,
    model: str | None,
) -> MemoryRecord:
    """The record :attr:`RowSql.insert` stored for ``entry`` at ``sequence`` (its metadata as
    the JSON round trip the database made of it)."""
    metadata = json.loads(json.dumps(dict(entry.metadata))) if entry.metadata else {}
    return entry.stored(
        scope, sequence=sequence, now=now, metadata=metadata, model=model, indexed=indexed
    )


def _windows(sent: Sequence[bytes]) -> Vector:
    """An entry's later windows, sent as ``vector_send`` bytes, as one ``(k, width)`` matrix."""
    return cast("Vector", np.stack(decode_vectors(sent)))


_SENT = operator.itemgetter("embedding", "windows")
"""A search row's vector and later windows, as ``vector_send`` bytes."""


def _searched_row(row: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """A search row with every record column: as it is for a row that came with them typed, else
    with the :data:`DEFERRED_COLUMNS` decoded from its
    ``deferred`` bytes (``record_send`` of them, in that order)."""
    sent = row["deferred"]
    if sent is None:
        return row
    full = dict(row.items())
    full.update(zip(DEFERRED_COLUMNS, decode_record(sent), strict=True))
    return full


_RANKED = operator.itemgetter(*RANKED_COLUMNS)
"""A row's fields the re-rank reads (one C call per row)."""


class SearchedColumns(CandidateColumns):
    """The candidates of a search (:func:`search_result`) as columns of its rows: the ranked
    fields (:data:`RANKED_COLUMNS`) as columns, the vectors one matrix, and the rows kept, one
    per candidate, a record read from one only when it is a hit (:meth:`record`) -- its
    :data:`DEFERRED_COLUMNS` decoded first, when they came as one value."""

    __slots__ = ()

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[Mapping[Any, Any]],
        matrix: npt.NDArray[np.float64],
        windows: Sequence[Vector | None] | None = None,
    ) -> SearchedColumns:
        """Columns of the search's ``rows``, their vectors already decoded into ``matrix``."""
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
            source=rows,
            windows=windows,
        )

    def record(self, at: int) -> MemoryRecord:
        """The record of candidate ``at``, read from its row now."""
        return record_from_row(_searched_row(self._source[at]))

    def _candidate(self, at: int) -> Candidate:
        windows = None if self.windows is None else self.windows[at]
        vector: Vector = self.matrix[at].astype(np.float32)
        candidate = row_candidate(vector, _searched_row(self._source[at]), windows)
        if self.profiles is not None:
            candidate.profile = self.profiles[at]
        return candidate


def search_result(rows: Sequence[Mapping[Any, Any]], terms: Sequence[str]) -> SearchResult:
    """Candidates (record and stored vector), corpus statistics, the thread's pending count and
    the active generation's model from rows of :meth:`RecallSql.search` (an empty corpus is one
    row without a candidate). A row's deferred columns, sent as one value, are decoded only when
    its record is read (a hit's)."""
    if not rows:
        return SearchResult([], CorpusStats())
    first = rows[0]
    ords, counts = first["df_ords"] or [], first["df_counts"] or []
    stats = CorpusStats(
        int(first["documents"]),
        int(first["total_length"]),
        {terms[int(o) - 1]: int(c) for o, c in zip(ords, counts, strict=True)},
    )
    # the statistics row is the outer side of a left join: one row without a candidate, or
    # every row a candidate
    if first["id"] is None:
        return SearchResult(
            [], stats, pending=int(first["pending"]), active_model=first["active_model"]
        )
    found = rows
    # the candidates as columns: the vectors one float64 matrix of one buffer, the rows kept
    # for the records of the hits alone (SearchedColumns)
    sent, held = zip(*map(_SENT, found), strict=True)
    windows = None if not any(held) else [None if w is None else _windows(w) for w in held]
    candidates: Sequence[Candidate]
    try:
        candidates = SearchedColumns.from_rows(found, decode_matrix(sent), windows)
    except ValueError:  # vectors of two widths (two models: the facade refuses to rank them)
        listed = windows or [None] * len(found)
        vectors = decode_vectors(sent)
        full = [_searched_row(row) for row in found]
        candidates = [row_candidate(*each) for each in zip(vectors, full, listed, strict=True)]
    return SearchResult(
        candidates, stats, pending=int(first["pending"]), active_model=first["active_model"]
    )
