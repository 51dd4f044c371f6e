-- name: indexing/claim_in
-- source: prism_memory.postgres.statements.indexing.IndexingSql.claim_in
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH due AS (SELECT d.tenant_id, d.resource_id, d.thread_id, d.id
    FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), CAST(:threads AS text[])) AS s(tenant_id, resource_id, thread_id)
    CROSS JOIN LATERAL (SELECT tenant_id, resource_id, thread_id, id
        FROM "prism_memory"."semantic_memory"
        WHERE tenant_id = s.tenant_id
        AND resource_id = s.resource_id
        AND thread_id = s.thread_id
        AND status = 'pending'
        AND (next_attempt_at IS NULL
            OR next_attempt_at <= :now)
        AND (claimed_until IS NULL
            OR claimed_until <= :now)
        ORDER BY sequence, id
        LIMIT :each FOR
        UPDATE SKIP LOCKED) d
    LIMIT :limit)
UPDATE "prism_memory"."semantic_memory" e
SET claimed_by = :worker, claimed_until = :until
FROM due
WHERE e.tenant_id = due.tenant_id
AND e.resource_id = due.resource_id
AND e.thread_id = due.thread_id
AND e.id = due.id
RETURNING e.tenant_id, e.resource_id, e.thread_id, e.id, e.revision, e.text, e.attempts, e.sequence, e.claimed_until
