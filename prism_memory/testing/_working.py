"""Conformance checks of working memory: versions, templates, bad documents, the processor and thread scope.

They run on every backend through :data:`~prism_memory.testing.CONFORMANCE_CHECKS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import (
    CapExceededError,
    ConflictError,
    ValidationError,
)
from ._support import ConformanceKit, _Case, _check, _raises

__all__ = ["WORKING_CHECKS"]


async def working_memory_versions_and_template(kit: ConformanceKit) -> None:
    """Versions start at 1 and increase by one; the template renders dotted paths."""
    case = _Case(kit)
    memory = case.memory(working_memory_template="Name: {{name}}; Format: {{prefs.format}}")
    _check(await memory.get_working() is None, "no document before the first write")
    first = await memory.update_working({"name": "Ada", "prefs": {"format": "concise"}})
    second = await memory.update_working({"name": "Ada L.", "prefs": {"format": "long"}})
    _check((first.version, second.version) == (1, 2), f"versions {first.version}, {second.version}")
    current = await memory.get_working()
    _check(current is not None and current.data["name"] == "Ada L.", "latest document is read back")
    text = await memory.context_provider(semantic=False).render()
    _check("Name: Ada L.; Format: long" in text, f"template rendered: {text!r}")
    other = case.memory(resource_id="user-bob")
    _check(await other.get_working() is None, "another resource does not see the document")


async def working_memory_rejects_bad_documents(kit: ConformanceKit) -> None:
    """Schema violations, byte-cap overruns and stale versions raise typed errors, change nothing."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    case = _Case(kit)
    memory = case.memory(schema=schema, limits={"working_memory_bytes": 200})
    await memory.update_working({"name": "Ada", "age": 36})
    for bad in ({"age": 3}, {"name": "Ada", "age": -1}, {"name": "Ada", "extra": 1}, {"name": 7}):
        await _raises(ValidationError, memory.update_working(bad), f"schema {bad}")
    await _raises(
        CapExceededError, memory.update_working({"name": "x" * 19, "age": 10**200}), "cap"
    )
    conflict = await _raises(
        ConflictError, memory.update_working({"name": "Bo"}, expected_version=0), "stale"
    )
    _check(not isinstance(conflict, ValidationError), "a conflict is not a validation error")
    current = await memory.get_working()
    _check(
        current is not None
        and current.version == 1
        and dict(current.data) == {"name": "Ada", "age": 36},
        "rejected writes changed nothing",
    )
    updated = await memory.update_working({"name": "Bo"}, expected_version=1)
    _check(updated.version == 2, "a matching expected_version writes")


async def working_memory_processor_and_thread_scope(kit: ConformanceKit) -> None:
    """The processor writes only what ``extract`` returns, against the version it read; with
    ``working_scope="thread"`` each thread keeps its own document."""
    case = _Case(kit)
    memory = case.memory()

    def extract(current: dict[str, Any], message: str) -> dict[str, Any] | None:
        prefix = "my name is "
        return {**current, "name": message[len(prefix) :]} if message.startswith(prefix) else None

    processor = memory.working_memory_processor(extract)
    _check(await processor.process("hello") is None, "no change, nothing written")
    _check(await memory.get_working() is None, "still no document")
    first = await processor.process("my name is Ada")
    _check(first is not None and (first.version, first.data["name"]) == (1, "Ada"), f"{first}")

    async def racing(current: dict[str, Any], message: str) -> dict[str, Any]:
        await memory.update_working({"name": "Written meanwhile"})
        return {**current, "name": message}

    await _raises(ConflictError, memory.working_memory_processor(racing).process("Bo"), "race")
    latest = await memory.get_working()
    _check(
        latest is not None and latest.data["name"] == "Written meanwhile", "the race lost nothing"
    )

    one = case.memory(thread="a", working_scope="thread")
    two = case.memory(thread="b", working_scope="thread")
    await one.update_working({"topic": "a"})
    await two.update_working({"topic": "b"})
    got = [await m.get_working() for m in (one, two)]
    _check([g.data["topic"] if g else None for g in got] == ["a", "b"], f"per thread: {got}")
    resource = await case.memory(thread="a").get_working()
    _check(
        resource is not None and resource.data["name"] == "Written meanwhile", "resource doc apart"
    )


WORKING_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        working_memory_versions_and_template,
        working_memory_rejects_bad_documents,
        working_memory_processor_and_thread_scope,
    )
}
"""The checks of this module by name, in :data:`~prism_memory.testing.CONFORMANCE_CHECKS` order."""
