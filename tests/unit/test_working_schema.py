"""Working memory: the JSON-Schema subset, pydantic schemas, host hooks, templates, canonical JSON."""

from __future__ import annotations

import pydantic
import pytest

from prism_memory.errors import (
    CapExceededError,
    ConfigurationError,
    PrismMemoryError,
    ValidationError,
)
from prism_memory.working import (
    canonical_json,
    check_size,
    compile_validator,
    render_template,
    validate_json_schema,
)


def ok(schema, value):
    validate_json_schema(schema, value)


def bad(schema, value, match=None):
    with pytest.raises(ValidationError, match=match) as info:
        validate_json_schema(schema, value)
    assert type(info.value) is ValidationError  # the typed validation error, not a cap error
    return info.value


# ---- type ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "good", "wrong"),
    [
        ("object", [{}, {"a": 1}], [[], "x", 1, None, True]),
        ("array", [[], [1, "a"]], [{}, "x", 1, None]),
        ("string", ["", "x"], [1, None, [], True]),
        ("integer", [0, -7, 10**20, 3.0], [1.5, "1", None, True, False]),
        ("number", [0, 1.5, -2, 10**20], ["1", None, True, False, []]),
        ("boolean", [True, False], [0, 1, "true", None]),
        ("null", [None], [0, "", False, []]),
    ],
)
def test_type_keyword(kind, good, wrong):
    for value in good:
        ok({"type": kind}, value)
    for value in wrong:
        bad({"type": kind}, value)


def test_a_type_list_accepts_any_listed_type():
    schema = {"type": ["string", "null"]}
    ok(schema, "x")
    ok(schema, None)
    bad(schema, 3)


def test_integer_and_number_are_distinct_from_boolean():
    bad({"type": "integer"}, True, match=r"\$: expected integer")
    bad({"type": "number"}, False)


# ---- objects ------------------------------------------------------------------------------------


def test_properties_are_checked_with_their_path():
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}}
    ok(schema, {"age": 3})
    ok(schema, {})  # not required
    bad(schema, {"age": "three"}, match=r"\$\.age")


def test_required_properties_must_be_present():
    schema = {"type": "object", "required": ["name", "age"]}
    ok(schema, {"name": "a", "age": 1})
    bad(schema, {"name": "a"}, match="age")


def test_a_required_property_may_be_null_if_its_schema_allows():
    ok({"required": ["x"], "properties": {"x": {"type": "null"}}}, {"x": None})


def test_additional_properties_false_rejects_unknown_keys():
    schema = {"properties": {"a": {"type": "string"}}, "additionalProperties": False}
    ok(schema, {"a": "x"})
    error = bad(schema, {"a": "x", "b-sk-42": 1}, match="does not allow")
    assert "sk-42" not in str(error)  # the caller's key is not repeated


def test_additional_properties_schema_checks_unknown_keys():
    schema = {"properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}}
    ok(schema, {"a": "x", "b": 1, "c": 2})
    bad(schema, {"a": "x", "b": "one"}, match=r"\$\.b")
    bad(schema, {"a": 1})  # declared properties still use their own schema


def test_additional_properties_default_allows_anything():
    ok({"properties": {"a": {"type": "string"}}}, {"a": "x", "b": [1, {"c": None}]})


def test_nested_objects_report_the_full_path():
    schema = {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {"prefs": {"type": "object", "required": ["lang"]}},
            }
        },
    }
    ok(schema, {"user": {"prefs": {"lang": "en"}}})
    bad(schema, {"user": {"prefs": {}}}, match=r"\$\.user\.prefs.*lang")


# ---- arrays -------------------------------------------------------------------------------------


def test_items_checks_every_element_with_its_index():
    schema = {"type": "array", "items": {"type": "string", "maxLength": 3}}
    ok(schema, [])
    ok(schema, ["a", "abc"])
    bad(schema, ["a", "b", 3], match=r"\$\[2\]")
    bad(schema, ["a", "toolong"], match=r"\$\[1\]")


def test_items_inside_objects():
    schema = {"properties": {"tags": {"items": {"enum": ["x", "y"]}}}}
    ok(schema, {"tags": ["x", "y", "x"]})
    bad(schema, {"tags": ["x", "z"]}, match=r"\$\.tags\[1\]")


# ---- enum, bounds, lengths ------------------------------------------------------------------------


def test_enum_accepts_only_listed_values():
    schema = {"enum": ["red", "green", 3, None]}
    for value in ("red", "green", 3, None):
        ok(schema, value)
    for value in ("blue", 4, "3", [], {}):
        bad(schema, value)


def test_enum_does_not_confuse_booleans_with_numbers():
    # JSON Schema: true is not equal to 1 and false is not equal to 0.
    bad({"enum": [1, 2]}, True)
    bad({"enum": [0]}, False)
    bad({"enum": [True]}, 1)


