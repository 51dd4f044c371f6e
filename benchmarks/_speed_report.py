"""``speed.py``'s report: the machine and versions, and the Markdown tables of a run's result.
Not a benchmark itself."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _targets
import numpy as np
from _speed_data import BATCH, KS

# the run's legs, in order: a stopped run's results say which are missing
LEGS = ("load", "recall", "throughput", "in_memory")


def write_results(out: Path, stem: str, result: dict[str, Any], missing: Sequence[str]) -> str:
    """``<stem>.json`` and ``<stem>.md`` under ``out``, each written to a temporary file then
    renamed over the old one (a stop mid-write leaves the previous file whole); the JSON says
    ``"complete"``, and without it which legs are missing. Returns the Markdown."""
    result = {**result, "complete": not missing}
    if missing:
        result["missing_legs"] = list(missing)
    table = markdown(result, missing)
    for name, text in (
        (f"{stem}.json", json.dumps(result, indent=2) + "\n"),
        (f"{stem}.md", table),
    ):
        temporary = out / f".{name}.tmp"
        temporary.write_text(text)
        os.replace(temporary, out / name)
    return table


def versions(server_version: str, pgvector: str) -> dict[str, str]:
    def v(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "-"

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": str(os.cpu_count()),
        "postgresql": server_version,
        "pgvector": pgvector,
        "prism-memory": v("prism-memory"),
        "numpy": np.__version__,
        "asyncpg": v("asyncpg"),
        "sqlalchemy": v("sqlalchemy"),
        "langgraph-checkpoint-postgres": v("langgraph-checkpoint-postgres"),
        "OPENBLAS_NUM_THREADS": os.environ["OPENBLAS_NUM_THREADS"],
    }


def markdown(result: dict[str, Any], missing: Sequence[str] = ()) -> str:
    """The report; ``missing``: the legs a stopped run did not finish (their tables left out)."""
    ds = result["dataset"]
    done = {leg for leg in LEGS if leg not in missing}
    lines = [
        *_partial(missing),
        f"### {result['date']}: {ds['rows']:,} rows, {ds['threads']} threads "
        f"(largest {ds['largest_thread']:,} rows), {ds['queries']} queries, dim {ds['dimension']}",
        "",
        "Machine and versions: "
        + ", ".join(f"{k} {v}" for k, v in result["versions"].items())
        + ".",
        "",
        f"Filters active: {ds['hidden_by_consent']:,} rows hidden by consent, "
        f"{ds['invalidated_by_lineage']:,} invalidated by a corrected lineage source. "
        f"Threads over {ds.get('tenants', 1)} tenants x {ds.get('resources', 1)} resources, "
        f"loaded {ds.get('load', 'thread by thread')}. Load average {ds.get('load_average', '-')}.",
        "",
        *([_targets.markdown(result)] if "targets" in result else []),
    ]
    if {"recall", "throughput"} <= done:
        lines += _headline(result)
    if "recall" in done:
        lines += _by_class(result)
    if {"recall", "throughput"} <= done:
        lines += pooled_markdown(result)
    if "recall" in done:
        lines += _cpu(result)
    if "throughput" in done:
        lines += _throughput(result)
    if "load" in done:
        lines += _load(result)
    if "in_memory" in done:
        lines += _in_memory(result)
    return "\n".join(lines) + "\n"


def _partial(missing: Sequence[str]) -> list[str]:
    if not missing:
        return []
    return [
        f"**Partial run**: stopped before {', '.join(missing)} finished; the tables below hold "
        "what the finished legs measured.",
        "",
    ]


def _headline(result: dict[str, Any]) -> list[str]:
    rec, tp = result["recall"], result["throughput"]
    pr, vo, hd = rec["prism"], rec["bare"], rec["hand"]
    return [
        "| every query, K=10 / K=32 | prism_memory `Memory.recall` | bare vector-only query "
        "(reference) | same work by hand | prism / bare (target) | prism / same work |",
        "| --- | --- | --- | --- | --- | --- |",
        *(
            f"| recall {name} | "
            + " / ".join(f"{pr[f'all_k{k}'][f'{name}_ms']:.2f}" for k in KS)
            + " ms | "
            + " / ".join(f"{vo[f'all_k{k}'][f'{name}_ms']:.2f}" for k in KS)
            + " ms | "
            + " / ".join(f"{hd[f'all_k{k}'][f'{name}_ms']:.2f}" for k in KS)
            + " ms | "
            + " / ".join(
                f"{pr[f'all_k{k}'][f'{name}_ms'] / vo[f'all_k{k}'][f'{name}_ms']:.2f}×" for k in KS
            )
            + f" ({target}) | "
            + " / ".join(
                f"{pr[f'all_k{k}'][f'{name}_ms'] / hd[f'all_k{k}'][f'{name}_ms']:.2f}×" for k in KS
            )
            + " |"
            for name, target in (("p50", "≤ 1.5× / ≤ 2×"), ("p95", "≤ 2×"))
        ),
        "| throughput, 8 in flight | "
        + " / ".join(f"{tp['prism'][f'k{k}']:,.0f}" for k in KS)
        + " qps | "
        + " / ".join(f"{tp['bare'][f'k{k}']:,.0f}" for k in KS)
        + " qps | "
        + " / ".join(f"{tp['hand'][f'k{k}']:,.0f}" for k in KS)
        + " qps | "
        + " / ".join(f"{tp['prism'][f'k{k}'] / tp['bare'][f'k{k}']:.2f}×" for k in KS)
        + " (≥ 0.6×) | "
        + " / ".join(f"{tp['prism'][f'k{k}'] / tp['hand'][f'k{k}']:.2f}×" for k in KS)
        + " |",
        "| client CPU per recall, median | "
        + " / ".join(f"{pr[f'all_k{k}']['cpu_p50_us']:.0f}" for k in KS)
        + " µs | "
        + " / ".join(f"{vo[f'all_k{k}']['cpu_p50_us']:.0f}" for k in KS)
        + " µs | "
        + " / ".join(f"{hd[f'all_k{k}']['cpu_p50_us']:.0f}" for k in KS)
        + " µs | | |",
    ]


def _by_class(result: dict[str, Any]) -> list[str]:
    rec = result["recall"]
    lines = [
        "",
        "| recall p50 / p95, ms | "
        + " | ".join(v["label"] for v in rec.values())
        + " | prism / same work p50 (≤1.15) | p95 (≤1.25) | prism / bare p50 | p95 |",
        "| --- | " + " | ".join("---" for _ in rec) + " | --- | --- | --- | --- |",
    ]
    for cls in ("all", "small", "medium", "largest", "lexical"):
        for k in KS:
            key = f"{cls}_k{k}"
            if key not in rec["prism"]:
                continue
            cells = []
            for v in rec.values():
                s = v[key]
                quality = (
                    f"recall {s['recall_at_k']:.3f}"
                    if s["recall_at_k"] is not None
                    else f"n={s['n']}"
                )
                cells.append(f"{s['p50_ms']:.2f} / {s['p95_ms']:.2f} ({quality})")
            p, h, a = rec["prism"][key], rec["hand"][key], rec["bare"][key]
            lines.append(
                f"| {cls}, K={k} | "
                + " | ".join(cells)
                + f" | {p['p50_ms'] / h['p50_ms']:.2f}× | {p['p95_ms'] / h['p95_ms']:.2f}×"
                + f" | {p['p50_ms'] / a['p50_ms']:.2f}× | {p['p95_ms'] / a['p95_ms']:.2f}× |"
            )
    lines.append(
        "| results short of min(K, eligible) | "
        + " | ".join(str(v["short_results"]) for v in rec.values())
        + " | | | | |"
    )
    lines.append(
        "| ids differ from the same-work hand-written | "
        + " | ".join(
            "-" if v.get("mismatches_vs_hand") is None else str(v["mismatches_vs_hand"])
            for v in rec.values()
        )
        + " | | | | |"
    )
    lines.append(
        "| ids differ from direct `Memory.recall` | "
        + " | ".join(str(v.get("differs_from_direct", "-")) for v in rec.values())
        + " | | | | |"
    )
    return lines


def _cpu(result: dict[str, Any]) -> list[str]:
    rec = result["recall"]
    lines = [
        "",
        "| client CPU per recall, median µs (the event loop's thread: Python, driver, decoding; not the "
        "server's) | " + " | ".join(v["label"] for v in rec.values()) + " | prism / same work |",
        "| --- | " + " | ".join("---" for _ in rec) + " | --- |",
    ]
    for cls in ("all", "small", "medium", "largest", "lexical"):
        for k in KS:
            key = f"{cls}_k{k}"
            if key not in rec["prism"] or "cpu_p50_us" not in rec["prism"][key]:
                continue
            cpu = [v[key]["cpu_p50_us"] for v in rec.values()]
            ratio = rec["prism"][key]["cpu_p50_us"] / rec["hand"][key]["cpu_p50_us"]
            lines.append(
                f"| {cls}, K={k} | " + " | ".join(f"{c:.0f}" for c in cpu) + f" | {ratio:.2f}× |"
            )
    return lines


def _throughput(result: dict[str, Any]) -> list[str]:
    tp = result["throughput"]
    return [
        "",
        "| throughput, 8 in flight, qps | " + " | ".join(f"K={k}" for k in KS) + " |",
        "| --- | " + " | ".join("---" for _ in KS) + " |",
        *(f"| {n} | " + " | ".join(f"{v[f'k{k}']:,.0f}" for k in KS) + " |" for n, v in tp.items()),
        "| prism / same work | "
        + " | ".join(f"{tp['prism'][f'k{k}'] / tp['hand'][f'k{k}']:.2f}×" for k in KS)
        + " |",
        "| prism / bare vector query (≥ 0.6) | "
        + " | ".join(f"{tp['prism'][f'k{k}'] / tp['bare'][f'k{k}']:.2f}×" for k in KS)
        + " |",
    ]


def _load(result: dict[str, Any]) -> list[str]:
    ds = result["dataset"]
    lines = [
        "",
        "| load | rows/s |",
        "| --- | --- |",
    ]
    ld = result["load"]
    deferred = " (HNSW deferred)" if ld["hnsw_deferred"] else ""
    how = (
        "`import_entries`, vectors given, threads interleaved"
        if ds["load"].startswith("interleaved")
        else f"`remember(wait=True)`, {BATCH}/batch, free embedder"
    )
    lines.append(f"| prism_memory {how}{deferred} | {ld['prism_load_rows_per_s']:,.0f} |")
    lines.append(f"| COPY into the same table shape (no HNSW) | {ld['copy_rows_per_s']:,.0f} |")
    lines.append(f"| prism_memory, HNSW built afterwards | {ld['prism_rows_per_s']:,.0f} |")
    lines.append(f"| COPY, HNSW built afterwards | {ld['copy_build_rows_per_s']:,.0f} |")
    if "langgraph_rows_per_s" in ld:
        lines.append(
            f"| LangGraph `abatch` puts, {BATCH}/batch | {ld['langgraph_rows_per_s']:,.0f} |"
        )
    lines.append(f"| in-memory, the same way | {ld['in_memory_rows_per_s']:,.0f} |")
    lines.append(
        f"| prism / COPY (≥0.5): load / with the HNSW build | "
        f"{ld['prism_load_rows_per_s'] / ld['copy_rows_per_s']:.2f}× / "
        f"{ld['prism_rows_per_s'] / ld['copy_build_rows_per_s']:.2f}× |"
    )
    return lines


def _in_memory(result: dict[str, Any]) -> list[str]:
    im = result["in_memory"]
    return [
        "",
        "| in-memory | measured | target |",
        "| --- | --- | --- |",
        f"| 100-row thread, `store.search` p50 | {im['t100_search_p50_us']:.0f} µs | ≤ 50 µs |",
        f"| 100-row thread, `store.search` p50, query terms in every row | {im['t100_search_lexical_p50_us']:.0f} µs | - |",
        f"| 100-row thread, `Memory.recall` p50 | {im['t100_recall_p50_us']:.0f} µs | - |",
        f"| 13,000-row thread, remember(wait=True) then recall, p50 | {im['t13k_remember_recall_p50_ms']:.2f} ms | ≤ 5 ms |",
        f"| 13,000-row thread, `Memory.recall` p50 | {im['t13k_recall_p50_ms']:.2f} ms | - |",
    ]


def pooled_markdown(result: dict[str, Any]) -> list[str]:
    """The pooled routes beside the direct recall: p50, p95, throughput and their ratios."""
    rec, tp = result["recall"], result["throughput"]
    routes = [key for key in ("pooled", "txn_direct") if key in rec]
    if not routes:
        return []
    lines = [
        "",
        "| every query, K=10 / K=32 | direct `Memory.recall` | "
        + " | ".join(f"{rec[r]['label']} | / direct" for r in routes)
        + " |",
        "| --- | --- | " + " | ".join("--- | ---" for _ in routes) + " |",
    ]

    for name in ("p50", "p95"):
        cells = [" / ".join(f"{rec['prism'][f'all_k{k}'][f'{name}_ms']:.2f}" for k in KS) + " ms"]
        for r in routes:
            cells.append(" / ".join(f"{rec[r][f'all_k{k}'][f'{name}_ms']:.2f}" for k in KS) + " ms")
            cells.append(
                " / ".join(
                    f"{rec[r][f'all_k{k}'][f'{name}_ms'] / rec['prism'][f'all_k{k}'][f'{name}_ms']:.2f}×"
                    for k in KS
                )
            )
        lines.append(f"| recall {name} | " + " | ".join(cells) + " |")
    cells = [" / ".join(f"{tp['prism'][f'k{k}']:,.0f}" for k in KS) + " qps"]
    for r in routes:
        cells.append(" / ".join(f"{tp[r][f'k{k}']:,.0f}" for k in KS) + " qps")
        cells.append(" / ".join(f"{tp[r][f'k{k}'] / tp['prism'][f'k{k}']:.2f}×" for k in KS))
    lines.append("| throughput, 8 in flight | " + " | ".join(cells) + " |")
    cells = ["-"]
    for r in routes:
        cells += [f"{rec[r]['differs_from_direct']} differ, {rec[r]['short_results']} short", ""]
    lines.append("| same answers as direct | " + " | ".join(cells) + " |")
    return lines
