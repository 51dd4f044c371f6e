-- name: repositories/EntryRepository.embedding_models.any_scope
-- source: prism_memory.postgres.repositories.entries.EntryRepository.embedding_models
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT DISTINCT prism_memory.semantic_memory.embedding_model 
FROM prism_memory.semantic_memory 
WHERE prism_memory.semantic_memory.embedding_model IS NOT NULL
