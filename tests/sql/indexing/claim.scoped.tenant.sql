-- name: indexing/claim.scoped.tenant
-- source: prism_memory.postgres.statements.indexing.IndexingSql.claim(scoped=True, tenant=True)
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH due AS (SELECT tenant_id, resource_id, thread_id, id
    FROM "prism_memory"."semantic_memory"
    WHERE status = 'pending'
    AND tenant_id = :tenant
    AND resource_id = :resource
    AND thread_id = :thread
    AND (next_attempt_at IS NULL
        OR next_attempt_at <= :now)
    AND (claimed_until IS NULL
        OR claimed_until <= :now)
    ORDER BY sequence, id, tenant_id, resource_id, thread_id
    LIMIT :limit FOR
    UPDATE SKIP LOCKED)
UPDATE "prism_memory"."semantic_memory" e
SET claimed_by = :worker, claimed_until = :until
FROM due
WHERE e.tenant_id = due.tenant_id
AND e.resource_id = due.resource_id
AND e.thread_id = due.thread_id
AND e.id = due.id
RETURNING e.tenant_id, e.resource_id, e.thread_id, e.id, e.revision, e.text, e.attempts, e.sequence, e.claimed_until
