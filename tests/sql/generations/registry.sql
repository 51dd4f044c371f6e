-- name: generations/registry
-- source: prism_memory.postgres.statements.generations.GenerationSql.registry
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT model, width, role, active, started_at, switched_at
FROM "prism_memory"."semantic_memory_generations"
ORDER BY role = 'shadow', started_at, model
