-- name: repositories/TombstoneRepository.remove
-- source: prism_memory.postgres.repositories.entries.TombstoneRepository.remove
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
DELETE FROM prism_memory.semantic_memory_invalidation
WHERE prism_memory.semantic_memory_invalidation.tenant_id = $1::VARCHAR
AND prism_memory.semantic_memory_invalidation.resource_id = $2::VARCHAR
AND prism_memory.semantic_memory_invalidation.thread_id = $3::VARCHAR
AND prism_memory.semantic_memory_invalidation.cause_id = $4::VARCHAR
AND prism_memory.semantic_memory_invalidation.reason = $5::VARCHAR
