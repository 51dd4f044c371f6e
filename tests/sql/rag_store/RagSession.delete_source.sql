-- name: rag_store/RagSession.delete_source
-- source: prism_memory.postgres.rag_store.RagSession.delete_source
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
DELETE FROM prism_memory.semantic_memory_rag_chunks
WHERE prism_memory.semantic_memory_rag_chunks.tenant_id = $1::VARCHAR
AND prism_memory.semantic_memory_rag_chunks.scope = $2::VARCHAR
AND prism_memory.semantic_memory_rag_chunks.generation = $3::BIGINT
AND prism_memory.semantic_memory_rag_chunks.source_id = $4::VARCHAR
