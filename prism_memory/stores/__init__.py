"""Store contracts and the in-memory reference adapters."""

from .base import (
    ClaimedEntry,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SharedSource,
    Tombstone,
    VectorStore,
    WorkingStore,
)

__all__ = [
    "ClaimedEntry",
    "NewEntry",
    "RecallFilter",
    "SearchRequest",
    "SharedSource",
    "Tombstone",
    "VectorStore",
    "WorkingStore",
]
