-- name: indexing/release
-- source: prism_memory.postgres.statements.indexing.IndexingSql.release
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
UPDATE "prism_memory"."semantic_memory"
SET claimed_by = NULL, claimed_until = NULL
WHERE claimed_by = :worker
AND status = 'pending'
