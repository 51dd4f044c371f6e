"""Bulk import: history and other systems' memories moved into prism_memory at ``COPY`` speed.

:func:`import_entries` takes a stream of :class:`ImportEntry` objects (or mappings) of many tenants,
resources and threads, keeps every rule ``remember()`` keeps, and writes them in batches through
the store's :meth:`~prism_memory.stores.base.VectorStore.import_rows` (on PostgreSQL: a binary
``COPY`` into a staging table and one set-based ``INSERT`` per batch). The readers in
:mod:`prism_memory.importing.readers` make such streams from prism_memory's JSONL format, saved
``export_memory()`` pages, mem0's exported memories and a LangGraph ``AsyncPostgresStore``
database; ``prism-memory import`` runs them from the command line. See docs/importing.md.
"""

from __future__ import annotations

from ._checkpoint import ImportCheckpoint
from ._entry import ImportEntry
from ._service import (
    DEFAULT_IMPORT_BATCH,
    MAX_IMPORT_BATCH,
    MAX_SCOPES_PER_BATCH,
    ImportLineError,
    ImportReport,
    import_entries,
)
from .readers import (
    MAX_DOCUMENT_BYTES,
    MAX_LINE_BYTES,
    FileEntries,
    read_export,
    read_jsonl,
    read_langgraph_store,
    read_mem0,
)

__all__ = [
    "DEFAULT_IMPORT_BATCH",
    "MAX_DOCUMENT_BYTES",
    "MAX_IMPORT_BATCH",
    "MAX_LINE_BYTES",
    "MAX_SCOPES_PER_BATCH",
    "FileEntries",
    "ImportCheckpoint",
    "ImportEntry",
    "ImportLineError",
    "ImportReport",
    "import_entries",
    "read_export",
    "read_jsonl",
    "read_langgraph_store",
    "read_mem0",
]
