-- name: rag/nearest
-- source: prism_memory.postgres.statements.rag.RagSql.nearest(exact=False, acl=False, versioned=False, filtered=False)
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT c.source_id, c.chunk_index, c.text, c.metadata, c.generation, c.embedding, c.embedding_model
FROM "prism_memory"."semantic_memory_rag_chunks" c
WHERE c.tenant_id = :tenant
AND c.scope = :scope
AND c.generation = COALESCE(CAST(:generation AS bigint), (SELECT g.generation
        FROM "prism_memory"."semantic_memory_rag_scope_generations" g
        WHERE g.tenant_id = :tenant
        AND g.scope = :scope), 0)
ORDER BY (c.embedding <=> :query)
LIMIT :limit
