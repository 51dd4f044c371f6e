"""``inherited_tombstones``: what new entries take over from their lineage sources' tombstones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prism_memory.models import Lineage, MemoryRecord
from prism_memory.stores.base import Tombstone
from prism_memory.stores.rules import inherited_tombstones

WRITTEN = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def record(entry_id: str, *sources: str) -> MemoryRecord:
    return MemoryRecord(
        tenant_id="t", resource_id="r", thread_id="th", id=entry_id, text=entry_id, role="user",
        metadata={}, consent=None, sequence=0, occurred_at=WRITTEN, created_at=WRITTEN,
        written_at=WRITTEN, importance=1.0,
        lineage=Lineage(source_ids=sources) if sources else None,
    )  # fmt: skip


def stone(entry_id: str, cause: str, reason: str = "revoked", at: datetime = WRITTEN) -> Tombstone:
    return Tombstone(entry_id, cause, reason, at)  # type: ignore[arg-type]


def test_a_new_entry_copies_the_tombstones_of_a_stored_source():
    stored = {"s": [stone("s", "s", "revoked"), stone("s", "h", "held")]}
    assert inherited_tombstones([record("d", "s")], stored) == [
        stone("d", "s", "revoked"),
        stone("d", "h", "held"),
    ]


def test_an_entry_without_lineage_or_with_clean_sources_inherits_nothing():
    stored = {"s": [stone("s", "s")]}
    assert inherited_tombstones([record("a"), record("b", "other")], stored) == []


def test_a_correction_older_than_the_entry_is_not_inherited():
    before, after = WRITTEN - timedelta(seconds=1), WRITTEN + timedelta(seconds=1)
    stored = {
        "s": [stone("s", "s", "corrected", before)],
        "u": [stone("u", "u", "corrected", after)],
    }
    assert inherited_tombstones([record("d", "s", "u")], stored) == [
        stone("d", "u", "corrected", after)
    ]


def test_marks_pass_along_a_chain_written_in_one_call_whatever_its_order():
    stored = {"s": [stone("s", "s")]}
    # d2 stands before its source d1, which takes the mark from the stored s
    got = inherited_tombstones([record("d2", "d1"), record("d1", "s")], stored)
    assert sorted(got, key=lambda t: t.entry_id) == [stone("d1", "s"), stone("d2", "s")]


def test_a_new_source_passes_on_only_what_it_inherits_not_its_stored_namesake():
    # "s" is both written in this call (clean) and has stored tombstones: the new one counts
    stored = {"s": [stone("s", "s")]}
    assert inherited_tombstones([record("s"), record("d", "s")], stored) == []


def test_the_same_cause_through_two_sources_is_one_tombstone():
    stored = {"a": [stone("a", "x")], "b": [stone("b", "x")]}
    assert inherited_tombstones([record("d", "a", "b")], stored) == [stone("d", "x")]
