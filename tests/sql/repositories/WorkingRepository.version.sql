-- name: repositories/WorkingRepository.version
-- source: prism_memory.postgres.repositories.mapped.WorkingRepository.version
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT prism_memory.semantic_memory_working.tenant_id, prism_memory.semantic_memory_working.resource_id, prism_memory.semantic_memory_working.thread_key, prism_memory.semantic_memory_working.version, prism_memory.semantic_memory_working.data, prism_memory.semantic_memory_working.updated_at 
FROM prism_memory.semantic_memory_working 
WHERE prism_memory.semantic_memory_working.tenant_id = $1::VARCHAR AND prism_memory.semantic_memory_working.resource_id = $2::VARCHAR AND prism_memory.semantic_memory_working.thread_key = $3::VARCHAR
