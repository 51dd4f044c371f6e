-- name: catalog/working_count
-- source: prism_memory.postgres.statements.catalog.SchemaSql.working_count
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT count(*)
FROM "prism_memory"."semantic_memory_working"
