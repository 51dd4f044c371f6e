-- name: catalog/vector_version
-- source: prism_memory.postgres.statements.catalog.VECTOR_VERSION
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT extversion
FROM pg_extension
WHERE extname = 'vector'
