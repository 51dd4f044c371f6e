-- name: rag_store/RagSession.set_source_access.2
-- source: prism_memory.postgres.rag_store.RagSession.set_source_access
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
INSERT INTO prism_memory.semantic_memory_rag_source_acl (tenant_id, scope, source_id, principal_kind, principal_id, access_version, created_at)
VALUES ($1::VARCHAR, $2::VARCHAR, $3::VARCHAR, $4::VARCHAR, $5::VARCHAR, $6::BIGINT, now())
