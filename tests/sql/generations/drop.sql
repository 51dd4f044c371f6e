-- name: generations/drop
-- source: prism_memory.postgres.statements.generations.GenerationSql.drop
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH target AS (SELECT role, active
    FROM "prism_memory"."semantic_memory_generations"
    WHERE model = CAST(:model AS text)),
gone AS (DELETE FROM "prism_memory"."semantic_memory_generations"
    WHERE model = CAST(:model AS text)
    AND role = 'shadow'
    AND NOT active
    AND NOT EXISTS (SELECT 1
        FROM "prism_memory"."semantic_memory" e
        WHERE e.embedding_model = CAST(:model AS text)
        AND e.embedding IS NOT NULL)
    RETURNING model)
SELECT (SELECT role
    FROM target) AS role, (SELECT active
    FROM target) AS active, (SELECT count(*)
    FROM (SELECT 1
        FROM "prism_memory"."semantic_memory" e
        WHERE e.embedding_model = CAST(:model AS text)
        AND e.embedding IS NOT NULL) AS o) AS own, (SELECT count(*)
    FROM "prism_memory"."semantic_memory_vectors"
    WHERE model = CAST(:model AS text)
    AND embedding IS NOT NULL) AS vectors, (SELECT count(*)
    FROM gone) AS dropped
