"""RAG over a host's documents: chunks by source, access control inside the query, generations.

* :class:`RagStore` -- the store contract (``upsert``, ``query``, ``lexical_query``,
  ``get_by_source``, ``list_sources``, ``delete_source``, ``transaction()``,
  ``get_current_generation`` / ``set_current_generation``, ``set_source_access`` / ``check_source_access``, ``close``);
  :class:`InMemoryRagStore` here, and the PostgreSQL one from
  :func:`prism_memory.postgres.create_postgres_vector_store`.
* :func:`ingest` -- chunk, embed and replace one source atomically (unchanged text is a no-op);
  :func:`hybrid_query` -- vector and lexical legs fused by recall's fusion (it never compares
  vectors of two embedding models); :func:`reembed_generation` -- copy a generation into another
  with a new model's vectors (a model change: re-embed, switch per scope, roll back).
* Models: :class:`RagScope`, :class:`Chunk`, :class:`AccessConstraint`, :class:`SourceAccess`,
  :class:`RagHit`, :class:`IngestResult`.

See ``docs/rag.md`` for a tour.
"""

from ..rag_types import (
    ACL,
    AccessConstraint,
    Authorization,
    Chunk,
    IngestResult,
    MetadataFilter,
    RagHit,
    RagScope,
    SourceAccess,
    chunk_digest,
)
from ..stores.rag_base import RagOperations, RagStore
from ..stores.rag_memory import InMemoryRagStore
from ._reembed import ReembedReport, reembed_generation
from ._service import hybrid_query, ingest
from .chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, chunk_text

__all__ = [
    "ACL",
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "AccessConstraint",
    "Authorization",
    "Chunk",
    "InMemoryRagStore",
    "IngestResult",
    "MetadataFilter",
    "RagHit",
    "RagOperations",
    "RagScope",
    "RagStore",
    "ReembedReport",
    "SourceAccess",
    "chunk_digest",
    "chunk_text",
    "hybrid_query",
    "ingest",
    "reembed_generation",
]
