"""The entries table the Alembic revisions build is the entry's declaration
(``prism_memory/_entry_fields.py``): the same columns, of the declared types and nullability, read
from ``information_schema`` of a migrated schema on the real server. A revision that adds a column
the declaration lacks (or the reverse) fails here even when ``alembic check`` is not run.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from prism_memory._entry_fields import ENTRY_FIELDS

pytestmark = pytest.mark.postgres

# information_schema's udt_name of each declared SQL type
UDT = {
    "text": "text",
    "jsonb": "jsonb",
    "boolean": "bool",
    "timestamptz": "timestamptz",
    "bigint": "int8",
    "double precision": "float8",
    "integer": "int4",
    "vector": "vector",
    "vector[]": "_vector",
    "tsvector": "tsvector",
}


@pytest.mark.parametrize("dimension", [None, 4])
async def test_the_migrated_entries_table_is_the_declaration(
    make_postgres_stores, dimension: int | None
) -> None:
    stores = await make_postgres_stores(dimension=dimension)
    names = stores.vector_store.tables.names
    async with stores.vector_store.engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT column_name, udt_name, is_nullable FROM information_schema.columns "
                    "WHERE table_schema = :schema AND table_name = :table"
                ),
                {"schema": names.schema, "table": names.entries},
            )
        ).all()
        typed = (
            await conn.execute(
                text(
                    "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                    "WHERE a.attrelid = CAST(:table AS regclass) AND a.attname = 'embedding'"
                ),
                {"table": f'"{names.schema}"."{names.entries}"'},
            )
        ).scalar_one()
    found = {row.column_name: (row.udt_name, row.is_nullable == "YES") for row in rows}
    declared = {f.name: (UDT[f.sql], f.nullable) for f in ENTRY_FIELDS}
    assert found == declared
    assert typed == ("vector" if dimension is None else f"vector({dimension})")
