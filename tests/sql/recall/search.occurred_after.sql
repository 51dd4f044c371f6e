-- name: recall/search.occurred_after
-- source: prism_memory.postgres.statements.recall.RecallSql.search(require_consent=False, occurred_after=True, shared=False, lexical=False, resource_wide=False, by_model=False)
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH dead AS (SELECT jsonb_object_agg(k.entry_id, k.kill) AS kills
    FROM (SELECT entry_id, max(CASE WHEN reason = 'corrected' THEN created_at ELSE 'infinity'::timestamptz END) AS kill
        FROM "prism_memory"."semantic_memory_invalidation"
        WHERE tenant_id = :tenant
        AND resource_id = (SELECT CAST(:resource AS text))
        AND thread_id = (SELECT CAST(:thread AS text))
        GROUP BY entry_id) AS k),
eligible AS MATERIALIZED (SELECT e.ctid AS row_ctid, e.id, e.sequence, COALESCE(NULLIF(CASE WHEN e.window_embeddings IS NULL THEN e.embedding <=> :query ELSE LEAST(e.embedding <=> :query, (SELECT min(w.v <=> :query)
                    FROM unnest(e.window_embeddings) AS w(v)) + CAST(0.15 AS float8)) END, 'NaN'::float8), 1.0) AS distance, e.term_count
    FROM dead d
    CROSS JOIN "prism_memory"."semantic_memory" e
    WHERE e.tenant_id = :tenant
    AND e.resource_id = (SELECT CAST(:resource AS text))
    AND e.thread_id = (SELECT CAST(:thread AS text))
    AND e.status = 'indexed'
    AND e.consent_visible
    AND e.consent_revoked_at IS NULL
    AND NOT e.legal_hold
    AND e.occurred_at >= :occurred_after
    AND (d.kills IS NULL
        OR (NOT COALESCE(CAST(d.kills ->> e.id AS timestamptz) > e.written_at, false)
            AND (((e.metadata -> '_lineage'::text) -> 'sourceIds'::text) IS NULL
                OR NOT EXISTS (SELECT 1
                    FROM jsonb_array_elements_text(((e.metadata -> '_lineage'::text) -> 'sourceIds'::text)) AS src(id)
                    WHERE CAST(d.kills ->> src.id AS timestamptz) > e.written_at))))
    AND e.embedding IS NOT NULL),
stats AS (SELECT count(*) AS documents, COALESCE(sum(term_count), 0) AS total_length
    FROM eligible),
nearest_top AS (SELECT row_ctid
    FROM eligible
    ORDER BY distance, sequence, id
    LIMIT :limit)
SELECT e."thread_id", e."id", e."text", e."sequence", e."occurred_at", e."importance", e."embedding_model", CASE WHEN e.eager THEN e."tenant_id" END AS "tenant_id", CASE WHEN e.eager THEN e."resource_id" END AS "resource_id", CASE WHEN e.eager THEN e."role" END AS "role", CASE WHEN e.eager THEN CAST(e.metadata AS text) END AS "metadata", CASE WHEN e.eager THEN e."consent_explicit" END AS "consent_explicit", CASE WHEN e.eager THEN e."consent_source" END AS "consent_source", CASE WHEN e.eager THEN e."consent_scope" END AS "consent_scope", CASE WHEN e.eager THEN e."consent_visible" END AS "consent_visible", CASE WHEN e.eager THEN e."consent_granted_at" END AS "consent_granted_at", CASE WHEN e.eager THEN e."consent_revoked_at" END AS "consent_revoked_at", CASE WHEN e.eager THEN e."created_at" END AS "created_at", CASE WHEN e.eager THEN e."written_at" END AS "written_at", CASE WHEN e.eager THEN e."legal_hold" END AS "legal_hold", CASE WHEN e.eager THEN e."status" END AS "status", CASE WHEN e.eager THEN e."revision" END AS "revision", CASE WHEN e.eager THEN e."attempts" END AS "attempts", CASE WHEN e.eager THEN e."last_error" END AS "last_error", CASE WHEN NOT e.eager THEN record_send(ROW(e."tenant_id", e."resource_id", e."role", CAST(e.metadata AS text), e."consent_explicit", e."consent_source", e."consent_scope", e."consent_visible", e."consent_granted_at", e."consent_revoked_at", e."created_at", e."written_at", e."legal_hold", e."status", e."revision", e."attempts", e."last_error")) END AS deferred, vector_send(e.embedding) AS embedding, CASE WHEN e.window_embeddings IS NOT NULL THEN ARRAY(SELECT vector_send(w.v)
    FROM unnest(e.window_embeddings) WITH ORDINALITY AS w(v, n)
    ORDER BY w.n) END AS windows, s.documents, s.total_length, NULL::bigint[] AS df_ords, NULL::bigint[] AS df_counts, (SELECT count(*)
    FROM "prism_memory"."semantic_memory" p
    WHERE p.status = 'pending'
    AND p.tenant_id = :tenant
    AND p.resource_id = (SELECT CAST(:resource AS text))
    AND p.thread_id = (SELECT CAST(:thread AS text))) AS pending, (SELECT g.model
    FROM "prism_memory"."semantic_memory_generations" g
    WHERE g.active) AS active_model
FROM stats s
LEFT JOIN (SELECT e.*, e.ctid = ANY(ARRAY((SELECT row_ctid
                FROM nearest_top
                LIMIT (CAST(:limit AS bigint) + 3) / 4))) AS eager
    FROM "prism_memory"."semantic_memory" e
    WHERE e.ctid = ANY(ARRAY(SELECT row_ctid
            FROM nearest_top))
    OFFSET 0) AS e
ON e.tenant_id = :tenant
AND e.resource_id = (SELECT CAST(:resource AS text))
