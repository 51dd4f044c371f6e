-- name: catalog/schema_tables
-- source: prism_memory.postgres.statements.catalog.SCHEMA_TABLES
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT c.relname
FROM pg_class c
JOIN pg_namespace n
ON n.oid = c.relnamespace
WHERE n.nspname = :schema
AND c.relname = ANY(CAST(:names AS text[]))
AND c.relkind IN ('r', 'p')
