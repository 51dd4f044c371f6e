"""The RAG store's typed values (``prism_memory.rag_types``): their checks, caps, messages and the
access rule, each at its boundary.

Every expected value is written out by hand (digests by :mod:`hashlib`, never by the code under
test).
"""

from __future__ import annotations

import dataclasses
import hashlib
import typing
from typing import Literal

import numpy as np
import pytest

from prism_memory.errors import CapExceededError, ValidationError
from prism_memory.rag_types import (
    ACL,
    AccessConstraint,
    Authorization,
    Chunk,
    IngestResult,
    MetadataFilter,
    RagHit,
    RagScope,
    SourceAccess,
    check_filter,
    check_generation,
    check_metadata,
    check_text,
    chunk_digest,
)

VECTOR = np.zeros(3, dtype=np.float32)
LARGEST = 9_223_372_036_854_775_807  # 2**63 - 1


def _ids(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{n}" for n in range(count)]


def _hit(embedding: object = None) -> RagHit:
    return RagHit("s", 3, "text", {"k": 1}, 2, 0.5, embedding=embedding)  # type: ignore[arg-type]


# ---- the values are frozen and slotted ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (RagScope("acme", "ada"), "collection"),
        (Chunk("s", 0, "text", VECTOR), "text"),
        (AccessConstraint("p"), "principal_id"),
        (SourceAccess(("p",), (), 1), "access_version"),
        (_hit(), "score"),
        (IngestResult("s", 1, 2, 1, False), "chunks"),
    ],
)
def test_a_rag_value_is_frozen_and_has_no_instance_dict(value: object, field: str):
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, field, None)
    assert not hasattr(value, "__dict__")


def test_the_public_aliases_name_exactly_what_the_api_accepts():
    assert ACL == "acl"
    assert typing.get_args(Authorization) == (AccessConstraint, Literal["acl"], type(None))
    assert typing.get_args(MetadataFilter) == (str, int | float | bool | str | None)


# ---- check_text -----------------------------------------------------------------------------------


def test_text_is_returned_unchanged_and_may_be_empty_only_when_allowed():
    assert check_text(" héllo ", "text") == " héllo "
    assert check_text("", "text", allow_empty=True) == ""
    assert check_text("  ", "text", allow_empty=True) == "  "


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (5, r"^source text must be a string$"),
        ("", r"^source text must not be empty$"),
        (" \n\t", r"^source text must not be empty$"),
        ("a\x00b", r"^source text contains a NUL byte$"),
        ("a\ud800", r"^source text contains a lone surrogate$"),
    ],
)
def test_bad_text_is_refused_by_name(bad: object, message: str):
    with pytest.raises(ValidationError, match=message):
        check_text(bad, "source text")


def test_a_lone_surrogate_error_keeps_the_encoding_error_as_its_cause():
    with pytest.raises(ValidationError) as caught:
        check_text("\udfff", "text")
    assert isinstance(caught.value.__cause__, UnicodeEncodeError)


# ---- generations and access versions --------------------------------------------------------------


@pytest.mark.parametrize("good", [0, 1, LARGEST])
def test_a_generation_is_an_integer_from_0_to_2_to_the_63_minus_1(good: int):
    assert check_generation(good) == good


@pytest.mark.parametrize("bad", [-1, LARGEST + 1, True, 1.0, "1", None])
def test_any_other_generation_is_refused(bad: object):
    with pytest.raises(ValidationError, match=r"^generation must be an integer in \[0, 2\*\*63\)$"):
        check_generation(bad)
    with pytest.raises(ValidationError, match=r"^since must be an integer in \[0, 2\*\*63\)$"):
        check_generation(bad, "since")


@pytest.mark.parametrize("good", [1, 2, LARGEST])
def test_an_access_version_is_an_integer_from_1_to_2_to_the_63_minus_1(good: int):
    assert AccessConstraint("p", access_version=good).access_version == good
    assert SourceAccess((), (), good).access_version == good


@pytest.mark.parametrize("bad", [0, -1, LARGEST + 1, True, 1.5])
def test_any_other_access_version_is_refused(bad: object):
    with pytest.raises(ValidationError, match=r"^access_version must be an integer >= 1$"):
        AccessConstraint("p", access_version=bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"^access_version must be an integer >= 1$"):
        SourceAccess((), (), bad)  # type: ignore[arg-type]


