-- name: migrations/upgrade_head
-- source: prism_memory.postgres.migrate.build_ddl
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
BEGIN;

CREATE EXTENSION IF NOT EXISTS vector;

CREATE SCHEMA IF NOT EXISTS "prism_memory";

CREATE TABLE prism_memory.semantic_memory_alembic_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT semantic_memory_alembic_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> prism_memory_0001

CREATE EXTENSION IF NOT EXISTS vector;

CREATE SCHEMA IF NOT EXISTS "prism_memory";

CREATE TABLE prism_memory.semantic_memory (
    tenant_id TEXT NOT NULL, 
    resource_id TEXT NOT NULL, 
    thread_id TEXT NOT NULL, 
    id TEXT NOT NULL, 
    text TEXT NOT NULL, 
    role TEXT NOT NULL, 
    metadata JSONB NOT NULL, 
    consent_explicit BOOLEAN NOT NULL, 
    consent_source TEXT NOT NULL, 
    consent_scope TEXT NOT NULL, 
    consent_visible BOOLEAN NOT NULL, 
    consent_granted_at TIMESTAMP WITH TIME ZONE, 
    consent_revoked_at TIMESTAMP WITH TIME ZONE, 
    sequence BIGINT NOT NULL, 
    occurred_at TIMESTAMP WITH TIME ZONE NOT NULL, 
    created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
    written_at TIMESTAMP WITH TIME ZONE NOT NULL, 
    importance DOUBLE PRECISION NOT NULL, 
    legal_hold BOOLEAN NOT NULL, 
    status TEXT NOT NULL, 
    revision INTEGER NOT NULL, 
    attempts INTEGER NOT NULL, 
    last_error TEXT, 
    next_attempt_at TIMESTAMP WITH TIME ZONE, 
    claimed_by TEXT, 
    claimed_until TIMESTAMP WITH TIME ZONE, 
    embedding VECTOR, 
    text_tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, text)) STORED, 
    CONSTRAINT semantic_memory_pkey PRIMARY KEY (tenant_id, resource_id, thread_id, id), 
    CONSTRAINT semantic_memory_status_check CHECK (status IN ('pending', 'indexed', 'failed'))
);

CREATE INDEX semantic_memory_scope_seq_idx ON prism_memory.semantic_memory (tenant_id, resource_id, thread_id, sequence);

CREATE INDEX semantic_memory_pending_idx ON prism_memory.semantic_memory (sequence, id) WHERE status = 'pending'::text;

CREATE INDEX semantic_memory_lineage_gin ON prism_memory.semantic_memory USING gin (((metadata -> '_lineage'::text) -> 'sourceIds'::text));

CREATE INDEX semantic_memory_text_tsv_gin ON prism_memory.semantic_memory USING gin (text_tsv);

CREATE TABLE prism_memory.semantic_memory_invalidation (
    tenant_id TEXT NOT NULL, 
    resource_id TEXT NOT NULL, 
    thread_id TEXT NOT NULL, 
    entry_id TEXT NOT NULL, 
    cause_id TEXT NOT NULL, 
    reason TEXT NOT NULL, 
    created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
    CONSTRAINT semantic_memory_invalidation_pkey PRIMARY KEY (tenant_id, resource_id, thread_id, entry_id, cause_id)
);

CREATE INDEX semantic_memory_invalidation_cause_idx ON prism_memory.semantic_memory_invalidation (tenant_id, resource_id, thread_id, cause_id);

CREATE TABLE prism_memory.semantic_memory_share_grant (
    tenant_id TEXT NOT NULL, 
    resource_id TEXT NOT NULL, 
    parent_thread_id TEXT NOT NULL, 
    child_thread_id TEXT NOT NULL, 
    source_ids TEXT[] NOT NULL, 
    created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
    expires_at TIMESTAMP WITH TIME ZONE, 
    CONSTRAINT semantic_memory_share_grant_pkey PRIMARY KEY (tenant_id, resource_id, parent_thread_id, child_thread_id)
);

