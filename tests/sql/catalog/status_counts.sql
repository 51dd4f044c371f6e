-- name: catalog/status_counts
-- source: prism_memory.postgres.statements.catalog.SchemaSql.status_counts
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT status, count(*) AS n
FROM "prism_memory"."semantic_memory"
GROUP BY status
