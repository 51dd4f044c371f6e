-- name: lineage/dependents
-- source: prism_memory.postgres.statements.lineage.LineageSql.dependents
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT e.id, ((e.metadata -> '_lineage'::text) -> 'sourceIds'::text) AS sources
FROM "prism_memory"."semantic_memory" e
WHERE e.tenant_id = :tenant
AND e.resource_id = :resource
AND e.thread_id = :thread
AND ((e.metadata -> '_lineage'::text) -> 'sourceIds'::text) ?| CAST(:ids AS text[])
ORDER BY e.id
LIMIT :limit
