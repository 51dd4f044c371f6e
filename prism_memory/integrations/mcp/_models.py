"""What the memory server's tools return: small JSON objects a model can read and act on."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "ConsentResult",
    "CorrectResult",
    "ExportResult",
    "ForgetResult",
    "Hit",
    "RecallOutput",
    "RememberOutput",
    "WorkingMemory",
]


class RememberOutput(BaseModel):
    """The ids of the stored memories (use them to forget, correct or revoke one later)."""

    ids: list[str] = Field(description="one id per remembered text, in order")
    pending: list[str] = Field(
        description="ids not yet searchable (their embedding failed and is being retried)"
    )


class Hit(BaseModel):
    """One recalled memory."""

    id: str = Field(description="the memory's id, for forget / correct / revoke_consent")
    text: str
    score: float = Field(description="overall rank score (similarity, recency, importance)")
    similarity: float = Field(description="how closely the text matches the query")
    occurred_at: datetime
    scope: Literal["thread", "user", "profile"] = Field(
        description="thread: this conversation only; user/profile: follows the user"
    )
    shared: bool = Field(description="true when another conversation of this user owns it")
    visible: bool = Field(description="consent in force (always true in recall results)")


class RecallOutput(BaseModel):
    """Memories best first."""

    hits: list[Hit]
    pending: int = Field(description="memories of this conversation not yet searchable")


class ForgetResult(BaseModel):
    """How many stored memories were deleted (the named ones and those derived from them)."""

    deleted: int


class ConsentResult(BaseModel):
    """A memory's consent after the change."""

    id: str
    visible: bool = Field(description="false: revoked, never recalled until restored")


class CorrectResult(BaseModel):
    """The corrected memory."""

    id: str
    text: str


class WorkingMemory(BaseModel):
    """The working-memory document: a JSON object the conversation keeps up to date."""

    version: int = Field(description="0 before the first write; pass it as expected_version")
    data: dict[str, Any]


class ExportResult(BaseModel):
    """One page of this conversation's exportable memories."""

    entries: list[dict[str, Any]]
    next_cursor: str | None = Field(
        description="pass it back as cursor for the next page; null at the end"
    )
