-- name: entries/known_ids
-- source: prism_memory.postgres.statements.entries.RowSql.known_ids
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT e.id
FROM (SELECT DISTINCT id
    FROM unnest(CAST(:ids AS text[])) AS u(id)) AS k
CROSS JOIN LATERAL (SELECT e.tenant_id, e.resource_id, e.thread_id, e.id
    FROM "prism_memory"."semantic_memory" e
    WHERE e.tenant_id = :tenant
    AND ROW(e.resource_id, e.thread_id, e.id) >= ROW(CAST(:resource AS text), CAST(:thread AS text), k.id)
    ORDER BY e.tenant_id, e.resource_id, e.thread_id, e.id
    LIMIT 1) AS e
WHERE ROW(e.tenant_id, e.resource_id, e.thread_id, e.id) = ROW(CAST(:tenant AS text), CAST(:resource AS text), CAST(:thread AS text), k.id)
