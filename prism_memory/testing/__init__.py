"""Conformance checks every store adapter must pass, and helpers for testing with prism_memory.

``await run_memory_conformance(factory)`` runs every check in :data:`CONFORMANCE_CHECKS` against the
stores ``factory`` returns and raises :class:`ConformanceError` listing the failures (``roles=`` runs only the checks of the
store roles an adapter implements, :data:`ROLE_CHECKS`);
``await run_rag_conformance(factory)`` does the same for a RAG store (:data:`RAG_CONFORMANCE_CHECKS`). Checks create
memories under fresh random tenant ids, so one pair of stores can serve every check.
"""

from ._conformance import (
    CONFORMANCE_CHECKS,
    CORE_ROLES,
    MEMORY_ROLES,
    ROLE_CHECKS,
    ConformanceError,
    ConformanceKit,
    KitFactory,
    check_roles,
    checks_for_roles,
    run_conformance_check,
    run_memory_conformance,
)
from ._fixtures import (
    FirstWordsEmbedder,
    FlakyEmbedder,
    GatedEmbedder,
    ManualClock,
    NonFiniteEmbedder,
)
from ._rag_conformance import (
    RAG_CONFORMANCE_CHECKS,
    RagConformanceKit,
    RagKitFactory,
    run_rag_conformance,
    run_rag_conformance_check,
)
from ._reranking import RecordingReranker

__all__ = [
    "CONFORMANCE_CHECKS",
    "CORE_ROLES",
    "MEMORY_ROLES",
    "RAG_CONFORMANCE_CHECKS",
    "ROLE_CHECKS",
    "ConformanceError",
    "ConformanceKit",
    "FirstWordsEmbedder",
    "FlakyEmbedder",
    "GatedEmbedder",
    "KitFactory",
    "ManualClock",
    "NonFiniteEmbedder",
    "RagConformanceKit",
    "RagKitFactory",
    "RecordingReranker",
    "check_roles",
    "checks_for_roles",
    "run_conformance_check",
    "run_memory_conformance",
    "run_rag_conformance",
    "run_rag_conformance_check",
]
