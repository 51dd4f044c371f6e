-- name: rag_store/RagSession.upsert
-- source: prism_memory.postgres.rag_store.RagSession.upsert
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
INSERT INTO prism_memory.semantic_memory_rag_chunks (tenant_id, scope, generation, source_id, chunk_index, text, metadata, digest, embedding, text_tsv, term_count, created_at, embedding_model)
VALUES ($1::VARCHAR, $2::VARCHAR, $3::BIGINT, $4::VARCHAR, $5::INTEGER, $6::VARCHAR, $7::JSONB, $8::VARCHAR, $9, $10, $11::INTEGER, now(), $12::VARCHAR)
ON CONFLICT (tenant_id, scope, generation, source_id, chunk_index)
DO UPDATE
SET text = excluded.text, metadata = excluded.metadata, digest = excluded.digest, embedding = excluded.embedding, text_tsv = excluded.text_tsv, term_count = excluded.term_count, created_at = excluded.created_at, embedding_model = excluded.embedding_model
