-- name: recall/search.occurred_after.shared.lexical.by_model
-- source: prism_memory.postgres.statements.recall.RecallSql.search(require_consent=False, occurred_after=True, shared=True, lexical=True, resource_wide=False, by_model=True)
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH dead AS (SELECT jsonb_object_agg(k.entry_id, k.kill) AS kills
    FROM (SELECT entry_id, max(CASE WHEN reason = 'corrected' THEN created_at ELSE 'infinity'::timestamptz END) AS kill
        FROM "prism_memory"."semantic_memory_invalidation"
        WHERE tenant_id = :tenant
        AND resource_id = (SELECT CAST(:resource AS text))
        AND thread_id = (SELECT CAST(:thread AS text))
        GROUP BY entry_id) AS k),
scanned AS MATERIALIZED (SELECT e.ctid AS row_ctid, e.id, e.sequence, e.term_count, CASE WHEN e.text_tsv @@ CAST(:any_term AS tsquery) THEN ARRAY(SELECT q.ord
        FROM unnest(CAST(:term_queries AS tsquery[])) WITH ORDINALITY AS q(tsq, ord)
        WHERE e.text_tsv @@ q.tsq
        ORDER BY q.ord) ELSE '{}'::bigint[] END AS matched, true AS own, CASE WHEN COALESCE(e.embedding IS NOT NULL
        AND COALESCE(e.embedding_model, (SELECT g.model
                FROM "prism_memory"."semantic_memory_generations" g
                WHERE g.role = 'primary')) = CAST(:model AS text), false) THEN CASE WHEN e.window_embeddings IS NULL THEN e.embedding <=> :query ELSE LEAST(e.embedding <=> :query, (SELECT min(w.v <=> :query)
            FROM unnest(e.window_embeddings) AS w(v)) + CAST(0.15 AS float8)) END ELSE (SELECT v.embedding <=> :query
        FROM "prism_memory"."semantic_memory_vectors" v
        WHERE v.tenant_id = e.tenant_id
        AND v.resource_id = e.resource_id
        AND v.thread_id = e.thread_id
        AND v.entry_id = e.id
        AND v.model = CAST(:model AS text)
        AND v.revision = e.revision
        AND v.embedding IS NOT NULL) END AS raw_distance
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
    UNION ALL
    SELECT e.ctid AS row_ctid, e.id, e.sequence, e.term_count, CASE WHEN e.text_tsv @@ CAST(:any_term AS tsquery) THEN ARRAY(SELECT q.ord
        FROM unnest(CAST(:term_queries AS tsquery[])) WITH ORDINALITY AS q(tsq, ord)
        WHERE e.text_tsv @@ q.tsq
        ORDER BY q.ord) ELSE '{}'::bigint[] END AS matched, false AS own, CASE WHEN COALESCE(e.embedding IS NOT NULL
        AND COALESCE(e.embedding_model, (SELECT g.model
                FROM "prism_memory"."semantic_memory_generations" g
                WHERE g.role = 'primary')) = CAST(:model AS text), false) THEN CASE WHEN e.window_embeddings IS NULL THEN e.embedding <=> :query ELSE LEAST(e.embedding <=> :query, (SELECT min(w.v <=> :query)
            FROM unnest(e.window_embeddings) AS w(v)) + CAST(0.15 AS float8)) END ELSE (SELECT v.embedding <=> :query
        FROM "prism_memory"."semantic_memory_vectors" v
        WHERE v.tenant_id = e.tenant_id
        AND v.resource_id = e.resource_id
        AND v.thread_id = e.thread_id
        AND v.entry_id = e.id
        AND v.model = CAST(:model AS text)
        AND v.revision = e.revision
        AND v.embedding IS NOT NULL) END AS raw_distance
    FROM "prism_memory"."semantic_memory" e
    WHERE e.tenant_id = :tenant
    AND e.resource_id = (SELECT CAST(:resource AS text))
    AND e.thread_id = (SELECT CAST(:parent AS text))
    AND e.id = ANY(CAST(:shared_ids AS text[]))
    AND e.status = 'indexed'
    AND e.consent_visible
    AND e.consent_revoked_at IS NULL
    AND NOT e.legal_hold
    AND e.occurred_at >= :occurred_after
    AND (((e.metadata -> '_lineage'::text) -> 'sourceIds'::text) IS NULL
        OR NOT EXISTS (SELECT 1
            FROM "prism_memory"."semantic_memory_invalidation" t
            WHERE t.tenant_id = e.tenant_id
            AND t.resource_id = e.resource_id
            AND t.thread_id = e.thread_id
            AND t.entry_id IN (SELECT jsonb_array_elements_text(((e.metadata -> '_lineage'::text) -> 'sourceIds'::text)))
            AND (t.reason <> 'corrected'
                OR t.created_at > e.written_at)))
    AND NOT EXISTS (SELECT 1
        FROM "prism_memory"."semantic_memory_invalidation" o
        WHERE o.tenant_id = e.tenant_id
        AND o.resource_id = e.resource_id
        AND o.thread_id = e.thread_id
        AND o.entry_id = e.id
        AND (o.reason <> 'corrected'
            OR o.created_at > e.written_at))),
