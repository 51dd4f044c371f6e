"""The behaviour checks of :func:`run_memory_conformance`.

Each check builds memories on the stores a factory provides, under a fresh random tenant, and
asserts observable behaviour only: what recall, export, working memory and the typed errors show.
Expected values are computed independently of the code under test (plain numpy cosines, hand
arithmetic), never read back from it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping

from ..embedding import HashEmbedder
from ..stores.backend import MemoryBackend
from ..stores.base import VectorGenerations
from ._conformance_agents import AGENT_CHECKS
from ._conformance_indexing import INDEXING_CHECKS
from ._generations import GENERATION_CHECKS
from ._generations_lag import GENERATION_LAG_CHECKS
from ._generations_promotion import GENERATION_PROMOTION_CHECKS
from ._generations_recall import GENERATION_RECALL_CHECKS
from ._governance import GOVERNANCE_CHECKS
from ._importing import IMPORT_CHECKS
from ._lineage import LINEAGE_CHECKS
from ._long_entries import LONG_ENTRY_CHECKS
from ._prompt import PROMPT_CHECKS
from ._ranking import RANKING_CHECKS
from ._recall import RECALL_CHECKS
from ._reranking import RERANK_CHECKS
from ._roles import CORE_ROLES, MEMORY_ROLES, ROLE_CHECKS, check_roles, checks_for_roles
from ._scopes import SCOPE_CHECKS
from ._support import ConformanceError, ConformanceKit, KitFactory, _run_each, closing_memories
from ._working import WORKING_CHECKS
from ._writes import WRITE_CHECKS

__all__ = [
    "CONFORMANCE_CHECKS",
    "CORE_ROLES",
    "MEMORY_ROLES",
    "ROLE_CHECKS",
    "ConformanceError",
    "ConformanceKit",
    "KitFactory",
    "check_roles",
    "checks_for_roles",
    "run_conformance_check",
    "run_memory_conformance",
]

CONFORMANCE_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    **WORKING_CHECKS,
    **RECALL_CHECKS,
    # long entries: searchable past the embedder's window
    **LONG_ENTRY_CHECKS,
    **LINEAGE_CHECKS,
    **SCOPE_CHECKS,
    **PROMPT_CHECKS,
    # the governance invariants, one check per defect class
    **GOVERNANCE_CHECKS,
    **RANKING_CHECKS,
    # the optional reranking stage: what it sees, how it orders, how it fails
    **RERANK_CHECKS,
    # shared indexing: one task per store and embedder, members, turns, the many-thread claim
    **INDEXING_CHECKS,
    # the agent-facing checks (embedding model, read-after-write, resource-wide recall)
    **AGENT_CHECKS,
    # the write path: rows stored with their vectors in one write
    **WRITE_CHECKS,
    # the bulk import: remember()'s rules for streams of many scopes
    **IMPORT_CHECKS,
    # the optional vector generations: a model change without an outage
    **GENERATION_CHECKS,
    **GENERATION_LAG_CHECKS,
    **GENERATION_RECALL_CHECKS,
    **GENERATION_PROMOTION_CHECKS,
}
"""Every conformance check by name, in a sensible order."""


async def _kit(factory: KitFactory) -> ConformanceKit:
    made = factory()
    if inspect.isawaitable(made):
        made = await made
    if isinstance(made, ConformanceKit):
        return made
    if isinstance(made, MemoryBackend):
        return ConformanceKit.of_backend(HashEmbedder(), made)
    if isinstance(made, Mapping):
        if "backend" in made:
            return ConformanceKit.of_backend(
                made.get("embedder") or HashEmbedder(), made["backend"]
            )
        return ConformanceKit(
            embedder=made.get("embedder") or HashEmbedder(),
            vector_store=made["vector_store"],
            working_store=made["working_store"],
        )
    raise TypeError("the factory must return a ConformanceKit, a MemoryBackend or a mapping")


async def run_conformance_check(name: str, factory: KitFactory) -> None:
    """Run one check by name; raises ``AssertionError`` (or the unexpected error) on failure.

    A check of the optional ``generations`` role passes without running when the kit's vector
    store is not a :class:`~prism_memory.stores.base.VectorGenerations`: the role is not
    demanded of a store that does not implement it."""
    kit = await _kit(factory)
    if "generations" in check_roles(name) and not isinstance(kit.vector_store, VectorGenerations):
        return
    async with closing_memories():
        await CONFORMANCE_CHECKS[name](kit)


async def run_memory_conformance(
    factory: KitFactory, *, only: list[str] | None = None, roles: Iterable[str] | None = None
) -> None:
    """Run every check (or ``only`` those) and raise :class:`ConformanceError` if any fails.

    ``factory`` makes the stores under test: a :class:`ConformanceKit` of a vector and a working
    store, or of a :class:`~prism_memory.stores.MemoryBackend` -- the backend's role objects,
    which the checks' memories call (``ConformanceKit.of_backend``, or the bundle itself).

    ``roles`` names the store roles the adapter implements (of :data:`MEMORY_ROLES`, the core
    ``"entries"`` and ``"indexing"`` always among them): only the checks that exercise nothing
    else run, so an adapter without share grants, governance or a working store of its own
    (:data:`ROLE_CHECKS`) proves the roles it has. ``None`` means every role."""
    names = only or list(CONFORMANCE_CHECKS)
    if roles is not None:
        names = checks_for_roles(names, roles)
    await _run_each(names, lambda name: run_conformance_check(name, factory))