CREATE TABLE prism_memory.semantic_memory_rag_source_acl (
    tenant_id TEXT NOT NULL, 
    source_id TEXT NOT NULL, 
    principal_kind TEXT NOT NULL, 
    principal_id TEXT NOT NULL, 
    access_version BIGINT NOT NULL, 
    created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
    CONSTRAINT semantic_memory_rag_source_acl_pkey PRIMARY KEY (tenant_id, source_id, principal_kind, principal_id), 
    CONSTRAINT semantic_memory_rag_source_acl_kind_check CHECK (principal_kind IN ('principal', 'group'))
);

CREATE INDEX semantic_memory_rag_source_acl_principal_idx ON prism_memory.semantic_memory_rag_source_acl (tenant_id, principal_kind, principal_id, source_id);

CREATE TABLE prism_memory.semantic_memory_rag_scope_generations (
    tenant_id TEXT NOT NULL, 
    scope TEXT NOT NULL, 
    generation BIGINT NOT NULL, 
    updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
    CONSTRAINT semantic_memory_rag_scope_generations_pkey PRIMARY KEY (tenant_id, scope)
);

CREATE TABLE prism_memory.semantic_memory_working (
    tenant_id TEXT NOT NULL, 
    resource_id TEXT NOT NULL, 
    thread_key TEXT NOT NULL, 
    version INTEGER NOT NULL, 
    data JSONB NOT NULL, 
    updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
    CONSTRAINT semantic_memory_working_pkey PRIMARY KEY (tenant_id, resource_id, thread_key)
);

INSERT INTO prism_memory.semantic_memory_alembic_version (version_num) VALUES ('prism_memory_0001') RETURNING prism_memory.semantic_memory_alembic_version.version_num;

-- Running upgrade prism_memory_0001 -> prism_memory_0002

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0002' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0001';

-- Running upgrade prism_memory_0002 -> prism_memory_0003

ALTER TABLE prism_memory.semantic_memory_invalidation DROP CONSTRAINT semantic_memory_invalidation_pkey;

ALTER TABLE prism_memory.semantic_memory_invalidation ADD CONSTRAINT semantic_memory_invalidation_pkey PRIMARY KEY (tenant_id, resource_id, thread_id, entry_id, cause_id, reason);

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0003' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0002';

-- Running upgrade prism_memory_0003 -> prism_memory_0007

CREATE OR REPLACE FUNCTION "prism_memory"."semantic_memory_notify_pending"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM new_rows WHERE status = 'pending') THEN
    PERFORM pg_notify('prism_memory_pending', 'prism_memory.semantic_memory');
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER "semantic_memory_notify_insert" AFTER INSERT ON "prism_memory"."semantic_memory" REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "prism_memory"."semantic_memory_notify_pending"();

CREATE TRIGGER "semantic_memory_notify_update" AFTER UPDATE ON "prism_memory"."semantic_memory" REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "prism_memory"."semantic_memory_notify_pending"();

COMMIT;

CREATE INDEX CONCURRENTLY IF NOT EXISTS semantic_memory_pending_tenant_idx ON prism_memory.semantic_memory (tenant_id, sequence, id) WHERE status = 'pending'::text;

BEGIN;

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0007' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0003';

-- Running upgrade prism_memory_0007 -> prism_memory_0004

ALTER TABLE "prism_memory"."semantic_memory" ALTER COLUMN text_tsv DROP EXPRESSION;

ALTER TABLE "prism_memory"."semantic_memory" ADD COLUMN term_count integer;

ALTER TABLE "prism_memory"."semantic_memory" ALTER COLUMN term_count SET NOT NULL;

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0004' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0007';

-- Running upgrade prism_memory_0004 -> prism_memory_0006

