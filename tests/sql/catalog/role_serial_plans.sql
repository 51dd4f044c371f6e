-- name: catalog/role_serial_plans
-- source: prism_memory.postgres.statements.catalog.ROLE_SERIAL_PLANS
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT EXISTS (SELECT 1
    FROM pg_db_role_setting s, unnest(s.setconfig) AS c(setting)
    WHERE s.setrole IN (0, (SELECT oid
            FROM pg_roles
            WHERE rolname = current_user))
    AND s.setdatabase IN (0, (SELECT oid
            FROM pg_database
            WHERE datname = current_database()))
    AND c.setting = 'max_parallel_workers_per_gather=0')