# ---- metadata -------------------------------------------------------------------------------------


def test_no_metadata_is_an_empty_object():
    assert check_metadata(None) == {}


def test_metadata_comes_back_as_a_plain_json_copy_with_sorted_keys():
    given = {"b": (1, 2), "a": {"z": 1, "y": None}}
    copy = check_metadata(given)
    assert copy == {"a": {"y": None, "z": 1}, "b": [1, 2]}
    assert list(copy) == ["a", "b"]
    assert list(copy["a"]) == ["y", "z"]
    assert copy is not given


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([("a", 1)], r"^chunk metadata must be a mapping$"),
        ({"k": object()}, r"^chunk metadata holds a value that is not JSON: object$"),
        ({"k": float("nan")}, r"^chunk metadata holds a non-finite number$"),
    ],
)
def test_bad_metadata_is_refused_by_name(bad: object, message: str):
    with pytest.raises(ValidationError, match=message):
        check_metadata(bad, "chunk metadata")


def test_metadata_named_metadata_by_default():
    with pytest.raises(ValidationError, match=r"^metadata must be a mapping$"):
        check_metadata("x")


def test_metadata_of_64_kib_as_json_is_accepted_and_one_byte_more_refused():
    # json.dumps({"k": s}) is '{"k": "' + s + '"}': 9 characters around s
    assert check_metadata({"k": "x" * 65_527}) == {"k": "x" * 65_527}
    with pytest.raises(CapExceededError, match=r"^metadata is larger than 65536 bytes as JSON$"):
        check_metadata({"k": "x" * 65_528})


def test_metadata_size_counts_utf8_bytes_not_escapes():
    # "é" is 2 bytes in UTF-8 (6 as the escape \u00e9): 2 × 32_763 + 9 = 65_535 bytes
    assert check_metadata({"k": "é" * 32_763}) == {"k": "é" * 32_763}
    with pytest.raises(CapExceededError):
        check_metadata({"k": "é" * 32_764})


# ---- filters --------------------------------------------------------------------------------------


def test_no_filter_stays_none_and_a_filter_comes_back_as_a_dict():
    assert check_filter(None) is None
    given = {"lang": "en", "n": 2, "x": 1.5, "ok": True, "gone": None}
    assert check_filter(given) == {"lang": "en", "n": 2, "x": 1.5, "ok": True, "gone": None}


def test_a_filter_tests_at_most_16_keys():
    sixteen = {f"k{n}": n for n in range(16)}
    assert check_filter(sixteen) == sixteen
    with pytest.raises(CapExceededError, match=r"^filter tests 17 keys; the cap is 16$"):
        check_filter({**sixteen, "k16": 16})


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (
            [("k", 1)],
            ValidationError,
            r"^filter must be a mapping of metadata keys to JSON scalars$",
        ),
        ({"a": 1, 2: 1}, ValidationError, r"^filter key #1 must be a string$"),
        ({"a\x00": 1}, ValidationError, r"^filter key #0 contains a NUL byte$"),
        ({"a": 1, "b": [1]}, ValidationError, r"^filter value #1 must be a JSON scalar$"),
        ({"a": {"b": 1}}, ValidationError, r"^filter value #0 must be a JSON scalar$"),
        ({"a": float("inf")}, ValidationError, r"^filter value #0 holds a non-finite number$"),
        ({"a": "v\x00"}, ValidationError, r"^filter value #0 contains a NUL character"),
    ],
)
def test_a_bad_filter_is_refused_by_position(bad: object, error: type[Exception], message: str):
    with pytest.raises(error, match=message):
        check_filter(bad)


# ---- digests --------------------------------------------------------------------------------------


def test_the_chunk_digest_is_the_sha256_of_the_utf8_text():
    assert chunk_digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert chunk_digest("é") == hashlib.sha256(b"\xc3\xa9").hexdigest()


# ---- RagScope -------------------------------------------------------------------------------------


def test_a_scope_keeps_its_parts_and_keys_by_resource_and_collection():
    scope = RagScope("acme", "ré", "docs")
    assert (scope.tenant_id, scope.resource_id, scope.collection) == ("acme", "ré", "docs")
    assert scope.key == '["ré", "docs"]'
    assert RagScope("acme", "ada").key == '["ada", null]'


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (("", "ada", None), r"^tenant_id must be a non-empty string$"),
        (("acme", " ", None), r"^resource_id must be a non-empty string$"),
        (("acme", "ada", ""), r"^collection must be a non-empty string$"),
    ],
)
def test_each_scope_part_is_checked_by_name(parts: tuple[str, str, str | None], message: str):
    with pytest.raises(ValidationError, match=message):
        RagScope(*parts)


