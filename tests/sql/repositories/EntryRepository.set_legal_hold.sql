-- name: repositories/EntryRepository.set_legal_hold
-- source: prism_memory.postgres.repositories.entries.EntryRepository.set_legal_hold
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
UPDATE prism_memory.semantic_memory
SET legal_hold=$1::BOOLEAN
WHERE prism_memory.semantic_memory.tenant_id = $2::VARCHAR
AND prism_memory.semantic_memory.resource_id = $3::VARCHAR
AND prism_memory.semantic_memory.thread_id = $4::VARCHAR
AND prism_memory.semantic_memory.id = ANY ($5::TEXT[])
