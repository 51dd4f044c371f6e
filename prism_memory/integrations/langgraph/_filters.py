"""LangGraph's filter rules: a search's ``filter`` on item values and ``list_namespaces``'
match conditions on namespaces, as ``InMemoryStore`` and ``PostgresStore`` apply them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.store.base import MatchCondition

from ...errors import ValidationError


def matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter rule (as ``InMemoryStore`` and ``PostgresStore`` apply it): nested dicts
    compare key by key, lists element by element, ``{"$op": x}`` applies ``$eq $ne $gt $gte $lt
    $lte`` (the ordered ones numerically; a value that is not a number does not match)."""
    if isinstance(wanted, Mapping):
        if any(str(key).startswith("$") for key in wanted):
            return all(_compare(value, op, operand) for op, operand in wanted.items())
        return isinstance(value, Mapping) and all(
            matches(value.get(key), item) for key, item in wanted.items()
        )
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(matches(v, w) for v, w in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _compare(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValidationError(f"unsupported filter operator {op!r}")
    try:
        left, right = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    if op == "$gt":
        return left > right
    if op == "$gte":
        return left >= right
    if op == "$lt":
        return left < right
    return left <= right


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether ``namespace`` meets ``condition`` (a prefix or suffix; ``"*"`` matches any label)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    return all(want == "*" or label == want for label, want in pairs)