def test_scope_of_takes_a_scope_as_it_is_or_a_mapping_of_its_parts():
    scope = RagScope("acme", "ada", "docs")
    assert RagScope.of(scope) is scope
    mapped = {"tenant_id": "acme", "resource_id": "ada", "collection": "docs"}
    assert RagScope.of(mapped) == scope
    assert RagScope.of({"tenant_id": "acme", "resource_id": "ada"}) == RagScope("acme", "ada")


def test_scope_of_refuses_anything_else_and_unknown_keys():
    with pytest.raises(ValidationError, match=r"^scope must be a RagScope or a mapping$"):
        RagScope.of(["acme", "ada"])  # type: ignore[arg-type]
    allowed = "the allowed keys are tenant_id, resource_id, collection"
    with pytest.raises(ValidationError, match=rf"^scope has 2 unknown keys; {allowed}$"):
        RagScope.of({"tenant_id": "a", "resource_id": "b", "x": 1, "thread_id": "t"})
    with pytest.raises(ValidationError, match=rf"^scope has 1 unknown key; {allowed}$") as caught:
        RagScope.of({"tenant_id": "a", "resource_id": "b", "sk_live_pasted": 1})
    assert "sk_live_pasted" not in str(caught.value)  # a key may be a secret a caller pasted
    with pytest.raises(ValidationError, match=r"^resource_id must be a non-empty string$"):
        RagScope.of({"tenant_id": "acme"})


# ---- Chunk ----------------------------------------------------------------------------------------


def test_a_chunk_gets_its_digest_and_a_json_copy_of_its_metadata():
    chunk = Chunk("s", 0, "abc", VECTOR, {"b": (1,), "a": 2})
    assert chunk.digest == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert chunk.metadata == {"a": 2, "b": [1]}
    assert (chunk.source_id, chunk.index, chunk.text) == ("s", 0, "abc")
    assert Chunk("s", 4095, "abc", VECTOR).metadata == {}


def test_a_given_digest_must_match_the_text():
    right = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert Chunk("s", 0, "abc", VECTOR, digest=right).digest == right
    with pytest.raises(ValidationError, match=r"^chunk digest does not match its text$"):
        Chunk("s", 0, "abd", VECTOR, digest=right)


def test_chunk_text_of_16000_characters_is_accepted_and_16001_refused():
    assert len(Chunk("s", 0, "x" * 16_000, VECTOR).text) == 16_000
    with pytest.raises(CapExceededError, match=r"^chunk text is longer than 16000 characters$"):
        Chunk("s", 0, "x" * 16_001, VECTOR)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"source_id": ""}, r"^source_id must be a non-empty string$"),
        ({"index": True}, r"^chunk index must be an integer$"),
        ({"index": 1.0}, r"^chunk index must be an integer$"),
        ({"index": -1}, r"^chunk index must be in \[0, 4096\)$"),
        ({"index": 4096}, r"^chunk index must be in \[0, 4096\)$"),
        ({"text": " "}, r"^chunk text must not be empty$"),
        ({"metadata": ["a"]}, r"^chunk metadata must be a mapping$"),
    ],
)
def test_a_bad_chunk_is_refused_by_name(fields: dict[str, object], message: str):
    given: dict[str, object] = {"source_id": "s", "index": 0, "text": "t", "embedding": VECTOR}
    with pytest.raises(ValidationError, match=message):
        Chunk(**{**given, **fields})  # type: ignore[arg-type]


# ---- access -------------------------------------------------------------------------------------


def test_a_constraint_keeps_distinct_groups_in_order():
    constraint = AccessConstraint("p", ["g2", "g1", "g2"])  # type: ignore[arg-type]
    assert (constraint.principal_id, constraint.group_ids) == ("p", ("g2", "g1"))
    assert constraint.access_version is None


def test_a_constraint_names_at_most_32_groups():
    assert len(AccessConstraint("p", tuple(_ids("g", 32))).group_ids) == 32
    with pytest.raises(CapExceededError, match=r"^group_ids: 33 ids, over the cap 32$"):
        AccessConstraint("p", tuple(_ids("g", 33)))


