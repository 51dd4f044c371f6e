-- name: entries/lock_thread
-- source: prism_memory.postgres.statements.entries.RowSql.lock_thread
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))
