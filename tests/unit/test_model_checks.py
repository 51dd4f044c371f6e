"""The checks every input passes (``prism_memory.models``: keys, ids, storable text and JSON) and how
pydantic's errors are reported: typed, and without the caller's own keys or values.

Every expected message and boundary below is written out by hand from the documented rules.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo

import pytest
from pydantic import BaseModel, ConfigDict

from prism_memory.errors import CapExceededError, ValidationError
from prism_memory.models import (
    MAX_JSON_DEPTH,
    MemoryConsent,
    MemoryEntry,
    MemoryIdentity,
    check_id_collection,
    check_ids,
    check_json,
    check_key,
    check_text,
    parse,
)


class _NoOffset(tzinfo):
    """A tzinfo that knows no offset: a datetime carrying it is still naive."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int


class _Outer(BaseModel):
    """A plain pydantic model (not one of ours), so :func:`parse` translates its errors itself."""

    model_config = ConfigDict(extra="forbid")
    name: str
    items: list[_Item]


def _nested_lists(containers: int) -> object:
    value: list[object] = []
    for _ in range(containers - 1):
        value = [value]
    return value


def _nested_dicts(containers: int) -> object:
    value: dict[str, object] = {}
    for _ in range(containers - 1):
        value = {"k": value}
    return value


# ---- keys -----------------------------------------------------------------------------------------


def test_a_key_of_printable_characters_is_returned_unchanged():
    assert check_key("acme-1", "tenant_id") == "acme-1"
    assert check_key("k" * 256, "tenant_id") == "k" * 256


@pytest.mark.parametrize("bad", ["", "   ", 5, None])
def test_a_blank_or_non_string_key_is_refused(bad: object):
    with pytest.raises(ValidationError, match=r"^tenant_id must be a non-empty string$"):
        check_key(bad, "tenant_id")


def test_a_key_longer_than_256_characters_is_refused():
    with pytest.raises(ValidationError, match=r"^thread_id is longer than 256 characters$"):
        check_key("k" * 257, "thread_id")


@pytest.mark.parametrize("bad", ["a\tb", "a\x01", "line\n", "del\x7f", "nul\x00"])
def test_a_key_with_a_control_character_is_refused(bad: str):
    with pytest.raises(ValidationError, match=r"^resource_id contains control characters$"):
        check_key(bad, "resource_id")


def test_a_key_with_a_lone_surrogate_is_refused_as_unstorable_text():
    with pytest.raises(
        ValidationError, match=r"^entry id contains a NUL character or a lone surrogate$"
    ):
        check_key("a\ud800b", "entry id")


# ---- id collections -------------------------------------------------------------------------------


@pytest.mark.parametrize("ids", [["a"], ("a",), {"a"}, frozenset({"a"}), []])
def test_a_list_tuple_set_or_frozenset_is_a_collection_of_ids(ids: object):
    assert check_id_collection(ids, "ids") is None


@pytest.mark.parametrize(
    ("bad", "kind"), [("staff", "str"), (b"staff", "bytes"), (bytearray(b"s"), "bytearray"),
                      (7, "int"), ({"a": 1}, "dict"), (None, "NoneType")],
)  # fmt: skip
def test_a_string_or_non_collection_is_not_a_collection_of_ids(bad: object, kind: str):
    with pytest.raises(
        ValidationError, match=rf"^group_ids must be a list, tuple or set of ids, not {kind}$"
    ):
        check_id_collection(bad, "group_ids")


def test_ids_come_back_distinct_in_their_first_order():
    assert check_ids(["b", "a", "b", "c", "a"], "ids", cap=5) == ("b", "a", "c")
    assert check_ids((), "ids", cap=0) == ()


def test_exactly_cap_ids_are_accepted_and_one_more_is_refused():
    assert check_ids(["a", "b", "c"], "ids", cap=3) == ("a", "b", "c")
    with pytest.raises(CapExceededError, match=r"^ids: 4 ids, over the cap 3$"):
        check_ids(["a", "b", "c", "d"], "ids", cap=3)


