"""Where a PostgreSQL recall's client time goes, by function: cProfile over 200 warm
``Memory.recall`` calls on 20 threads of 40 rows (``HashEmbedder(384)``, an embedded server), at
K=10 and K=32. Wall microseconds per recall with the profiler's overhead: read the shares.

    python benchmarks/recall_profile.py
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"

import asyncio
import cProfile
import pstats
import time

from prism_memory import HashEmbedder, create_memory
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres.embedded import start_embedded_postgres


async def main():
    server = start_embedded_postgres()
    stores = await create_postgres_memory_stores(server.url, dimension=384)
    emb = HashEmbedder(384)
    mems = []
    for t in range(20):
        m = create_memory(
            tenant_id="t",
            resource_id="r",
            thread_id=f"th{t}",
            embedder=emb,
            vector_store=stores.vector_store,
            working_store=stores.working_store,
        )
        await m.remember(
            [
                {"text": f"note {i} about topic {i % 7} in thread {t} word{i % 13}"}
                for i in range(40)
            ],
            wait=True,
        )
        mems.append(m)
    qs = [f"topic {i % 7} word{i % 13} probe" for i in range(200)]
    for k in (10, 32):
        for q in qs[:50]:
            await mems[0].recall(q, top_k=k)
        pr = cProfile.Profile()
        t0 = time.thread_time()
        pr.enable()
        for i, q in enumerate(qs):
            await mems[i % 20].recall(q, top_k=k)
        pr.disable()
        per = (time.thread_time() - t0) / len(qs) * 1e6
        print(f"K={k}: thread CPU per recall (profiled) {per:.0f} us")
        st = pstats.Stats(pr)
        st.sort_stats("cumulative")
        rows = []
        for (f, _line, n), v in st.stats.items():
            rows.append(
                (v[3], f.split("prism_memory/")[-1] if "prism_memory" in f else f.split("/")[-1], n)
            )
        rows.sort(reverse=True)
        for ct, f, n in rows[:45]:
            print(f"  {ct / len(qs) * 1e6:8.0f} us  {f}:{n}")
    for m in mems:
        await m.aclose()
    await stores.close()
    server.close()


asyncio.run(main())
