-- name: entries/replace_text
-- source: prism_memory.postgres.statements.entries.RowSql.replace_text
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
UPDATE "prism_memory"."semantic_memory" e
SET text = :text, embedding = :embedding, embedding_model = CAST(:model AS text), window_embeddings = CAST(:window_embeddings AS vector[]), text_tsv = array_to_tsvector(CAST(:lexical_terms AS text[])), term_count = :term_count, revision = e.revision + 1, status = 'indexed', attempts = 0, last_error = NULL, next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL, written_at = :now
WHERE e.tenant_id = :tenant
AND e.resource_id = :resource
AND e.thread_id = :thread
AND e.id = :id
RETURNING e."tenant_id", e."resource_id", e."thread_id", e."id", e."text", e."role", e."metadata", e."consent_explicit", e."consent_source", e."consent_scope", e."consent_visible", e."consent_granted_at", e."consent_revoked_at", e."sequence", e."occurred_at", e."created_at", e."written_at", e."importance", e."legal_hold", e."status", e."revision", e."attempts", e."last_error", e."embedding_model"
