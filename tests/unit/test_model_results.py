"""The records and results the library hands back (``prism_memory.models``): immutable, slotted,
with the documented defaults; a record's derived views; a candidate whose record is built once.

Every expected value is written out by hand.
"""

from __future__ import annotations

import asyncio
import dataclasses
import typing
from datetime import UTC, datetime

import numpy as np
import pytest

from prism_memory.models import (
    Candidate,
    ExportPage,
    IndexingReport,
    IndexStatus,
    Lineage,
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    RebuildPage,
    RecallExplanation,
    RecallHit,
    RecallResult,
    RememberResult,
    RetentionResult,
    ShareGrant,
    TombstoneReason,
    WorkingMemoryRecord,
)

WHEN = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
LATER = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
VECTOR = np.ones(3, dtype=np.float32)


def _record(**fields: object) -> MemoryRecord:
    given: dict[str, object] = {
        "tenant_id": "acme", "resource_id": "ada", "thread_id": "t1", "id": "e1", "text": "hello",
        "role": "user", "metadata": {"k": 1}, "consent": None, "sequence": 3, "occurred_at": WHEN,
        "created_at": LATER, "written_at": LATER, "importance": 0.5,
    }  # fmt: skip
    return MemoryRecord(**{**given, **fields})  # type: ignore[arg-type]


def _hit() -> RecallHit:
    return RecallHit(_record(), 0.9, 0.8, 0.7, 0.6, 0.5, 0.4)


def _explanation() -> RecallExplanation:
    return RecallExplanation("e1", 1, 0.4, 0.9, 0.8, 0.7, 0.6, 0.5, (1.0, 0.0, 0.0))


async def _report() -> IndexingReport:
    return IndexingReport(("e1",))


def _remember_result() -> RememberResult:
    coroutine = _report()
    coroutine.close()  # never awaited: the result only holds it
    return RememberResult(("e1",), (), coroutine)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (_record(), "text"),
        (WorkingMemoryRecord(1, {}, WHEN), "version"),
        (IndexingReport(("e1",)), "indexed"),
        (_remember_result(), "pending"),
        (_hit(), "score"),
        (_explanation(), "rank"),
        (RecallResult(()), "pending"),
        (ShareGrant("acme", "ada", "p", "c", ("e1",), WHEN), "expires_at"),
        (RetentionResult(1, 2), "deleted"),
        (ExportPage((), 0, None), "bytes"),
        (RebuildPage(0, None), "rebuilt"),
    ],
)
def test_a_result_is_frozen_and_has_no_instance_dict(value: object, field: str):
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, field, None)
    assert not hasattr(value, "__dict__")


def test_the_status_and_tombstone_aliases_name_exactly_the_stored_values():
    assert typing.get_args(IndexStatus) == ("pending", "indexed", "failed")
    assert typing.get_args(TombstoneReason) == (
        "forgotten",
        "revoked",
        "corrected",
        "held",
        "retention",
    )


# ---- MemoryRecord -------------------------------------------------------------------------------


def test_a_record_defaults_to_a_first_revision_pending_without_hold_or_errors():
    record = _record()
    assert (record.lineage, record.legal_hold, record.status) == (None, False, "pending")
    assert (record.revision, record.attempts) == (1, 0)
    assert (record.last_error, record.embedding_model) == (None, None)


def test_a_record_without_consent_is_under_the_default_consent():
    assert _record().effective_consent == MemoryConsent(source="user", scope="thread", visible=True)
    given = MemoryConsent(visible=False)
    assert _record(consent=given).effective_consent is given


def test_a_record_names_its_thread_scope():
    assert _record().identity == MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="t1")


def test_a_record_as_json_without_consent_or_lineage():
    assert _record().to_json() == {
        "id": "e1",
        "tenant_id": "acme",
        "resource_id": "ada",
        "thread_id": "t1",
        "text": "hello",
        "role": "user",
        "metadata": {"k": 1},
        "consent": None,
        "sequence": 3,
        "occurred_at": "2026-03-01T09:30:00+00:00",
        "created_at": "2026-03-02T10:00:00+00:00",
        "importance": 0.5,
        "lineage": None,
    }


def test_a_record_as_json_with_consent_and_lineage():
    record = _record(
        consent=MemoryConsent(source="agent", scope="user", visible=False, granted_at=WHEN),
        lineage=Lineage(source_ids=("a", "b"), reason="merged"),
    )
    exported = record.to_json()
    assert exported["consent"] == {
        "source": "agent",
        "scope": "user",
        "visible": False,
        "granted_at": "2026-03-01T09:30:00Z",
        "revoked_at": None,
    }
    assert exported["lineage"] == {"source_ids": ["a", "b"], "reason": "merged"}


# ---- Candidate ----------------------------------------------------------------------------------


def test_a_candidate_carries_the_record_fields_ranking_reads():
    record = _record(embedding_model="m1")
    candidate = Candidate(record, VECTOR)
    assert candidate.record is record
    assert candidate.vector is VECTOR
    assert (candidate.thread_id, candidate.id, candidate.text) == ("t1", "e1", "hello")
    assert (candidate.sequence, candidate.occurred_at) == (3, WHEN)
    assert (candidate.importance, candidate.embedding_model) == (0.5, "m1")
    assert repr(candidate) == "Candidate(thread_id='t1', id='e1', sequence=3)"


def test_a_deferred_candidate_builds_its_record_once_on_first_read():
    built: list[MemoryRecord] = []

    def build() -> MemoryRecord:
        built.append(_record())
        return built[-1]

    candidate = Candidate.deferred(
        VECTOR, thread_id="t1", id="e1", text="hello", sequence=3, occurred_at=WHEN,
        importance=0.5, embedding_model=None, build=build,
    )  # fmt: skip
    assert built == []
    assert (candidate.thread_id, candidate.id, candidate.text) == ("t1", "e1", "hello")
    assert (candidate.sequence, candidate.occurred_at) == (3, WHEN)
    assert (candidate.importance, candidate.embedding_model) == (0.5, None)
    assert candidate.vector is VECTOR
    first = candidate.record
    assert candidate.record is first
    assert built == [first]


def test_a_candidate_has_no_instance_dict():
    candidate = Candidate(_record(), VECTOR)
    assert not hasattr(candidate, "__dict__")
    with pytest.raises(AttributeError):
        candidate.score = 1.0  # type: ignore[attr-defined]


# ---- results ------------------------------------------------------------------------------------


def test_a_hit_defaults_to_an_own_entry_with_unit_scales_and_no_bm25():
    hit = _hit()
    assert (hit.shared, hit.bm25, hit.semantic_scale, hit.bm25_scale) == (False, 0.0, 1.0, 1.0)
    assert (hit.id, hit.text) == ("e1", "hello")


def test_an_explanation_defaults_to_no_bm25_lambda_one_half_and_no_notes():
    explanation = _explanation()
    assert (explanation.bm25, explanation.lexical_weight, explanation.how) == (0.0, 0.5, {})


def test_result_defaults():
    result = RecallResult(())
    assert (result.adjacent, result.explanations, result.pending) == ((), None, 0)
    assert IndexingReport(("e1",)).failed == {}
    assert ShareGrant("acme", "ada", "p", "c", ("e1",), WHEN).expires_at is None
    assert RetentionResult(1, 2).blocked == ()
    assert asyncio.iscoroutine(_remember_result().done)
