"""Which callbacks hold an event loop, and what they run: put this directory on ``PYTHONPATH``
and set ``LOOP_STALLS=<file>`` (``LOOP_STALLS_MS``, default 20, the threshold).

Every asyncio callback run on the main thread (``Handle._run``) is timed, wall and thread CPU;
while one has run for more than 5 ms a daemon thread samples the main thread's stack every
millisecond. Each callback over the threshold is appended to ``<file>`` as one JSON line (its
start, wall and CPU ms, its most frequent stacks), and each garbage collection over 5 ms too.
Child processes inherit it through the environment (``load.py`` passes ``PYTHONPATH`` on to its
MCP server). ``python benchmarks/loop_stalls.py <file> [load.json]`` prints them. A measuring
aid, not part of the benchmark: the sampler's thread takes the GIL every millisecond.
"""

from __future__ import annotations

import collections
import gc
import json
import os
import sys
import threading
import time
from typing import Any

_PATH = os.environ.get("LOOP_STALLS")


def _install(path: str) -> None:
    import asyncio.events

    threshold = float(os.environ.get("LOOP_STALLS_MS", "20")) / 1000
    main = threading.main_thread().ident
    state: dict[str, Any] = {"start": None, "stacks": collections.Counter()}
    original = asyncio.events.Handle._run

    def frames(frame: Any) -> list[str]:
        found = []
        while frame is not None:
            code = frame.f_code
            found.append(f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}")
            frame = frame.f_back
        return found

    def write(record: dict[str, Any]) -> None:
        with open(path, "a") as out:
            out.write(json.dumps({"pid": os.getpid(), **record}) + "\n")

    def timed(self: Any) -> None:
        if threading.get_ident() != main:
            original(self)
            return
        start, cpu = time.perf_counter(), time.thread_time()
        stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        state["stacks"], state["start"] = stacks, start
        try:
            original(self)
        finally:
            state["start"] = None
            took = time.perf_counter() - start
            if took >= threshold:
                write(
                    {
                        "wall": round(time.time() - took, 3),
                        "ms": round(took * 1000, 1),
                        "cpu_ms": round((time.thread_time() - cpu) * 1000, 1),
                        "samples": sum(stacks.values()),
                        "top": [[n, list(s)] for s, n in stacks.most_common(5)],
                    }
                )

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]

    def sample() -> None:
        while True:
            time.sleep(0.001)
            start = state["start"]
            if start is None or time.perf_counter() - start < 0.005:
                continue
            frame = sys._current_frames().get(main)
            if frame is None:
                return
            stack = frames(frame)
            state["stacks"][tuple(stack[:-12] if len(stack) > 12 else stack)[:16]] += 1

    collecting: dict[str, float] = {}

    def collected(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collecting["at"] = time.perf_counter()
            return
        took = time.perf_counter() - collecting.get("at", time.perf_counter())
        if took >= 0.005:
            write({"wall": round(time.time() - took, 3), "gc": info.get("generation"),
                   "ms": round(took * 1000, 1)})  # fmt: skip

    gc.callbacks.append(collected)
    threading.Thread(target=sample, daemon=True, name="loop-stalls").start()


if _PATH:
    _install(_PATH)
