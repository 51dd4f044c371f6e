-- name: catalog/backlog
-- source: prism_memory.postgres.statements.catalog.SchemaSql.backlog
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT count(*) FILTER (WHERE status = 'pending') AS pending, count(*) FILTER (WHERE status = 'failed') AS failed, min(written_at) FILTER (WHERE status = 'pending') AS oldest
FROM "prism_memory"."semantic_memory"
