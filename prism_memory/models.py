"""Domain models: pydantic inputs, frozen dataclass records and results.

Inputs (:class:`MemoryEntry`, :class:`MemoryConsent`, :class:`Lineage`, :class:`MemoryIdentity`,
:class:`RecallScoring`) are pydantic models, so a host may pass plain dicts. Everything the library
hands back is an immutable dataclass. Nothing here knows about storage.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .errors import CapExceededError, ValidationError

__all__ = [
    "DEFAULT_LEXICAL_WEIGHT",
    "Candidate",
    "ConsentScope",
    "ConsentSource",
    "ExportPage",
    "IndexStatus",
    "IndexingReport",
    "Lineage",
    "MemoryConsent",
    "MemoryEntry",
    "MemoryIdentity",
    "MemoryRecord",
    "RebuildPage",
    "RecallExplanation",
    "RecallHit",
    "RecallResult",
    "RecallScoring",
    "RememberResult",
    "RetentionResult",
    "ShareGrant",
    "TombstoneReason",
    "Vector",
    "WorkingMemoryRecord",
]

Vector = npt.NDArray[np.float32]
"""A one-dimensional float32 embedding."""

DEFAULT_LEXICAL_WEIGHT = 0.5
"""Default λ of the recall fusion: dense and lexical signals, each scaled to its best candidate,
count equally."""

ConsentSource = Literal["user", "agent", "system"]
ConsentScope = Literal["thread", "profile", "user"]
IndexStatus = Literal["pending", "indexed", "failed"]
TombstoneReason = Literal["forgotten", "revoked", "corrected", "held", "retention"]

M = TypeVar("M", bound=BaseModel)

_MAX_KEY = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
MAX_JSON_DEPTH = 32
"""How deeply metadata, reflections and working memory may nest (deeper, or circular, is refused)."""
_MAX_JSON_NODES = 262_144


def _aware(value: datetime | None, name: str) -> datetime | None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise ValidationError(f"{name} must be a timezone-aware datetime")
    return value


def check_key(value: object, name: str) -> str:
    """Validate a scope key or entry id: a non-empty string of printable characters, ≤ 256 chars."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} must be a non-empty string")
    if len(value) > _MAX_KEY:
        raise ValidationError(f"{name} is longer than {_MAX_KEY} characters")
    if _CONTROL.search(value):
        raise ValidationError(f"{name} contains control characters")
    return check_text(value, name)


def check_id_collection(value: object, name: str) -> None:
    """Refuse anything but a collection of ids (a list, tuple, set or frozenset) for ``name``.

    A bare ``str`` is a sequence of its characters: taken as ids it would name (or grant) ``s``,
    ``t``, ``a``, ``f`` instead of ``"staff"``, so it is refused like any other non-collection.
    """
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Sequence | Set):
        raise ValidationError(
            f"{name} must be a list, tuple or set of ids, not {type(value).__name__}"
        )


def check_ids(value: object, name: str, *, cap: int) -> tuple[str, ...]:
    """``value`` as distinct checked ids in order (:func:`check_id_collection`, then
    :func:`check_key` on each, named by position): :class:`CapExceededError` over ``cap`` ids."""
    check_id_collection(value, name)
    assert isinstance(value, Sequence | Set)  # for mypy: checked just above
    if len(value) > cap:
        raise CapExceededError(f"{name}: {len(value)} ids, over the cap {cap}")
    return tuple(dict.fromkeys(check_key(i, f"{name}[{at}]") for at, i in enumerate(value)))


def check_text(value: str, name: str) -> str:
    """Refuse text no backend can store: NUL characters and lone UTF-16 surrogates.

    Every backend accepts and rejects the same strings, so this runs before any store sees them.
    """
    if _UNSTORABLE.search(value):
        raise ValidationError(f"{name} contains a NUL character or a lone surrogate")
    return value


