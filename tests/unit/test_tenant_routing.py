"""Sharding by tenant, made checkable: every statement the PostgreSQL adapter runs on a
tenant-keyed table (entries, tombstones, share grants, working documents, the RAG tables) names its
tenant as a plain equality, ``tenant_id = :tenant`` / ``e.tenant_id = $1``, that a
distribution-column router (Citus) can prune by -- or is on :data:`ALLOWED` with the reason it does
not. An ``INSERT ... VALUES`` that binds ``tenant_id`` counts too (a router sends each row to its
tenant's shard). A tenant compared with a subquery (``tenant_id = (SELECT ...)``, an init-plan
parameter) does not count, anywhere in the statement.

And per table reference (issue 47): one such equality somewhere is not enough -- every reference to
a tenant-keyed table (a sub-select, a join, a CTE such as the tombstone clean-up of an insert) is
constrained by its tenant itself, directly or through a join on ``tenant_id`` with a constrained one
(``tests/tenant_references.py`` reads the statements).

The statements are those of ``tests/sql/`` (``tests/sql_catalogue.py``). docs/scaling.md lists the
allow-list; Citus itself is not run here.
"""

from __future__ import annotations

import re
from pathlib import Path

from prism_memory.postgres.tables import build_metadata
from tests.sql_catalogue import Rendered, rendered_statements
from tests.tenant_references import references, unconstrained

_DOC = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"

_DDL = "the revisions' DDL: creates and alters every table"
_REPORT = "operator report or maintenance (`prism-memory stats`, `doctor`): the whole table"
_REGISTRY = "the vector generations' registry has no tenant: a row per model (a reference table)"
_BACKFILL = "a model change's backfill walks every tenant's entries in key order (a cursor)"
_STORE_WIDE = (
    "a model change is one for the whole store: counts, the switch and the drop span tenants"
)
_WIDTH = "the width of any one stored vector (LIMIT 1), whichever tenant holds it"

ALLOWED: dict[str, str] = {
    "catalog/analyze_entries": _REPORT,
    "catalog/backlog": _REPORT,
    "catalog/status_counts": _REPORT,
    "catalog/tenant_count": _REPORT,
    "catalog/top_tenants": _REPORT,
    "catalog/working_count": _REPORT,
    "entries/any_width": _WIDTH,
    "rag/any_width": _WIDTH,
    "entries/known_keys": "a bulk import's check: keys of many threads and tenants, as arrays",
    "entries/models_of": "a bulk import's check: the threads of many tenants, as arrays",
    "importing/import_insert": "the bulk import: staged rows of many tenants in one statement",
    "indexing/claim": "a queue with no scope (AllScopes): due rows of any tenant",
    "indexing/claim_in": "a shared indexing loop's claim: threads of several tenants, as arrays",
    "indexing/complete": "a claimed batch's vectors, keyed by arrays (a batch may span tenants)",
    "indexing/due_tenants": "the service worker's round: which tenants have due rows",
    "indexing/release": "a worker drops every lease it holds, whichever tenant (by claimed_by)",
    "lineage/inherit": (
        "INSERT ... SELECT :tenant ... FROM unnest(...): the tenant is a bound value of the rows "
        "written, not a filter a router prunes by"
    ),
    "repositories/EntryRepository.embedding_models.any_scope": (
        "the service worker's start-up check: the embedding models recorded in the whole table"
    ),
    "generations/registry": _REGISTRY,
    "generations/register": _REGISTRY,
    "generations/claim": _BACKFILL,
    "generations/claim.after": _BACKFILL,
    "generations/store": "a backfill batch's vectors, keyed by arrays (a batch may span tenants)",
    "generations/progress": _STORE_WIDE,
    "generations/switch": _STORE_WIDE,
    "generations/promote": _STORE_WIDE,
    "generations/finish_promotion": _STORE_WIDE,
    "generations/drop": _STORE_WIDE,
    "repositories/EntryRepository.indexed_threads": (
        "a model change's gate samples indexed threads of the whole store (`prism-memory models`)"
    ),
    "migrations/upgrade_head": _DDL,
    "migrations/upgrade_head.dim4": _DDL,
}
"""Statements on tenant-keyed tables without a plain tenant equality, each with its reason."""

_NAMES = build_metadata().names
_KEYED = {t.name for t in build_metadata().metadata.tables.values() if "tenant_id" in t.c}
"""The tenant-keyed tables: those with a ``tenant_id`` column (not the generations' registry)."""
_TABLES = re.compile(
    r'(?<![\w])"?(?:'
    + "|".join(re.escape(t) for t in sorted(_NAMES.tables, key=len, reverse=True))
    + r')"?(?![\w])'
)
_PLAIN = re.compile(r'\btenant_id"?\s*=\s*(?::\w+|\$\d+)(?:::VARCHAR)?(?![\w(])')
_SUBQUERY = re.compile(r'\btenant_id"?\s*=\s*\(\s*SELECT\b')
_VALUES = re.compile(r"^INSERT INTO \S+ \(tenant_id,[^)]*\)\s+VALUES \((?::\w+|\$\d+)")


