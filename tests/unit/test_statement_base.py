"""What every statement family shares (``prism_memory.postgres.statements._base``; issue 47's
mutation run): identifiers quoted and escaped, record columns, the primary-key probe with and
without its tenant, and the rewrite of ``:name`` binds (the statements themselves run against
PostgreSQL in ``tests/postgres/``)."""

from __future__ import annotations

import dataclasses

import pytest

from prism_memory.postgres.rows import RECORD_COLUMNS
from prism_memory.postgres.statements._base import TableSql, quote, to_positional
from prism_memory.postgres.tables import build_metadata


def test_quote_escapes_a_double_quote() -> None:
    assert quote("plain") == '"plain"'
    assert quote('we"ird') == '"we""ird"'
    assert quote('"') == '""""'


def test_the_record_columns() -> None:
    plain = TableSql.columns("x")
    assert plain.split(", ") == [f'x."{name}"' for name in RECORD_COLUMNS]
    assert "CAST" not in plain
    as_text = TableSql.columns(json_as_text=True).split(", ")
    assert "CAST(e.metadata AS text) AS metadata" in as_text
    assert len(as_text) == len(RECORD_COLUMNS)
    assert [c for c in as_text if "metadata" not in c] == [
        f'e."{name}"' for name in RECORD_COLUMNS if name != "metadata"
    ]


def test_the_primary_key_probe_names_its_tenant_when_asked() -> None:
    sql = TableSql.for_tables(build_metadata())
    key = TableSql.thread_key("i.id")
    plain = sql.first_stored(key, "e.id")
    assert plain.startswith(f"(SELECT e.id FROM {sql.entries} e WHERE ROW(")
    assert "e.tenant_id =" not in plain
    # the key given in its four parts without a tenant: the same whole-key row comparison
    assert sql.first_stored(TableSql.thread_key_parts("i.id"), "e.id") == plain
    assert (
        "WHERE ROW(e.tenant_id, e.resource_id, e.thread_id, e.id) >= ROW(CAST(:tenant AS text), "
        "CAST(:resource AS text), CAST(:thread AS text), i.id) ORDER BY"
    ) in plain
    parts = TableSql.thread_key_parts("i.id")
    named = sql.first_stored(parts, "e.id", tenant=":tenant")
    # after the tenant's equality the row comparison covers the other three key columns, so the
    # descent starts at the probed key, not at the tenant's first one
    assert (
        f"FROM {sql.entries} e WHERE e.tenant_id = :tenant "
        "AND ROW(e.resource_id, e.thread_id, e.id) >= ROW(CAST(:resource AS text), "
        "CAST(:thread AS text), i.id)"
    ) in named
    with pytest.raises(TypeError):  # the whole key with a tenant would walk the tenant
        sql.first_stored(key, "e.id", tenant=":tenant")
    assert sql.stored_key(parts, tenant=":tenant").count("e.tenant_id = :tenant") == 1
    assert "e.tenant_id = :tenant" not in sql.stored_key(key)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sql.entries = "x"  # type: ignore[misc]


def test_binds_become_positional_and_casts_stay() -> None:
    assert to_positional("SELECT :a, :b::int, :a, x::text, CAST(:c AS text)") == (
        "SELECT $1, $2::int, $1, x::text, CAST($3 AS text)",
        ("a", "b", "c"),
    )
    assert to_positional("SELECT 1") == ("SELECT 1", ())