def test_a_bad_id_is_named_by_its_position():
    with pytest.raises(ValidationError, match=r"^principal_ids\[2\] must be a non-empty string$"):
        check_ids(["a", "b", " "], "principal_ids", cap=8)


def test_a_bare_string_of_ids_is_refused_before_the_cap():
    with pytest.raises(ValidationError, match=r"not str$"):
        check_ids("abc", "ids", cap=1)


# ---- text -----------------------------------------------------------------------------------------


def test_storable_text_is_returned_unchanged():
    assert check_text("héllo\tworld\n", "text") == "héllo\tworld\n"
    assert check_text("", "text") == ""


@pytest.mark.parametrize("bad", ["a\x00b", "\ud800", "x\udfff"])
def test_a_nul_or_a_lone_surrogate_is_refused(bad: str):
    with pytest.raises(
        ValidationError, match=r"^text contains a NUL character or a lone surrogate$"
    ):
        check_text(bad, "text")


# ---- JSON -----------------------------------------------------------------------------------------


def test_the_json_depth_cap_is_32_levels():
    assert MAX_JSON_DEPTH == 32


@pytest.mark.parametrize("nested", [_nested_lists, _nested_dicts])
def test_32_nested_containers_are_accepted_and_33_refused(nested):
    assert check_json(nested(32), "metadata") is None
    with pytest.raises(ValidationError, match=r"^metadata nests deeper than 32 levels$"):
        check_json(nested(33), "metadata")


def test_a_circular_value_is_refused_as_too_deep():
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValidationError, match=r"^working memory nests deeper than 32 levels$"):
        check_json(loop, "working memory")


def test_262144_values_are_accepted_and_one_more_is_refused():
    # the outer list counts as one value
    assert check_json([0] * 262_143, "metadata") is None
    with pytest.raises(ValidationError, match=r"^metadata holds more than 262144 values$"):
        check_json([0] * 262_144, "metadata")


def test_finite_numbers_strings_and_nested_values_are_accepted():
    value = {"a": [1, 2.5, -0.0, "x", None, True], "b": {"c": ("d", 3)}}
    assert check_json(value, "metadata") is None


@pytest.mark.parametrize(
    "bad",
    [float("nan"), [1.0, float("inf")], {"a": {"b": float("-inf")}}, ({"c": [float("nan")]},)],
)
def test_a_non_finite_number_is_refused_at_any_depth(bad: object):
    with pytest.raises(ValidationError, match=r"^metadata holds a non-finite number$"):
        check_json(bad, "metadata")


@pytest.mark.parametrize("bad", ["a\x00", ["ok", "\ud800"], {"k": {"j": "nul\x00"}}, {"a\x00": 1}])
def test_unstorable_text_in_a_value_or_a_key_is_refused(bad: object):
    with pytest.raises(
        ValidationError, match=r"^reflection contains a NUL character or a lone surrogate$"
    ):
        check_json(bad, "reflection")


@pytest.mark.parametrize("bad", [{1: "a"}, {"ok": {None: 1}}, [{("t",): 1}]])
def test_a_key_that_is_not_a_string_is_refused(bad: object):
    with pytest.raises(ValidationError, match=r"^metadata keys must be strings$"):
        check_json(bad, "metadata")


def test_any_value_passes_unless_json_only_is_asked():
    odd = {"when": datetime(2026, 1, 1, tzinfo=UTC), "blob": b"x", "obj": object()}
    assert check_json(odd, "metadata") is None


@pytest.mark.parametrize("good", [None, True, 0, 1, -3, 1.5, "s", [None, False], {"k": (1,)}])
def test_json_only_accepts_the_json_types(good: object):
    assert check_json(good, "chunk metadata", json_only=True) is None


