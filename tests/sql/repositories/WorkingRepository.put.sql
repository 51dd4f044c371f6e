-- name: repositories/WorkingRepository.put
-- source: prism_memory.postgres.repositories.mapped.WorkingRepository.put
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
INSERT INTO prism_memory.semantic_memory_working (tenant_id, resource_id, thread_key, version, data, updated_at)
VALUES ($1::VARCHAR, $2::VARCHAR, $3::VARCHAR, $4::INTEGER, $5::JSONB, $6::TIMESTAMP WITH TIME ZONE)
ON CONFLICT (tenant_id, resource_id, thread_key)
DO UPDATE
SET version = (prism_memory.semantic_memory_working.version + $7::INTEGER), data = excluded.data, updated_at = excluded.updated_at
RETURNING prism_memory.semantic_memory_working.tenant_id, prism_memory.semantic_memory_working.resource_id, prism_memory.semantic_memory_working.thread_key, prism_memory.semantic_memory_working.version, prism_memory.semantic_memory_working.data, prism_memory.semantic_memory_working.updated_at
