"""Store contracts and the in-memory reference adapters."""

from .backend import MemoryBackend
from .base import (
    VECTOR_STORE_ROLES,
    ClaimedEntry,
    EntryStore,
    GovernanceStore,
    IndexingLedger,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SharedSource,
    ShareGrants,
    StoredEntries,
    Tombstone,
    VectorGenerations,
    VectorStore,
    WorkingStore,
)
from .primitives import GovernancePrimitives

__all__ = [
    "VECTOR_STORE_ROLES",
    "ClaimedEntry",
    "EntryStore",
    "GovernancePrimitives",
    "GovernanceStore",
    "IndexingLedger",
    "MemoryBackend",
    "NewEntry",
    "RecallFilter",
    "SearchRequest",
    "ShareGrants",
    "SharedSource",
    "StoredEntries",
    "Tombstone",
    "VectorGenerations",
    "VectorStore",
    "WorkingStore",
]