def _key(rendered: Rendered) -> str:
    return f"{rendered.group}/{rendered.name}"


def tenant_scoped(sql: str) -> bool:
    """``sql`` reads or writes a tenant-keyed table."""
    return bool(_TABLES.search(sql))


def names_its_tenant(sql: str) -> bool:
    """A plain ``tenant_id = <param>`` (or a ``VALUES`` row binding it), and no subquery compare."""
    plain = bool(_PLAIN.search(sql)) or (bool(_VALUES.match(sql)) and "SELECT" not in sql)
    return plain and not _SUBQUERY.search(sql)


def test_every_tenant_scoped_statement_names_its_tenant():
    offenders = [
        _key(r)
        for r in rendered_statements()
        if tenant_scoped(r.sql) and not names_its_tenant(r.sql) and _key(r) not in ALLOWED
    ]
    assert offenders == [], (
        "these statements touch a tenant-keyed table without a plain `tenant_id = <param>` "
        f"equality a shard router can prune by: {offenders}. Name the tenant, or add the statement "
        "to ALLOWED with its reason and to docs/scaling.md."
    )


def test_the_allow_list_holds_only_statements_that_need_it():
    rendered = {_key(r): r.sql for r in rendered_statements()}
    stale = [
        key
        for key in ALLOWED
        if key not in rendered
        or not tenant_scoped(rendered[key])
        or names_its_tenant(rendered[key])
    ]
    assert stale == []


def test_recall_names_its_tenant_in_every_variant():
    """Recall's search (all 64 variants) and neighbours prune by tenant: the tenant is a plain
    equality, only the resource and thread keys are init-plan parameters."""
    recall = [r for r in rendered_statements() if r.group == "recall"]
    assert len(recall) == 72
    assert all(names_its_tenant(r.sql) for r in recall)


def test_the_checks_tell_plain_from_init_plan_equalities():
    assert names_its_tenant("SELECT 1 FROM t WHERE e.tenant_id = :tenant")
    assert names_its_tenant("SELECT 1 FROM t WHERE t.tenant_id = $1::VARCHAR AND x = $2")
    assert names_its_tenant("INSERT INTO t (tenant_id, x) VALUES ($1::VARCHAR, $2)")
    assert not names_its_tenant("SELECT 1 FROM t WHERE tenant_id = (SELECT CAST(:tenant AS text))")
    assert not names_its_tenant(
        "SELECT 1 FROM t WHERE tenant_id = :tenant AND x IN "
        "(SELECT 1 FROM u WHERE u.tenant_id = (SELECT CAST(:tenant AS text)))"
    )
    assert not names_its_tenant("SELECT 1 FROM t WHERE t.tenant_id = s.tenant_id")
    assert not names_its_tenant("SELECT 1 FROM t WHERE tenant_id = CAST(:tenant AS text)")
    assert tenant_scoped('SELECT 1 FROM "prism_memory"."semantic_memory_invalidation"')
    assert not tenant_scoped('SELECT 1 FROM pg_temp."semantic_memory_import"')


def test_docs_scaling_lists_the_allow_list():
    doc = _DOC.read_text(encoding="utf-8")
    missing = [key for key in ALLOWED if f"`{key}`" not in doc]
    assert missing == [], "docs/scaling.md must list every allow-listed statement"


def test_every_reference_to_a_tenant_keyed_table_is_constrained_by_its_tenant():
    offenders = {
        _key(r): sorted({f"{ref.table} {ref.alias}" for ref in unconstrained(r.sql, _KEYED)})
        for r in rendered_statements()
        if _key(r) not in ALLOWED
    }
    offenders = {key: refs for key, refs in offenders.items() if refs}
    assert offenders == {}, (
        "these statements reference a tenant-keyed table that nothing constrains by its tenant "
        "(a `tenant_id = <param>` of its own, or a join on tenant_id with a constrained one): "
        f"{offenders}"
    )


_TABLE_NAME = re.compile(
    r'(?<![\w"])"?(?:' + "|".join(sorted(_KEYED, key=len, reverse=True)) + r')"?(?![\w".])'
)


def test_the_reader_finds_every_reference():
    """Each tenant-keyed table named in a statement (not as a column's qualifier) is one reference
    the per-reference check judged: none is skipped by the reader."""
    missed = {}
    for r in rendered_statements():
        if _key(r) in ALLOWED:
            continue
        named = len(_TABLE_NAME.findall(r.sql))
        found = len(references(r.sql, _KEYED))
        if named != found:
            missed[_key(r)] = (named, found)
    assert missed == {}


