-- name: generations/promote
-- source: prism_memory.postgres.statements.generations.GenerationSql.promote
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH primary_model AS (SELECT model
    FROM "prism_memory"."semantic_memory_generations"
    WHERE role = 'primary'),
moving AS (SELECT e.tenant_id, e.resource_id, e.thread_id, e.id, e.revision, e.embedding AS own, COALESCE(e.embedding_model, (SELECT model
            FROM primary_model)) AS own_model, v.embedding AS promoted
    FROM "prism_memory"."semantic_memory" e
    JOIN "prism_memory"."semantic_memory_vectors" v
    ON v.tenant_id = e.tenant_id
    AND v.resource_id = e.resource_id
    AND v.thread_id = e.thread_id
    AND v.entry_id = e.id
    AND v.model = CAST(:model AS text)
    AND v.revision = e.revision
    AND v.embedding IS NOT NULL
    WHERE e.status = 'indexed'
    AND NOT COALESCE(e.embedding IS NOT NULL
        AND COALESCE(e.embedding_model, (SELECT g.model
                FROM "prism_memory"."semantic_memory_generations" g
                WHERE g.role = 'primary')) = CAST(:model AS text), false)
    ORDER BY e.tenant_id, e.resource_id, e.thread_id, e.id
    LIMIT :limit FOR NO KEY
    UPDATE OF e SKIP LOCKED),
kept AS (INSERT INTO "prism_memory"."semantic_memory_vectors" AS w (tenant_id, resource_id, thread_id, entry_id, model, revision, embedding, claimed_by, claimed_until)
    SELECT tenant_id, resource_id, thread_id, id, own_model, revision, own, NULL, NULL
    FROM moving
    WHERE own IS NOT NULL
    AND own_model IN (SELECT model
        FROM "prism_memory"."semantic_memory_generations")
    ON CONFLICT (tenant_id, resource_id, thread_id, entry_id, model)
    DO UPDATE
    SET revision = excluded.revision, embedding = excluded.embedding, claimed_by = NULL, claimed_until = NULL
    RETURNING 1),
moved AS (UPDATE "prism_memory"."semantic_memory" e
    SET embedding = m.promoted, embedding_model = CAST(:model AS text), window_embeddings = NULL
    FROM moving m
    WHERE e.tenant_id = m.tenant_id
    AND e.resource_id = m.resource_id
    AND e.thread_id = m.thread_id
    AND e.id = m.id
    RETURNING 1),
cleared AS (DELETE FROM "prism_memory"."semantic_memory_vectors" v
    USING moving m
    WHERE v.tenant_id = m.tenant_id
    AND v.resource_id = m.resource_id
    AND v.thread_id = m.thread_id
    AND v.entry_id = m.id
    AND v.model = CAST(:model AS text)
    RETURNING 1)
SELECT (SELECT count(*)
    FROM moved) AS moved, (SELECT count(*)
    FROM kept) AS kept, (SELECT count(*)
    FROM cleared) AS cleared