eligible AS MATERIALIZED (SELECT row_ctid, id, sequence, COALESCE(NULLIF(raw_distance, 'NaN'::float8), 1.0) AS distance, term_count, matched
    FROM scanned
    WHERE raw_distance IS NOT NULL),
stats AS (SELECT count(*) AS documents, COALESCE(sum(term_count), 0) AS total_length
    FROM eligible),
nearest_top AS (SELECT row_ctid
    FROM eligible
    ORDER BY distance, sequence, id
    LIMIT :limit),
lexical AS MATERIALIZED (SELECT row_ctid, id, sequence, term_count, matched
    FROM eligible
    WHERE cardinality(matched) > 0),
holdings AS (SELECT matched, count(*) AS holders
    FROM lexical
    GROUP BY matched),
frequencies AS (SELECT m.ord, CAST(sum(h.holders) AS bigint) AS df
    FROM holdings h, unnest(h.matched) AS m(ord)
    GROUP BY m.ord),
weights AS (SELECT f.ord, ln(CAST(1.0 AS float8) + (CAST(s.documents - f.df AS float8) + CAST(0.5 AS float8)) / (CAST(f.df AS float8) + CAST(0.5 AS float8))) AS idf
    FROM frequencies f
    CROSS JOIN stats s),
gains AS MATERIALIZED (SELECT h.matched, (SELECT sum(w.idf
            ORDER BY w.ord)
        FROM weights w
        WHERE w.ord = ANY(h.matched)) AS gain
    FROM holdings h),
lexical_top AS (SELECT el.row_ctid
    FROM lexical el
    JOIN gains g
    ON g.matched = el.matched
    CROSS JOIN stats s
    ORDER BY g.gain * (CAST(0.9 AS float8) + CAST(1.0 AS float8)) / (CAST(1.0 AS float8) + CAST(0.9 AS float8) * (CAST(1.0 AS float8) - CAST(0.4 AS float8) + CAST(0.4 AS float8) * el.term_count / (CAST(s.total_length AS float8) / CAST(s.documents AS float8)))) DESC, el.sequence, el.id
    LIMIT :limit)
