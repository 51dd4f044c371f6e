-- name: repositories/ShareGrantRepository.delete
-- source: prism_memory.postgres.repositories.mapped.ShareGrantRepository.delete
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
DELETE FROM prism_memory.semantic_memory_share_grant
WHERE prism_memory.semantic_memory_share_grant.tenant_id = $1::VARCHAR
AND prism_memory.semantic_memory_share_grant.resource_id = $2::VARCHAR
AND prism_memory.semantic_memory_share_grant.parent_thread_id = $3::VARCHAR
AND prism_memory.semantic_memory_share_grant.child_thread_id = $4::VARCHAR