@pytest.mark.parametrize(
    ("schema", "good", "wrong"),
    [
        ({"minimum": 0}, [0, 0.0, 5, 1e9], [-1, -0.001]),
        ({"maximum": 10}, [10, 9.99, -5], [10.5, 11]),
        ({"minimum": 1, "maximum": 2}, [1, 1.5, 2], [0.99, 2.01]),
        ({"minimum": -3.5}, [-3.5, 0], [-3.51]),
    ],
)
def test_minimum_and_maximum_are_inclusive(schema, good, wrong):
    for value in good:
        ok(schema, value)
    for value in wrong:
        bad(schema, value)


def test_bounds_apply_only_to_numbers():
    ok({"minimum": 5}, "abc")
    ok({"maximum": 0}, [1, 2, 3])


@pytest.mark.parametrize(
    ("schema", "good", "wrong"),
    [
        ({"minLength": 2}, ["ab", "abc"], ["", "a"]),
        ({"maxLength": 3}, ["", "abc"], ["abcd"]),
        ({"minLength": 1, "maxLength": 1}, ["x", "é", "🙂"], ["", "xy"]),
    ],
)
def test_string_lengths_count_characters(schema, good, wrong):
    for value in good:
        ok(schema, value)
    for value in wrong:
        bad(schema, value)


def test_lengths_apply_only_to_strings():
    ok({"maxLength": 1}, [1, 2, 3])
    ok({"minLength": 5}, 7)


# ---- compile_validator: definitions -------------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "pattern": "^a"},
        {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}},
        {"type": "array", "items": {"type": "string", "pattern": "x"}},
        {"type": "object", "additionalProperties": {"oneOf": [{"type": "string"}]}},
        {"$ref": "#/definitions/x"},
        {"type": "array", "minItems": 1},
    ],
)
def test_unsupported_keywords_fail_at_compile_time(schema):
    with pytest.raises(ConfigurationError):
        compile_validator(schema)


@pytest.mark.parametrize("schema", [{"type": "str"}, {"type": ["string", "text"]}, "object", 3])
def test_unknown_types_and_non_object_schemas_fail_at_compile_time(schema):
    with pytest.raises(ConfigurationError):
        compile_validator(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": ["name"]},
        {"enum": "abc"},
        {"properties": {"n": {"minimum": "5"}}},
        {"maxLength": "10"},
    ],
)
def test_malformed_keyword_values_fail_at_compile_time(schema):
    # compile_validator promises "a bad schema definition raises ConfigurationError here, at creation";
    # it must not compile and then blow up with a TypeError/AttributeError on the first write.
    with pytest.raises(ConfigurationError):
        compile_validator(schema)


def test_annotation_keywords_are_allowed():
    validate = compile_validator(
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Profile",
            "description": "who the user is",
            "type": "object",
            "properties": {"name": {"type": "string", "default": "anon"}},
        }
    )
    assert validate({"name": "Ada"}) == {"name": "Ada"}


def test_compiled_validator_returns_a_normalised_copy():
    validate = compile_validator({"type": "object", "properties": {"xs": {"type": "array"}}})
    source = {"xs": (1, 2), "b": {"c": True}}
    document = validate(source)
    assert document == {"xs": [1, 2], "b": {"c": True}}
    document["b"]["c"] = False
    assert source["b"]["c"] is True


def test_compiled_validator_raises_prism_validation_error():
    validate = compile_validator({"type": "object", "required": ["name"]})
    with pytest.raises(ValidationError):
        validate({})
    with pytest.raises(ValidationError):
        validate(["not", "an", "object"])


def test_no_schema_accepts_any_object():
    assert compile_validator(None)({"anything": [1, None]}) == {"anything": [1, None]}


def test_a_non_json_document_is_a_validation_error():
    with pytest.raises(ValidationError):
        compile_validator(None)({"x": float("nan")})
    with pytest.raises(ValidationError):
        compile_validator(None)({"x": {1, 2}})


# ---- pydantic model schemas ---------------------------------------------------------------------


class Profile(pydantic.BaseModel):
    name: str
    age: int = 0
    tags: list[str] = []


def test_pydantic_schema_normalises_a_valid_document():
    validate = compile_validator(Profile)
    assert validate({"name": "Ada", "age": "36"}) == {"name": "Ada", "age": 36, "tags": []}


def test_pydantic_schema_accepts_a_model_instance():
    validate = compile_validator(Profile)
    assert validate(Profile(name="Bo", tags=["x"])) == {"name": "Bo", "age": 0, "tags": ["x"]}


@pytest.mark.parametrize("document", [{}, {"name": "Ada", "age": "old"}, {"name": ["x"]}])
def test_pydantic_schema_rejects_with_a_prism_validation_error(document):
    validate = compile_validator(Profile)
    with pytest.raises(ValidationError) as info:
        validate(document)
    assert not isinstance(info.value, pydantic.ValidationError)
    assert isinstance(info.value.__cause__, pydantic.ValidationError)


def test_a_schema_that_is_neither_dict_nor_model_is_a_configuration_error():
    with pytest.raises(ConfigurationError):
        compile_validator(dict)  # type: ignore[arg-type]


