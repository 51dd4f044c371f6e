"""What every conformance check module shares: the kit, the typed failure and the check helpers.

A leaf of ``prism_memory.testing``: the check modules and the runners (``_conformance``,
``_rag_conformance``) import it, and it imports none of them, so the package has no import circle.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..embedding import Embedder
from ..errors import ConfigurationError, ValidationError
from ..indexing import IndexingPolicy
from ..memory import Memory, create_memory
from ..stores.backend import MemoryBackend
from ..stores.base import VectorStore, WorkingStore
from ._fixtures import ManualClock

__all__ = ["ConformanceError", "ConformanceKit", "KitFactory"]


@dataclass(frozen=True, slots=True)
class ConformanceKit:
    """What a factory hands the suite: an embedder and the two stores under test -- or the
    backend's role objects (:meth:`of_backend`), which the checks' memories then call."""

    embedder: Embedder
    vector_store: VectorStore
    working_store: WorkingStore
    backend: MemoryBackend | None = None
    """The bundle under test, role by role (``vector_store`` is then one store over its roles,
    for the checks that call a store method directly)."""

    @classmethod
    def of_backend(cls, embedder: Embedder, backend: MemoryBackend) -> ConformanceKit:
        """A kit of ``backend``'s role objects (``create_memory(backend=...)``)."""
        return cls(embedder, backend.vector_store(), backend.working, backend)


KitFactory = Callable[
    [],
    "ConformanceKit | MemoryBackend | Mapping[str, Any] | "
    "Awaitable[ConformanceKit | MemoryBackend | Mapping[str, Any]]",
]
"""Returns a :class:`ConformanceKit`, a :class:`~prism_memory.stores.MemoryBackend` (checked with
a :class:`~prism_memory.HashEmbedder`) or a mapping with the kit's keys, possibly awaitably."""


class ConformanceError(AssertionError):
    """One or more conformance checks failed; ``failures`` maps check names to what went wrong."""

    def __init__(self, failures: Mapping[str, str]) -> None:
        self.failures = dict(failures)
        lines = "\n".join(f"- {name}: {reason}" for name, reason in self.failures.items())
        super().__init__(f"{len(self.failures)} conformance checks failed:\n{lines}")


_FAST = IndexingPolicy(
    retry_base_seconds=0.02, retry_max_seconds=0.1, busy_poll_seconds=0.01, idle_poll_seconds=0.05
)


async def _run_each(names: Iterable[str], run_one: Callable[[str], Awaitable[None]]) -> None:
    """Run the check of every name in turn and raise :class:`ConformanceError` listing each one
    that failed (the runners of both suites)."""
    failures: dict[str, str] = {}
    for name in names:
        try:
            await run_one(name)
        except Exception as exc:  # noqa: BLE001 - every failure is collected and reported
            failures[name] = f"{type(exc).__name__}: {exc}"
    if failures:
        raise ConformanceError(failures)


_OPENED: ContextVar[list[Memory] | None] = ContextVar("prism_conformance_opened", default=None)
"""The memories the running check opened through :meth:`_Case.memory` (:func:`closing_memories`)."""


@contextlib.asynccontextmanager
async def closing_memories() -> AsyncIterator[None]:
    """Around one check: every memory it opened through :meth:`_Case.memory` and left open is
    closed afterwards (also when it failed), so no indexing queue of a finished check keeps
    running on the host's stores -- claiming, tracing -- while the next check or test runs."""
    opened: list[Memory] = []
    token = _OPENED.set(opened)
    try:
        yield
    finally:
        _OPENED.reset(token)
        for memory in opened:
            with contextlib.suppress(Exception):  # the check's own outcome is what is reported
                await memory.aclose()


class _Case:
    """Per-check helpers: fresh scopes on the kit's stores."""

    def __init__(self, kit: ConformanceKit) -> None:
        self.kit = kit
        self.tenant = f"t-{uuid.uuid4().hex[:12]}"
        self.clock = ManualClock()

    def memory(self, thread: str | None = "thread-1", **options: Any) -> Memory:
        options.setdefault("embedder", self.kit.embedder)
        options.setdefault("indexing", _FAST)
        options.setdefault("clock", self.clock)
        if self.kit.backend is not None:
            options.setdefault("backend", self.kit.backend)
        else:
            options.setdefault("vector_store", self.kit.vector_store)
            options.setdefault("working_store", self.kit.working_store)
        memory = create_memory(
            tenant_id=options.pop("tenant_id", self.tenant),
            resource_id=options.pop("resource_id", "user-ada"),
            thread_id=thread,
            **options,
        )
        opened = _OPENED.get()
        if opened is not None:
            opened.append(memory)
        return memory


async def _forget_threads(case: _Case, *threads: str) -> None:
    """Delete every entry of ``threads`` (of the check's tenant): a check that stored vectors of
    another model than the kit's embedder leaves the store as it found it, so a later check on
    the same stores -- the store-wide generations ones -- never meets them. A store that keeps no
    governance (so cannot delete) keeps them."""
    for thread in threads:
        memory = case.memory(thread=thread)
        try:
            await memory.forget()
        except ConfigurationError:  # an adapter without the governance role
            pass
        finally:
            await memory.aclose()


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


async def _raises(error: type[BaseException], call: Awaitable[Any], what: str) -> BaseException:
    try:
        await call
    except error as exc:
        return exc
    except BaseException as exc:
        raise AssertionError(
            f"{what}: expected {error.__name__}, got {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"{what}: expected {error.__name__}, nothing was raised")


def _write_refused_or_done(outcome: Sequence[object]) -> None:
    """The outcome of ``gather(write, forget, return_exceptions=True)`` of a lineage race: the
    write may only be refused (:class:`ValidationError`, an unknown source), the forget must not
    fail; anything else is raised."""
    written, forgotten = outcome
    if isinstance(written, BaseException) and not isinstance(written, ValidationError):
        raise written
    if isinstance(forgotten, BaseException):
        raise forgotten


async def _ids(memory: Memory, query: str, **options: Any) -> list[str]:
    return [hit.id for hit in (await memory.recall(query, **options)).hits]