def check_json(value: object, name: str, *, json_only: bool = False) -> None:
    """Refuse a JSON-like value no backend can store, without recursing.

    Strings (keys included) go through :func:`check_text`; keys must be strings; floats must be
    finite; nesting deeper than :data:`MAX_JSON_DEPTH` (which a circular value always is) is refused.
    ``json_only`` also refuses any value that is not a JSON type (``None``, bool, int, float, str,
    a mapping, a list or tuple). The one depth cap of memory metadata, working memory and RAG
    metadata; messages name ``name``, never a key or value.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > _MAX_JSON_NODES:
            raise ValidationError(f"{name} holds more than {_MAX_JSON_NODES} values")
        if isinstance(item, str):
            check_text(item, name)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValidationError(f"{name} holds a non-finite number")
        elif isinstance(item, Mapping | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                raise ValidationError(f"{name} nests deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(item, Mapping):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise ValidationError(f"{name} keys must be strings")
                    check_text(key, name)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        elif json_only and not (item is None or isinstance(item, bool | int | float)):
            raise ValidationError(f"{name} holds a value that is not JSON: {type(item).__name__}")


def _describe(exc: pydantic.ValidationError) -> str:
    """pydantic's errors without the offending input (which may hold a secret): the location of
    an unknown field stops at its parent, since its last part is the caller's own key."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        loc, message = list(error["loc"]), str(error["msg"])
        if error["type"] == "extra_forbidden" and loc:
            loc, message = loc[:-1], "an unknown field (not permitted)"
        where = ".".join(str(part) for part in loc)
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def typed_errors(cls: type[BaseModel], data: Any, handler: Any) -> Any:
    """Body of a wrap validator: pydantic's errors become :class:`ValidationError`, chained."""
    try:
        return handler(data)
    except pydantic.ValidationError as exc:
        raise ValidationError(f"invalid {cls.__name__}: {_describe(exc)}") from None


class _Input(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)

    @model_validator(mode="wrap")
    @classmethod
    def _typed_errors(cls, data: Any, handler: Any) -> Any:
        return typed_errors(cls, data, handler)


def parse(model: type[M], value: object, what: str) -> M:
    """Coerce ``value`` (a model instance or a plain mapping) into ``model``.

    pydantic's own errors become :class:`ValidationError`, chained, so callers see one error tree.
    """
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise ValidationError(f"invalid {what}: {_describe(exc)}") from None


class MemoryIdentity(_Input):
    """The exact owner of a memory: tenant, resource (user) and thread."""

    tenant_id: str
    resource_id: str
    thread_id: str

    @field_validator("tenant_id", "resource_id", "thread_id", mode="before")
    @classmethod
    def _key(cls, value: object, info: Any) -> str:
        return check_key(value, info.field_name)


class MemoryConsent(_Input):
    """Provenance and visibility of an entry. Unset on an entry means ``user``/``thread``/visible."""

    source: ConsentSource = "user"
    scope: ConsentScope = "thread"
    visible: bool = True
    granted_at: datetime | None = None
    revoked_at: datetime | None = None

    @field_validator("granted_at", "revoked_at")
    @classmethod
    def _tz(cls, value: datetime | None, info: Any) -> datetime | None:
        return _aware(value, info.field_name)

    @property
    def revoked(self) -> bool:
        """True when a revocation timestamp is set."""
        return self.revoked_at is not None


class Lineage(_Input):
    """Which stored entries an entry was derived from, and why."""

    source_ids: tuple[str, ...] = Field(min_length=1)
    reason: str | None = Field(default=None, max_length=256)

    @field_validator("source_ids")
    @classmethod
    def _ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            check_key(item, "lineage source id")
        return tuple(dict.fromkeys(value))

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str | None) -> str | None:
        return None if value is None else check_text(value, "lineage reason")


