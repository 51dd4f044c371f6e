-- name: rag/prepare_vector
-- source: prism_memory.postgres.statements.rag.RagSql.prepare_vector(acl=False, versioned=False, filtered=False)
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT (SELECT count(*)
    FROM (SELECT 1
        FROM "prism_memory"."semantic_memory_rag_chunks" c
        WHERE c.tenant_id = :tenant
        AND c.scope = :scope
        AND c.generation = COALESCE(CAST(:generation AS bigint), (SELECT g.generation
                FROM "prism_memory"."semantic_memory_rag_scope_generations" g
                WHERE g.tenant_id = :tenant
                AND g.scope = :scope), 0)
        LIMIT :exact_max + 1) AS bounded) AS size, set_config('hnsw.iterative_scan', 'strict_order', true) AS scan, set_config('hnsw.ef_search', :ef, true) AS ef