@pytest.mark.parametrize(
    ("bad", "kind"), [(b"x", "bytes"), ({"k": object()}, "object"), ([{1, 2}], "set")]
)
def test_json_only_refuses_any_other_value_by_its_type(bad: object, kind: str):
    with pytest.raises(
        ValidationError, match=rf"^chunk metadata holds a value that is not JSON: {kind}$"
    ):
        check_json(bad, "chunk metadata", json_only=True)


# ---- timezone-aware datetimes (through the models that use them) ----------------------------------


def test_an_aware_datetime_is_kept_and_none_stays_none():
    when = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
    consent = MemoryConsent(granted_at=when)
    assert (consent.granted_at, consent.revoked_at) == (when, None)
    assert MemoryEntry(text="t", occurred_at=when).occurred_at == when
    assert MemoryEntry(text="t").occurred_at is None


@pytest.mark.parametrize("zone", [None, _NoOffset()])
def test_a_naive_datetime_is_refused(zone: tzinfo | None):
    naive = datetime(2026, 3, 1, 9, 30, tzinfo=zone)
    with pytest.raises(ValidationError, match=r"occurred_at must be a timezone-aware datetime"):
        MemoryEntry(text="t", occurred_at=naive)
    with pytest.raises(ValidationError, match=r"revoked_at must be a timezone-aware datetime"):
        MemoryConsent(revoked_at=naive)


# ---- pydantic's errors, typed and described -------------------------------------------------------


def test_parse_returns_an_instance_as_it_is_and_builds_one_from_a_mapping():
    identity = MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="t1")
    assert parse(MemoryIdentity, identity, "identity") is identity
    built = parse(
        MemoryIdentity, {"tenant_id": "acme", "resource_id": "ada", "thread_id": "t1"}, "identity"
    )
    assert type(built) is MemoryIdentity
    assert built == identity


def test_parse_lists_every_missing_field_in_order():
    with pytest.raises(ValidationError) as caught:
        parse(_Outer, {}, "outer")
    assert str(caught.value) == "invalid outer: name: Field required; items: Field required"
    assert caught.value.__cause__ is None


def test_a_nested_location_is_joined_with_dots():
    with pytest.raises(ValidationError) as caught:
        parse(_Outer, {"name": "n", "items": [{"n": 1}, {}]}, "outer")
    assert str(caught.value) == "invalid outer: items.1.n: Field required"


def test_an_unknown_top_level_field_is_reported_without_its_name():
    with pytest.raises(ValidationError) as caught:
        parse(_Outer, {"name": "n", "items": [], "sk_live_secret": 1}, "outer")
    assert str(caught.value) == "invalid outer: an unknown field (not permitted)"


def test_an_unknown_nested_field_is_located_at_its_parent_only():
    with pytest.raises(ValidationError) as caught:
        parse(_Outer, {"name": "n", "items": [{"n": 1, "sk_live_secret": 2}]}, "outer")
    assert str(caught.value) == "invalid outer: items.0: an unknown field (not permitted)"


def test_a_model_input_error_is_typed_and_named_after_the_model():
    with pytest.raises(ValidationError) as caught:
        MemoryEntry(text="")
    assert str(caught.value) == "invalid MemoryEntry: text: String should have at least 1 character"
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__ is True


def test_a_model_error_never_repeats_the_input_or_an_unknown_key():
    with pytest.raises(ValidationError) as caught:
        parse(MemoryEntry, {"text": "t", "sequence": "sk_live_secret"}, "entry")
    assert str(caught.value) == (
        "invalid MemoryEntry: sequence: Input should be a valid integer, unable to parse string as an integer"
    )
    with pytest.raises(ValidationError) as caught:
        MemoryIdentity.model_validate(
            {"tenant_id": "a", "resource_id": "b", "thread_id": "c", "sk_live_secret": 1}
        )
    assert str(caught.value) == "invalid MemoryIdentity: an unknown field (not permitted)"
