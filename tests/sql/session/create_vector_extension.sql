-- name: session/create_vector_extension
-- source: prism_memory.postgres.statements.session.CREATE_VECTOR_EXTENSION
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SET client_min_messages TO warning; CREATE EXTENSION IF NOT EXISTS vector;
