-- name: session/langgraph_items.vectors_False
-- source: prism_memory.postgres.statements.session.langgraph_items
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT s.prefix, s.key, s.value, s.created_at, NULL::text AS embedding
FROM store s
ORDER BY s.prefix, s.key