# ---- host hooks ---------------------------------------------------------------------------------


def test_hook_returning_false_rejects():
    validate = compile_validator(None, lambda doc: doc.get("ok", False))
    assert validate({"ok": True}) == {"ok": True}
    with pytest.raises(ValidationError):
        validate({"ok": False})


def test_hook_returning_none_or_truthy_accepts():
    assert compile_validator(None, lambda doc: None)({"a": 1}) == {"a": 1}
    assert compile_validator(None, lambda doc: "yes")({"a": 1}) == {"a": 1}


def test_hook_raising_becomes_a_chained_validation_error():
    def hook(doc):
        raise RuntimeError("no swearing")

    with pytest.raises(ValidationError, match="no swearing") as info:
        compile_validator(None, hook)({"a": 1})
    assert isinstance(info.value.__cause__, RuntimeError)


def test_hook_raising_a_prism_validation_error_passes_it_through():
    error = ValidationError("custom")

    def hook(doc):
        raise error

    with pytest.raises(ValidationError) as info:
        compile_validator(None, hook)({"a": 1})
    assert info.value is error


def test_hook_sees_the_schema_normalised_document():
    seen = []
    compile_validator(Profile, seen.append)({"name": "Ada"})
    assert seen == [{"name": "Ada", "age": 0, "tags": []}]


def test_hook_does_not_run_when_the_schema_rejects():
    calls = []
    validate = compile_validator({"required": ["a"]}, calls.append)
    with pytest.raises(ValidationError):
        validate({})
    assert calls == []


def test_a_non_callable_hook_is_a_configuration_error():
    with pytest.raises(ConfigurationError):
        compile_validator(None, "not callable")  # type: ignore[arg-type]


# ---- templates ----------------------------------------------------------------------------------


def test_template_fills_dotted_paths():
    data = {"user": {"name": "Ada", "address": {"city": "London"}}}
    assert render_template("{{user.name}} lives in {{ user.address.city }}.", data) == (
        "Ada lives in London."
    )


def test_template_indexes_lists():
    data = {"items": ["zero", "one", {"label": "two"}]}
    assert render_template("{{items.1}}/{{items.2.label}}", data) == "one/two"


def test_template_missing_paths_render_empty():
    data = {"a": {"b": 1}, "xs": [1]}
    assert render_template("[{{nope}}|{{a.c}}|{{a.b.c}}|{{xs.5}}|{{xs.x}}]", data) == "[||||]"


def test_template_renders_scalars_plainly():
    data = {"t": True, "f": False, "n": None, "i": 42, "x": 1.5, "s": "str"}
    assert (
        render_template("{{t}} {{f}} [{{n}}] {{i}} {{x}} {{s}}", data) == "true false [] 42 1.5 str"
    )


def test_template_renders_objects_and_lists_as_compact_sorted_json():
    data = {"prefs": {"b": [1, 2], "a": "é"}, "xs": [{"k": None}]}
    assert render_template("{{prefs}} {{xs}}", data) == '{"a":"é","b":[1,2]} [{"k":null}]'


def test_template_values_are_never_re_expanded():
    data = {"a": "{{b}}", "b": "SECRET", "c": {"inner": "{{b}}"}}
    assert render_template("{{a}} {{c}}", data) == '{{b}} {"inner":"{{b}}"}'


def test_template_leaves_other_text_alone():
    assert (
        render_template("no {placeholders} here {{ }}", {"x": 1}) == "no {placeholders} here {{ }}"
    )


# ---- canonical JSON and size ----------------------------------------------------------------------


def test_canonical_json_is_compact_and_key_sorted():
    assert canonical_json({"b": 1, "a": [True, None, "é"]}) == '{"a":[true,null,"é"],"b":1}'


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_canonical_json_rejects_non_finite_numbers(value):
    with pytest.raises(ValidationError):
        canonical_json({"x": [value]})


def test_canonical_json_rejects_non_json_values():
    with pytest.raises(ValidationError):
        canonical_json({"x": object()})


def test_check_size_counts_utf8_bytes_of_canonical_json():
    document = {"a": "é"}  # '{"a":"é"}' is 9 characters and 10 bytes
    assert check_size(document, 10) == 10
    with pytest.raises(CapExceededError):
        check_size(document, 9)


def test_errors_are_prism_errors():
    assert issubclass(ConfigurationError, PrismMemoryError)
    assert issubclass(ValidationError, PrismMemoryError)


def test_an_unsupported_keyword_is_counted_never_repeated():
    # a mapping key can be anything a caller pasted (a secret too): the message says how many
    with pytest.raises(
        ConfigurationError, match=r"^schema at \$ uses 1 unsupported keyword; "
    ) as e:
        compile_validator({"type": "object", "sk_live_pasted": 1})
    assert "sk_live_pasted" not in str(e.value)
    assert "additionalProperties" in str(e.value)  # the supported ones are named
