-- name: generations/progress
-- source: prism_memory.postgres.statements.generations.GenerationSql.progress
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT (SELECT role
    FROM "prism_memory"."semantic_memory_generations"
    WHERE model = CAST(:model AS text)) AS role, (SELECT count(*)
    FROM "prism_memory"."semantic_memory"
    WHERE status = 'indexed') AS entries, (SELECT count(*)
    FROM "prism_memory"."semantic_memory" e
    WHERE e.status = 'indexed'
    AND (COALESCE(e.embedding IS NOT NULL
            AND COALESCE(e.embedding_model, (SELECT g.model
                    FROM "prism_memory"."semantic_memory_generations" g
                    WHERE g.role = 'primary')) = CAST(:model AS text), false)
        OR EXISTS (SELECT 1
            FROM "prism_memory"."semantic_memory_vectors" v
            WHERE v.tenant_id = e.tenant_id
            AND v.resource_id = e.resource_id
            AND v.thread_id = e.thread_id
            AND v.entry_id = e.id
            AND v.model = CAST(:model AS text)
            AND v.revision = e.revision
            AND v.embedding IS NOT NULL))) AS current, (SELECT count(*)
    FROM "prism_memory"."semantic_memory" e
    JOIN "prism_memory"."semantic_memory_vectors" v
    ON v.tenant_id = e.tenant_id
    AND v.resource_id = e.resource_id
    AND v.thread_id = e.thread_id
    AND v.entry_id = e.id
    AND v.model = CAST(:model AS text)
    WHERE e.status = 'indexed'
    AND NOT (COALESCE(e.embedding IS NOT NULL
            AND COALESCE(e.embedding_model, (SELECT g.model
                    FROM "prism_memory"."semantic_memory_generations" g
                    WHERE g.role = 'primary')) = CAST(:model AS text), false)
        OR EXISTS (SELECT 1
            FROM "prism_memory"."semantic_memory_vectors" v
            WHERE v.tenant_id = e.tenant_id
            AND v.resource_id = e.resource_id
            AND v.thread_id = e.thread_id
            AND v.entry_id = e.id
            AND v.model = CAST(:model AS text)
            AND v.revision = e.revision
            AND v.embedding IS NOT NULL))
    AND v.claimed_until > CAST(:now AS timestamptz)) AS leased
