-- name: generations/switch
-- source: prism_memory.postgres.statements.generations.GenerationSql.switch
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH target AS (SELECT model, role
    FROM "prism_memory"."semantic_memory_generations"
    WHERE model = CAST(:model AS text)),
missing AS (SELECT count(*) FILTER (WHERE CAST(:horizon AS timestamptz) IS NULL
        OR e.written_at <= CAST(:horizon AS timestamptz)) AS n, count(*) AS every
    FROM "prism_memory"."semantic_memory" e
    WHERE e.status = 'indexed'
    AND EXISTS (SELECT 1
        FROM target)
    AND NOT (COALESCE(e.embedding IS NOT NULL
            AND COALESCE(e.embedding_model, (SELECT g.model
                    FROM "prism_memory"."semantic_memory_generations" g
                    WHERE g.role = 'primary')) = CAST(:model AS text), false)
        OR EXISTS (SELECT 1
            FROM "prism_memory"."semantic_memory_vectors" v
            WHERE v.tenant_id = e.tenant_id
            AND v.resource_id = e.resource_id
            AND v.thread_id = e.thread_id
            AND v.entry_id = e.id
            AND v.model = CAST(:model AS text)
            AND v.revision = e.revision
            AND v.embedding IS NOT NULL))),
go AS (SELECT 1
    FROM target
    WHERE CAST(:force AS boolean)
    OR (SELECT n
        FROM missing) = 0),
off AS (UPDATE "prism_memory"."semantic_memory_generations"
    SET active = false
    WHERE active
    AND model <> CAST(:model AS text)
    AND EXISTS (SELECT 1
        FROM go)
    RETURNING model),
flipped AS (UPDATE "prism_memory"."semantic_memory_generations"
    SET active = true, switched_at = CASE WHEN active THEN switched_at ELSE CAST(:now AS timestamptz) END
    WHERE model = CAST(:model AS text)
    AND EXISTS (SELECT 1
        FROM go)
    AND (SELECT count(*)
        FROM off) >= 0
    RETURNING model, width, role, active, started_at, switched_at)
SELECT (SELECT count(*)
    FROM target) AS found, (SELECT n
    FROM missing) AS missing, (SELECT every - n
    FROM missing) AS recent, f.model, f.width, f.role, f.active, f.started_at, f.switched_at
FROM (SELECT 1) AS one
LEFT JOIN flipped f
ON true
