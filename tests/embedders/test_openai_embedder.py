"""OpenAIEmbedder against a real HTTP server on 127.0.0.1 that the test starts and scripts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from prism_memory import create_memory
from prism_memory.embedders import RetryPolicy
from prism_memory.embedders.openai import OpenAIEmbedder
from prism_memory.embedding import embedder_window
from prism_memory.errors import (
    ConfigurationError,
    DimensionMismatchError,
    EmbedderError,
    IndexingError,
    InvalidVectorError,
)
from prism_memory.indexing import IndexingPolicy
from prism_memory.windows import WindowedVector, embed_entries

WIDTH = 8
FAST = RetryPolicy(
    timeout_seconds=2.0, max_attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.05
)

Reply = tuple[int, dict[str, str], bytes]


def vector_for(text: str) -> list[float]:
    """An independent, deterministic embedding the fake server returns."""
    rng = np.random.default_rng(sum(text.encode()))
    return [float(x) for x in rng.normal(size=WIDTH)]


def ok(body: dict[str, Any]) -> Reply:
    return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()


def good(request: dict[str, Any]) -> Reply:
    return ok(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": vector_for(t)}
                for i, t in enumerate(request["input"])
            ],
            "model": request["model"],
        }
    )


class FakeServer:
    """Answers each POST with the next scripted reply (a callable of the request), then ``good``."""

    def __init__(self) -> None:
        self.script: list[Callable[[dict[str, Any]], Reply]] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.delay = 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                request = json.loads(self.rfile.read(length))
                server.requests.append(request)
                server.headers.append(dict(self.headers))
                if server.delay:
                    time.sleep(server.delay)
                reply = server.script.pop(0) if server.script else good
                status, headers, body = reply(request)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError):
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    yield fake
    fake.close()


def make(server: FakeServer, **options: Any) -> OpenAIEmbedder:
    options.setdefault("retry", FAST)
    return OpenAIEmbedder(model="test-embed", dimensions=WIDTH, base_url=server.url, **options)


async def test_it_embeds_in_order_and_sends_model_dimensions_and_key(server, monkeypatch):
    monkeypatch.setenv("PRISM_TEST_EMBED_KEY", "sk-test-123")
    embedder = make(server, api_key_env="PRISM_TEST_EMBED_KEY")
    out = await embedder.embed(["alpha", "beta"])
    assert out.dtype == np.float32
    assert out.shape == (2, WIDTH)
    np.testing.assert_allclose(out, np.array([vector_for("alpha"), vector_for("beta")]), rtol=1e-6)
    assert server.requests == [
        {
            "model": "test-embed",
            "input": ["alpha", "beta"],
            "encoding_format": "float",
            "dimensions": WIDTH,
        }
    ]
    assert server.headers[0]["Authorization"] == "Bearer sk-test-123"
    assert embedder.model == "test-embed@8"
    assert "sk-test" not in repr(embedder)


async def test_items_out_of_order_are_put_back_by_index(server):
    def shuffled(request: dict[str, Any]) -> Reply:
        items = [{"index": i, "embedding": vector_for(t)} for i, t in enumerate(request["input"])]
        return ok({"data": items[::-1]})

    server.script = [shuffled]
    out = await make(server).embed(["one", "two", "three"])
    np.testing.assert_allclose(out[0], vector_for("one"), rtol=1e-6)
    np.testing.assert_allclose(out[2], vector_for("three"), rtol=1e-6)


async def test_more_than_a_batch_is_split_into_capped_requests(server):
    texts = [f"text {i}" for i in range(300)]
    out = await make(server).embed(texts)
    assert out.shape == (300, WIDTH)
    assert [len(r["input"]) for r in server.requests] == [128, 128, 44]
    small = make(server, batch_size=50)
    await small.embed(texts[:120])
    assert [len(r["input"]) for r in server.requests[3:]] == [50, 50, 20]


@pytest.mark.parametrize("batch_size", [0, 129, True, 2.5])
def test_a_batch_size_over_the_cap_is_a_configuration_error(server, batch_size):
    with pytest.raises(ConfigurationError):
        make(server, batch_size=batch_size)


@pytest.mark.parametrize("status", [429, 500, 502, 503])
async def test_transient_statuses_are_retried_then_succeed(server, status):
    busy: Reply = (status, {"Retry-After": "0"}, b'{"error": "busy"}')
    server.script = [lambda _: busy, lambda _: busy]
    out = await make(server).embed(["x"])
    np.testing.assert_allclose(out[0], vector_for("x"), rtol=1e-6)
    assert len(server.requests) == 3


async def test_exhausted_retries_raise_a_transient_embedder_error(server):
    server.script = [lambda _: (503, {}, b"down")] * 3
    with pytest.raises(EmbedderError) as caught:
        await make(server).embed(["x"])
    assert caught.value.transient
    assert "HTTP 503" in str(caught.value)
    assert len(server.requests) == 3


async def test_a_refusal_is_not_retried_and_never_echoes_the_key(server, monkeypatch):
    monkeypatch.setenv("PRISM_TEST_EMBED_KEY", "sk-secret-xyz")
    server.script = [lambda _: (401, {}, b'{"error": "bad key sk-secret-xyz"}')]
    with pytest.raises(EmbedderError) as caught:
        await make(server, api_key_env="PRISM_TEST_EMBED_KEY").embed(["x"])
    assert not caught.value.transient
    assert "HTTP 401" in str(caught.value)
    assert "sk-secret-xyz" not in str(caught.value)
    assert len(server.requests) == 1


async def test_a_slow_server_times_out_and_is_retried(server):
    server.delay = 0.5
    policy = RetryPolicy(timeout_seconds=0.1, max_attempts=2, backoff_seconds=0.01)
    with pytest.raises(EmbedderError, match="timed out"):
        await make(server, retry=policy).embed(["x"])
    assert len(server.requests) == 2


def not_json(_: dict[str, Any]) -> Reply:
    return 200, {}, b"<html>oops</html>"


def no_data(_: dict[str, Any]) -> Reply:
    return ok({"object": "list"})


def too_few(request: dict[str, Any]) -> Reply:
    return ok({"data": [{"index": 0, "embedding": vector_for("a")}]})


def nan_vector(request: dict[str, Any]) -> Reply:
    bad = [float("nan")] * WIDTH
    return 200, {}, json.dumps({"data": [{"index": 0, "embedding": bad}]}).encode()


def strings(request: dict[str, Any]) -> Reply:
    return ok({"data": [{"index": 0, "embedding": ["a"] * WIDTH}]})


def duplicate_index(request: dict[str, Any]) -> Reply:
    return ok({"data": [{"index": 0, "embedding": vector_for("a")}] * 2})


@pytest.mark.parametrize(
    "reply", [not_json, no_data, too_few, nan_vector, strings, duplicate_index]
)
async def test_malformed_responses_are_typed_errors_and_not_retried(server, reply):
    server.script = [reply]
    texts = ["a"] if reply in (nan_vector, strings) else ["a", "b"]
    with pytest.raises(InvalidVectorError):
        await make(server).embed(texts)
    assert len(server.requests) == 1


async def test_a_wrong_width_is_a_dimension_mismatch(server):
    server.script = [lambda _: ok({"data": [{"index": 0, "embedding": [0.1] * (WIDTH + 1)}]})]
    with pytest.raises(DimensionMismatchError):
        await make(server).embed(["a"])


async def test_cancellation_stops_a_call_promptly(server):
    server.delay = 1.0
    task = asyncio.ensure_future(make(server).embed(["x"]))
    await asyncio.sleep(0.2)  # the request is in flight; the server answers only after 1 s
    assert server.requests
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=0.5)  # well before the server answers


@pytest.mark.parametrize(
    "options",
    [
        {"base_url": "ftp://127.0.0.1/v1"},
        {"base_url": ""},
        {"model": ""},
        {"dimensions": 0},
        {"model_id": ""},
        {"max_tokens": 0},
        {"max_tokens": True},
        {"max_tokens": 8191.0},
    ],
)
def test_bad_configuration_is_rejected(server, options):
    arguments: dict[str, Any] = {
        "model": "m",
        "dimensions": WIDTH,
        "base_url": server.url,
        **options,
    }
    with pytest.raises(ConfigurationError):
        OpenAIEmbedder(**arguments)


async def test_it_declares_the_window_it_is_given_and_sends_long_texts_in_windows(server):
    assert embedder_window(make(server)).declared is False  # the 1,000-character default
    declared = make(server, max_tokens=20)
    assert (embedder_window(declared).chars, embedder_window(declared).tokens) == (60, 20)
    long = " ".join(f"Sentence {i} of a long entry." for i in range(40))  # 1,149 characters
    (made,) = await embed_entries(declared, [long])  # an entry: every window is embedded
    assert isinstance(made, WindowedVector)
    assert made.vector.shape == (WIDTH,)
    sent = [text for body in server.requests for text in body["input"]]
    assert len(sent) == 1 + len(made.windows) > 1
    assert all(len(text) <= 60 for text in sent)  # no request over its window


def test_base_url_defaults_to_the_environment(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    assert OpenAIEmbedder(model="m", dimensions=4).dimensions == 4
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(ConfigurationError, match="OPENAI_BASE_URL"):
        OpenAIEmbedder(model="m", dimensions=4)


async def test_a_memory_indexes_through_it_and_writes_nothing_for_a_bad_response(server):
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="c",
        embedder=make(server),
        indexing=IndexingPolicy(
            busy_poll_seconds=0.01, idle_poll_seconds=0.05, retry_base_seconds=0.01
        ),
    )
    async with memory:
        await memory.remember({"id": "good", "text": "tea with lemon"}, wait=True)
        stored = await memory.get("good")
        assert stored.status == "indexed"
        assert stored.embedding_model == "test-embed@8"
        # twice: remember(wait=True) embeds before the write, then the queue tries once more
        server.script = [lambda _: ok({"data": [{"index": 0, "embedding": [1.0] * 3}]})] * 2
        with pytest.raises(IndexingError):
            await memory.remember({"id": "bad", "text": "coffee black"}, wait=True)
        bad = await memory.get("bad")
        assert bad.status == "failed"
        assert "width 3" in (bad.last_error or "")
        hits = await memory.recall("coffee black", top_k=5)
        assert [h.id for h in hits.hits] == ["good"]
