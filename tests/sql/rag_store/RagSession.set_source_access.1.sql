-- name: rag_store/RagSession.set_source_access.1
-- source: prism_memory.postgres.rag_store.RagSession.set_source_access
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
DELETE FROM prism_memory.semantic_memory_rag_source_acl
WHERE prism_memory.semantic_memory_rag_source_acl.tenant_id = $1::VARCHAR
AND prism_memory.semantic_memory_rag_source_acl.scope = $2::VARCHAR
AND prism_memory.semantic_memory_rag_source_acl.source_id = $3::VARCHAR
