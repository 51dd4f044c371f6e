-- name: entries/begin_locked
-- source: prism_memory.postgres.statements.entries.begin_locked_statement
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT pg_advisory_xact_lock(hashtextextended(E'tenant-auser-1thread-1', 0))
