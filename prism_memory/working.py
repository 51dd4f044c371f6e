"""Working memory: schema checks, JSON size, and ``{{path}}`` templates. Pure; no storage."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pydantic

from .errors import CapExceededError, ConfigurationError, ValidationError

__all__ = [
    "SUPPORTED_KEYWORDS",
    "WorkingValidator",
    "canonical_json",
    "check_size",
    "compile_validator",
    "render_template",
    "validate_json_schema",
]

SUPPORTED_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum",
        "minimum", "maximum", "minLength", "maxLength",
        "title", "description", "default", "$schema",
    }
)  # fmt: skip
"""JSON-Schema keywords the subset understands (the last four are annotations only)."""

_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})

WorkingValidator = Callable[[Any], dict[str, Any]]
"""Validates a working-memory document and returns it normalised (JSON-ready)."""


def canonical_json(data: Any) -> str:
    """Compact, key-sorted JSON; raises :class:`ValidationError` for values JSON cannot hold."""
    try:
        return json.dumps(
            data, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False
        )
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"working memory must be plain JSON: {exc}") from exc


def _check_schema_definition(schema: Any, path: str) -> None:
    if not isinstance(schema, Mapping):
        raise ConfigurationError(f"schema at {path or '$'} must be an object")
    unknown = len(set(schema) - SUPPORTED_KEYWORDS)
    if unknown:
        # the keywords themselves are never repeated: a mapping key can be anything a caller pasted
        raise ConfigurationError(
            f"schema at {path or '$'} uses {unknown} unsupported keyword"
            f"{'s' if unknown > 1 else ''}; the supported ones are "
            f"{', '.join(sorted(SUPPORTED_KEYWORDS))}"
        )
    where = path or "$"
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    if any(k not in _TYPES for k in kinds):
        raise ConfigurationError(f"schema at {where} has an unknown type {kind!r}")
    if not isinstance(schema.get("properties", {}), Mapping):
        raise ConfigurationError(f"schema at {where}: properties must be an object")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ConfigurationError(f"schema at {where}: required must be a list of strings")
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise ConfigurationError(f"schema at {where}: enum must be a list")
    for bound in ("minimum", "maximum"):
        value = schema.get(bound, 0)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ConfigurationError(f"schema at {where}: {bound} must be a finite number")
    for bound in ("minLength", "maxLength"):
        value = schema.get(bound, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigurationError(f"schema at {where}: {bound} must be a non-negative integer")
    extra = schema.get("additionalProperties", True)
    if not isinstance(extra, bool | Mapping):
        raise ConfigurationError(
            f"schema at {where}: additionalProperties must be a bool or a schema"
        )
    for name, sub in (schema.get("properties") or {}).items():
        _check_schema_definition(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), Mapping):
        _check_schema_definition(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        _check_schema_definition(schema["items"], f"{path}[]")


def _type_ok(kind: str, value: Any) -> bool:
    match kind:
        case "object":
            return isinstance(value, Mapping)
        case "array":
            return isinstance(value, list | tuple)
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "null":
            return value is None
        case "integer":
            return (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, float) and math.isfinite(value) and value.is_integer()
            )
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
    return False


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: booleans never equal numbers (Python's ``True == 1`` does not apply)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def validate_json_schema(schema: Mapping[str, Any], value: Any, path: str = "$") -> None:
    """Check ``value`` against the JSON-Schema subset; raise :class:`ValidationError` naming the path."""
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_type_ok(k, value) for k in kinds):
            raise ValidationError(
                f"{path}: expected {' or '.join(kinds)}, got {type(value).__name__}"
            )
    if "enum" in schema and not any(_same_json(value, option) for option in schema["enum"]):
        raise ValidationError(f"{path}: not one of the allowed values")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise ValidationError(f"{path}: below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ValidationError(f"{path}: above the maximum {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise ValidationError(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise ValidationError(f"{path}: longer than {schema['maxLength']} characters")
    if isinstance(value, Mapping):
        properties: Mapping[str, Any] = schema.get("properties") or {}
        for name in schema.get("required") or ():
            if name not in value:
                raise ValidationError(f"{path}: missing required property {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                validate_json_schema(properties[name], item, f"{path}.{name}")
            elif extra is False:
                raise ValidationError(f"{path}: a property the schema does not allow")
            elif isinstance(extra, Mapping):
                validate_json_schema(extra, item, f"{path}.{name}")
    if isinstance(value, list | tuple) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            validate_json_schema(schema["items"], item, f"{path}[{index}]")


def compile_validator(
    schema: Mapping[str, Any] | type[pydantic.BaseModel] | None,
    hook: Callable[[dict[str, Any]], Any] | None = None,
) -> WorkingValidator:
    """Build the validator a memory runs before every working-memory write.

    ``schema`` is a JSON-Schema subset dict or a pydantic model class (its ``model_dump(mode="json")``
    becomes the stored document). ``hook`` is the host's own check: it may raise, or return ``False``
    to reject. A bad schema definition raises :class:`ConfigurationError` here, at creation.
    """
    if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
        model: type[pydantic.BaseModel] | None = schema
        definition: Mapping[str, Any] | None = None
    elif schema is None or isinstance(schema, Mapping):
        model, definition = None, schema
        if definition is not None:
            _check_schema_definition(definition, "")
    else:
        raise ConfigurationError("schema must be a JSON-Schema dict or a pydantic model class")
    if hook is not None and not callable(hook):
        raise ConfigurationError("validate_working_memory must be callable")

    def validate(data: Any) -> dict[str, Any]:
        if isinstance(data, pydantic.BaseModel):
            data = data.model_dump(mode="json")
        if not isinstance(data, Mapping):
            raise ValidationError("working memory must be a JSON object")
        document: dict[str, Any] = json.loads(canonical_json(data))
        if model is not None:
            try:
                document = model.model_validate(document).model_dump(mode="json")
            except pydantic.ValidationError as exc:
                raise ValidationError(
                    f"working memory does not match {model.__name__}: {exc}"
                ) from exc
        if definition is not None:
            validate_json_schema(definition, document)
        if hook is not None:
            try:
                verdict = hook(document)
            except ValidationError:
                raise
            except Exception as exc:
                raise ValidationError(
                    f"working memory rejected by validate_working_memory: {exc}"
                ) from exc
            if verdict is False:
                raise ValidationError("working memory rejected by validate_working_memory")
        return document

    return validate


def check_size(document: Mapping[str, Any], cap: int) -> int:
    """Size of the canonical JSON in UTF-8 bytes; :class:`CapExceededError` above ``cap``."""
    size = len(canonical_json(document).encode())
    if size > cap:
        raise CapExceededError(f"working memory is {size} bytes, over the cap of {cap}")
    return size


_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*)\s*\}\}")


def _lookup(data: Any, path: Sequence[str]) -> Any:
    current = data
    for part in path:
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return None
    return current


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # inert, like a memory line: a value cannot open a line, so it cannot forge a header
        return " ".join(value.split())
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    return canonical_json(value)


def render_template(template: str, data: Mapping[str, Any]) -> str:
    """Fill ``{{dotted.path}}`` placeholders from ``data`` in one pass (values are never re-expanded).

    A missing path renders as the empty string; objects and lists render as compact JSON; a string
    value renders on one line (its whitespace, newlines included, collapses to single spaces).
    """
    return _PLACEHOLDER.sub(
        lambda match: _format(_lookup(data, match.group(1).split("."))), template
    )
