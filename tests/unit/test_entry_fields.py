"""An entry's fields are declared once (``prism_memory/_entry_fields.py``), and everything that lists
them agrees with that declaration: the entries table of the SQLAlchemy metadata, its ORM class, the
record (``MemoryRecord``, which is the in-memory store's row), the columns records are read from
and their decoding, and the bulk import's staging table and ``COPY`` rows. The migrated database's
catalog is checked against it in ``tests/postgres/test_entry_fields.py``.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy.dialects import postgresql

from prism_memory._entry_fields import (
    ENTRY_FIELDS,
    LINEAGE_KEY,
    RECORD_COLUMNS,
    STAGE_COLUMNS,
    field_named,
    stage_types,
)
from prism_memory.models import Lineage, MemoryConsent, MemoryIdentity, MemoryRecord
from prism_memory.postgres.orm import EntryRow
from prism_memory.postgres.rows import record_from_row, row_candidate, stage_records
from prism_memory.postgres.statements import EntrySql, ImportSql, TableSql
from prism_memory.postgres.tables import build_metadata
from prism_memory.stores.base import ImportRow, NewEntry

# How SQLAlchemy compiles each declared SQL type for PostgreSQL (unpinned and pinned ``vector``).
COMPILED = {
    "text": "TEXT",
    "jsonb": "JSONB",
    "boolean": "BOOLEAN",
    "timestamptz": "TIMESTAMP WITH TIME ZONE",
    "bigint": "BIGINT",
    "double precision": "DOUBLE PRECISION",
    "integer": "INTEGER",
    "vector": "VECTOR",
    "vector[]": "VECTOR[]",
    "tsvector": "TSVECTOR",
}


def test_the_declaration_names_each_column_once() -> None:
    names = [f.name for f in ENTRY_FIELDS]
    assert len(names) == len(set(names))
    staged = [f.staged for f in ENTRY_FIELDS if f.staged]
    assert len(staged) == len(set(staged))
    assert field_named("importance").sql == "double precision"
    with pytest.raises(KeyError):
        field_named("no_such_column")


@pytest.mark.parametrize("dimension", [None, 4])
def test_the_entries_table_is_the_declaration(dimension: int | None) -> None:
    table = build_metadata("prism_memory", "semantic_memory", dimension).entries
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    columns = [(c.name, c.type.compile(dialect=dialect), c.nullable) for c in table.columns]
    pinned = {"vector": f"VECTOR({dimension})"} if dimension else {}
    assert columns == [
        (f.name, pinned.get(f.sql, COMPILED[f.sql]), f.nullable) for f in ENTRY_FIELDS
    ]


def test_the_orm_class_annotates_declared_columns_with_their_types() -> None:
    """``EntryRow``'s annotations (what mypy sees of ``tables.orm.Entry``) are declared columns of
    the declared Python type, ``| None`` exactly where the column is nullable."""
    hints = {
        name: hint
        for name, hint in EntryRow.__annotations__.items()
        if str(hint).startswith("Mapped[")
    }
    assert hints, "EntryRow annotates its columns"
    for name, hint in hints.items():
        declared = field_named(name)
        wanted = declared.python + (" | None" if declared.nullable else "")
        assert hint == f"Mapped[{wanted}]", name
    mapped = build_metadata("prism_memory", "semantic_memory", None).orm.Entry
    assert [c.name for c in mapped.__table__.columns] == [f.name for f in ENTRY_FIELDS]


def test_the_record_is_made_of_the_declared_record_fields() -> None:
    """``MemoryRecord`` (and so the in-memory store's row) has exactly the fields the declaration
    reads into it, and each record column is a declared column."""
    declared = {name for f in ENTRY_FIELDS for name in f.record}
    assert {f.name for f in fields(MemoryRecord)} == declared
    assert tuple(f.name for f in ENTRY_FIELDS if f.record) == RECORD_COLUMNS
    plain = [f for f in ENTRY_FIELDS if f.record == (f.name,)]
    narrowed = {"IndexStatus": "str"}  # a Literal of the status check's values
    for f in plain:  # a column read as is into the record field of its name has its type
        wanted = f.python + (" | None" if f.nullable else "")
        shown = MemoryRecord.__annotations__[f.name]
        assert narrowed.get(shown, shown) == wanted, f.name


def test_a_row_of_the_record_columns_decodes_field_by_field() -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    row: dict[str, Any] = {name: f"value of {name}" for name in RECORD_COLUMNS}
    row.update(
        sequence=7,
        importance=0.25,
        revision=3,
        attempts=1,
        legal_hold=True,
        occurred_at=now,
        created_at=now,
        written_at=now,
        metadata={"a": 1, LINEAGE_KEY: {"sourceIds": ["s1"], "reason": "why"}},
        consent_explicit=True,
        consent_source="user",
        consent_scope="user",
        consent_visible=False,
        consent_granted_at=now,
        consent_revoked_at=None,
    )
    record = record_from_row(row)
    for f in fields(MemoryRecord):
        if f.name not in ("metadata", "consent", "lineage"):
            assert getattr(record, f.name) == row[f.name], f.name
    assert record.metadata == {"a": 1}
    assert record.lineage == Lineage(source_ids=("s1",), reason="why")
    assert record.consent == MemoryConsent(
        source="user", scope="user", visible=False, granted_at=now
    )
    as_text = dict(row, metadata="{}", consent_explicit=False)
    plain = record_from_row(as_text)
    assert (plain.metadata, plain.lineage, plain.consent) == ({}, None, None)


def test_a_row_candidate_reads_its_record_from_its_row() -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    row: dict[str, Any] = {name: f"value of {name}" for name in RECORD_COLUMNS}
    row.update(sequence=4, importance=0.5, metadata="{}", consent_explicit=False)
    row.update(occurred_at=now, created_at=now, written_at=now)
    vector = np.ones(3, dtype=np.float32)
    candidate = row_candidate(vector, row)
    assert (candidate.id, candidate.sequence, candidate.importance) == (
        "value of id",
        4,
        0.5,
    )
    assert candidate.record == record_from_row(row)
    assert candidate.record is candidate.record, "read once"


def test_the_select_lists_read_the_record_columns() -> None:
    assert TableSql.columns("x").split(", ") == [f'x."{c}"' for c in RECORD_COLUMNS]
    model = "CAST(:model AS text) AS embedding_model"
    chosen = TableSql.columns("x", json_as_text=True, instead={"embedding_model": model})
    wanted = {
        "metadata": "CAST(x.metadata AS text) AS metadata",
        "embedding_model": model,
    }
    assert chosen.split(", ") == [wanted.get(c, f'x."{c}"') for c in RECORD_COLUMNS]
    mine = {"metadata": "x.metadata AS metadata"}  # instead wins over json_as_text
    assert TableSql.columns("x", json_as_text=True, instead=mine).split(", ")[6] == mine["metadata"]


def test_the_staging_table_and_its_copy_rows_follow_the_declaration() -> None:
    sql = ImportSql.for_tables(build_metadata("prism_memory", "semantic_memory", None))
    created = sql.import_stage.split("(", 1)[1].rsplit(")", 1)[0].split(", ")
    assert created == [f"{name} {kind}" for name, kind in stage_types()]
    assert [name for name, _ in stage_types()] == list(STAGE_COLUMNS)
    for f in ENTRY_FIELDS:  # every declared staged column has its own type, but text_tsv's terms
        if f.staged:
            assert (f.staged, f.stage_sql or f.sql) in stage_types()
    now = datetime(2026, 1, 2, tzinfo=UTC)
    entry = NewEntry(
        id="e1",
        text="hello world",
        role="user",
        metadata={},
        consent=None,
        sequence=None,
        occurred_at=now,
        importance=0.5,
        lineage=None,
    )
    scope = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="h")
    (staged,) = stage_records([ImportRow(scope=scope, entry=entry, vector=None, model=None)])
    assert len(staged) == len(STAGE_COLUMNS)
    by_name = dict(zip(STAGE_COLUMNS, staged, strict=True))
    assert (by_name["tenant_id"], by_name["id"], by_name["text"]) == ("t", "e1", "hello world")
    assert (by_name["importance"], by_name["embedding"], by_name["ord"]) == (0.5, None, 0)
    assert (by_name["terms"], by_name["term_count"]) == ("hello world", 2)


def test_every_insert_writes_declared_columns_and_every_required_one() -> None:
    """The inserts (remember's three forms and the bulk import's) name only declared columns, and
    every column that admits no NULL: a NOT NULL column added to the declaration fails here until
    the inserts write it (or the revision gives it a default and the declaration says nullable)."""
    sql = EntrySql.for_tables(build_metadata("prism_memory", "semantic_memory", None))
    statements = {
        "insert": sql.rows.insert,
        "insert_new": sql.rows.insert_new,
        "insert_new_appended": sql.rows.insert_new_appended,
        "import_insert": sql.importing.import_insert,
    }
    declared = {f.name for f in ENTRY_FIELDS}
    required = {f.name for f in ENTRY_FIELDS if not f.nullable}
    for name, statement in statements.items():
        target = statement.split(f"INSERT INTO {sql.rows.entries} (", 1)[1].split(")", 1)[0]
        written = set(target.split(", "))
        assert written <= declared, (name, written - declared)
        assert required <= written, (name, required - written)
