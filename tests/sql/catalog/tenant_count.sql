-- name: catalog/tenant_count
-- source: prism_memory.postgres.statements.catalog.SchemaSql.tenant_count
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT count(DISTINCT tenant_id)
FROM "prism_memory"."semantic_memory"
