-- name: catalog/index_names
-- source: prism_memory.postgres.statements.catalog.INDEX_NAMES
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT indexname
FROM pg_indexes
WHERE schemaname = :schema