def _insert_sql() -> str:
    [insert] = [r.sql for r in rendered_statements() if _key(r) == "entries/insert"]
    return insert


_E = '"prism_memory"."semantic_memory"'
_T = '"prism_memory"."semantic_memory_invalidation"'
_V = '"prism_memory"."semantic_memory_vectors"'


def _bad(sql: str) -> list[str]:
    return [f"{ref.table} {ref.alias}" for ref in unconstrained(sql, _KEYED)]


def test_a_branch_that_loses_its_tenant_is_found():
    """The real insert passes; with its tombstone clean-up (a CTE) or its existing-ids probe (a
    sub-select) stripped of their tenant, only that branch is named -- although the statement still
    holds plain tenant equalities elsewhere, which the statement-wide rule is content with."""
    insert = _insert_sql()
    assert _bad(insert) == []
    cleanup = "DELETE FROM " + _T + " WHERE tenant_id = :tenant AND "
    assert cleanup in insert
    lost = insert.replace(cleanup, "DELETE FROM " + _T + " WHERE ")
    assert names_its_tenant(lost)  # the old rule passes it
    assert _bad(lost) == ["semantic_memory_invalidation semantic_memory_invalidation"]
    probe = "WHERE e.tenant_id = :tenant AND ROW("
    assert probe in insert
    lost = insert.replace(probe, "WHERE ROW(")
    assert names_its_tenant(lost)
    assert _bad(lost) == ["semantic_memory e"]


def test_the_reference_rule_on_small_statements():
    ok = [
        f"SELECT 1 FROM {_E} e WHERE e.tenant_id = :tenant",
        f"SELECT 1 FROM {_E} WHERE tenant_id = $1::VARCHAR AND x = $2",
        f"SELECT 1 FROM {_E} e JOIN {_V} v ON v.tenant_id = e.tenant_id WHERE e.tenant_id = $1",
        f"SELECT 1 FROM {_E} e WHERE e.tenant_id = :t AND EXISTS "
        f"(SELECT 1 FROM {_V} v WHERE v.tenant_id = e.tenant_id)",
        f"SELECT 1 FROM {_E} e WHERE ROW(e.tenant_id, e.id) = ROW(:t, :id)",
        f"INSERT INTO {_T} (tenant_id, entry_id) VALUES (:tenant, :id)",
        f"INSERT INTO {_T} (tenant_id, entry_id) SELECT e.tenant_id, e.id FROM {_E} e "
        "WHERE e.tenant_id = :tenant",
        f"SELECT * FROM (SELECT * FROM {_E} e OFFSET 0) AS d WHERE d.tenant_id = :t",
        f"WITH x AS (SELECT * FROM {_E} WHERE tenant_id = :t) "
        f"SELECT 1 FROM x JOIN {_V} v ON v.tenant_id = x.tenant_id",
        f"SELECT 1 FROM {_E} WHERE tenant_id = :t UNION ALL SELECT 1 FROM {_T} WHERE tenant_id = :t",
    ]
    for sql in ok:
        assert _bad(sql) == [], sql
    bad = {
        f"SELECT 1 FROM {_E} e WHERE e.tenant_id = :t OR e.id = :id": "semantic_memory e",
        f"SELECT 1 FROM {_E} e WHERE e.tenant_id = (SELECT CAST(:t AS text))": "semantic_memory e",
        f"SELECT 1 FROM {_E} e WHERE e.tenant_id = :t AND EXISTS "
        f"(SELECT 1 FROM {_V} v WHERE v.entry_id = e.id)": "semantic_memory_vectors v",
        f"SELECT 1 FROM {_E} e JOIN {_V} v ON v.entry_id = e.id "
        "WHERE e.tenant_id = :t": "semantic_memory_vectors v",
        f"SELECT 1 FROM {_E} WHERE tenant_id = :t UNION ALL "
        f"SELECT 1 FROM {_T} WHERE entry_id = :id": "semantic_memory_invalidation "
        "semantic_memory_invalidation",
        f"INSERT INTO {_T} (tenant_id, entry_id) SELECT e.tenant_id, e.id FROM {_E} e": (
            "semantic_memory e"
        ),
        f"SELECT * FROM (SELECT e.id FROM {_E} e) AS d WHERE d.tenant_id = :t": (
            "semantic_memory e"
        ),
        f"UPDATE {_E} SET x = 1 WHERE id = :id AND tenant_id IN (:t)": (
            "semantic_memory semantic_memory"
        ),
    }
    for sql, named in bad.items():
        assert named in _bad(sql), sql
