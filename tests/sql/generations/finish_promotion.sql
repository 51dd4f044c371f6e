-- name: generations/finish_promotion
-- source: prism_memory.postgres.statements.generations.GenerationSql.finish_promotion
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
WITH target AS (SELECT model
    FROM "prism_memory"."semantic_memory_generations"
    WHERE model = CAST(:model AS text)
    AND role = 'shadow'
    AND active),
remaining AS (SELECT count(*) AS n
    FROM "prism_memory"."semantic_memory" e
    WHERE e.status = 'indexed'
    AND NOT COALESCE(e.embedding IS NOT NULL
        AND COALESCE(e.embedding_model, (SELECT g.model
                FROM "prism_memory"."semantic_memory_generations" g
                WHERE g.role = 'primary')) = CAST(:model AS text), false)),
go AS (SELECT 1
    FROM target
    WHERE (SELECT n
        FROM remaining) = 0),
demoted AS (UPDATE "prism_memory"."semantic_memory_generations"
    SET role = 'shadow'
    WHERE role = 'primary'
    AND EXISTS (SELECT 1
        FROM go)
    RETURNING model),
promoted AS (UPDATE "prism_memory"."semantic_memory_generations"
    SET role = 'primary'
    WHERE model = CAST(:model AS text)
    AND EXISTS (SELECT 1
        FROM go)
    AND (SELECT count(*)
        FROM demoted) >= 0
    RETURNING model)
SELECT (SELECT n
    FROM remaining) AS left, (SELECT count(*)
    FROM promoted) AS swapped
