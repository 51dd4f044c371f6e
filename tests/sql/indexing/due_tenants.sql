-- name: indexing/due_tenants
-- source: prism_memory.postgres.statements.indexing.IndexingSql.due_tenants
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH RECURSIVE turn(tenant_id) AS ((SELECT tenant_id
        FROM "prism_memory"."semantic_memory"
        WHERE status = 'pending'
        ORDER BY tenant_id
        LIMIT 1)
    UNION ALL
    SELECT (SELECT e.tenant_id
        FROM "prism_memory"."semantic_memory" e
        WHERE e.status = 'pending'
        AND e.tenant_id > turn.tenant_id
        ORDER BY e.tenant_id
        LIMIT 1)
    FROM turn
    WHERE turn.tenant_id IS NOT NULL)
SELECT tenant_id
FROM turn
WHERE tenant_id IS NOT NULL
LIMIT :limit
