-- name: repositories/ShareGrantRepository.put
-- source: prism_memory.postgres.repositories.mapped.ShareGrantRepository.put
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
INSERT INTO prism_memory.semantic_memory_share_grant (tenant_id, resource_id, parent_thread_id, child_thread_id, source_ids, created_at, expires_at)
VALUES ($1::VARCHAR, $2::VARCHAR, $3::VARCHAR, $4::VARCHAR, $5::TEXT[], $6::TIMESTAMP WITH TIME ZONE, $7::TIMESTAMP WITH TIME ZONE)
ON CONFLICT (tenant_id, resource_id, parent_thread_id, child_thread_id)
DO UPDATE
SET source_ids = excluded.source_ids, created_at = excluded.created_at, expires_at = excluded.expires_at
RETURNING prism_memory.semantic_memory_share_grant.tenant_id, prism_memory.semantic_memory_share_grant.resource_id, prism_memory.semantic_memory_share_grant.parent_thread_id, prism_memory.semantic_memory_share_grant.child_thread_id, prism_memory.semantic_memory_share_grant.source_ids, prism_memory.semantic_memory_share_grant.created_at, prism_memory.semantic_memory_share_grant.expires_at