class MemoryEntry(_Input):
    """One thing to remember. ``id`` defaults to a digest of role and (redacted) text."""

    id: str | None = None
    text: str = Field(min_length=1)
    role: str = Field(default="user", min_length=1, max_length=64)
    metadata: dict[str, Any] = Field(default_factory=dict)
    consent: MemoryConsent | None = None
    sequence: int | None = Field(default=None, ge=0, le=2**62)
    occurred_at: datetime | None = None
    importance: float | None = None
    reflection: dict[str, Any] | None = None
    lineage: Lineage | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        return None if value is None else check_key(value, "entry id")

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        if not value.strip():
            raise ValidationError("entry text must not be blank")
        return check_text(value, "entry text")

    @field_validator("role")
    @classmethod
    def _role(cls, value: str) -> str:
        return check_text(value, "role")

    @field_validator("reflection")
    @classmethod
    def _reflection(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_json(value, "reflection")
        return value

    @field_validator("occurred_at")
    @classmethod
    def _tz(cls, value: datetime | None) -> datetime | None:
        return _aware(value, "occurred_at")

    @field_validator("importance")
    @classmethod
    def _importance(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValidationError("importance must be a finite number")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_json(value, "metadata")
        reserved = [key for key in value if key.startswith("_")]
        if reserved:  # the names are not repeated: a key may hold a secret
            raise ValidationError(
                f"{len(reserved)} metadata key(s) start with '_', which is reserved"
            )
        return value


class RecallScoring(_Input):
    """Opt-in blend of recency and importance into the recall score.

    Weights are validated (finite, in [0, 1]) and sum-normalised: similarity keeps the remainder of 1,
    and weights that overshoot 1 are scaled down so that similarity gets 0.
    """

    recency_weight: float = 0.0
    importance_weight: float = 0.0
    half_life_ms: float | None = None
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    """λ: share of the normalised BM25 inside ``similarity``; the rest is the normalised cosine.

    The default, 0.5, weighs the two scale-free signals equally (see :mod:`prism_memory.ranking`).
    """

    @field_validator("recency_weight", "importance_weight", "lexical_weight")
    @classmethod
    def _weight(cls, value: float, info: Any) -> float:
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValidationError(f"{info.field_name} must be a finite number in [0, 1]")
        return value

    @field_validator("half_life_ms")
    @classmethod
    def _half_life(cls, value: float | None) -> float | None:
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise ValidationError("half_life_ms must be a positive finite number")
        return value

    @model_validator(mode="after")
    def _needs_half_life(self) -> RecallScoring:
        if self.recency_weight > 0 and self.half_life_ms is None:
            raise ValidationError("recency_weight needs half_life_ms")
        return self

    def weights(self) -> tuple[float, float, float]:
        """Normalised ``(similarity, recency, importance)`` weights, summing to 1."""
        recency, importance = self.recency_weight, self.importance_weight
        total = recency + importance
        if total > 1.0:
            recency, importance = recency / total, importance / total
        return max(0.0, 1.0 - recency - importance), recency, importance


# --------------------------------------------------------------------------------------------
# Records and results (immutable; produced by the library)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A stored semantic-memory entry as the library sees it."""

    tenant_id: str
    resource_id: str
    thread_id: str
    id: str
    text: str
    role: str
    metadata: Mapping[str, Any]
    consent: MemoryConsent | None
    """``None`` for entries remembered without explicit consent (treated as the default)."""
    sequence: int
    occurred_at: datetime
    created_at: datetime
    written_at: datetime
    """When text or lineage was last written (lineage invalidation compares against it)."""
    importance: float
    lineage: Lineage | None = None
    legal_hold: bool = False
    status: IndexStatus = "pending"
    revision: int = 1
    """Bumped whenever the text changes; an embedding is only stored for its own revision."""
    attempts: int = 0
    last_error: str | None = None
    embedding_model: str | None = None
    """The ``model`` identifier of the embedder that made the stored vector (``None``: unknown)."""

    @property
    def effective_consent(self) -> MemoryConsent:
        """The consent in force: the explicit one, or the default."""
        return self.consent if self.consent is not None else MemoryConsent()

    @property
    def identity(self) -> MemoryIdentity:
        """The thread scope this record belongs to."""
        return MemoryIdentity(
            tenant_id=self.tenant_id, resource_id=self.resource_id, thread_id=self.thread_id
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (used by export)."""
        return {
            "id": self.id,
            "tenant_id": self.tenant_id,
            "resource_id": self.resource_id,
            "thread_id": self.thread_id,
            "text": self.text,
            "role": self.role,
            "metadata": dict(self.metadata),
            "consent": None if self.consent is None else self.consent.model_dump(mode="json"),
            "sequence": self.sequence,
            "occurred_at": self.occurred_at.isoformat(),
            "created_at": self.created_at.isoformat(),
            "importance": self.importance,
            "lineage": None if self.lineage is None else self.lineage.model_dump(mode="json"),
        }


class Candidate:
    """A recall candidate a store returns: the record and its stored embedding.

    ``Candidate(record, vector)`` is all a store needs. Ranking reads only a few of the record's
    fields, and a recall keeps ``top_k`` of its ``4 × top_k`` candidates (or more), so a store
    that decodes rows may use :meth:`deferred` instead: it passes those fields and a function
    that builds the record, which runs once, when ``record`` is first read — for the hits only.
    """

    __slots__ = (
        "_build",
        "_record",
        "embedding_model",
        "id",
        "importance",
        "occurred_at",
        "sequence",
        "text",
        "thread_id",
        "vector",
    )

    vector: Vector
    thread_id: str
    id: str
    text: str
    sequence: int
    occurred_at: datetime
    importance: float
    embedding_model: str | None

    def __init__(self, record: MemoryRecord, vector: Vector) -> None:
        self._record: MemoryRecord | None = record
        self._build: Callable[[], MemoryRecord] | None = None
        self.vector = vector
        self.thread_id, self.id, self.text = record.thread_id, record.id, record.text
        self.sequence, self.occurred_at = record.sequence, record.occurred_at
        self.importance, self.embedding_model = record.importance, record.embedding_model

    @classmethod
    def deferred(
        cls,
        vector: Vector,
        *,
        thread_id: str,
        id: str,
        text: str,
        sequence: int,
        occurred_at: datetime,
        importance: float,
        embedding_model: str | None,
        build: Callable[[], MemoryRecord],
    ) -> Candidate:
        """A candidate whose record ``build`` makes on first use; the fields must be the record's."""
        candidate = cls.__new__(cls)
        candidate._record, candidate._build, candidate.vector = None, build, vector
        candidate.thread_id, candidate.id, candidate.text = thread_id, id, text
        candidate.sequence, candidate.occurred_at = sequence, occurred_at
        candidate.importance, candidate.embedding_model = importance, embedding_model
        return candidate

    @property
    def record(self) -> MemoryRecord:
        """The candidate's record (built on first read when the store deferred it)."""
        if self._record is None:
            assert self._build is not None
            self._record, self._build = self._build(), None
        return self._record

    def __repr__(self) -> str:
        return f"Candidate(thread_id={self.thread_id!r}, id={self.id!r}, sequence={self.sequence})"


@dataclass(frozen=True, slots=True)
class WorkingMemoryRecord:
    """The working-memory document of a scope, with its version (starts at 1)."""

    version: int
    data: Mapping[str, Any]
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class IndexingReport:
    """What became of the entries one ``remember()`` handed to the indexing queue."""

    indexed: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RememberResult:
    """``accepted`` ids are durable; ``pending`` ones await embedding; ``done`` resolves once they have."""

    accepted: tuple[str, ...]
    pending: tuple[str, ...]
    done: Awaitable[IndexingReport]


@dataclass(frozen=True, slots=True)
class RecallHit:
    """One recalled entry with its score components."""

    record: MemoryRecord
    similarity: float
    """Fusion of cosine and BM25, each brought to a common scale (see :mod:`prism_memory.ranking`)."""
    semantic: float
    """True cosine similarity of query and entry, in [−1, 1] (never clamped)."""
    lexical: float
    """BM25 divided by the larger of the best candidate's and the ideal match's BM25, in [0, 1]."""
    recency: float
    importance: float
    score: float
    shared: bool = False
    """True when another thread owns the hit: a parent's entry through a share grant, or a
    ``user``/``profile`` entry reached by ``recall(..., scope="resource")``."""
    bm25: float = 0.0
    """Raw BM25 of the entry for the query, over the recall scope's statistics."""
    semantic_scale: float = 1.0
    """The largest ``|cosine|`` among the candidates, which ``semantic`` was divided by (1 if 0)."""
    bm25_scale: float = 1.0
    """The divisor of ``bm25``: max(best candidate BM25, ideal match BM25), 1 when both are 0."""

    @property
    def id(self) -> str:
        """The entry id."""
        return self.record.id

    @property
    def text(self) -> str:
        """The entry text."""
        return self.record.text


@dataclass(frozen=True, slots=True)
class RecallExplanation:
    """Why a hit ranked where it did (``recall(explain=True)``)."""

    id: str
    rank: int
    score: float
    similarity: float
    semantic: float
    lexical: float
    recency: float
    importance: float
    weights: tuple[float, float, float]
    """Normalised ``(similarity, recency, importance)`` weights used."""
    bm25: float = 0.0
    """Raw BM25 behind ``lexical``."""
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    """λ of the fusion that produced ``similarity``."""
    how: Mapping[str, str] = field(default_factory=dict)
    """How each component was computed, with the numbers used (keys: semantic, lexical,
    similarity, score)."""


@dataclass(frozen=True, slots=True)
class RecallResult:
    """Hits in score order, adjacent entries in chronological order, optional explanations."""

    hits: tuple[RecallHit, ...]
    adjacent: tuple[MemoryRecord, ...] = ()
    explanations: tuple[RecallExplanation, ...] | None = None
    pending: int = 0
    """How many of the thread's entries were still waiting for their vector when recall ran
    (so could not be recalled): non-zero right after ``remember()`` explains a missing hit."""


@dataclass(frozen=True, slots=True)
class ShareGrant:
    """A parent thread's allow-list of entries a child thread may recall."""

    tenant_id: str
    resource_id: str
    parent_thread_id: str
    child_thread_id: str
    source_ids: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """Outcome of one bounded retention sweep.

    ``blocked`` lists the due entries left in place because deleting them would touch more lineage
    than the caps allow; everything else due was deleted.
    """

    deleted: int
    scanned: int
    blocked: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExportPage:
    """One page of an identity-bound export; pass ``next_cursor`` back to continue."""

    entries: tuple[dict[str, Any], ...]
    bytes: int
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class RebuildPage:
    """One page of a re-index; store ``next_cursor`` durably to resume."""

    rebuilt: int
    next_cursor: str | None
