-- name: repositories/EntryRepository.indexed_threads
-- source: prism_memory.postgres.repositories.entries.EntryRepository.indexed_threads
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT DISTINCT prism_memory.semantic_memory.tenant_id, prism_memory.semantic_memory.resource_id, prism_memory.semantic_memory.thread_id 
FROM prism_memory.semantic_memory 
WHERE prism_memory.semantic_memory.status = $1::VARCHAR 
 LIMIT $2::INTEGER
