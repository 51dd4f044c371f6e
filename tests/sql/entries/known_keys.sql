-- name: entries/known_keys
-- source: prism_memory.postgres.statements.entries.RowSql.known_keys
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT k.ord
FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), CAST(:threads AS text[]), CAST(:ids AS text[])) WITH ORDINALITY AS k(tenant_id, resource_id, thread_id, id, ord)
WHERE EXISTS (SELECT 1
    FROM (SELECT e.tenant_id, e.resource_id, e.thread_id, e.id
        FROM "prism_memory"."semantic_memory" e
        WHERE ROW(e.tenant_id, e.resource_id, e.thread_id, e.id) >= ROW(k.tenant_id, k.resource_id, k.thread_id, k.id)
        ORDER BY e.tenant_id, e.resource_id, e.thread_id, e.id
        LIMIT 1) AS e
    WHERE ROW(e.tenant_id, e.resource_id, e.thread_id, e.id) = ROW(k.tenant_id, k.resource_id, k.thread_id, k.id))
