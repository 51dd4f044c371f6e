"""Domain models: pydantic inputs, frozen dataclass records and results.

Inputs (:class:`MemoryEntry`, :class:`MemoryConsent`, :class:`Lineage`, :class:`MemoryIdentity`,
:class:`RecallScoring`) are pydantic models, so a host may pass plain dicts. Everything the library
hands back is an immutable dataclass. Nothing here knows about storage.

This module is the one import path; the code lives in three private modules, one way down:
``_validation`` (the checks of keys, ids, text and JSON, pydantic's errors made ours), ``_inputs``
(the pydantic inputs) and ``_results`` (the records and results).
"""

from __future__ import annotations

from ._inputs import (
    DEFAULT_CHANCE_MARGIN,
    DEFAULT_LEXICAL_WEIGHT,
    ConsentScope,
    ConsentSource,
    Lineage,
    MemoryConsent,
    MemoryEntry,
    MemoryIdentity,
    RecallScoring,
)
from ._results import (
    Candidate,
    ExportPage,
    IndexingReport,
    IndexStatus,
    MemoryRecord,
    RebuildPage,
    RecallExplanation,
    RecallHit,
    RecallResult,
    RememberResult,
    RetentionResult,
    ShareGrant,
    TombstoneReason,
    Vector,
    WorkingMemoryRecord,
)
from ._validation import (
    MAX_JSON_DEPTH,
    check_id_collection,
    check_ids,
    check_json,
    check_key,
    check_text,
    parse,
    typed_errors,
)

__all__ = [
    "DEFAULT_CHANCE_MARGIN",
    "DEFAULT_LEXICAL_WEIGHT",
    "MAX_JSON_DEPTH",
    "Candidate",
    "ConsentScope",
    "ConsentSource",
    "ExportPage",
    "IndexStatus",
    "IndexingReport",
    "Lineage",
    "MemoryConsent",
    "MemoryEntry",
    "MemoryIdentity",
    "MemoryRecord",
    "RebuildPage",
    "RecallExplanation",
    "RecallHit",
    "RecallResult",
    "RecallScoring",
    "RememberResult",
    "RetentionResult",
    "ShareGrant",
    "TombstoneReason",
    "Vector",
    "WorkingMemoryRecord",
    "check_id_collection",
    "check_ids",
    "check_json",
    "check_key",
    "check_text",
    "parse",
    "typed_errors",
]
