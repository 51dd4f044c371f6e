-- name: generations/store
-- source: prism_memory.postgres.statements.generations.GenerationSql.store
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH released AS (UPDATE "prism_memory"."semantic_memory_vectors" AS r
    SET claimed_by = NULL, claimed_until = NULL
    FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), CAST(:threads AS text[]), CAST(:ids AS text[]), CAST(:revisions AS integer[])) AS i(tenant_id, resource_id, thread_id, id, revision)
    WHERE r.tenant_id = i.tenant_id
    AND r.resource_id = i.resource_id
    AND r.thread_id = i.thread_id
    AND r.entry_id = i.id
    AND r.model = CAST(:model AS text)
    AND r.claimed_until IS NOT NULL
    AND NOT EXISTS (SELECT 1
        FROM "prism_memory"."semantic_memory" e
        WHERE e.tenant_id = i.tenant_id
        AND e.resource_id = i.resource_id
        AND e.thread_id = i.thread_id
        AND e.id = i.id
        AND e.revision = i.revision)
    RETURNING 1)
INSERT INTO "prism_memory"."semantic_memory_vectors" AS w (tenant_id, resource_id, thread_id, entry_id, model, revision, embedding, claimed_by, claimed_until)
SELECT e.tenant_id, e.resource_id, e.thread_id, e.id, CAST(:model AS text), e.revision, i.embedding, NULL, NULL
FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), CAST(:threads AS text[]), CAST(:ids AS text[]), CAST(:revisions AS integer[]), CAST(:embeddings AS vector[])) AS i(tenant_id, resource_id, thread_id, id, revision, embedding)
JOIN "prism_memory"."semantic_memory" e
ON e.tenant_id = i.tenant_id
AND e.resource_id = i.resource_id
AND e.thread_id = i.thread_id
AND e.id = i.id
AND e.revision = i.revision
AND NOT COALESCE(e.embedding IS NOT NULL
    AND COALESCE(e.embedding_model, (SELECT g.model
            FROM "prism_memory"."semantic_memory_generations" g
            WHERE g.role = 'primary')) = CAST(:model AS text), false)
ON CONFLICT (tenant_id, resource_id, thread_id, entry_id, model)
DO UPDATE
SET revision = excluded.revision, embedding = excluded.embedding, claimed_by = NULL, claimed_until = NULL