SELECT e."thread_id", e."id", e."text", e."sequence", e."occurred_at", e."importance", CAST(:model AS text) AS embedding_model, CASE WHEN e.eager THEN e."tenant_id" END AS "tenant_id", CASE WHEN e.eager THEN e."resource_id" END AS "resource_id", CASE WHEN e.eager THEN e."role" END AS "role", CASE WHEN e.eager THEN CAST(e.metadata AS text) END AS "metadata", CASE WHEN e.eager THEN e."consent_explicit" END AS "consent_explicit", CASE WHEN e.eager THEN e."consent_source" END AS "consent_source", CASE WHEN e.eager THEN e."consent_scope" END AS "consent_scope", CASE WHEN e.eager THEN e."consent_visible" END AS "consent_visible", CASE WHEN e.eager THEN e."consent_granted_at" END AS "consent_granted_at", CASE WHEN e.eager THEN e."consent_revoked_at" END AS "consent_revoked_at", CASE WHEN e.eager THEN e."created_at" END AS "created_at", CASE WHEN e.eager THEN e."written_at" END AS "written_at", CASE WHEN e.eager THEN e."legal_hold" END AS "legal_hold", CASE WHEN e.eager THEN e."status" END AS "status", CASE WHEN e.eager THEN e."revision" END AS "revision", CASE WHEN e.eager THEN e."attempts" END AS "attempts", CASE WHEN e.eager THEN e."last_error" END AS "last_error", CASE WHEN NOT e.eager THEN record_send(ROW(e."tenant_id", e."resource_id", e."role", CAST(e.metadata AS text), e."consent_explicit", e."consent_source", e."consent_scope", e."consent_visible", e."consent_granted_at", e."consent_revoked_at", e."created_at", e."written_at", e."legal_hold", e."status", e."revision", e."attempts", e."last_error")) END AS deferred, CASE WHEN COALESCE(e.embedding IS NOT NULL
    AND COALESCE(e.embedding_model, (SELECT g.model
            FROM "prism_memory"."semantic_memory_generations" g
            WHERE g.role = 'primary')) = CAST(:model AS text), false) THEN vector_send(e.embedding) ELSE (SELECT vector_send(v.embedding)
    FROM "prism_memory"."semantic_memory_vectors" v
    WHERE v.tenant_id = e.tenant_id
    AND v.resource_id = e.resource_id
    AND v.thread_id = e.thread_id
    AND v.entry_id = e.id
    AND v.model = CAST(:model AS text)
    AND v.revision = e.revision) END AS embedding, CASE WHEN e.window_embeddings IS NOT NULL
AND COALESCE(e.embedding IS NOT NULL
    AND COALESCE(e.embedding_model, (SELECT g.model
            FROM "prism_memory"."semantic_memory_generations" g
            WHERE g.role = 'primary')) = CAST(:model AS text), false) THEN ARRAY(SELECT vector_send(w.v)
    FROM unnest(e.window_embeddings) WITH ORDINALITY AS w(v, n)
    ORDER BY w.n) END AS windows, s.documents, s.total_length, ARRAY(SELECT ord
    FROM frequencies
    ORDER BY ord) AS df_ords, ARRAY(SELECT df
    FROM frequencies
    ORDER BY ord) AS df_counts, (SELECT count(*)
    FROM "prism_memory"."semantic_memory" p
    WHERE p.status = 'pending'
    AND p.tenant_id = :tenant
    AND p.resource_id = (SELECT CAST(:resource AS text))
    AND p.thread_id = (SELECT CAST(:thread AS text))) + (SELECT count(*)
    FROM scanned
    WHERE own
    AND raw_distance IS NULL) AS pending, (SELECT g.model
    FROM "prism_memory"."semantic_memory_generations" g
    WHERE g.active) AS active_model
FROM stats s
LEFT JOIN (SELECT e.*, e.ctid = ANY(ARRAY((SELECT row_ctid
                FROM nearest_top
                LIMIT (CAST(:limit AS bigint) + 3) / 4)
            UNION (SELECT row_ctid
                FROM lexical_top
                LIMIT (CAST(:limit AS bigint) + 3) / 4))) AS eager
    FROM "prism_memory"."semantic_memory" e
    WHERE e.ctid = ANY(ARRAY(SELECT row_ctid
            FROM nearest_top
            UNION
            SELECT row_ctid
            FROM lexical_top))
    OFFSET 0) AS e
ON e.tenant_id = :tenant
AND e.resource_id = (SELECT CAST(:resource AS text))
