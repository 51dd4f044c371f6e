-- name: repositories/WorkingRepository.put.expected
-- source: prism_memory.postgres.repositories.mapped.WorkingRepository.put
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
UPDATE prism_memory.semantic_memory_working
SET version=(prism_memory.semantic_memory_working.version + $1::INTEGER), data=$2::JSONB, updated_at=$3::TIMESTAMP WITH TIME ZONE
WHERE prism_memory.semantic_memory_working.tenant_id = $4::VARCHAR
AND prism_memory.semantic_memory_working.resource_id = $5::VARCHAR
AND prism_memory.semantic_memory_working.thread_key = $6::VARCHAR
AND prism_memory.semantic_memory_working.version = $7::INTEGER
RETURNING prism_memory.semantic_memory_working.tenant_id, prism_memory.semantic_memory_working.resource_id, prism_memory.semantic_memory_working.thread_key, prism_memory.semantic_memory_working.version, prism_memory.semantic_memory_working.data, prism_memory.semantic_memory_working.updated_at
