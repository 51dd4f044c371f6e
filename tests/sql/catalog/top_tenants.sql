-- name: catalog/top_tenants
-- source: prism_memory.postgres.statements.catalog.SchemaSql.top_tenants
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT tenant_id, count(*) AS n, count(*) FILTER (WHERE status = 'pending') AS pending, count(*) FILTER (WHERE status = 'failed') AS failed
FROM "prism_memory"."semantic_memory"
GROUP BY tenant_id
ORDER BY n DESC, tenant_id
LIMIT :top