def test_a_constraint_refuses_a_blank_principal_and_a_bare_string_of_groups():
    with pytest.raises(ValidationError, match=r"^principal_id must be a non-empty string$"):
        AccessConstraint("")
    with pytest.raises(ValidationError, match=r"^group_ids must be a list, tuple or set of ids"):
        AccessConstraint("p", "staff")  # type: ignore[arg-type]


def test_source_access_keeps_distinct_ids_as_tuples():
    access = SourceAccess(["a", "b", "a"], ["g"], 3)  # type: ignore[arg-type]
    assert (access.principal_ids, access.group_ids, access.access_version) == (
        ("a", "b"),
        ("g",),
        3,
    )
    of = SourceAccess.of(["a", "a"], ["g1", "g1"], 2)
    assert of == SourceAccess(("a",), ("g1",), 2)


def test_source_access_caps_principals_at_1024_and_groups_at_32():
    assert len(SourceAccess.of(_ids("p", 1024), _ids("g", 32), 1).principal_ids) == 1024
    with pytest.raises(CapExceededError, match=r"^principal_ids: 1025 ids, over the cap 1024$"):
        SourceAccess.of(_ids("p", 1025), [], 1)
    with pytest.raises(CapExceededError, match=r"^group_ids: 33 ids, over the cap 32$"):
        SourceAccess.of([], _ids("g", 33), 1)
    with pytest.raises(CapExceededError, match=r"^principal_ids: 1025 ids, over the cap 1024$"):
        SourceAccess(tuple(_ids("p", 1025)), (), 1)
    with pytest.raises(CapExceededError, match=r"^group_ids: 33 ids, over the cap 32$"):
        SourceAccess((), tuple(_ids("g", 33)), 1)


def test_source_access_of_refuses_a_bare_string_by_name():
    with pytest.raises(
        ValidationError, match=r"^principal_ids must be a list, tuple or set of ids"
    ):
        SourceAccess.of("ada", [], 1)
    with pytest.raises(ValidationError, match=r"^group_ids must be a list, tuple or set of ids"):
        SourceAccess.of([], "staff", 1)


@pytest.mark.parametrize(
    ("constraint", "allowed"),
    [
        (AccessConstraint("ada"), True),  # the principal is granted
        (AccessConstraint("bob", ("g2",)), True),  # one of its groups is granted
        (AccessConstraint("bob", ("g9", "g2")), True),  # any one group is enough
        (AccessConstraint("bob", ("g9",)), False),  # neither
        (AccessConstraint("bob"), False),  # no groups, principal not granted
        (AccessConstraint("ada", access_version=4), True),  # the grants' own version
        (AccessConstraint("ada", access_version=3), False),  # a stale version denies
        (AccessConstraint("bob", ("g1",), access_version=5), False),
    ],
)
def test_the_access_rule(constraint: AccessConstraint, allowed: bool):
    grants = SourceAccess(("ada", "cy"), ("g1", "g2"), 4)
    assert grants.allows(constraint) is allowed


# ---- results --------------------------------------------------------------------------------------


def test_a_hit_is_keyed_by_source_and_chunk_index():
    assert _hit().key == ("s", 3)


def test_a_hit_compares_and_prints_without_its_embedding():
    with_vector, without = _hit(np.ones(3, dtype=np.float32)), _hit()
    assert with_vector == without
    assert "embedding=" not in repr(with_vector)  # the vector is not printed; its model is
    assert "embedding_model=None" in repr(with_vector)
    assert (without.semantic, without.lexical, without.embedding) == (None, None, None)
    assert without.embedding_model is None


def test_a_chunk_records_its_model_last_and_checks_it_without_repeating_it():
    from prism_memory.rag_types import Chunk

    positional = Chunk("s", 0, "text", np.ones(3), {"k": 1}, "")
    assert positional.embedding_model is None
    assert Chunk("s", 0, "text", np.ones(3), embedding_model="m@1").embedding_model == "m@1"
    assert [f.name for f in dataclasses.fields(Chunk)][-1] == "embedding_model"
    for bad in ("", "   ", "x" * 257, "secret\nmodel", 3):
        with pytest.raises(ValidationError) as refused:
            Chunk("s", 0, "text", np.ones(3), embedding_model=bad)  # type: ignore[arg-type]
        assert "secret" not in str(refused.value)
