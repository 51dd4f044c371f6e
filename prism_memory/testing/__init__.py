"""Conformance checks every store adapter must pass, and helpers for testing with prism_memory.

``await run_memory_conformance(factory)`` runs every check in :data:`CONFORMANCE_CHECKS` against the
stores ``factory`` returns and raises :class:`ConformanceError` listing the failures. Checks create
memories under fresh random tenant ids, so one pair of stores can serve every check.
"""

from ._conformance import (
    CONFORMANCE_CHECKS,
    ConformanceError,
    ConformanceKit,
    KitFactory,
    run_conformance_check,
    run_memory_conformance,
)
from ._fixtures import FlakyEmbedder, GatedEmbedder, ManualClock, NonFiniteEmbedder

__all__ = [
    "CONFORMANCE_CHECKS",
    "ConformanceError",
    "ConformanceKit",
    "FlakyEmbedder",
    "GatedEmbedder",
    "KitFactory",
    "ManualClock",
    "NonFiniteEmbedder",
    "run_conformance_check",
    "run_memory_conformance",
]
