-- name: rag/sources
-- source: prism_memory.postgres.statements.rag.RagSql.sources
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT DISTINCT c.source_id COLLATE "C" AS source_id
FROM "prism_memory"."semantic_memory_rag_chunks" c
WHERE c.tenant_id = :tenant
AND c.scope = :scope
AND c.generation = :generation
AND (CAST(:after AS text) IS NULL
    OR c.source_id COLLATE "C" > CAST(:after AS text))
ORDER BY 1
LIMIT :limit
