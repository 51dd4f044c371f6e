-- name: rag/set_generation
-- source: prism_memory.postgres.statements.rag.RagSql.set_generation
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
INSERT INTO "prism_memory"."semantic_memory_rag_scope_generations" (tenant_id, scope, generation, updated_at)
VALUES (:tenant, :scope, :generation, now())
ON CONFLICT (tenant_id, scope)
DO UPDATE
SET generation = EXCLUDED.generation, updated_at = EXCLUDED.updated_at
