"""The one definition of a stored entry: its fields, each declared once.

Every place that lists an entry's columns follows from :data:`ENTRY_FIELDS`:

* the entries table (:func:`prism_memory.postgres.tables.build_metadata`: a column per field, of
  its SQL type and nullability) and so its ORM class (mapped onto that table);
* the columns a :class:`~prism_memory.models.MemoryRecord` is read from (:data:`RECORD_COLUMNS`,
  the select lists of :mod:`prism_memory.postgres.statements` and of the repositories' Core
  statements) and the decoding of such a row (:func:`prism_memory.postgres.rows.record_from_row`);
* the bulk import's staging table and its binary ``COPY`` (:data:`STAGE_COLUMNS`);
* the record itself: the fields of :class:`~prism_memory.models.MemoryRecord` -- the in-memory
  store's row -- are the :attr:`EntryField.record` fields named here
  (``tests/unit/test_entry_fields.py`` proves that the table, the migrated database, the ORM class,
  the record and the ``COPY`` columns agree with this declaration).

Adding a column: declare it here, write the Alembic revision that adds it, and change the code
that reads or writes it (CONTRIBUTING.md, "Adding a column to entries"). A leaf: it imports
nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ENTRY_FIELDS",
    "LINEAGE_KEY",
    "RECORD_COLUMNS",
    "STAGE_COLUMNS",
    "EntryField",
    "field_named",
    "stage_types",
]


@dataclass(frozen=True, slots=True)
class EntryField:
    """One column of the entries table and where it goes."""

    name: str
    """The column's name."""
    sql: str
    """Its SQL type, spelled as the statements cast to it (``timestamptz``, ``vector[]``)."""
    python: str
    """Its Python type as the ORM class annotates it (without ``| None``)."""
    nullable: bool = False
    """The column admits NULL (a Python ``None``)."""
    record: tuple[str, ...] = ()
    """The :class:`~prism_memory.models.MemoryRecord` fields read from it (``()``: not in the
    record); one column may make several (``metadata`` holds the lineage too), several one (the
    consent columns)."""
    staged: str | None = None
    """The bulk import's staging column that carries it (``None``: not imported; the insert
    sets it); usually the column's own name."""
    stage_sql: str | None = None
    """The staging column's SQL type when it is not :attr:`sql` (``None``: the same)."""


def _plain(name: str, sql: str, python: str, *, nullable: bool = False) -> EntryField:
    """A column read into the record field of its name and imported under its name."""
    return EntryField(name, sql, python, nullable, record=(name,), staged=name)


def _consent(name: str, sql: str, python: str, *, nullable: bool = False) -> EntryField:
    """One of the consent columns: together they make ``MemoryRecord.consent``."""
    return EntryField(name, sql, python, nullable, record=("consent",), staged=name)


def _kept(name: str, sql: str, python: str, *, nullable: bool = False) -> EntryField:
    """A column of the record the store sets itself (not imported)."""
    return EntryField(name, sql, python, nullable, record=(name,))


def _ledger(name: str, sql: str, python: str, *, nullable: bool = True) -> EntryField:
    """A column of the indexing ledger or the vector: in no record, not imported."""
    return EntryField(name, sql, python, nullable)


ENTRY_FIELDS: tuple[EntryField, ...] = (
    _plain("tenant_id", "text", "str"),
    _plain("resource_id", "text", "str"),
    _plain("thread_id", "text", "str"),
    _plain("id", "text", "str"),
    _plain("text", "text", "str"),
    _plain("role", "text", "str"),
    # the entry's metadata, with its lineage under LINEAGE_KEY
    EntryField(
        "metadata", "jsonb", "dict[str, Any]", record=("metadata", "lineage"), staged="metadata"
    ),
    _consent("consent_explicit", "boolean", "bool"),
    _consent("consent_source", "text", "str"),
    _consent("consent_scope", "text", "str"),
    _consent("consent_visible", "boolean", "bool"),
    _consent("consent_granted_at", "timestamptz", "datetime", nullable=True),
    _consent("consent_revoked_at", "timestamptz", "datetime", nullable=True),
    _plain("sequence", "bigint", "int"),
    _plain("occurred_at", "timestamptz", "datetime"),
    _kept("created_at", "timestamptz", "datetime"),
    _kept("written_at", "timestamptz", "datetime"),
    _plain("importance", "double precision", "float"),
    _kept("legal_hold", "boolean", "bool"),
    _kept("status", "text", "str"),  # pending, indexed or failed (a check constraint)
    _kept("revision", "integer", "int"),
    _kept("attempts", "integer", "int"),
    _kept("last_error", "text", "str", nullable=True),
    _ledger("next_attempt_at", "timestamptz", "datetime"),
    _ledger("claimed_by", "text", "str"),
    _ledger("claimed_until", "timestamptz", "datetime"),
    EntryField("embedding", "vector", "Vector", nullable=True, staged="embedding"),
    _plain("embedding_model", "text", "str", nullable=True),
    # Revision prism_memory_0013: the vectors of an entry's windows after the first (NULL: none,
    # the entry fits its embedder's window), written with ``embedding``.
    _ledger("window_embeddings", "vector[]", "list[Vector]"),
    # The lexical leg's terms: ``array_to_tsvector`` of prism_memory.lexical.tokenize(text)
    # (distinct terms, no positions), written by the library with the text, so both backends
    # share one tokenizer (revision prism_memory_0004); imported as the terms' text.
    EntryField("text_tsv", "tsvector", "str", nullable=True, staged="terms", stage_sql="text"),
    # ... and the number of terms (the BM25 length)
    EntryField("term_count", "integer", "int", staged="term_count"),
)
"""The entries table's columns, in the table's order."""

LINEAGE_KEY = "_lineage"
"""The key of ``metadata`` that holds the entry's lineage (``sourceIds``, ``reason``)."""

RECORD_COLUMNS: tuple[str, ...] = tuple(f.name for f in ENTRY_FIELDS if f.record)
"""The columns a :class:`~prism_memory.models.MemoryRecord` is read from, in the table's order."""

STAGE_COLUMNS: tuple[str, ...] = (*(f.staged for f in ENTRY_FIELDS if f.staged), "ord")
"""The columns of the bulk import's staging table, in the table's order, then ``ord`` (the row's
place in its batch, from 0)."""


def stage_types() -> tuple[tuple[str, str], ...]:
    """``(column, SQL type)`` of each of :data:`STAGE_COLUMNS`."""
    staged = tuple((f.staged, f.stage_sql or f.sql) for f in ENTRY_FIELDS if f.staged)
    return (*staged, ("ord", "bigint"))


def field_named(name: str) -> EntryField:
    """The declared field of the column ``name`` (``KeyError`` when there is none)."""
    for declared in ENTRY_FIELDS:
        if declared.name == name:
            return declared
    raise KeyError(name)
