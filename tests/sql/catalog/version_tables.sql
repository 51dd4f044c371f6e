-- name: catalog/version_tables
-- source: prism_memory.postgres.statements.catalog.VERSION_TABLES
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT n.nspname, c.relname
FROM pg_attribute a
JOIN pg_class c
ON c.oid = a.attrelid
JOIN pg_namespace n
ON n.oid = c.relnamespace
WHERE a.attname = 'version_num'
AND NOT a.attisdropped
AND c.relkind IN ('r', 'p')
AND a.atttypid IN ('varchar'::regtype, 'text'::regtype)
AND n.nspname NOT IN ('pg_catalog', 'information_schema')
AND has_table_privilege(c.oid, 'SELECT')
ORDER BY 1, 2
