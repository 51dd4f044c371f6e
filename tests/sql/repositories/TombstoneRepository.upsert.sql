-- name: repositories/TombstoneRepository.upsert
-- source: prism_memory.postgres.repositories.entries.TombstoneRepository.upsert
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
INSERT INTO prism_memory.semantic_memory_invalidation (tenant_id, resource_id, thread_id, entry_id, cause_id, reason, created_at)
VALUES ($1::VARCHAR, $2::VARCHAR, $3::VARCHAR, $4::VARCHAR, $5::VARCHAR, $6::VARCHAR, $7::TIMESTAMP WITH TIME ZONE), ($8::VARCHAR, $9::VARCHAR, $10::VARCHAR, $11::VARCHAR, $12::VARCHAR, $13::VARCHAR, $14::TIMESTAMP WITH TIME ZONE)
ON CONFLICT (tenant_id, resource_id, thread_id, entry_id, cause_id, reason)
DO UPDATE
SET created_at = excluded.created_at
