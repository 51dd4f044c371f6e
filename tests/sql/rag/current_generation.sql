-- name: rag/current_generation
-- source: prism_memory.postgres.statements.rag.RagSql.current_generation
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT COALESCE((SELECT generation
        FROM "prism_memory"."semantic_memory_rag_scope_generations"
        WHERE tenant_id = :tenant
        AND scope = :scope), 0)
