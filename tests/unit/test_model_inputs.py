"""The pydantic inputs (``MemoryIdentity``, ``MemoryConsent``, ``Lineage``, ``MemoryEntry``,
``RecallScoring``): their defaults, bounds and messages, and the normalised recall weights.

Every expected value is written out by hand from the documented rules.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pydantic
import pytest

from prism_memory.errors import ValidationError
from prism_memory.models import (
    DEFAULT_LEXICAL_WEIGHT,
    Lineage,
    MemoryConsent,
    MemoryEntry,
    MemoryIdentity,
    RecallScoring,
)

WHEN = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


# ---- every input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [
        (MemoryIdentity(tenant_id="a", resource_id="b", thread_id="c"), "thread_id", "d"),
        (MemoryConsent(), "visible", False),
        (Lineage(source_ids=("a",)), "reason", "r"),
        (MemoryEntry(text="t"), "text", "u"),
        (RecallScoring(), "lexical_weight", 0.25),
    ],
)
def test_an_input_is_frozen(model: pydantic.BaseModel, field: str, value: object):
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        setattr(model, field, value)


def test_an_unknown_field_is_refused_with_a_typed_error():
    with pytest.raises(ValidationError, match=r"^invalid MemoryConsent: an unknown field"):
        MemoryConsent(shared=True)  # type: ignore[call-arg]


def test_text_keeps_its_surrounding_whitespace():
    entry = MemoryEntry(text="  hi  ", role=" assistant ")
    assert (entry.text, entry.role) == ("  hi  ", " assistant ")


# ---- MemoryIdentity -----------------------------------------------------------------------------


def test_an_identity_keeps_its_three_keys():
    identity = MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="t1")
    assert (identity.tenant_id, identity.resource_id, identity.thread_id) == ("acme", "ada", "t1")


@pytest.mark.parametrize("key", ["tenant_id", "resource_id", "thread_id"])
def test_each_identity_key_is_checked_before_coercion_and_named(key: str):
    given = {"tenant_id": "acme", "resource_id": "ada", "thread_id": "t1", key: 5}
    with pytest.raises(ValidationError, match=rf"^{key} must be a non-empty string$"):
        MemoryIdentity(**given)
    with pytest.raises(ValidationError, match=rf"^{key} contains control characters$"):
        MemoryIdentity(**{**given, key: "a\x01"})


# ---- MemoryConsent ------------------------------------------------------------------------------


def test_consent_defaults_to_a_visible_user_grant_for_the_thread():
    consent = MemoryConsent()
    assert (consent.source, consent.scope, consent.visible) == ("user", "thread", True)
    assert (consent.granted_at, consent.revoked_at, consent.revoked) == (None, None, False)


@pytest.mark.parametrize("source", ["user", "agent", "system"])
@pytest.mark.parametrize("scope", ["thread", "profile", "user"])
def test_consent_takes_each_documented_source_and_scope(source: str, scope: str):
    consent = MemoryConsent(source=source, scope=scope)  # type: ignore[arg-type]
    assert (consent.source, consent.scope) == (source, scope)


def test_an_unknown_source_or_scope_is_refused():
    with pytest.raises(ValidationError, match=r"^invalid MemoryConsent: source: Input should be"):
        MemoryConsent(source="bot")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"^invalid MemoryConsent: scope: Input should be"):
        MemoryConsent(scope="tenant")  # type: ignore[arg-type]


def test_consent_is_revoked_once_it_has_a_revocation_time():
    consent = MemoryConsent(granted_at=WHEN, revoked_at=WHEN)
    assert (consent.granted_at, consent.revoked_at, consent.revoked) == (WHEN, WHEN, True)


def test_a_naive_grant_time_is_refused_by_name():
    with pytest.raises(ValidationError, match=r"^granted_at must be a timezone-aware datetime$"):
        MemoryConsent(granted_at=datetime(2026, 3, 1))


# ---- Lineage ------------------------------------------------------------------------------------


def test_lineage_keeps_distinct_source_ids_in_order_and_no_reason_by_default():
    lineage = Lineage(source_ids=("b", "a", "b"))
    assert (lineage.source_ids, lineage.reason) == (("b", "a"), None)


def test_lineage_needs_at_least_one_source():
    assert Lineage(source_ids=("a",)).source_ids == ("a",)
    with pytest.raises(ValidationError, match=r"^invalid Lineage: source_ids: Tuple should have"):
        Lineage(source_ids=())


def test_a_lineage_reason_of_256_characters_is_kept_and_257_refused():
    assert Lineage(source_ids=("a",), reason="r" * 256).reason == "r" * 256
    with pytest.raises(ValidationError, match=r"^invalid Lineage: reason: String should have"):
        Lineage(source_ids=("a",), reason="r" * 257)


def test_lineage_names_a_bad_source_id_and_an_unstorable_reason():
    with pytest.raises(ValidationError, match=r"^lineage source id must be a non-empty string$"):
        Lineage(source_ids=("a", " "))
    with pytest.raises(
        ValidationError, match=r"^lineage reason contains a NUL character or a lone surrogate$"
    ):
        Lineage(source_ids=("a",), reason="why\x00")


# ---- MemoryEntry --------------------------------------------------------------------------------


def test_an_entry_defaults_to_a_user_entry_with_nothing_else_set():
    entry = MemoryEntry(text="hello")
    assert (entry.id, entry.text, entry.role, entry.metadata) == (None, "hello", "user", {})
    assert (entry.consent, entry.sequence, entry.occurred_at) == (None, None, None)
    assert (entry.importance, entry.reflection, entry.lineage) == (None, None, None)


def test_an_entry_keeps_every_field_it_is_given():
    consent, lineage = MemoryConsent(visible=False), Lineage(source_ids=("s",))
    entry = MemoryEntry(
        id="e1", text="t", role="assistant", metadata={"k": [1]}, consent=consent, sequence=7,
        occurred_at=WHEN, importance=0.25, reflection={"why": "x"}, lineage=lineage,
    )  # fmt: skip
    assert (entry.id, entry.text, entry.role, entry.metadata) == (
        "e1",
        "t",
        "assistant",
        {"k": [1]},
    )
    assert (entry.consent, entry.sequence, entry.occurred_at) == (consent, 7, WHEN)
    assert (entry.importance, entry.reflection, entry.lineage) == (0.25, {"why": "x"}, lineage)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"id": ""}, r"^entry id must be a non-empty string$"),
        ({"text": "   "}, r"^entry text must not be blank$"),
        ({"text": "a\x00b"}, r"^entry text contains a NUL character or a lone surrogate$"),
        ({"role": "r\x00"}, r"^role contains a NUL character or a lone surrogate$"),
        ({"reflection": {"score": float("nan")}}, r"^reflection holds a non-finite number$"),
        ({"metadata": {"k": float("inf")}}, r"^metadata holds a non-finite number$"),
        ({"importance": float("nan")}, r"^importance must be a finite number$"),
        ({"occurred_at": datetime(2026, 3, 1)}, r"^occurred_at must be a timezone-aware datetime$"),
    ],
)
def test_a_bad_entry_field_is_refused_by_name(fields: dict[str, object], message: str):
    with pytest.raises(ValidationError, match=message):
        MemoryEntry(**{"text": "t", **fields})


def test_the_text_needs_one_character_and_the_role_one_to_64():
    with pytest.raises(ValidationError, match=r"^invalid MemoryEntry: text: String should have"):
        MemoryEntry(text="")
    assert MemoryEntry(text="t", role="r" * 64).role == "r" * 64
    for role in ("", "r" * 65):
        with pytest.raises(
            ValidationError, match=r"^invalid MemoryEntry: role: String should have"
        ):
            MemoryEntry(text="t", role=role)


def test_the_sequence_runs_from_0_to_2_to_the_62():
    assert MemoryEntry(text="t", sequence=0).sequence == 0
    assert (
        MemoryEntry(text="t", sequence=4_611_686_018_427_387_904).sequence
        == 4_611_686_018_427_387_904
    )
    for sequence in (-1, 4_611_686_018_427_387_905):
        with pytest.raises(ValidationError, match=r"^invalid MemoryEntry: sequence: Input should"):
            MemoryEntry(text="t", sequence=sequence)


def test_metadata_keys_starting_with_an_underscore_are_reserved_and_not_repeated():
    with pytest.raises(ValidationError) as caught:
        MemoryEntry(text="t", metadata={"_sk_live": 1, "ok": 2, "_b": 3})
    assert str(caught.value) == "2 metadata key(s) start with '_', which is reserved"
    assert MemoryEntry(text="t", metadata={"a_b": 1}).metadata == {"a_b": 1}


# ---- RecallScoring ------------------------------------------------------------------------------


def test_scoring_defaults_rank_by_similarity_alone_with_lambda_one_half():
    scoring = RecallScoring()
    assert (scoring.recency_weight, scoring.importance_weight) == (0.0, 0.0)
    assert (scoring.half_life_ms, scoring.lexical_weight) == (None, 0.5)
    assert DEFAULT_LEXICAL_WEIGHT == 0.5
    assert scoring.weights() == (1.0, 0.0, 0.0)


@pytest.mark.parametrize("field", ["recency_weight", "importance_weight", "lexical_weight"])
@pytest.mark.parametrize("value", [0.0, 0.5, 1.0])
def test_each_weight_takes_the_closed_unit_interval(field: str, value: float):
    scoring = RecallScoring(**{field: value, "half_life_ms": 1000.0})
    assert getattr(scoring, field) == value


@pytest.mark.parametrize("field", ["recency_weight", "importance_weight", "lexical_weight"])
@pytest.mark.parametrize("value", [-0.01, 1.01, 1.5, float("nan"), float("inf")])
def test_a_weight_outside_the_unit_interval_is_refused_by_name(field: str, value: float):
    with pytest.raises(ValidationError, match=rf"^{field} must be a finite number in \[0, 1\]$"):
        RecallScoring(**{field: value, "half_life_ms": 1000.0})


@pytest.mark.parametrize("margin", [0.0, 1.0, 3.0, 10.0])
def test_the_chance_margin_takes_zero_to_ten(margin: float):
    assert RecallScoring(chance_margin=margin).chance_margin == margin
    assert RecallScoring().chance_margin == 3.0


@pytest.mark.parametrize("margin", [-0.01, 10.01, float("nan"), float("inf"), float("-inf")])
def test_a_chance_margin_outside_zero_to_ten_is_refused_by_name(margin: float):
    with pytest.raises(
        ValidationError, match=r"^chance_margin must be a finite number in \[0, 10\]$"
    ):
        RecallScoring(chance_margin=margin)


@pytest.mark.parametrize("half_life", [0.001, 0.5, 1.0, 86_400_000.0])
def test_a_positive_half_life_is_kept(half_life: float):
    assert RecallScoring(half_life_ms=half_life).half_life_ms == half_life


@pytest.mark.parametrize("half_life", [0.0, -1.0, float("inf"), float("nan")])
def test_a_half_life_that_is_not_positive_and_finite_is_refused(half_life: float):
    with pytest.raises(ValidationError, match=r"^half_life_ms must be a positive finite number$"):
        RecallScoring(half_life_ms=half_life)


def test_a_recency_weight_needs_a_half_life():
    with pytest.raises(ValidationError, match=r"^recency_weight needs half_life_ms$"):
        RecallScoring(recency_weight=0.5)
    assert RecallScoring(importance_weight=0.5).half_life_ms is None


@pytest.mark.parametrize(
    ("recency", "importance", "expected"),
    [
        (0.25, 0.5, (0.25, 0.25, 0.5)),  # under 1: similarity keeps the rest
        (0.5, 0.5, (0.0, 0.5, 0.5)),  # exactly 1: nothing left for similarity
        (0.75, 0.75, (0.0, 0.5, 0.5)),  # over 1: scaled down to sum to 1
        (1.0, 0.25, (0.0, 0.8, 0.2)),
    ],
)
def test_the_weights_are_normalised_to_sum_to_one(
    recency: float, importance: float, expected: tuple[float, float, float]
):
    scoring = RecallScoring(recency_weight=recency, importance_weight=importance, half_life_ms=1.0)
    assert scoring.weights() == expected


def test_a_one_character_role_is_accepted():
    assert MemoryEntry(text="t", role="r").role == "r"


def test_scoring_from_a_mapping_is_a_scoring_model():
    scoring = RecallScoring.model_validate({"recency_weight": 0.25, "half_life_ms": 10.0})
    assert type(scoring) is RecallScoring
    assert (scoring.recency_weight, scoring.half_life_ms) == (0.25, 10.0)
    assert scoring.weights() == (0.75, 0.25, 0.0)
