"""Every SQL statement of the PostgreSQL adapter, by name, apart from execution.

One module per family of statements, each rendered once per table set (schema-qualified, quoted
identifiers; values always bound) and cached:

* :mod:`.entries` -- entries by key: the batch insert, reads by id, text replacement, the thread's
  advisory lock (:class:`RowSql`);
* :mod:`.recall` -- recall's candidate search with its corpus statistics, and the neighbours
  (:class:`RecallSql`);
* :mod:`.lineage` -- tombstones inherited by new rows, lineage sources and dependents
  (:class:`LineageSql`);
* :mod:`.indexing` -- the indexing ledger: claims, leases, results, failures, the worker's tenant
  turn (:class:`IndexingSql`);
* :mod:`.importing` -- the bulk import's staging table and set-based insert (:class:`ImportSql`);
* :mod:`.generations` -- vector generations: the registry, a shadow model's backfill claims and
  vectors, progress, the switch and the drop (:class:`GenerationSql`);
* :mod:`.rag` -- the RAG chunks, their ACL and generations (:class:`RagSql`);
* :mod:`.catalog` -- the schema itself: inspection, maintenance, planner settings (:class:`SchemaSql`).

:class:`EntrySql` is all the entries-table families at once, the object the store and its
repositories hold; :mod:`.session` holds the statements of a connection rather than a table
(``BEGIN``/``COMMIT``, the pooler-mode ``BEGIN``, the vector codec's type lookup, the LangGraph
reader's reads), a leaf the engine module imports. Which index each statement expects is in its
docstring; every statement is executed by :mod:`prism_memory.postgres._executor`, called by the
repositories (:func:`to_positional` rewrites binds for the asyncpg driver). Core and ORM
statements built with SQLAlchemy's expression language stay in
:mod:`prism_memory.postgres.repositories`: they are not SQL text. No other module of the package
holds SQL text (``tests/unit/test_sql_only_in_statements.py``).
"""

from __future__ import annotations

from ._base import TableSql, quote, to_positional
from .catalog import SchemaSql
from .entries import (
    RowSql,
    begin_locked_statement,
    records_statement,
    thread_lock_key,
    thread_lock_literal,
)
from .generations import GenerationSql
from .importing import ImportSql
from .indexing import IndexingSql, claim_in_statement, claim_statement
from .lineage import LineageSql
from .rag import RagSql, tsquery_literal, tsvector_literal
from .recall import RecallSql, neighbors_statement, search_statement

__all__ = [
    "EntrySql",
    "GenerationSql",
    "ImportSql",
    "IndexingSql",
    "LineageSql",
    "RagSql",
    "RecallSql",
    "RowSql",
    "SchemaSql",
    "TableSql",
    "begin_locked_statement",
    "claim_in_statement",
    "claim_statement",
    "neighbors_statement",
    "quote",
    "records_statement",
    "search_statement",
    "thread_lock_key",
    "thread_lock_literal",
    "to_positional",
    "tsquery_literal",
    "tsvector_literal",
]


class _WriteSql(RowSql, LineageSql, ImportSql):
    """The families that write entries: rows by key, lineage and tombstones, the bulk import."""


class EntrySql(_WriteSql, RecallSql, IndexingSql):
    """Every statement over the entries and tombstones tables of one table set (the families
    above, together); built once per table set, executed through the repositories."""
