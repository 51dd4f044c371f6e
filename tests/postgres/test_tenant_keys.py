"""Every primary key and unique key starts with ``tenant_id`` (docs/scaling.md: Citus by tenant),
but those of the vector generations' registry (revision 0011): a row per embedding model for the
whole store, no tenant's (a reference table under Citus).

Checked twice: in the SQLAlchemy metadata, and in the catalog of a schema the revisions built --
so a revision that adds a key without ``tenant_id`` first fails here even if tables.py says otherwise.
"""

from __future__ import annotations

import pytest
from sqlalchemy import PrimaryKeyConstraint, UniqueConstraint, text

from prism_memory.postgres.tables import build_metadata


def test_every_key_in_the_metadata_starts_with_tenant_id() -> None:
    built = build_metadata("prism_memory", "semantic_memory", 384)
    registry = built.names.generations
    tables = [t for t in built.metadata.tables.values() if t.name != registry]
    assert len(tables) == len(built.metadata.tables) - 1
    keys: list[tuple[str, list[str]]] = []
    for table in tables:
        for constraint in table.constraints:
            if isinstance(constraint, PrimaryKeyConstraint | UniqueConstraint):
                keys.append((f"{table.name}:{constraint.name}", list(constraint.columns.keys())))
        for index in table.indexes:
            if index.unique:
                keys.append((f"{table.name}:{index.name}", [c.name for c in index.columns]))
    assert len(keys) >= len(list(tables)), "every table has at least its primary key"
    wrong = [name for name, columns in keys if not columns or columns[0] != "tenant_id"]
    assert not wrong, f"keys that do not start with tenant_id: {wrong}"


@pytest.mark.postgres
async def test_every_key_the_revisions_build_starts_with_tenant_id(make_postgres_stores) -> None:
    stores = await make_postgres_stores(dimension=16)
    schema = stores.vector_store.tables.names.schema
    version_table = stores.vector_store.tables.names.version_table
    async with stores.vector_store.engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT t.relname AS table_name, i.relname AS index_name, "
                    "a.attname AS first_column "
                    "FROM pg_index x "
                    "JOIN pg_class i ON i.oid = x.indexrelid "
                    "JOIN pg_class t ON t.oid = x.indrelid "
                    "JOIN pg_namespace n ON n.oid = t.relnamespace "
                    "LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = x.indkey[0] "
                    "WHERE n.nspname = :schema AND (x.indisprimary OR x.indisunique) "
                    "ORDER BY 1, 2"
                ),
                {"schema": schema},
            )
        ).all()
    tables = {row.table_name for row in rows if row.table_name != version_table}
    assert tables == set(stores.vector_store.tables.names.tables), "one key per table at least"
    registry = stores.vector_store.tables.names.generations
    wrong = [
        f"{row.table_name}.{row.index_name} starts with {row.first_column}"
        for row in rows
        if row.table_name not in (version_table, registry) and row.first_column != "tenant_id"
    ]
    assert not wrong, wrong
