"""A model change without downtime: fill a shadow generation, compare it, switch.

:func:`backfill_generation` embeds every indexed entry with the new model (several workers may
run at once; resumable; cancel-safe); :func:`compare_generations` ranks the same recalls with both
models and :meth:`GateReport.check` is the quality gate a switch passes first. The switch itself,
its rollback and dropping an abandoned generation are the store's
(:class:`~prism_memory.stores.base.VectorGenerations`); ``prism-memory models`` runs all of it
(docs/operations.md, "Switching models").
"""

from ._backfill import BackfillProgress, BackfillReport, backfill_generation
from ._gate import (
    GateQuery,
    GateReport,
    compare_generations,
    read_gate_queries,
    read_gate_queries_file,
)

__all__ = [
    "BackfillProgress",
    "BackfillReport",
    "GateQuery",
    "GateReport",
    "backfill_generation",
    "compare_generations",
    "read_gate_queries",
    "read_gate_queries_file",
]
