"""The pydantic inputs a host passes (or their plain-dict forms): identity, consent, lineage, an
entry and the recall scoring.

Each is frozen, refuses unknown fields and turns pydantic's errors into :class:`ValidationError`
(:func:`~prism_memory._validation.typed_errors`). :mod:`prism_memory.models` re-exports them.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._validation import check_aware, check_json, check_key, check_text, typed_errors
from .errors import ValidationError

DEFAULT_LEXICAL_WEIGHT = 0.5
"""Default λ of the recall fusion: the most the lexical signal can weigh beside the dense one (it
is scaled down by the candidates' median normalised cosine; see :mod:`prism_memory.ranking`)."""

DEFAULT_CHANCE_MARGIN = 3.0
"""Default margin of the lexical evidence: a query term counts only for the BM25 it adds above
this many times what an entry of the same length gets from it by chance."""

MAX_CHANCE_MARGIN = 10.0
"""The largest accepted ``RecallScoring.chance_margin``."""

ConsentSource = Literal["user", "agent", "system"]
ConsentScope = Literal["thread", "profile", "user"]


class _Input(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)

    @model_validator(mode="wrap")
    @classmethod
    def _typed_errors(cls, data: Any, handler: Any) -> Any:
        return typed_errors(cls, data, handler)


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
        return check_aware(value, info.field_name)

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
        return check_aware(value, "occurred_at")

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
    """λ: the most the normalised lexical evidence can weigh inside ``similarity``.

    Each query's lexical weight is λ times the candidates' median normalised cosine (clamped to
    [0, 1]): when the nearest candidate stands far above the typical one, the dense leg is sure and
    the lexical signal counts less. 0 ranks by cosine alone (see :mod:`prism_memory.ranking`).
    """
    chance_margin: float = DEFAULT_CHANCE_MARGIN
    """How many times its chance level a query term's BM25 gain must pass to count as lexical
    evidence (an entry of the same length holding the term as a random one would); 0 counts every
    match in full (plain BM25). Finite, in [0, 10]."""

    @field_validator("recency_weight", "importance_weight", "lexical_weight")
    @classmethod
    def _weight(cls, value: float, info: Any) -> float:
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValidationError(f"{info.field_name} must be a finite number in [0, 1]")
        return value

    @field_validator("chance_margin")
    @classmethod
    def _margin(cls, value: float) -> float:
        if not math.isfinite(value) or not 0.0 <= value <= MAX_CHANCE_MARGIN:
            raise ValidationError(
                f"chance_margin must be a finite number in [0, {MAX_CHANCE_MARGIN:g}]"
            )
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
