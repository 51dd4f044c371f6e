"""The statement families of the entries tables are composed, not mixed in: each family is one
class over :class:`TableSql` (the rendered table names and shared fragments), and
:class:`EntrySql` holds one object of each -- ``sql.rows.insert``, ``sql.recall.search(...)`` --
built once per table set."""

from __future__ import annotations

import dataclasses
import inspect

from prism_memory.postgres import statements
from prism_memory.postgres.statements import EntrySql, TableSql
from prism_memory.postgres.tables import build_metadata

FAMILIES = {
    "rows": statements.RowSql,
    "lineage": statements.LineageSql,
    "importing": statements.ImportSql,
    "recall": statements.RecallSql,
    "indexing": statements.IndexingSql,
}


def test_each_family_has_the_one_base_of_every_family() -> None:
    for family in (*FAMILIES.values(), statements.GenerationSql):
        assert family.__bases__ == (TableSql,), family.__name__


def test_entry_sql_holds_one_object_per_family_and_inherits_none() -> None:
    assert EntrySql.__bases__ == (object,)
    assert not any(issubclass(EntrySql, family) for family in FAMILIES.values())
    assert [f.name for f in dataclasses.fields(EntrySql)] == list(FAMILIES)
    sql = EntrySql.for_tables(build_metadata())
    for name, family in FAMILIES.items():
        assert type(getattr(sql, name)) is family, name
    assert EntrySql.for_tables(build_metadata()) is sql, "built once per table set"
    assert sql.rows.insert is sql.rows.insert, "each statement rendered once"


def test_no_statement_is_defined_by_two_families() -> None:
    seen: dict[str, str] = {}
    for family in FAMILIES.values():
        for name, member in vars(family).items():
            if name.startswith("_") or not (callable(member) or inspect.isdatadescriptor(member)):
                continue
            assert name not in seen, f"{name}: {seen.get(name)} and {family.__name__}"
            seen[name] = family.__name__
