-- name: importing/import_insert
-- source: prism_memory.postgres.statements.importing.ImportSql.import_insert
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH fresh AS (SELECT f.*, count(*) FILTER (WHERE f.sequence IS NULL) OVER w AS autos
    FROM pg_temp."semantic_memory_import" f
    WHERE NOT EXISTS (SELECT 1
        FROM (SELECT e.tenant_id, e.resource_id, e.thread_id, e.id
            FROM "prism_memory"."semantic_memory" e
            WHERE ROW(e.tenant_id, e.resource_id, e.thread_id, e.id) >= ROW(f.tenant_id, f.resource_id, f.thread_id, f.id)
            ORDER BY e.tenant_id, e.resource_id, e.thread_id, e.id
            LIMIT 1) AS e
        WHERE ROW(e.tenant_id, e.resource_id, e.thread_id, e.id) = ROW(f.tenant_id, f.resource_id, f.thread_id, f.id))
    WINDOW w AS (PARTITION BY f.tenant_id, f.resource_id, f.thread_id
        ORDER BY f.ord ROWS BETWEEN UNBOUNDED PRECEDING
        AND 1 PRECEDING)),
tops AS (SELECT f.tenant_id, f.resource_id, f.thread_id, coalesce((SELECT max(e.sequence)
            FROM "prism_memory"."semantic_memory" e
            WHERE e.tenant_id = f.tenant_id
            AND e.resource_id = f.resource_id
            AND e.thread_id = f.thread_id), -1) AS v
    FROM (SELECT DISTINCT tenant_id, resource_id, thread_id
        FROM fresh) f),
numbered AS (SELECT f.*, coalesce(f.sequence, f.autos + 1 + greatest(t.v, max(f.sequence - f.autos) OVER w)) AS seq
    FROM fresh f
    JOIN tops t
    USING (tenant_id, resource_id, thread_id)
    WINDOW w AS (PARTITION BY f.tenant_id, f.resource_id, f.thread_id
        ORDER BY f.ord ROWS BETWEEN UNBOUNDED PRECEDING
        AND 1 PRECEDING)),
inserted AS (INSERT INTO "prism_memory"."semantic_memory" (tenant_id, resource_id, thread_id, id, text, role, metadata, consent_explicit, consent_source, consent_scope, consent_visible, consent_granted_at, consent_revoked_at, sequence, occurred_at, created_at, written_at, importance, legal_hold, status, revision, attempts, embedding, embedding_model, window_embeddings, text_tsv, term_count)
    SELECT n.tenant_id, n.resource_id, n.thread_id, n.id, n.text, n.role, n.metadata, n.consent_explicit, n.consent_source, n.consent_scope, n.consent_visible, n.consent_granted_at, n.consent_revoked_at, n.seq, n.occurred_at, CAST(:now AS timestamptz), CAST(:now AS timestamptz), n.importance, false, CASE WHEN n.embedding IS NULL THEN 'pending' ELSE 'indexed' END, 1, 0, n.embedding, CASE WHEN n.embedding IS NOT NULL THEN n.embedding_model END, (SELECT array_agg(w.v
            ORDER BY w.n)
        FROM unnest(CAST(:windows AS vector[]), CAST(:window_rows AS bigint[])) WITH ORDINALITY AS w(v, owner, n)
        WHERE w.owner = n.ord), array_to_tsvector(string_to_array(n.terms, ' ')), n.term_count
    FROM numbered n
    ORDER BY n.ord
    RETURNING tenant_id, resource_id, thread_id, id, status),
cleared AS (DELETE FROM "prism_memory"."semantic_memory_invalidation" t
    USING inserted i
    WHERE t.tenant_id = i.tenant_id
    AND t.resource_id = i.resource_id
    AND t.thread_id = i.thread_id
    AND t.entry_id = i.id)
SELECT count(*) AS inserted, count(*) FILTER (WHERE status = 'pending') AS pending
FROM inserted
