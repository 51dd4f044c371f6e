-- name: repositories/IndexingRepository.requeue_failed.ids
-- source: prism_memory.postgres.repositories.indexing.IndexingRepository.requeue_failed
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
UPDATE prism_memory.semantic_memory
SET status=$1::VARCHAR, attempts=$2::INTEGER, last_error=$3::VARCHAR, next_attempt_at=$4::TIMESTAMP WITH TIME ZONE, claimed_by=$5::VARCHAR, claimed_until=$6::TIMESTAMP WITH TIME ZONE
WHERE prism_memory.semantic_memory.tenant_id = $7::VARCHAR
AND prism_memory.semantic_memory.resource_id = $8::VARCHAR
AND prism_memory.semantic_memory.thread_id = $9::VARCHAR
AND prism_memory.semantic_memory.status = $10::VARCHAR
AND prism_memory.semantic_memory.id = ANY ($11::TEXT[])
