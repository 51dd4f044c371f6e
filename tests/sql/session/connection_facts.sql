-- name: session/connection_facts
-- source: prism_memory.postgres.statements.session.CONNECTION_FACTS
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT (SELECT t.oid
    FROM pg_type t
    JOIN pg_namespace n
    ON n.oid = t.typnamespace
    WHERE t.typname = 'vector'
    AND t.typtype = 'b'
    ORDER BY n.oid
    LIMIT 1) AS vector_oid, current_setting('max_parallel_workers_per_gather') AS parallel_workers
