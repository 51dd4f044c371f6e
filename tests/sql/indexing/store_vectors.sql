-- name: indexing/store_vectors
-- source: prism_memory.postgres.statements.indexing.IndexingSql.store_vectors
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
UPDATE "prism_memory"."semantic_memory" e
SET embedding = v.embedding, status = 'indexed', embedding_model = CAST(:model AS text), window_embeddings = (SELECT array_agg(w.v
        ORDER BY w.n)
    FROM unnest(CAST(:windows AS vector[]), CAST(:window_rows AS bigint[])) WITH ORDINALITY AS w(v, owner, n)
    WHERE w.owner = v.ord), last_error = NULL, next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL
FROM unnest(CAST(:ids AS text[]), CAST(:revisions AS integer[]), CAST(:embeddings AS vector[])) WITH ORDINALITY AS v(id, revision, embedding, ord)
WHERE e.tenant_id = :tenant
AND e.resource_id = :resource
AND e.thread_id = :thread
AND e.id = v.id
AND e.revision = v.revision
