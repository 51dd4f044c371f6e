-- name: importing/lock_threads
-- source: prism_memory.postgres.statements.importing.ImportSql.lock_threads
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0)))
FROM (SELECT DISTINCT k
    FROM unnest(CAST(:keys AS text[])) AS u(k)
    ORDER BY k) AS s
