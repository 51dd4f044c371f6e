"""Count how a public call travels through the package: the modules it enters, the calls that
cross from one module to another, and the modules it comes back to after leaving them.

    python tools/call_hops.py                 # in memory and on an embedded PostgreSQL
    python tools/call_hops.py --url postgresql+asyncpg://...   # on that database
    python tools/call_hops.py --paths         # also print every path that comes back
    python tools/call_hops.py --hops          # also print every hop (caller -> callee)

What is counted, for one warm ``remember(wait=True)``, one ``remember`` whose ``done`` is then
awaited (the indexing queue's background task included) and one warm ``recall``:

- **files**: the package's modules that run under the call;
- **hops**: the distinct calls from a function of one module to a function of another, in the call
  graph of that one call (a call made twice counts once);
- **depth**: the longest chain of modules one path goes down (printed);
- **returns**: the modules a chain of calls enters again after it went down into another module
  (``_memory/remember.py`` -> ``indexing/queue.py`` -> ``_memory/remember.py`` is one). Calls that
  go one way have none.

The public wrappers every call passes (``_memory/observed.py``, the telemetry shim, ``errors``,
``errors``) are counted like any other module. Not counted as calls: the validators of the
package's pydantic models (pydantic calls them while validating, on behalf of the model's own
module) and generator expressions (data handed down, consumed by the callee).
CONTRIBUTING.md quotes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PACKAGE = str(ROOT / "prism_memory") + os.sep

Node = tuple[str, str]  # (module path under prism_memory/, function name)


class CallGraph:
    """The caller -> callee edges of the package's functions while ``recording``."""

    def __init__(self, skipped: set[CodeType]) -> None:
        self.edges: dict[Node, set[Node]] = defaultdict(set)
        self.roots: set[Node] = set()
        self.recording = False
        self._skipped = skipped

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        """``sys.setprofile``'s hook: note who called a package function."""
        if not self.recording or event != "call":
            return
        node = _node(frame)
        if node is None or frame.f_code in self._skipped or node[1] == "<genexpr>":
            return
        caller = frame.f_back
        while caller is not None and _node(caller) is None:
            caller = caller.f_back
        if caller is None:
            self.roots.add(node)
        else:
            parent = _node(caller)
            assert parent is not None
            if parent != node:
                self.edges[parent].add(node)


def _node(frame: FrameType) -> Node | None:
    path = frame.f_code.co_filename
    if not path.startswith(PACKAGE):
        return None
    return path[len(PACKAGE) :], frame.f_code.co_name


def measure(
    graph: CallGraph, roots: set[Node]
) -> tuple[set[str], set[tuple[Node, Node]], dict[str, list[list[str]]], list[str]]:
    """Files, cross-module hops, the module paths that come back and the deepest module path,
    from ``roots``."""
    files: set[str] = set()
    hops: set[tuple[Node, Node]] = set()
    returns: dict[str, list[list[str]]] = defaultdict(list)
    seen: set[Node] = set()
    deepest: list[list[str]] = [[]]

    def walk(node: Node, modules: list[str], on_path: set[Node]) -> None:
        files.add(node[0])
        if modules and modules[-1] != node[0]:
            if node[0] in modules:
                returns[node[0]].append([*modules, f"{node[0]}:{node[1]}"])
            modules = [*modules, node[0]]
        elif not modules:
            modules = [node[0]]
        if len(modules) > len(deepest[0]):
            deepest[0] = modules
        for child in sorted(graph.edges.get(node, ())):
            if child[0] != node[0]:
                hops.add((node, child))
            if child in on_path:
                continue
            key = child
            if key in seen and child[0] == node[0]:
                continue
            seen.add(key)
            walk(child, modules, on_path | {child})

    for root in sorted(roots):
        walk(root, [], {root})
    return files, hops, returns, deepest[0]


def validators() -> set[CodeType]:
    """The code of every validator of the package's pydantic models: pydantic calls them, so
    they are the model's own work, not a call back into the module that asked for validation.
    (The models the warm-up calls used are imported by then.)"""
    from pydantic import BaseModel

    codes: set[CodeType] = set()
    stack: list[type[BaseModel]] = [BaseModel]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if not cls.__module__.startswith("prism_memory"):
            continue
        decorators = cls.__pydantic_decorators__
        for group in (decorators.field_validators, decorators.model_validators):
            for decorator in group.values():
                func = getattr(decorator.func, "__func__", decorator.func)
                code = getattr(func, "__code__", None)
                if code is not None:
                    codes.add(code)
    return codes


SHOW_HOPS = "--hops" in sys.argv
"""``--hops``: also print every hop (``caller module:function -> callee module:function``)."""


async def _trace(name: str, call: Callable[[], Awaitable[object]], show: bool) -> None:
    graph = CallGraph(validators())
    sys.setprofile(graph.profile)
    try:
        graph.recording = True
        await call()
        graph.recording = False
    finally:
        sys.setprofile(None)
    # The call's own root (the facade method) and any task it started that it waited on.
    files, hops, returns, deepest = measure(graph, graph.roots)
    print(
        f"{name}: {len(hops)} hops over {len(files)} files, {len(deepest)} modules deep, "
        f"comes back to {len(returns)} modules"
    )
    print("  deepest: " + " -> ".join(deepest))
    if SHOW_HOPS:
        for caller, callee in sorted(hops):
            print(f"    {caller[0]}:{caller[1]} -> {callee[0]}:{callee[1]}")
    for module, paths in sorted(returns.items()):
        print(f"  back to {module} ({len(paths)} paths)")
        if show:
            for path in paths[:5]:
                print("     " + " -> ".join(path))


async def _indexed(memory: Any) -> None:
    result = await memory.remember({"text": "another fact"})
    await result.done


async def _run(memory: Any, show: bool, label: str) -> None:
    # Warm up: the first calls open connections, prepare statements and import lazily.
    for i in range(3):
        await memory.remember({"text": f"warm up {i}"}, wait=True)
        await memory.recall("warm up", top_k=5)
    await _trace(
        f"{label} remember(wait=True)", lambda: memory.remember({"text": "a fact"}, wait=True), show
    )
    await _trace(f"{label} remember, then its done", lambda: _indexed(memory), show)
    await _trace(f"{label} recall", lambda: memory.recall("a fact", top_k=5), show)


async def main() -> None:
    """Trace both backends."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a PostgreSQL URL (default: an embedded server)")
    parser.add_argument("--paths", action="store_true", help="print the paths that come back")
    parser.add_argument("--hops", action="store_true", help="print every hop of each call")
    args = parser.parse_args()

    from prism_memory import HashEmbedder, create_memory

    embedder = HashEmbedder(dimensions=32)
    async with create_memory(
        tenant_id="t", resource_id="r", thread_id="th", embedder=embedder
    ) as memory:
        await _run(memory, args.paths, "in memory:")

    from prism_memory.postgres import create_postgres_memory_stores

    server = None
    url = args.url
    if url is None:
        from prism_memory.postgres.embedded import start_embedded_postgres

        server = start_embedded_postgres()
        url = server.url
    try:
        stores = await create_postgres_memory_stores(url, schema="hops", dimension=32)
        try:
            async with create_memory(
                tenant_id="t",
                resource_id="r",
                thread_id="th",
                embedder=embedder,
                vector_store=stores.vector_store,
                working_store=stores.working_store,
            ) as memory:
                await _run(memory, args.paths, "PostgreSQL:")
        finally:
            await stores.close()
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
