-- name: session/pooled_begin
-- source: prism_memory.postgres.statements.session.POOLED_BEGIN
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
BEGIN;
SET LOCAL max_parallel_workers_per_gather = 0
