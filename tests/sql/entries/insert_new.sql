-- name: entries/insert_new
-- source: prism_memory.postgres.statements.entries.RowSql.insert_new
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH input AS (SELECT u.id, u.text, coalesce(u.role, CAST(:all_roles AS text)) AS role, coalesce(u.metadata, CAST(:all_metadata AS jsonb)) AS metadata, coalesce(u.consent_explicit, CAST(:all_consent_explicit AS boolean)) AS consent_explicit, coalesce(u.consent_source, CAST(:all_consent_source AS text)) AS consent_source, coalesce(u.consent_scope, CAST(:all_consent_scope AS text)) AS consent_scope, coalesce(u.consent_visible, CAST(:all_consent_visible AS boolean)) AS consent_visible, coalesce(u.consent_granted_at, CAST(:all_consent_granted_at AS timestamptz)) AS consent_granted_at, coalesce(u.consent_revoked_at, CAST(:all_consent_revoked_at AS timestamptz)) AS consent_revoked_at, coalesce(u.sequence, CAST(:all_sequences AS bigint)) AS sequence, coalesce(u.occurred_at, CAST(:all_occurred_at AS timestamptz)) AS occurred_at, coalesce(u.importance, CAST(:all_importance AS double precision)) AS importance, u.terms, u.term_count, coalesce(u.leased, CAST(:all_leased AS boolean)) AS leased, u.embedding, u.ord
    FROM unnest(CAST(:ids AS text[]), CAST(:texts AS text[]), CAST(:roles AS text[]), CAST(:metadata AS jsonb[]), CAST(:consent_explicit AS boolean[]), CAST(:consent_source AS text[]), CAST(:consent_scope AS text[]), CAST(:consent_visible AS boolean[]), CAST(:consent_granted_at AS timestamptz[]), CAST(:consent_revoked_at AS timestamptz[]), CAST(:sequences AS bigint[]), CAST(:occurred_at AS timestamptz[]), CAST(:importance AS double precision[]), CAST(:terms AS text[]), CAST(:term_counts AS integer[]), CAST(:leased AS boolean[]), CAST(:embeddings AS vector[])) WITH ORDINALITY AS u(id, text, role, metadata, consent_explicit, consent_source, consent_scope, consent_visible, consent_granted_at, consent_revoked_at, sequence, occurred_at, importance, terms, term_count, leased, embedding, ord)),
top AS (SELECT coalesce(max(sequence), -1) AS v
    FROM "prism_memory"."semantic_memory"
    WHERE tenant_id = :tenant
    AND resource_id = :resource
    AND thread_id = :thread),
fresh AS (SELECT i.*, count(*) FILTER (WHERE i.sequence IS NULL) OVER w AS autos
    FROM input i
    WINDOW w AS (ORDER BY ord ROWS BETWEEN UNBOUNDED PRECEDING
        AND 1 PRECEDING)),
numbered AS (SELECT f.*, coalesce(f.sequence, f.autos + 1 + greatest(top.v, max(f.sequence - f.autos) OVER w)) AS seq
    FROM fresh f, top
    WINDOW w AS (ORDER BY ord ROWS BETWEEN UNBOUNDED PRECEDING
        AND 1 PRECEDING)),
inserted AS (INSERT INTO "prism_memory"."semantic_memory" (tenant_id, resource_id, thread_id, id, text, role, metadata, consent_explicit, consent_source, consent_scope, consent_visible, consent_granted_at, consent_revoked_at, sequence, occurred_at, created_at, written_at, importance, legal_hold, status, revision, attempts, claimed_by, claimed_until, embedding, embedding_model, window_embeddings, text_tsv, term_count)
    SELECT :tenant, :resource, :thread, n.id, n.text, n.role, n.metadata, n.consent_explicit, n.consent_source, n.consent_scope, n.consent_visible, n.consent_granted_at, n.consent_revoked_at, n.seq, n.occurred_at, CAST(:now AS timestamptz), CAST(:now AS timestamptz), n.importance, false, CASE WHEN n.embedding IS NULL THEN 'pending' ELSE 'indexed' END, 1, 0, CASE WHEN n.leased THEN CAST(:worker AS text) END, CASE WHEN n.leased THEN CAST(:until AS timestamptz) END, n.embedding, CASE WHEN n.embedding IS NOT NULL THEN CAST(:model AS text) END, (SELECT array_agg(w.v
            ORDER BY w.n)
        FROM unnest(CAST(:windows AS vector[]), CAST(:window_rows AS bigint[])) WITH ORDINALITY AS w(v, owner, n)
        WHERE w.owner = n.ord), array_to_tsvector(string_to_array(n.terms, ' ')), n.term_count
    FROM numbered n
    ORDER BY n.ord
    ON CONFLICT (tenant_id, resource_id, thread_id, id)
    DO NOTHING
    RETURNING id, sequence),
cleared AS (DELETE FROM "prism_memory"."semantic_memory_invalidation"
    WHERE tenant_id = :tenant
    AND resource_id = :resource
    AND thread_id = :thread
    AND entry_id IN (SELECT id
        FROM inserted))
SELECT id, sequence
FROM inserted
