-- name: generations/claim.after
-- source: prism_memory.postgres.statements.generations.GenerationSql.claim(after=True)
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH due AS (SELECT e.tenant_id, e.resource_id, e.thread_id, e.id, e.revision, e.text, e.sequence
    FROM "prism_memory"."semantic_memory" e
    WHERE e.status = 'indexed'
    AND ROW(e.tenant_id, e.resource_id, e.thread_id, e.id) > ROW(CAST(:after_tenant AS text), CAST(:after_resource AS text), CAST(:after_thread AS text), CAST(:after_id AS text))
    AND NOT COALESCE(e.embedding IS NOT NULL
        AND COALESCE(e.embedding_model, (SELECT g.model
                FROM "prism_memory"."semantic_memory_generations" g
                WHERE g.role = 'primary')) = CAST(:model AS text), false)
    AND NOT EXISTS (SELECT 1
        FROM "prism_memory"."semantic_memory_vectors" v
        WHERE v.tenant_id = e.tenant_id
        AND v.resource_id = e.resource_id
        AND v.thread_id = e.thread_id
        AND v.entry_id = e.id
        AND v.model = CAST(:model AS text)
        AND ((v.revision = e.revision
                AND v.embedding IS NOT NULL)
            OR v.claimed_until > CAST(:now AS timestamptz)))
    ORDER BY e.tenant_id, e.resource_id, e.thread_id, e.id
    LIMIT :limit FOR NO KEY
    UPDATE OF e SKIP LOCKED),
leased AS (INSERT INTO "prism_memory"."semantic_memory_vectors" AS w (tenant_id, resource_id, thread_id, entry_id, model, revision, embedding, claimed_by, claimed_until)
    SELECT tenant_id, resource_id, thread_id, id, CAST(:model AS text), revision, NULL, CAST(:worker AS text), CAST(:until AS timestamptz)
    FROM due
    ON CONFLICT (tenant_id, resource_id, thread_id, entry_id, model)
    DO UPDATE
    SET claimed_by = excluded.claimed_by, claimed_until = excluded.claimed_until
    WHERE (w.claimed_until IS NULL
        OR w.claimed_until <= CAST(:now AS timestamptz))
    AND (w.embedding IS NULL
        OR w.revision <> excluded.revision)
    RETURNING w.tenant_id, w.resource_id, w.thread_id, w.entry_id, w.claimed_until)
SELECT d.tenant_id, d.resource_id, d.thread_id, d.id, d.revision, d.text, 0 AS attempts, d.sequence, l.claimed_until
FROM due d
JOIN leased l
ON l.tenant_id = d.tenant_id
AND l.resource_id = d.resource_id
AND l.thread_id = d.thread_id
AND l.entry_id = d.id
ORDER BY d.tenant_id, d.resource_id, d.thread_id, d.id
