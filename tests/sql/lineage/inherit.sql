-- name: lineage/inherit
-- source: prism_memory.postgres.statements.lineage.LineageSql.inherit
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
INSERT INTO "prism_memory"."semantic_memory_invalidation" (tenant_id, resource_id, thread_id, entry_id, cause_id, reason, created_at)
SELECT :tenant, :resource, :thread, t.entry_id, t.cause_id, t.reason, t.created_at
FROM unnest(CAST(:entries AS text[]), CAST(:causes AS text[]), CAST(:reasons AS text[]), CAST(:times AS timestamptz[])) AS t(entry_id, cause_id, reason, created_at)
ON CONFLICT
DO NOTHING
