"""Sharding by tenant, made checkable: every statement the PostgreSQL adapter runs on a
tenant-keyed table (entries, tombstones, share grants, working documents, the RAG tables) names its
tenant as a plain equality, ``tenant_id = :tenant`` / ``e.tenant_id = $1``, that a
distribution-column router (Citus) can prune by -- or is on :data:`ALLOWED` with the reason it does
not. An ``INSERT ... VALUES`` that binds ``tenant_id`` counts too (a router sends each row to its
tenant's shard). A tenant compared with a subquery (``tenant_id = (SELECT ...)``, an init-plan
parameter) does not count, anywhere in the statement.

The statements are those of ``tests/sql/`` (``tests/sql_catalogue.py``). docs/scaling.md lists the
allow-list; Citus itself is not run here.
"""

from __future__ import annotations

import re
from pathlib import Path

from prism_memory.postgres.tables import build_metadata
from tests.sql_catalogue import Rendered, rendered_statements

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
    "migrations/upgrade_head": _DDL,
    "migrations/upgrade_head.dim4": _DDL,
}
"""Statements on tenant-keyed tables without a plain tenant equality, each with its reason."""

_NAMES = build_metadata().names
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
