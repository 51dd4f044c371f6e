"""One entry made ready to store: redacted, checked against the caps, given its id.

Pure logic shared by every write path -- :meth:`prism_memory.Memory.remember` and the bulk import
(:mod:`prism_memory.importing`) -- so both keep the same rules: the redactor and the secrets run
before anything persists, the payload and lineage caps hold, and an entry without an id gets the
digest of its role and redacted text (a retried write, or a re-imported file, never duplicates).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from .errors import CapExceededError, ValidationError
from .limits import Limits
from .models import MemoryEntry
from .redaction import Scrubber
from .stores.base import NewEntry
from .working import canonical_json

__all__ = ["entry_digest", "prepare_entry"]


def entry_digest(role: str, text: str) -> str:
    """The id an entry gets when none is given: a digest of role and (redacted) text.

    A retried write therefore does not duplicate, and the same words from two roles stay two entries.
    """
    digest = hashlib.sha256(f"{role}\x1f{text}".encode()).hexdigest()
    return f"m_{digest[:32]}"


def prepare_entry(
    entry: MemoryEntry,
    now: datetime,
    *,
    scrubber: Scrubber,
    limits: Limits,
    label: str = "the entry",
) -> NewEntry:
    """``entry`` redacted, checked against the caps and given its id; its importance is the given
    one (clamped) or 1.0 (a host's ``importance_from`` hook is the caller's to apply). ``label``
    says where the entry stands in an error message (never its id: that is the caller's input)."""
    text, role, lineage = entry.text, entry.role, entry.lineage
    if scrubber.active:
        text, role = scrubber.text(text), scrubber.text(role)
    if lineage is not None and lineage.reason is not None and scrubber.active:
        lineage = lineage.model_copy(update={"reason": scrubber.text(lineage.reason)})
    metadata: dict[str, Any] = scrubber.value(entry.metadata) if entry.metadata else {}
    payload = len(text.encode()) + (len(canonical_json(metadata).encode()) if metadata else 2)
    if payload > limits.payload_bytes:
        raise CapExceededError(
            f"entry payload is {payload} bytes, over the cap {limits.payload_bytes}"
        )
    if entry.lineage is not None and len(entry.lineage.source_ids) > limits.lineage_source_ids:
        raise CapExceededError(
            f"lineage names {len(entry.lineage.source_ids)} sources, over the cap "
            f"{limits.lineage_source_ids}"
        )
    entry_id = entry.id if entry.id is not None else entry_digest(role, text)
    if entry.lineage is not None and entry_id in entry.lineage.source_ids:
        raise ValidationError(f"{label} names itself in its lineage")
    return NewEntry(
        id=entry_id,
        text=text,
        role=role,
        metadata=metadata,
        consent=entry.consent,
        sequence=entry.sequence,
        occurred_at=entry.occurred_at or now,
        importance=1.0 if entry.importance is None else min(1.0, max(0.0, entry.importance)),
        lineage=lineage,
    )
