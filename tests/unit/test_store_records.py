"""The records the store contracts exchange (``prism_memory.stores._records``): what a new entry
is stored as, the defaults of a recall request, a write's lease and the rows a write inserted."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from prism_memory.lexical import CorpusStats
from prism_memory.models import Lineage, MemoryConsent, MemoryIdentity, MemoryRecord
from prism_memory.stores._records import (
    ClaimedEntry,
    EntryLease,
    ImportRow,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SearchResult,
    SharedSource,
    StoredEntries,
    Tombstone,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="t1")
CONSENT = MemoryConsent(source="agent", scope="user", visible=True, granted_at=T0)
LINEAGE = Lineage(source_ids=("s1",), reason="summary")


def new_entry(**changes: object) -> NewEntry:
    fields: dict[str, object] = {
        "id": "e1",
        "text": "the user likes tea",
        "role": "assistant",
        "metadata": {"k": "original"},
        "consent": CONSENT,
        "sequence": None,
        "occurred_at": T0,
        "importance": 0.75,
        "lineage": LINEAGE,
    }
    fields.update(changes)
    return NewEntry(**fields)  # type: ignore[arg-type]


def record(entry_id: str) -> MemoryRecord:
    return new_entry(id=entry_id).stored(
        SCOPE, sequence=1, now=NOW, metadata={}, model=None, indexed=False
    )


def test_an_indexed_entry_is_stored_with_its_scope_fields_and_model():
    stored = new_entry().stored(
        SCOPE, sequence=7, now=NOW, metadata={"k": "copy"}, model="hash-384", indexed=True
    )
    assert stored == MemoryRecord(
        tenant_id="acme",
        resource_id="ada",
        thread_id="t1",
        id="e1",
        text="the user likes tea",
        role="assistant",
        metadata={"k": "copy"},
        consent=CONSENT,
        sequence=7,
        occurred_at=T0,
        created_at=NOW,
        written_at=NOW,
        importance=0.75,
        lineage=LINEAGE,
        status="indexed",
        embedding_model="hash-384",
    )


def test_an_entry_not_indexed_is_stored_pending_without_a_model():
    stored = new_entry().stored(
        SCOPE, sequence=3, now=NOW, metadata={}, model="hash-384", indexed=False
    )
    assert stored.status == "pending"
    assert stored.embedding_model is None
    assert stored.sequence == 3
    assert stored.legal_hold is False
    assert stored.revision == 1
    assert stored.attempts == 0
    assert stored.last_error is None


def test_a_stored_entry_keeps_the_store_copy_of_metadata_not_the_entry_own():
    copy = {"k": "copy"}
    stored = new_entry().stored(
        SCOPE, sequence=1, now=NOW, metadata=copy, model=None, indexed=False
    )
    assert stored.metadata is copy


def test_the_filter_defaults_ask_no_consent_and_no_retention_window():
    recall_filter = RecallFilter(now=NOW)
    assert recall_filter.require_consent is False
    assert recall_filter.occurred_after is None


def test_a_request_defaults_to_its_own_thread_only():
    request = SearchRequest(
        vector=np.zeros(3, dtype=np.float32),
        terms=frozenset({"tea"}),
        limit=4,
        filter=RecallFilter(now=NOW),
    )
    assert request.shared is None
    assert request.resource_wide is False


def test_a_result_defaults_to_pending_not_counted():
    assert SearchResult(candidates=[], stats=CorpusStats()).pending is None


def test_a_claim_defaults_to_any_lease_of_the_worker():
    claim = ClaimedEntry(scope=SCOPE, id="e1", revision=2, text="x", attempts=0)
    assert claim.lease_until is None


def test_a_lease_over_all_new_rows_covers_any_id():
    lease = EntryLease(worker_id="w1", until=NOW)
    assert lease.ids is None
    assert lease.covers("e1") is True
    assert lease.covers("anything") is True


def test_a_lease_over_named_rows_covers_only_those():
    lease = EntryLease(worker_id="w1", until=NOW, ids=frozenset({"e1", "e2"}))
    assert lease.covers("e1") is True
    assert lease.covers("e2") is True
    assert lease.covers("e3") is False


def test_a_lease_over_no_rows_covers_none():
    assert EntryLease(worker_id="w1", until=NOW, ids=frozenset()).covers("e1") is False


def test_stored_entries_are_the_records_in_order_with_the_inserted_ids():
    records = [record("e1"), record("e2")]
    stored = StoredEntries(records, inserted=["e2"])
    assert list(stored) == records
    assert isinstance(stored, list)
    assert stored.inserted == frozenset({"e2"})


def test_stored_entries_default_to_empty_with_nothing_inserted():
    stored = StoredEntries()
    assert list(stored) == []
    assert stored.inserted == frozenset()


def test_stored_entries_have_no_instance_dict():
    stored = StoredEntries([record("e1")], inserted=["e1"])
    assert not hasattr(stored, "__dict__")
    with pytest.raises(AttributeError):
        stored.other = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (new_entry(), "text"),
        (ImportRow(scope=SCOPE, entry=new_entry(), vector=None, model=None), "model"),
        (RecallFilter(now=NOW), "require_consent"),
        (SharedSource(thread_id="parent", ids=("e1",)), "ids"),
        (
            SearchRequest(
                vector=np.zeros(3, dtype=np.float32),
                terms=frozenset(),
                limit=1,
                filter=RecallFilter(now=NOW),
            ),
            "limit",
        ),
        (SearchResult(candidates=[], stats=CorpusStats()), "pending"),
        (Tombstone(entry_id="e1", cause_id="e1", reason="forgotten", created_at=NOW), "reason"),
        (ClaimedEntry(scope=SCOPE, id="e1", revision=1, text="x", attempts=0), "attempts"),
        (EntryLease(worker_id="w1", until=NOW + timedelta(seconds=30)), "ids"),
    ],
)
def test_a_record_is_frozen_and_has_no_instance_dict(value: object, field: str):
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, field, None)
    assert not hasattr(value, "__dict__")
