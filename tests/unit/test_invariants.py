"""revoked_ids_absent over every environment shape a harness may hand it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from prism_memory import ContextBlock, revoked_ids_absent
from prism_memory.models import ExportPage, MemoryRecord, RecallHit, RecallResult

T = datetime(2024, 1, 1, tzinfo=UTC)


def record(entry_id):
    return MemoryRecord(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        id=entry_id,
        text=f"text {entry_id}",
        role="user",
        metadata={},
        consent=None,
        sequence=0,
        occurred_at=T,
        created_at=T,
        written_at=T,
        importance=1.0,
    )


def hit(entry_id):
    return RecallHit(
        record=record(entry_id),
        similarity=1.0,
        semantic=1.0,
        lexical=1.0,
        recency=1.0,
        importance=1.0,
        score=1.0,
    )


RESULT = RecallResult(hits=(hit("h1"), hit("h2")), adjacent=(record("adj"),))
PAGE = ExportPage(entries=({"id": "e1", "text": "x"}, {"id": "e2"}), bytes=10, next_cursor=None)
BLOCK = ContextBlock(kind="semantic", text="- x", tokens=1, entry_ids=("b1", "b2"))


@pytest.mark.parametrize(
    ("environment", "present"),
    [
        (RESULT, ["h1", "h2", "adj"]),
        (PAGE, ["e1", "e2"]),
        (BLOCK, ["b1", "b2"]),
        (["i1", "i2"], ["i1", "i2"]),
        (("i1",), ["i1"]),
        ("solo", ["solo"]),
        (hit("x"), ["x"]),
        (record("y"), ["y"]),
        ({"id": "m"}, ["m"]),
        ([RESULT, (BLOCK, [PAGE])], ["h1", "h2", "adj", "b1", "b2", "e1", "e2"]),
    ],
)
def test_each_exposed_id_is_detected(environment, present):
    for leaked in present:
        score = revoked_ids_absent(environment, [leaked, "never-there"])
        assert score.score == 0.0
        assert score.metadata["leaked"] == [leaked]
        assert score.metadata["invariant"] is True


@pytest.mark.parametrize(
    "environment",
    [RESULT, PAGE, BLOCK, ["i1"], "solo", [], RecallResult(hits=()), {"no": "id"}, None, 3],
)
def test_absent_ids_score_one(environment):
    score = revoked_ids_absent(environment, ["revoked-1", "revoked-2"])
    assert score.score == 1.0
    assert score.metadata["leaked"] == []
    assert score.metadata["invariant"] is True
    assert score.metadata["checked"] == 2


def test_all_leaked_ids_are_listed_sorted():
    environment = [BLOCK, RESULT]
    score = revoked_ids_absent(environment, ["h2", "b1", "adj", "zzz"])
    assert score.score == 0.0
    assert score.metadata["leaked"] == ["adj", "b1", "h2"]
    assert score.metadata["checked"] == 4


def test_a_leak_in_adjacent_entries_counts():
    result = RecallResult(hits=(hit("ok"),), adjacent=(record("revoked"),))
    assert revoked_ids_absent(result, ["revoked"]).score == 0.0


def test_non_string_ids_are_compared_as_strings():
    page = ExportPage(entries=({"id": 17},), bytes=1, next_cursor=None)
    assert revoked_ids_absent(page, [17]).score == 0.0
    assert revoked_ids_absent(page, ["17"]).score == 0.0


def test_no_denied_ids_scores_one():
    score = revoked_ids_absent(RESULT, [])
    assert score.score == 1.0
    assert score.metadata["checked"] == 0


def test_text_mentioning_an_id_is_not_a_leak_of_that_id():
    block = ContextBlock(kind="semantic", text="- mentions revoked-1", tokens=3, entry_ids=("ok",))
    assert revoked_ids_absent(block, ["revoked-1"]).score == 1.0


def test_a_score_cannot_be_changed_after_the_fact():
    result = revoked_ids_absent(["a"], ["a"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.score = 1.0  # type: ignore[misc]
