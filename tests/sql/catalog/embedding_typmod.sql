-- name: catalog/embedding_typmod
-- source: prism_memory.postgres.statements.catalog.EMBEDDING_TYPMOD
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT a.atttypmod
FROM pg_attribute a
WHERE a.attrelid = to_regclass(:relation)
AND a.attname = 'embedding'
AND NOT a.attisdropped
