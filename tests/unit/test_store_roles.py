"""The store contract by role: each role small, ``VectorStore`` their union, and the indexing queue's member seated through the queue's public surface only."""

from __future__ import annotations

import ast
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, VectorStore, create_memory
from prism_memory.errors import ConfigurationError
from prism_memory.stores.base import (
    VECTOR_STORE_ROLES,
    EntryStore,
    GovernanceStore,
    IndexingLedger,
    ShareGrants,
)
from prism_memory.testing import (
    CONFORMANCE_CHECKS,
    CORE_ROLES,
    MEMORY_ROLES,
    ROLE_CHECKS,
    check_roles,
    checks_for_roles,
)

PACKAGE = Path(__file__).resolve().parents[2] / "prism_memory"
MAX_ABSTRACT = 8


def test_each_role_lists_its_abstract_methods() -> None:
    expected = {
        "entries": [
            "dependents",
            "dimension",
            "get_entries",
            "list_by_thread",
            "list_oldest",
            "neighbors",
            "put_entries",
            "search",
        ],
        "indexing": [
            "claim_pending",
            "complete_indexing",
            "fail_indexing",
            "index_status",
            "release_claims",
            "requeue_failed",
            "store_vectors",
        ],
        "governance": ["apply_governance"],
        "shares": ["delete_share_grant", "get_share_grant", "put_share_grant"],
    }
    found = {name: sorted(role.__abstractmethods__) for name, role in VECTOR_STORE_ROLES.items()}
    assert found == expected
    assert all(len(methods) <= MAX_ABSTRACT for methods in found.values())
    assert list(VECTOR_STORE_ROLES.values()) == [
        EntryStore,
        IndexingLedger,
        GovernanceStore,
        ShareGrants,
    ]


def test_vector_store_is_the_union_of_its_roles() -> None:
    assert VectorStore.__bases__ == (EntryStore, IndexingLedger, GovernanceStore, ShareGrants)
    union = set().union(*(role.__abstractmethods__ for role in VECTOR_STORE_ROLES.values()))
    assert set(VectorStore.__abstractmethods__) == union
    assert len(VectorStore.__abstractmethods__) == 19  # what an existing adapter implements


def test_the_queue_member_uses_no_private_member_of_its_queue() -> None:
    tree = ast.parse((PACKAGE / "indexing" / "queue.py").read_text(encoding="utf-8"))
    member = next(
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "QueueMember"
    )
    reached = [
        ast.unparse(node)
        for node in ast.walk(member)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and ast.unparse(node.value) == "self.queue"
    ]
    assert reached == []


def test_role_checks_name_real_checks_and_known_roles() -> None:
    assert set(ROLE_CHECKS) == set(MEMORY_ROLES) - CORE_ROLES
    for names in ROLE_CHECKS.values():
        assert set(names) <= set(CONFORMANCE_CHECKS)
        assert len(set(names)) == len(names)
    assert check_roles("sharing_is_parent_to_child_only") == {"entries", "indexing", "shares"}


def test_checks_for_roles_keeps_the_order_and_drops_what_needs_a_missing_role() -> None:
    every = list(CONFORMANCE_CHECKS)
    assert checks_for_roles(every, MEMORY_ROLES) == every
    core = checks_for_roles(every, CORE_ROLES)
    assert core == [name for name in every if check_roles(name) == CORE_ROLES]
    assert "sharing_is_parent_to_child_only" not in core
    assert "consent_is_the_single_gate" not in core
    assert core  # the core alone still has checks to run


@pytest.mark.parametrize(
    "roles", [["entries"], ["entries", "indexing", "rag"], "entries", ["indexing", "shares"]]
)
def test_checks_for_roles_refuses_a_set_without_the_core_or_with_unknown_names(
    roles: object,
) -> None:
    with pytest.raises(ConfigurationError):
        checks_for_roles(list(CONFORMANCE_CHECKS), roles)  # type: ignore[arg-type]


async def test_an_adapter_of_the_nineteen_methods_still_works_as_a_vector_store() -> None:
    """An adapter written before the roles -- one class, the nineteen members, subclassing
    ``VectorStore`` -- is still instantiable and serves a memory."""
    inner = InMemoryVectorStore()

    def forward(name: str) -> Callable[..., Awaitable[Any]]:
        async def method(self: VectorStore, *args: Any, **kwargs: Any) -> Any:
            return await getattr(inner, name)(*args, **kwargs)

        return method

    members: dict[str, Any] = {
        name: forward(name) for name in VectorStore.__abstractmethods__ if name != "dimension"
    }
    members["dimension"] = property(lambda self: None)
    adapter_class = type("NineteenMethods", (VectorStore,), members)
    store = adapter_class()
    assert isinstance(store, EntryStore)
    assert isinstance(store, IndexingLedger)
    memory = create_memory(
        tenant_id="t", resource_id="r", thread_id="c", embedder=HashEmbedder(), vector_store=store
    )
    async with memory:
        await memory.remember([{"id": "m1", "text": "Ada prefers tea"}], wait=True)
        assert [hit.id for hit in (await memory.recall("tea")).hits] == ["m1"]
