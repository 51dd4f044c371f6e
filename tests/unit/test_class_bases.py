"""A class of the package is composed of objects rather than a deep mixin chain: none names more
than four bases (the PostgreSQL vector store once had twelve classes in its MRO)."""

from __future__ import annotations

import ast
from pathlib import Path

import prism_memory

PACKAGE = Path(prism_memory.__file__).parent
MAX_BASES = 4


def test_no_class_has_more_than_four_bases() -> None:
    wide = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and len(node.bases) > MAX_BASES:
                wide.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    assert not wide, f"classes with more than {MAX_BASES} bases: {wide}"


def test_the_postgres_vector_store_is_composed() -> None:
    from prism_memory.postgres import PostgresVectorStore
    from prism_memory.stores.base import VectorStore
    from prism_memory.stores.rag_base import RagStore

    assert issubclass(PostgresVectorStore, VectorStore)
    assert issubclass(PostgresVectorStore, RagStore)  # SPEC §6: also the RAG store
    # Its classes are itself, the contracts it implements and the compatibility shape that makes
    # each role method its role object's (stores/backend.py, no behaviour): no mixin of the
    # adapter's own.
    contracts = {
        "prism_memory.stores.base",
        "prism_memory.stores.rag_base",
        "prism_memory.stores.backend",
        "abc",
        "builtins",
    }
    mixins = [
        cls.__qualname__
        for cls in PostgresVectorStore.__mro__[1:]
        if cls.__module__ not in contracts
        and not cls.__module__.startswith("prism_memory.stores._role")
    ]
    assert mixins == []
