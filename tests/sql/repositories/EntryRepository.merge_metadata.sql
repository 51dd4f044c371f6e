-- name: repositories/EntryRepository.merge_metadata
-- source: prism_memory.postgres.repositories.entries.EntryRepository.merge_metadata
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
UPDATE prism_memory.semantic_memory
SET metadata=(prism_memory.semantic_memory.metadata || ($1::JSONB -> prism_memory.semantic_memory.id))
WHERE prism_memory.semantic_memory.tenant_id = $2::VARCHAR
AND prism_memory.semantic_memory.resource_id = $3::VARCHAR
AND prism_memory.semantic_memory.thread_id = $4::VARCHAR
AND prism_memory.semantic_memory.id = ANY ($5::TEXT[])
AND prism_memory.semantic_memory.legal_hold IS false
AND prism_memory.semantic_memory.revision = CAST(($6::JSONB -> prism_memory.semantic_memory.id) ->> $7::INTEGER AS INTEGER)
AND prism_memory.semantic_memory.written_at = CAST(($6::JSONB -> prism_memory.semantic_memory.id) ->> $8::INTEGER AS TIMESTAMP WITH TIME ZONE)
