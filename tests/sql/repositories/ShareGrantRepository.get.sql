-- name: repositories/ShareGrantRepository.get
-- source: prism_memory.postgres.repositories.mapped.ShareGrantRepository.get
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT prism_memory.semantic_memory_share_grant.tenant_id, prism_memory.semantic_memory_share_grant.resource_id, prism_memory.semantic_memory_share_grant.parent_thread_id, prism_memory.semantic_memory_share_grant.child_thread_id, prism_memory.semantic_memory_share_grant.source_ids, prism_memory.semantic_memory_share_grant.created_at, prism_memory.semantic_memory_share_grant.expires_at 
FROM prism_memory.semantic_memory_share_grant 
WHERE prism_memory.semantic_memory_share_grant.tenant_id = $1::VARCHAR AND prism_memory.semantic_memory_share_grant.resource_id = $2::VARCHAR AND prism_memory.semantic_memory_share_grant.parent_thread_id = $3::VARCHAR AND prism_memory.semantic_memory_share_grant.child_thread_id = $4::VARCHAR
