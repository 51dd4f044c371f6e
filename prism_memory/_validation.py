"""The checks every input passes: keys, ids, storable text and JSON, and pydantic's errors made ours.

The leaf of the domain models (:mod:`prism_memory.models` re-exports it): it knows pydantic and
:mod:`prism_memory.errors`, nothing else of the package.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence, Set
from datetime import datetime
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel

from .errors import CapExceededError, ValidationError

M = TypeVar("M", bound=BaseModel)

_MAX_KEY = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
MAX_JSON_DEPTH = 32
"""How deeply metadata, reflections and working memory may nest (deeper, or circular, is refused)."""
_MAX_JSON_NODES = 262_144


def check_aware(value: datetime | None, name: str) -> datetime | None:
    """``value`` unchanged when it is ``None`` or timezone-aware; a naive datetime is refused."""
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise ValidationError(f"{name} must be a timezone-aware datetime")
    return value


def check_key(value: object, name: str) -> str:
    """Validate a scope key or entry id: a non-empty string of printable characters, ≤ 256 chars."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} must be a non-empty string")
    if len(value) > _MAX_KEY:
        raise ValidationError(f"{name} is longer than {_MAX_KEY} characters")
    if _CONTROL.search(value):
        raise ValidationError(f"{name} contains control characters")
    return check_text(value, name)


def check_id_collection(value: object, name: str) -> None:
    """Refuse anything but a collection of ids (a list, tuple, set or frozenset) for ``name``.

    A bare ``str`` is a sequence of its characters: taken as ids it would name (or grant) ``s``,
    ``t``, ``a``, ``f`` instead of ``"staff"``, so it is refused like any other non-collection.
    """
    if isinstance(value, str | bytes | bytearray) or not isinstance(value, Sequence | Set):
        raise ValidationError(
            f"{name} must be a list, tuple or set of ids, not {type(value).__name__}"
        )


def check_ids(value: object, name: str, *, cap: int) -> tuple[str, ...]:
    """``value`` as distinct checked ids in order (:func:`check_id_collection`, then
    :func:`check_key` on each, named by position): :class:`CapExceededError` over ``cap`` ids."""
    check_id_collection(value, name)
    assert isinstance(value, Sequence | Set)  # for mypy: checked just above
    if len(value) > cap:
        raise CapExceededError(f"{name}: {len(value)} ids, over the cap {cap}")
    return tuple(dict.fromkeys(check_key(i, f"{name}[{at}]") for at, i in enumerate(value)))


def check_text(value: str, name: str) -> str:
    """Refuse text no backend can store: NUL characters and lone UTF-16 surrogates.

    Every backend accepts and rejects the same strings, so this runs before any store sees them.
    """
    if _UNSTORABLE.search(value):
        raise ValidationError(f"{name} contains a NUL character or a lone surrogate")
    return value


def check_json(value: object, name: str, *, json_only: bool = False) -> None:
    """Refuse a JSON-like value no backend can store, without recursing.

    Strings (keys included) go through :func:`check_text`; keys must be strings; floats must be
    finite; nesting deeper than :data:`MAX_JSON_DEPTH` (which a circular value always is) is refused.
    ``json_only`` also refuses any value that is not a JSON type (``None``, bool, int, float, str,
    a mapping, a list or tuple). The one depth cap of memory metadata, working memory and RAG
    metadata; messages name ``name``, never a key or value.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > _MAX_JSON_NODES:
            raise ValidationError(f"{name} holds more than {_MAX_JSON_NODES} values")
        if isinstance(item, str):
            check_text(item, name)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValidationError(f"{name} holds a non-finite number")
        elif isinstance(item, Mapping | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                raise ValidationError(f"{name} nests deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(item, Mapping):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise ValidationError(f"{name} keys must be strings")
                    check_text(key, name)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        elif json_only and not (item is None or isinstance(item, bool | int | float)):
            raise ValidationError(f"{name} holds a value that is not JSON: {type(item).__name__}")


def _describe(exc: pydantic.ValidationError) -> str:
    """pydantic's errors without the offending input (which may hold a secret): the location of
    an unknown field stops at its parent, since its last part is the caller's own key."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        loc, message = list(error["loc"]), str(error["msg"])
        if error["type"] == "extra_forbidden" and loc:
            loc, message = loc[:-1], "an unknown field (not permitted)"
        where = ".".join(str(part) for part in loc)
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def typed_errors(cls: type[BaseModel], data: Any, handler: Any) -> Any:
    """Body of a wrap validator: pydantic's errors become :class:`ValidationError`, chained."""
    try:
        return handler(data)
    except pydantic.ValidationError as exc:
        raise ValidationError(f"invalid {cls.__name__}: {_describe(exc)}") from None


def parse(model: type[M], value: object, what: str) -> M:
    """Coerce ``value`` (a model instance or a plain mapping) into ``model``.

    pydantic's own errors become :class:`ValidationError`, chained, so callers see one error tree.
    """
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise ValidationError(f"invalid {what}: {_describe(exc)}") from None
