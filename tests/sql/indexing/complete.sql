-- name: indexing/complete
-- source: prism_memory.postgres.statements.indexing.IndexingSql.complete
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
UPDATE "prism_memory"."semantic_memory" e
SET embedding = v.embedding, status = 'indexed', embedding_model = CAST(:model AS text), window_embeddings = (SELECT array_agg(w.v
        ORDER BY w.n)
    FROM unnest(CAST(:windows AS vector[]), CAST(:window_rows AS bigint[])) WITH ORDINALITY AS w(v, owner, n)
    WHERE w.owner = v.ord), last_error = NULL, next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL
FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), CAST(:threads AS text[]), CAST(:ids AS text[]), CAST(:revisions AS integer[]), CAST(:embeddings AS vector[]), CAST(:leases AS timestamptz[])) WITH ORDINALITY AS v(tenant_id, resource_id, thread_id, id, revision, embedding, lease_until, ord)
WHERE e.tenant_id = v.tenant_id
AND e.resource_id = v.resource_id
AND e.thread_id = v.thread_id
AND e.id = v.id
AND e.revision = v.revision
AND e.status = 'pending'
AND e.claimed_by = :worker
AND e.claimed_until > :now
AND (v.lease_until IS NULL
    OR e.claimed_until = v.lease_until)
