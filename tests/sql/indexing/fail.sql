-- name: indexing/fail
-- source: prism_memory.postgres.statements.indexing.IndexingSql.fail
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
UPDATE "prism_memory"."semantic_memory"
SET attempts = CASE WHEN (revision = :revision
    AND status = 'pending'
    AND claimed_until > :now) THEN attempts + 1 ELSE attempts END, last_error = CASE WHEN (revision = :revision
    AND status = 'pending'
    AND claimed_until > :now) THEN CAST(:error AS text) ELSE last_error END, status = CASE WHEN (revision = :revision
    AND status = 'pending'
    AND claimed_until > :now) THEN CAST(:new_status AS text) ELSE status END, next_attempt_at = CASE WHEN (revision = :revision
    AND status = 'pending'
    AND claimed_until > :now) THEN CAST(:retry_at AS timestamptz) ELSE next_attempt_at END, claimed_by = NULL, claimed_until = NULL
WHERE tenant_id = :tenant
AND resource_id = :resource
AND thread_id = :thread
AND id = :id
AND claimed_by = :worker
