-- name: entries/any_width
-- source: prism_memory.postgres.statements._base.TableSql.any_width
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT vector_dims(embedding)
FROM "prism_memory"."semantic_memory"
WHERE embedding IS NOT NULL
LIMIT 1
