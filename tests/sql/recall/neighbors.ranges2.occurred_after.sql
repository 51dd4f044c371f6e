-- name: recall/neighbors.ranges2.occurred_after
-- source: prism_memory.postgres.statements.recall.RecallSql.neighbors(ranges=2, require_consent=False, occurred_after=True)
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT e."tenant_id", e."resource_id", e."thread_id", e."id", e."text", e."role", e."metadata", e."consent_explicit", e."consent_source", e."consent_scope", e."consent_visible", e."consent_granted_at", e."consent_revoked_at", e."sequence", e."occurred_at", e."created_at", e."written_at", e."importance", e."legal_hold", e."status", e."revision", e."attempts", e."last_error", e."embedding_model"
FROM "prism_memory"."semantic_memory" e
WHERE e.tenant_id = :tenant
AND e.resource_id = :resource
AND e.thread_id = :thread
AND (e.sequence BETWEEN :low0 AND :high0
    OR e.sequence BETWEEN :low1 AND :high1)
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
        OR o.created_at > e.written_at))
ORDER BY e.sequence, e.id