CREATE TABLE prism_memory.semantic_memory_rag_chunks (
    tenant_id TEXT NOT NULL, 
    scope TEXT NOT NULL, 
    generation BIGINT NOT NULL, 
    source_id TEXT NOT NULL, 
    chunk_index INTEGER NOT NULL, 
    text TEXT NOT NULL, 
    metadata JSONB NOT NULL, 
    digest TEXT NOT NULL, 
    embedding VECTOR NOT NULL, 
    text_tsv TSVECTOR NOT NULL, 
    term_count INTEGER NOT NULL, 
    created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
    CONSTRAINT semantic_memory_rag_chunks_pkey PRIMARY KEY (tenant_id, scope, generation, source_id, chunk_index)
);

CREATE INDEX semantic_memory_rag_chunks_tsv_gin ON prism_memory.semantic_memory_rag_chunks USING gin (text_tsv);

ALTER TABLE prism_memory.semantic_memory_rag_source_acl ADD COLUMN scope TEXT DEFAULT '' NOT NULL;

ALTER TABLE prism_memory.semantic_memory_rag_source_acl ALTER COLUMN scope DROP DEFAULT;

DROP INDEX prism_memory.semantic_memory_rag_source_acl_principal_idx;

ALTER TABLE prism_memory.semantic_memory_rag_source_acl DROP CONSTRAINT semantic_memory_rag_source_acl_pkey;

ALTER TABLE prism_memory.semantic_memory_rag_source_acl ADD CONSTRAINT semantic_memory_rag_source_acl_pkey PRIMARY KEY (tenant_id, scope, source_id, principal_kind, principal_id);

CREATE INDEX semantic_memory_rag_source_acl_principal_idx ON prism_memory.semantic_memory_rag_source_acl (tenant_id, scope, principal_kind, principal_id, source_id);

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0006' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0004';

-- Running upgrade prism_memory_0006 -> prism_memory_0005

ALTER TABLE prism_memory.semantic_memory ADD COLUMN embedding_model TEXT;

CREATE INDEX semantic_memory_resource_shared_idx ON prism_memory.semantic_memory (tenant_id, resource_id, sequence) WHERE (consent_scope <> 'thread'::text);

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0005' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0006';

-- Running upgrade prism_memory_0005 -> prism_memory_0008

COMMIT;

CREATE INDEX CONCURRENTLY IF NOT EXISTS semantic_memory_pending_scope_idx ON prism_memory.semantic_memory (tenant_id, resource_id, thread_id, sequence, id) WHERE status = 'pending'::text;

CREATE INDEX CONCURRENTLY IF NOT EXISTS semantic_memory_claimed_idx ON prism_memory.semantic_memory (claimed_by) WHERE claimed_by IS NOT NULL;

BEGIN;

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0008' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0005';

-- Running upgrade prism_memory_0008 -> prism_memory_0009

ALTER TABLE "prism_memory"."semantic_memory" ALTER COLUMN thread_id SET (n_distinct = -0.05);

ANALYZE "prism_memory"."semantic_memory";

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0009' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0008';

-- Running upgrade prism_memory_0009 -> prism_memory_0010

COMMIT;

DROP INDEX CONCURRENTLY IF EXISTS prism_memory.semantic_memory_embedding_hnsw;

BEGIN;

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0010' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0009';

-- Running upgrade prism_memory_0010 -> prism_memory_0011

CREATE TABLE prism_memory.semantic_memory_generations (
    model TEXT NOT NULL, 
    width INTEGER NOT NULL, 
    role TEXT NOT NULL, 
    active BOOLEAN NOT NULL, 
    started_at TIMESTAMP WITH TIME ZONE NOT NULL, 
    switched_at TIMESTAMP WITH TIME ZONE, 
    CONSTRAINT semantic_memory_generations_pkey PRIMARY KEY (model), 
    CONSTRAINT semantic_memory_generations_role_check CHECK (role IN ('primary', 'shadow'))
);

CREATE UNIQUE INDEX semantic_memory_generations_active_idx ON prism_memory.semantic_memory_generations (active) WHERE active;

