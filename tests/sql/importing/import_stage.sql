-- name: importing/import_stage
-- source: prism_memory.postgres.statements.importing.ImportSql.import_stage
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
CREATE TEMP TABLE IF NOT EXISTS pg_temp."semantic_memory_import" (tenant_id text, resource_id text, thread_id text, id text, text text, role text, metadata jsonb, consent_explicit boolean, consent_source text, consent_scope text, consent_visible boolean, consent_granted_at timestamptz, consent_revoked_at timestamptz, sequence bigint, occurred_at timestamptz, importance double precision, embedding vector, embedding_model text, terms text, term_count integer, ord bigint)
ON COMMIT DELETE ROWS
