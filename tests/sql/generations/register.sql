-- name: generations/register
-- source: prism_memory.postgres.statements.generations.GenerationSql.register
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
INSERT INTO "prism_memory"."semantic_memory_generations" (model, width, role, active, started_at, switched_at)
VALUES (CAST(:model AS text), CAST(:width AS integer), CAST(:role AS text), CAST(:active AS boolean), CAST(:now AS timestamptz), NULL)
ON CONFLICT (model)
DO NOTHING