CREATE TABLE prism_memory.semantic_memory_vectors (
    tenant_id TEXT NOT NULL, 
    resource_id TEXT NOT NULL, 
    thread_id TEXT NOT NULL, 
    entry_id TEXT NOT NULL, 
    model TEXT NOT NULL, 
    revision INTEGER NOT NULL, 
    embedding VECTOR, 
    claimed_by TEXT, 
    claimed_until TIMESTAMP WITH TIME ZONE, 
    CONSTRAINT semantic_memory_vectors_pkey PRIMARY KEY (tenant_id, resource_id, thread_id, entry_id, model), 
    CONSTRAINT semantic_memory_vectors_entry_fkey FOREIGN KEY(tenant_id, resource_id, thread_id, entry_id) REFERENCES prism_memory.semantic_memory (tenant_id, resource_id, thread_id, id) ON DELETE CASCADE, 
    CONSTRAINT semantic_memory_vectors_model_fkey FOREIGN KEY(model) REFERENCES prism_memory.semantic_memory_generations (model) ON DELETE CASCADE
);

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0011' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0010';

-- Running upgrade prism_memory_0011 -> prism_memory_0012

ALTER TABLE prism_memory.semantic_memory_rag_chunks ADD COLUMN embedding_model TEXT;

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0012' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0011';

-- Running upgrade prism_memory_0012 -> prism_memory_0013

ALTER TABLE prism_memory.semantic_memory ADD COLUMN window_embeddings VECTOR[];

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0013' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0012';

-- Running upgrade prism_memory_0013 -> prism_memory_0014

DROP POLICY IF EXISTS prism_memory_tenant ON "prism_memory"."semantic_memory";

CREATE POLICY prism_memory_tenant ON "prism_memory"."semantic_memory" USING (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true))) WITH CHECK (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true)));

DROP POLICY IF EXISTS prism_memory_tenant ON "prism_memory"."semantic_memory_invalidation";

CREATE POLICY prism_memory_tenant ON "prism_memory"."semantic_memory_invalidation" USING (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true))) WITH CHECK (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true)));

DROP POLICY IF EXISTS prism_memory_tenant ON "prism_memory"."semantic_memory_share_grant";

CREATE POLICY prism_memory_tenant ON "prism_memory"."semantic_memory_share_grant" USING (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true))) WITH CHECK (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true)));

DROP POLICY IF EXISTS prism_memory_tenant ON "prism_memory"."semantic_memory_rag_source_acl";

CREATE POLICY prism_memory_tenant ON "prism_memory"."semantic_memory_rag_source_acl" USING (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true))) WITH CHECK (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true)));

DROP POLICY IF EXISTS prism_memory_tenant ON "prism_memory"."semantic_memory_rag_scope_generations";

CREATE POLICY prism_memory_tenant ON "prism_memory"."semantic_memory_rag_scope_generations" USING (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true))) WITH CHECK (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true)));

DROP POLICY IF EXISTS prism_memory_tenant ON "prism_memory"."semantic_memory_rag_chunks";

CREATE POLICY prism_memory_tenant ON "prism_memory"."semantic_memory_rag_chunks" USING (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true))) WITH CHECK (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true)));

DROP POLICY IF EXISTS prism_memory_tenant ON "prism_memory"."semantic_memory_working";

CREATE POLICY prism_memory_tenant ON "prism_memory"."semantic_memory_working" USING (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true))) WITH CHECK (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true)));

DROP POLICY IF EXISTS prism_memory_tenant ON "prism_memory"."semantic_memory_vectors";

CREATE POLICY prism_memory_tenant ON "prism_memory"."semantic_memory_vectors" USING (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true))) WITH CHECK (tenant_id = (SELECT current_setting('prism_memory.tenant_id', true)));

UPDATE prism_memory.semantic_memory_alembic_version SET version_num='prism_memory_0014' WHERE prism_memory.semantic_memory_alembic_version.version_num = 'prism_memory_0013';

COMMIT;
