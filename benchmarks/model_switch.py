"""A model switch on LoCoMo: the quality gate's verdicts and the backfill's re-embedding rate.

Loads the dev LoCoMo conversations (as benchmarks/locomo.py does, one scope per conversation,
all-MiniLM-L6-v2 as the primary model), writes the gate's queries JSONL from the questions'
evidence, then on each backend: starts a shadow generation, backfills it and runs
``compare_generations`` -- MiniLM against the hash embedder (the gate must refuse) and against
MiniLM renamed (it must accept) -- and prints the backfill rate in entries/s.

    .venv/bin/python benchmarks/model_switch.py                  # ../shared/data/locomo-dev/
    .venv/bin/python benchmarks/model_switch.py --backends memory
    .venv/bin/python benchmarks/model_switch.py --url postgresql://app@localhost/app

MiniLM's vectors are cached like benchmarks/locomo.py's (``benchmarks/.cache/``), so the
backfill with MiniLM renamed measures the store's side alone; the encoder's own rate on this CPU
is measured apart (a live backfill runs at the lower of the two).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: locomo, _common

from _common import database
from locomo import DEFAULT_DATA, Conversation, embed_all, load, model_path

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory
from prism_memory._clock import utcnow
from prism_memory.generations import (
    backfill_generation,
    compare_generations,
    read_gate_queries_file,
)
from prism_memory.models import MemoryIdentity

BATCH = 128
MINILM = "all-MiniLM-L6-v2"


class Cached:
    """An ``Embedder`` over precomputed vectors, under a model name of our choice."""

    def __init__(self, table: dict[str, np.ndarray], model: str) -> None:
        self._table, self.model = table, model
        self.dimensions = len(next(iter(table.values())))

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._table[t] for t in texts])


def scope(conv: Conversation) -> MemoryIdentity:
    return MemoryIdentity(tenant_id="locomo", resource_id=conv.sample_id, thread_id=conv.sample_id)


def write_queries(conversations: list[Conversation], path: Path) -> int:
    """The gate's JSONL: each question with evidence, its expected ids the turns of that evidence."""
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for conv in conversations:
            ids = {dia: f"turn-{i:05d}" for i, (dia, _) in enumerate(conv.turns)}
            for question in conv.questions:
                expected = sorted({ids[e] for e in question.evidence if e in ids})
                if not expected:
                    continue
                row = {**scope(conv).model_dump(), "query": question.text}
                out.write(json.dumps({**row, "expected_ids": expected}) + "\n")
                count += 1
    return count


async def load_store(store: Any, conversations: list[Conversation], primary: Cached) -> int:
    total = 0
    for conv in conversations:
        key = scope(conv)
        async with create_memory(
            **key.model_dump(), embedder=primary, vector_store=store
        ) as memory:
            entries = [
                {"id": f"turn-{i:05d}", "text": body, "sequence": i}
                for i, (_, body) in enumerate(conv.turns)
            ]
            for start in range(0, len(entries), BATCH):
                await memory.remember(entries[start : start + BATCH], wait=True)
            total += len(entries)
    return total


async def shadow(store: Any, primary: Cached, new: Any, runs: list[str]) -> float:
    """Start ``new`` as the shadow generation and backfill it; the entries/s."""
    await store.start_generation(
        primary=primary.model,
        primary_width=primary.dimensions,
        model=new.model,
        width=new.dimensions,
        now=utcnow(),
    )
    report = await backfill_generation(store, new.model, new, batch_size=64)
    runs.append(f"{new.model}: {report.stored} vectors in {report.seconds:.2f} s")
    return report.rate


async def run_backend(
    name: str,
    store: Any,
    conversations: list[Conversation],
    primary: Cached,
    queries: Path,
) -> dict[str, Any]:
    entries = await load_store(store, conversations, primary)
    labelled = read_gate_queries_file(queries)
    threads = [scope(c) for c in conversations]
    runs: list[str] = []
    found: dict[str, Any] = {"backend": name, "entries": entries}
    hashed = HashEmbedder(dimensions=primary.dimensions)
    found["hash rate"] = await shadow(store, primary, hashed, runs)
    worse = await compare_generations(
        store, primary, hashed, k=10, queries=labelled, threads=threads
    )
    found["hash gate"] = worse
    await store.drop_generation(hashed.model)
    renamed = Cached(primary._table, f"{MINILM}-renamed")
    found["renamed rate"] = await shadow(store, primary, renamed, runs)
    same = await compare_generations(
        store, primary, renamed, k=10, queries=labelled, threads=threads
    )
    found["renamed gate"] = same
    found["runs"] = runs
    return found


def minilm_rate(texts: list[str], model: str) -> float:
    """all-MiniLM-L6-v2's own encoding rate on this CPU (texts/s, batch 64)."""
    from sentence_transformers import SentenceTransformer

    encoder = SentenceTransformer(model, device="cpu")
    encoder.encode(texts[:64], batch_size=64)  # warm-up
    began = time.perf_counter()
    encoder.encode(texts, batch_size=64, normalize_embeddings=True)
    return len(texts) / (time.perf_counter() - began)


def verdict(report: Any) -> str:
    failures = report.failures(max_drop=0.02)
    return "refused: " + "; ".join(failures) if failures else "accepted"


async def main_async(args: argparse.Namespace) -> None:
    conversations = load(args.data)
    texts = [body for c in conversations for _, body in c.turns]
    texts += [q.text for c in conversations for q in c.questions]
    model = model_path(args.model)
    primary = Cached(embed_all(texts, model), MINILM)
    with tempfile.TemporaryDirectory() as folder:
        queries = Path(folder, "queries.jsonl")
        count = write_queries(conversations, queries)
        print(f"data: {args.data.name}, {len(conversations)} conversations, {count} queries")
        results = []
        for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
            if backend == "memory":
                results.append(
                    await run_backend(
                        backend, InMemoryVectorStore(), conversations, primary, queries
                    )
                )
                continue
            from prism_memory.postgres import create_postgres_vector_store

            with database(args.url) as (url, _):
                name = f"switch_{uuid.uuid4().hex[:8]}"
                made = await create_postgres_vector_store(
                    url, schema=name, dimension=primary.dimensions
                )
                try:
                    results.append(
                        await run_backend(backend, made, conversations, primary, queries)
                    )
                finally:
                    from sqlalchemy import text

                    async with made.engine.begin() as conn:
                        await conn.execute(text(f'DROP SCHEMA "{name}" CASCADE'))
                    await made.close()
    for found in results:
        print(f"\n== {found['backend']}: {found['entries']} entries ==")
        for label in ("hash", "renamed"):
            report = found[f"{label} gate"]
            print(report.table())
            print(f"gate (max drop 0.02): {verdict(report)}")
            print(f"backfill {label}: {found[f'{label} rate']:.0f} entries/s")
        print("; ".join(found["runs"]))
    if args.encoder_rate:
        rate = minilm_rate(texts[:1024], model)
        print(f"\nall-MiniLM-L6-v2 encoding on this CPU: {rate:.0f} texts/s (batch 64)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--backends", default="memory,postgres")
    parser.add_argument("--url", default=None, help="a PostgreSQL URL (default: embedded)")
    parser.add_argument("--model", default=None, help="sentence-transformers model path")
    parser.add_argument(
        "--no-encoder-rate", dest="encoder_rate", action="store_false", help="skip MiniLM's rate"
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
