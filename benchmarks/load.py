"""The load benchmark: does one tenant's maximum-size call stall the others?

N small tenants recall on an open-loop schedule (one request every ``--interval`` seconds, round
robin over the tenants, each request's latency counted from when it was *due*, so time spent
waiting for a blocked event loop counts) while one tenant remembers a maximum-size batch -- 100
texts of 16,000 characters of distinct words, inside every cap and the MCP tool's schema -- and
then recalls from it. Reported: the small recalls' p50/p99 without the big call (a quiet phase)
and with it (requests due while the big call runs), on both backends (in-memory and PostgreSQL,
the embedded server unless ``--url``), served two ways:

* ``library``: ``Memory`` objects of one shared store in this process, the load generator on the
  same event loop (what a host embedding the library sees);
* ``mcp``: ``prism-memory mcp --transport http`` in a subprocess, each tenant an MCP client
  session with its bearer token (what an agent sees).

The embedder is a quick stand-in (a seeded vector per text, microseconds): the benchmark measures
the library, not a model. Run on demand, not a test (a few minutes)::

    .venv/bin/python benchmarks/load.py
    .venv/bin/python benchmarks/load.py --backends memory --modes library --seconds 3

Done-when of issue 46: with the big call, the small recalls' p99 is at most 3x their p99 without.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse
import asyncio
import contextlib
import gc
import hashlib
import json
import random
import socket
import statistics
import string
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import event

from prism_memory import InMemoryVectorStore, MemoryConsent, create_memory

REPO = Path(__file__).resolve().parents[1]
WIDTH = 32
BIG_TEXTS, BIG_CHARS = 100, 16_000  # the MCP remember tool's limits, inside the library's caps
SMALL_ENTRIES = 40
VOCABULARY = ["ocean", "tide", "moon", "garden", "violin", "river", "cobalt", "lantern", "meadow"]


class QuickEmbedder:
    """A seeded unit vector per text (BLAKE2b of the text): microseconds per text, so the
    benchmark times the library, not a model. Not semantic."""

    model = f"quick-v1-{WIDTH}"

    def __init__(self, dimensions: int = WIDTH) -> None:
        self.dimensions = dimensions
        self.model = f"quick-v1-{dimensions}"

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            digest = hashlib.blake2b(text[:512].encode(), digest_size=8).digest()
            seed = int.from_bytes(digest, "little") ^ len(text)
            row = np.random.default_rng(seed).standard_normal(self.dimensions)
            rows.append(row / np.linalg.norm(row))
        return np.array(rows, dtype=np.float32).reshape(len(texts), self.dimensions)


def big_batch(seed: int) -> list[str]:
    """100 texts of 16,000 characters of distinct made-up words (none repeats in the batch)."""
    texts = _big_batch(seed)
    _SEEDS[id(texts)] = seed
    return texts


def _big_batch(seed: int) -> list[str]:
    rng = random.Random(seed)
    seen: set[str] = set()
    texts = []
    for _ in range(BIG_TEXTS):
        words: list[str] = []
        size = 0
        while size < BIG_CHARS - 12:
            word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 10)))
            if word in seen:
                continue
            seen.add(word)
            words.append(word)
            size += len(word) + 1
        texts.append(" ".join(words)[:BIG_CHARS])
    return texts


def small_texts(tenant: int) -> list[str]:
    rng = random.Random(tenant)
    topics = ["likes", "visited", "plays", "paints", "keeps", "named", "bought", "fixed"]
    return [
        f"user {tenant} {rng.choice(topics)} the {rng.choice(VOCABULARY)} "
        f"and the {rng.choice(VOCABULARY)} on day {i}"
        for i in range(SMALL_ENTRIES)
    ]


def small_query(i: int) -> str:
    return f"which {VOCABULARY[i % len(VOCABULARY)]} did they visit on day {i % SMALL_ENTRIES}"


# ---- clients: one callable per tenant ------------------------------------------------------------

Recall = Callable[[str], Awaitable[Any]]
Remember = Callable[[list[str]], Awaitable[Any]]


Send = Callable[[], Awaitable[Any]]


@dataclass
class Tenant:
    recall: Recall
    remember: Remember
    prepare: Callable[[str, Any], Awaitable[Send]] | None = None
    """``prepare(action, argument)``: everything before the call made ready (a client process
    started, its input made, its session open); the call itself happens when the result is
    awaited. ``None``: nothing to prepare (the library's tenants)."""


@contextlib.asynccontextmanager
async def library_tenants(backend: str, url: str | None, n: int) -> AsyncIterator[list[Tenant]]:
    """``n + 2`` tenants (the last two: a warm-up and the big caller) on one shared store in this
    process."""
    stores: Any = None
    if backend == "postgres":
        from prism_memory.postgres import create_postgres_memory_stores

        schema = f"load_{int(time.time())}"
        stores = await create_postgres_memory_stores(url, schema=schema, dimension=WIDTH)
        vector_store, working_store = stores.vector_store, stores.working_store
        event.listen(stores.engine.sync_engine, "connect", lambda *_: CONNECTS.append(time.time()))
    else:
        vector_store, working_store = InMemoryVectorStore(dimension=WIDTH), None
    embedder = QuickEmbedder()
    consent = MemoryConsent(source="agent", scope="thread")
    tenants = []
    try:
        for t in range(n + 2):
            memory = create_memory(
                tenant_id=f"tenant-{t}",
                resource_id="user",
                thread_id="chat",
                embedder=embedder,
                vector_store=vector_store,
                working_store=working_store,
            )

            async def recall(query: str, memory: Any = memory) -> Any:
                return await memory.recall(query, top_k=5)

            async def remember(texts: list[str], memory: Any = memory) -> Any:
                entries = [{"text": text, "consent": consent} for text in texts]
                return await memory.remember(entries, wait=True)

            tenants.append(Tenant(recall, remember))
        yield tenants
    finally:
        if stores is not None:
            await stores.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def mcp_tenants(backend: str, url: str | None, n: int) -> AsyncIterator[list[Tenant]]:
    """``n`` MCP client sessions over Streamable HTTP to ``prism-memory mcp`` in a subprocess, and
    the warm-up and the big caller, each a client in a subprocess of its own per call."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    port = _free_port()
    with tempfile.TemporaryDirectory() as folder:
        tokens = {
            f"token-{t}": {"tenant_id": f"tenant-{t}", "resource_id": "user", "thread_id": "chat"}
            for t in range(n + 2)
        }
        token_file = Path(folder) / "tokens.json"
        token_file.write_text(json.dumps(tokens))
        args = [
            sys.executable, "-m", "prism_memory", "mcp", "--transport", "http",
            "--auth-tokens", str(token_file), "--embedder", "load:QuickEmbedder",
            "--port", str(port), "--dimension", str(WIDTH),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRISM_MEMORY_")}
        inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "benchmarks"), *inherited])
        if backend == "postgres":
            args += ["--url", str(url), "--schema", f"loadmcp_{int(time.time())}"]
        log_path = Path(os.environ.get("LOAD_SERVER_LOG", Path(folder) / "server.log"))
        log = log_path.open("wb")  # noqa: ASYNC230 - once, before the server starts
        server = await asyncio.create_subprocess_exec(*args, env=env, stderr=log, cwd=str(REPO))
        try:
            endpoint = f"http://127.0.0.1:{port}/mcp"
            for _ in range(400):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                if server.returncode is not None:
                    raise RuntimeError("the MCP server exited at start")
                await asyncio.sleep(0.05)
            async with contextlib.AsyncExitStack() as stack:
                tenants = []
                for t in range(n):
                    client = await stack.enter_async_context(
                        httpx2.AsyncClient(
                            headers={"Authorization": f"Bearer token-{t}"},
                            timeout=300,
                            # idle connections expire before the server's keep-alive (5 s)
                            # closes them under a request: the warm-up's big call takes longer
                            limits=httpx2.Limits(keepalive_expiry=2.0),
                        )
                    )
                    read, write = await stack.enter_async_context(
                        streamable_http_client(endpoint, http_client=client)
                    )
                    session = await stack.enter_async_context(ClientSession(read, write))
                    await session.initialize()

                    async def recall(query: str, session: Any = session) -> Any:
                        result = await session.call_tool("recall", {"query": query, "top_k": 5})
                        assert not result.is_error, result.content
                        return result

                    async def remember(texts: list[str], session: Any = session) -> Any:
                        result = await session.call_tool("remember", {"texts": texts})
                        assert not result.is_error, result.content
                        return result

                    tenants.append(Tenant(recall, remember))
                # the warm-up and the big caller are clients in processes of their own, so the
                # client side of the big call (encoding 1.6 MB) never runs on the small ones'
                # event loop (it still shares the machine's cores: see Tenant.prepare)
                tenants += [_remote_tenant(endpoint, f"token-{t}") for t in (n, n + 1)]
                yield tenants
        finally:
            if server.returncode is not None:
                sys.stderr.write(log_path.read_text()[-3000:])  # noqa: ASYNC240 - on failure
            else:
                server.terminate()
                await asyncio.wait_for(server.wait(), 30)
            log.close()


def _remote_tenant(endpoint: str, token: str) -> Tenant:
    """A tenant whose calls run in a client subprocess (``load.py --client``). Such a process
    costs about a second of CPU before it sends anything (the interpreter, the MCP SDK, the 1.6 MB
    batch): :attr:`Tenant.prepare` spends it before the loaded phase, so that on a machine of few
    cores the big caller's start does not compete with the server during the measurement."""

    async def prepare(action: str, argument: Any) -> Send:
        value = str(_SEEDS[id(argument)]) if action == "remember" else str(argument)
        child = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--client", endpoint, token, action, value,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert child.stdin is not None
        assert child.stdout is not None
        if (await child.stdout.readline()).strip() != b"ready":
            raise RuntimeError(f"the client of {token} failed to start")

        async def send() -> Any:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            await child.stdin.drain()
            out, _ = await child.communicate()
            if child.returncode != 0:
                raise RuntimeError(f"the client of {token} failed")
            return json.loads(out)

        return send

    async def recall(query: str) -> Any:
        return await (await prepare("recall", query))()

    async def remember(texts: list[str]) -> Any:
        return await (await prepare("remember", texts))()

    return Tenant(recall, remember, prepare)


CONNECTS: list[float] = []
"""When the library's engine opened each of its connections (``time.time()``)."""

_SEEDS: dict[int, int] = {}
"""``id(big_batch(seed)) -> seed``: a remote client makes the same texts from the seed."""


async def _client(endpoint: str, token: str, action: str, argument: str) -> None:
    """``load.py --client``: one MCP call of one tenant; prints its duration (s) as JSON."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    # idle connections expire before the server's keep-alive (5 s) closes them under a request
    limits = httpx2.Limits(keepalive_expiry=2.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=300, limits=limits) as client,
        streamable_http_client(endpoint, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        if action == "remember":
            arguments: dict[str, Any] = {"texts": big_batch(int(argument))}
        else:
            arguments = {"query": argument, "top_k": 5}
        gc.collect()  # the start's garbage, collected before the call rather than during it
        print("ready", flush=True)  # and wait for the word (see Tenant.prepare)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        started = time.perf_counter()
        result = await session.call_tool(action, arguments)
        took = time.perf_counter() - started
        assert not result.is_error, result.content
    print(json.dumps({"seconds": took}))


# ---- the open-loop schedule ----------------------------------------------------------------------


async def open_loop(
    tenants: Sequence[Tenant],
    interval: float,
    until: Callable[[float, int], bool],
    trace: list[tuple[float, float]] | None = None,
) -> list[float]:
    """Small recalls due every ``interval`` s, round robin over ``tenants``, until ``until(elapsed,
    issued)``; each latency (ms) counted from the request's due time. ``trace`` gets each
    request's ``(due s after the start, latency ms)``."""
    latencies: list[float] = []

    async def one(i: int, due: float) -> None:
        await tenants[i % len(tenants)].recall(small_query(i))
        latencies.append((time.perf_counter() - due) * 1000.0)
        if trace is not None:
            trace.append((round(due - start, 3), round(latencies[-1], 1)))

    start = time.perf_counter()
    running = []
    i = 0
    while not until(time.perf_counter() - start, i):
        due = start + i * interval
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        running.append(asyncio.create_task(one(i, due)))
        i += 1
    await asyncio.gather(*running)
    return latencies


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    return {
        "n": len(ordered),
        "p50": pct(50),
        "p99": pct(99),
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


class Heartbeat:
    """The event loop's longest pause in this process: a task that wakes every millisecond and
    records the longest gap between its wake-ups (library mode: the served loop is this one)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    def start(self) -> None:
        self.longest = 0.0
        self._task = asyncio.create_task(self._beat())

    def stop(self) -> float:
        """The longest gap since :meth:`start`, in ms."""
        assert self._task is not None
        self._task.cancel()
        return self.longest * 1000.0


async def run_one(
    mode: str, backend: str, url: str | None, args: argparse.Namespace
) -> dict[str, Any]:
    opener = library_tenants if mode == "library" else mcp_tenants
    async with opener(backend, url, args.tenants) as tenants:
        small, big, warm = tenants[:-2], tenants[-1], tenants[-2]
        # a server in its steady state has imported and warmed every path: one big call first
        await warm.remember(big_batch(args.seed + 1))
        await warm.recall("warm up the paths")
        for t, tenant in enumerate(small):  # each small tenant's own history
            await tenant.remember(small_texts(t))
        for i in range(len(small) * 3):  # warm: memos, connections, plans
            await small[i % len(small)].recall(small_query(i))
        for _ in range(3):  # and every connection of the pool open, as in a server's steady state
            await asyncio.gather(*(tenant.recall(small_query(t)) for t, tenant in enumerate(small)))
        heartbeat = Heartbeat()
        heartbeat.start()
        quiet = await open_loop(small, args.interval, lambda s, _: s >= args.seconds)
        quiet_gap = heartbeat.stop()
        texts = big_batch(args.seed)
        query = " ".join(texts[7].split()[100:104])
        timings: dict[str, float] = {}
        send_remember: Send = lambda: big.remember(texts)  # noqa: E731
        send_recall: Send = lambda: big.recall(query)  # noqa: E731
        if big.prepare is not None:
            send_remember = await big.prepare("remember", texts)
            send_recall = await big.prepare("recall", query)

        async def big_call() -> None:
            await asyncio.sleep(0.2)
            started = time.perf_counter()
            remembered = await send_remember()
            timings["remember_s"] = time.perf_counter() - started
            recalled = time.perf_counter()
            answer = await send_recall()
            timings["recall_s"] = time.perf_counter() - recalled
            timings["big_s"] = time.perf_counter() - started
            timings["remembered_at_s"] = recalled - begun  # on the trace's clock
            timings["recalled_at_s"] = time.perf_counter() - begun
            if isinstance(answer, dict):  # a client subprocess: the call itself, not its start
                timings["remember_s"] = remembered["seconds"]
                timings["recall_s"] = answer["seconds"]

        heartbeat.start()
        begun = time.perf_counter()
        timings["begun_unix_s"] = time.time()
        task = asyncio.create_task(big_call())
        trace: list[tuple[float, float]] = []
        loaded = await open_loop(
            small,
            args.interval,
            lambda s, _: (task.done() and s >= 0.5) or s > args.timeout,
            trace,
        )
        await task
        loaded_gap = heartbeat.stop()
    result = {
        "mode": mode,
        "backend": backend,
        "without": _summary(quiet),
        "with": _summary(loaded),
        "loop_gap_ms": {"without": quiet_gap, "with": loaded_gap},
        **timings,
    }
    result["p99_ratio"] = result["with"]["p99"] / result["without"]["p99"]
    if mode == "library" and backend == "postgres":  # opened while the big call ran
        result["connects_with"] = sum(1 for at in CONNECTS if at >= timings["begun_unix_s"])
    result["trace"] = sorted(trace)  # (due s after the loaded phase began, latency ms)
    return result


def _table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| served by | backend | recall p50 / p99 without (ms) | with the big call (ms) "
        "| p99 ratio | big remember / recall (s) | longest loop pause without / with (ms) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['mode']} | {r['backend']} | {r['without']['p50']:.1f} / {r['without']['p99']:.1f} "
        f"| {r['with']['p50']:.1f} / {r['with']['p99']:.1f} (n={r['with']['n']}) "
        f"| {r['p99_ratio']:.2f}x | {r.get('remember_s', 0):.2f} / {r.get('recall_s', 0):.3f} "
        f"| {r['loop_gap_ms']['without']:.0f} / {r['loop_gap_ms']['with']:.0f} |"
        for r in results
    ]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    backends = args.backends.split(",")
    modes = args.modes.split(",")
    url_cm: Any = contextlib.nullcontext((args.url, None))
    if "postgres" in backends and not args.url:
        from _common import database

        url_cm = database(None)
    with url_cm as (url, _):
        for backend in backends:
            for mode in modes:
                print(f"... {mode} / {backend}", file=sys.stderr, flush=True)
                results.append(await run_one(mode, backend, url, args))
                print(_table(results[-1:]), file=sys.stderr, flush=True)
    return results


def main() -> None:
    if sys.argv[1:2] == ["--client"]:
        asyncio.run(_client(*sys.argv[2:6]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=8, help="small tenants (default 8)")
    parser.add_argument("--interval", type=float, default=0.02, help="s between requests")
    parser.add_argument("--seconds", type=float, default=4.0, help="the quiet phase's length")
    parser.add_argument("--timeout", type=float, default=120.0, help="the loaded phase's limit")
    parser.add_argument("--backends", default="memory,postgres")
    parser.add_argument("--modes", default="library,mcp")
    parser.add_argument("--url", default=None, help="a PostgreSQL URL (default: embedded)")
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    print(f"load benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs")
    print(_table(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
