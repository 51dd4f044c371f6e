-- name: repositories/EntryRepository.set_consent
-- source: prism_memory.postgres.repositories.entries.EntryRepository.set_consent
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
UPDATE prism_memory.semantic_memory
SET consent_explicit=$1::BOOLEAN, consent_source=$2::VARCHAR, consent_scope=$3::VARCHAR, consent_visible=$4::BOOLEAN, consent_granted_at=$5::TIMESTAMP WITH TIME ZONE, consent_revoked_at=$6::TIMESTAMP WITH TIME ZONE
WHERE prism_memory.semantic_memory.tenant_id = $7::VARCHAR
AND prism_memory.semantic_memory.resource_id = $8::VARCHAR
AND prism_memory.semantic_memory.thread_id = $9::VARCHAR
AND prism_memory.semantic_memory.id = $10::VARCHAR
RETURNING prism_memory.semantic_memory.tenant_id, prism_memory.semantic_memory.resource_id, prism_memory.semantic_memory.thread_id, prism_memory.semantic_memory.id, prism_memory.semantic_memory.text, prism_memory.semantic_memory.role, prism_memory.semantic_memory.metadata, prism_memory.semantic_memory.consent_explicit, prism_memory.semantic_memory.consent_source, prism_memory.semantic_memory.consent_scope, prism_memory.semantic_memory.consent_visible, prism_memory.semantic_memory.consent_granted_at, prism_memory.semantic_memory.consent_revoked_at, prism_memory.semantic_memory.sequence, prism_memory.semantic_memory.occurred_at, prism_memory.semantic_memory.created_at, prism_memory.semantic_memory.written_at, prism_memory.semantic_memory.importance, prism_memory.semantic_memory.legal_hold, prism_memory.semantic_memory.status, prism_memory.semantic_memory.revision, prism_memory.semantic_memory.attempts, prism_memory.semantic_memory.last_error, prism_memory.semantic_memory.embedding_model
