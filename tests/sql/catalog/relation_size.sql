-- name: catalog/relation_size
-- source: prism_memory.postgres.statements.catalog.RELATION_SIZE
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT coalesce(pg_total_relation_size(to_regclass(:n)), 0)
