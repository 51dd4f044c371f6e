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

:class:`EntrySql` holds one object of each entries-table family (composition: ``sql.rows``,
``sql.recall``, ...), the object the repositories hold; :mod:`.session` holds the statements of a connection rather than a table
(``BEGIN``/``COMMIT``, the pooler-mode ``BEGIN``, the vector codec's type lookup, the LangGraph
reader's reads), a leaf the engine module imports. Which index each statement expects is in its
docstring; every statement is executed by :mod:`prism_memory.postgres._executor`, called by the
repositories (:func:`to_positional` rewrites binds for the asyncpg driver). Core and ORM
statements built with SQLAlchemy's expression language stay in
:mod:`prism_memory.postgres.repositories`: they are not SQL text. No other module of the package
holds SQL text (``tests/unit/test_sql_only_in_statements.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..tables import Names, PrismTables
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


@dataclass(frozen=True, slots=True)
class EntrySql:
    """Every statement over the entries and tombstones tables of one table set: one object per
    family (composed, not inherited), built once per table set and held by the repositories.

    ``sql.rows.insert``, ``sql.recall.search(...)``, ``sql.importing.import_insert``: a statement
    is reached through its family, so where it is written is where it is read.
    """

    rows: RowSql
    """Entries by key: the batch inserts, reads by id, text replacement, the thread's lock."""
    lineage: LineageSql
    """Inherited tombstones, lineage sources and dependents."""
    importing: ImportSql
    """The bulk import's staging table, locks and set-based insert."""
    recall: RecallSql
    """Recall's candidate search and the neighbours."""
    indexing: IndexingSql
    """The indexing ledger: claims, leases, results, failures, the worker's tenant turn."""

    @classmethod
    def for_tables(cls, tables: PrismTables) -> EntrySql:
        """The statements of ``tables`` (cached per table set)."""
        return _entry_sql(tables.names)

    @classmethod
    def for_names(cls, names: Names) -> EntrySql:
        """The statements of the table set ``names`` (cached)."""
        return _entry_sql(names)


@functools.lru_cache(maxsize=64)
def _entry_sql(names: Names) -> EntrySql:
    return EntrySql(
        rows=RowSql.for_names(names),
        lineage=LineageSql.for_names(names),
        importing=ImportSql.for_names(names),
        recall=RecallSql.for_names(names),
        indexing=IndexingSql.for_names(names),
    )
