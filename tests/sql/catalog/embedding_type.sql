-- name: catalog/embedding_type
-- source: prism_memory.postgres.statements.catalog.EMBEDDING_TYPE
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT format_type(atttypid, atttypmod)
FROM pg_attribute
WHERE attrelid = to_regclass(:name)
AND attname = 'embedding'
AND NOT attisdropped
