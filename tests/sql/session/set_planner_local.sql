-- name: session/set_planner_local
-- source: prism_memory.postgres.statements.session.SET_PLANNER_LOCAL
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT set_config('max_parallel_workers_per_gather', '0', true)
