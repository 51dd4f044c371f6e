-- name: rag/any_width
-- source: prism_memory.postgres.statements.rag.RagSql.any_width
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT vector_dims(embedding)
FROM "prism_memory"."semantic_memory_rag_chunks"
LIMIT 1
