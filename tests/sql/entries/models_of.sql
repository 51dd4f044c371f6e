-- name: entries/models_of
-- source: prism_memory.postgres.statements.entries.RowSql.models_of
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT DISTINCT k.ord, e.embedding_model
FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), CAST(:threads AS text[])) WITH ORDINALITY AS k(tenant_id, resource_id, thread_id, ord)
JOIN "prism_memory"."semantic_memory" e
ON e.tenant_id = k.tenant_id
AND e.resource_id = k.resource_id
AND e.thread_id = k.thread_id
WHERE e.embedding_model IS NOT NULL
