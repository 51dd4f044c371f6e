"""Store contracts and the in-memory reference adapters."""

from .base import (
    ClaimedEntry,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SharedSource,
    StoredEntries,
    Tombstone,
    VectorStore,
    WorkingStore,
)
from .primitives import GovernancePrimitives

__all__ = [
    "ClaimedEntry",
    "GovernancePrimitives",
    "NewEntry",
    "RecallFilter",
    "SearchRequest",
    "SharedSource",
    "StoredEntries",
    "Tombstone",
    "VectorStore",
    "WorkingStore",
]
