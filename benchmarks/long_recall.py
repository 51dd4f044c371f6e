"""In-memory recall on a chat of long entries: the BEAM shape (issue 48, item 5).

One scope holds every message of a BEAM development chat (~300 messages, assistant answers of a
median ~540 words) -- or, without the data set, a made-up chat of the same shape -- and recall is
timed on queries drawn from its user messages (a quick stand-in embedder: the lexical leg and the
re-rank are what is timed). Prints recall p50/p99 in ms. Run it against another checkout with
``PYTHONPATH=<checkout>`` for a side-by-side.

    .venv/bin/python benchmarks/long_recall.py
    .venv/bin/python benchmarks/long_recall.py --data ../shared/data/beam-dev/beam-dev.json --chat 100K-2
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path

from load import QuickEmbedder

from prism_memory import InMemoryVectorStore, create_memory

_BEAM = Path("shared") / "data" / "beam-dev" / "beam-dev.json"
_REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = next(
    (up / _BEAM for up in (_REPO.parent, _REPO.parent.parent) if (up / _BEAM).exists()),
    _REPO.parent / _BEAM,
)  # the project's shared folder beside the checkout (or beside its parent)


def beam_chat(path: Path, chat: str) -> list[tuple[str, str]]:
    """``(role, text)`` of every message of ``chat``, in order (the data set's README protocol)."""
    data = json.loads(path.read_text())
    messages = []
    for batch in data[chat]["chat"]:
        for turn in batch["turns"]:
            for message in turn:
                text = message["content"].split("->->")[0].strip()
                if text:
                    messages.append((message["role"], text))
    return messages


def made_up_chat(seed: int = 48) -> list[tuple[str, str]]:
    """~300 messages: short user turns and assistant answers of ~540 words of an English-like
    Zipf vocabulary."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(6000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]

    def words(n: int) -> str:
        return " ".join(rng.choices(vocabulary, weights, k=n))

    messages = []
    for _ in range(150):
        messages.append(("user", words(rng.randint(15, 60))))
        messages.append(("assistant", words(max(50, int(rng.gauss(540, 150))))))
    return messages


async def measure(messages: list[tuple[str, str]], queries: int) -> list[float]:
    memory = create_memory(
        tenant_id="bench",
        resource_id="user",
        thread_id="chat",
        embedder=QuickEmbedder(),
        vector_store=InMemoryVectorStore(),
        limits={"payload_bytes": 1_000_000},
    )
    entries = [{"text": t, "role": role, "sequence": i} for i, (role, t) in enumerate(messages)]
    for start in range(0, len(entries), 100):
        result = await memory.remember(entries[start : start + 100], wait=True)
        assert not result.pending
    rng = random.Random(7)
    users = [text for role, text in messages if role == "user"]
    asked = [" ".join(rng.choice(users).split()[:12]) for _ in range(queries)]
    for query in asked[:5]:  # warm
        await memory.recall(query, top_k=10)
    latencies = []
    for query in asked:
        started = time.perf_counter()
        await memory.recall(query, top_k=10)
        latencies.append((time.perf_counter() - started) * 1000.0)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--chat", default="100K-1")
    parser.add_argument("--queries", type=int, default=60)
    args = parser.parse_args()
    if args.data.exists():
        messages, source = beam_chat(args.data, args.chat), f"BEAM {args.chat}"
    else:
        messages, source = made_up_chat(), "made-up chat of the BEAM shape"
    sizes = sorted(len(text.split()) for role, text in messages if role == "assistant")
    latencies = sorted(asyncio.run(measure(messages, args.queries)))
    print(
        f"{source}: {len(messages)} messages, assistant median {statistics.median(sizes):.0f} "
        f"words; in-memory recall p50 {latencies[len(latencies) // 2]:.2f} ms, "
        f"p99 {latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]:.2f} ms "
        f"({len(latencies)} recalls)"
    )


if __name__ == "__main__":
    main()
