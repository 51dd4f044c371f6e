"""prism_memory: durable, governed working and semantic memory for AI-agent hosts.

Start with :func:`create_memory`; see the README for a tour.
"""

from .context import ContextBlock, ContextProvider, approximate_tokens
from .embedding import (
    Embedder,
    HashEmbedder,
    assert_finite_vector,
    check_embedder,
    embed_batched,
    embedder_window,
)
from .errors import (
    AccessDeniedError,
    CapExceededError,
    ConfigurationError,
    ConflictError,
    DimensionMismatchError,
    EmbedderError,
    EmbeddingModelMismatchError,
    GenerationNotReadyError,
    IndexingError,
    InvalidVectorError,
    LineageCapError,
    NotFoundError,
    PrismMemoryError,
    RerankerError,
    StorageError,
    StoreClosedError,
    ValidationError,
)
from .indexing import IndexingPolicy, IndexingQueue
from .invariants import InvariantScore, revoked_ids_absent
from .limits import Limits
from .memory import Memory, WorkingMemoryProcessor, create_memory, entry_digest
from .models import (
    ExportPage,
    IndexingReport,
    Lineage,
    MemoryConsent,
    MemoryEntry,
    MemoryIdentity,
    MemoryRecord,
    RebuildPage,
    RecallExplanation,
    RecallHit,
    RecallResult,
    RecallScoring,
    RememberResult,
    RetentionResult,
    ShareGrant,
    WorkingMemoryRecord,
)
from .reranking import Reranker, check_reranker
from .stores.backend import MemoryBackend
from .stores.base import VectorStore, WorkingStore
from .stores.memory import InMemoryVectorStore, InMemoryWorkingStore

__version__ = "0.1.0"

from .windows import embed_whole

__all__ = [
    "AccessDeniedError",
    "CapExceededError",
    "ConfigurationError",
    "ConflictError",
    "ContextBlock",
    "ContextProvider",
    "DimensionMismatchError",
    "Embedder",
    "EmbedderError",
    "EmbeddingModelMismatchError",
    "ExportPage",
    "GenerationNotReadyError",
    "HashEmbedder",
    "InMemoryVectorStore",
    "InMemoryWorkingStore",
    "IndexingError",
    "IndexingPolicy",
    "IndexingQueue",
    "IndexingReport",
    "InvalidVectorError",
    "InvariantScore",
    "Limits",
    "Lineage",
    "LineageCapError",
    "Memory",
    "MemoryBackend",
    "MemoryConsent",
    "MemoryEntry",
    "MemoryIdentity",
    "MemoryRecord",
    "NotFoundError",
    "PrismMemoryError",
    "RebuildPage",
    "RecallExplanation",
    "RecallHit",
    "RecallResult",
    "RecallScoring",
    "RememberResult",
    "Reranker",
    "RerankerError",
    "RetentionResult",
    "ShareGrant",
    "StorageError",
    "StoreClosedError",
    "ValidationError",
    "VectorStore",
    "WorkingMemoryProcessor",
    "WorkingMemoryRecord",
    "WorkingStore",
    "approximate_tokens",
    "assert_finite_vector",
    "check_embedder",
    "check_reranker",
    "create_memory",
    "embed_batched",
    "embed_whole",
    "embedder_window",
    "entry_digest",
    "revoked_ids_absent",
]
