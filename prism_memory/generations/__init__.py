"""A model change without downtime: fill a shadow generation, compare it, switch, promote.

:func:`backfill_generation` embeds every indexed entry with the new model (several workers may
run at once; resumable; cancel-safe); :func:`compare_generations` ranks the same recalls with both
models and :meth:`GateReport.check` is the quality gate a switch passes first;
:func:`promote_to_primary` makes the switched-to model the entries' own vectors, so the old one
can be dropped. The switch itself, its rollback and dropping a generation are the store's
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
from ._promote import MAX_PROMOTION_BATCH, PromotionReport, promote_to_primary

__all__ = [
    "MAX_PROMOTION_BATCH",
    "BackfillProgress",
    "BackfillReport",
    "GateQuery",
    "GateReport",
    "PromotionReport",
    "backfill_generation",
    "compare_generations",
    "promote_to_primary",
    "read_gate_queries",
    "read_gate_queries_file",
]
