-- name: rag_store/RagSession.get_by_source
-- source: prism_memory.postgres.rag_store.RagSession.get_by_source
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT prism_memory.semantic_memory_rag_chunks.source_id, prism_memory.semantic_memory_rag_chunks.chunk_index, prism_memory.semantic_memory_rag_chunks.text, prism_memory.semantic_memory_rag_chunks.metadata, prism_memory.semantic_memory_rag_chunks.digest, prism_memory.semantic_memory_rag_chunks.embedding, prism_memory.semantic_memory_rag_chunks.embedding_model 
FROM prism_memory.semantic_memory_rag_chunks 
WHERE prism_memory.semantic_memory_rag_chunks.tenant_id = $1::VARCHAR AND prism_memory.semantic_memory_rag_chunks.scope = $2::VARCHAR AND prism_memory.semantic_memory_rag_chunks.generation = $3::BIGINT AND prism_memory.semantic_memory_rag_chunks.source_id = $4::VARCHAR ORDER BY prism_memory.semantic_memory_rag_chunks.chunk_index
