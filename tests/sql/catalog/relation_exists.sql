-- name: catalog/relation_exists
-- source: prism_memory.postgres.statements.catalog.RELATION_EXISTS
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT to_regclass(:name) IS NOT NULL
