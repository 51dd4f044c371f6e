"""Issue 50's targets, every ratio of one ``speed.py`` run against its target: computed from the
run's result (``speed.py`` stores them under ``"targets"``) and rendered as the report's first
table. Not a benchmark itself.

The reference of the direct ratios is the bare exact ``ORDER BY embedding <=> $1 LIMIT K`` over the
thread's rows (contender ``bare``); the pooler's is the same ``Memory.recall`` on the direct URL
(contender ``prism``), both timed interleaved with it in the same run.
"""

from __future__ import annotations

from typing import Any

KS = (10, 32)

# (what, K, numerator, denominator, figure, bound, "<=" or ">=")
RATIOS: tuple[tuple[str, int, str, str, str, float, str], ...] = (
    ("recall p50, prism / bare", 10, "prism", "bare", "p50", 1.5, "<="),
    ("recall p50, prism / bare", 32, "prism", "bare", "p50", 2.0, "<="),
    ("recall p95, prism / bare", 10, "prism", "bare", "p95", 2.0, "<="),
    ("recall p95, prism / bare", 32, "prism", "bare", "p95", 2.0, "<="),
    ("throughput 8 in flight, prism / bare", 10, "prism", "bare", "qps", 0.6, ">="),
    ("throughput 8 in flight, prism / bare", 32, "prism", "bare", "qps", 0.6, ">="),
    ("recall p50, PgBouncer / direct", 10, "pooled", "prism", "p50", 1.3, "<="),
    ("recall p50, PgBouncer / direct", 32, "pooled", "prism", "p50", 1.3, "<="),
    ("throughput 8 in flight, PgBouncer / direct", 10, "pooled", "prism", "qps", 0.8, ">="),
    ("throughput 8 in flight, PgBouncer / direct", 32, "pooled", "prism", "qps", 0.8, ">="),
)


def _figure(result: dict[str, Any], key: str, k: int, figure: str) -> float | None:
    if figure == "qps":
        value = result["throughput"].get(key, {}).get(f"k{k}")
    else:
        value = result["recall"].get(key, {}).get(f"all_k{k}", {}).get(f"{figure}_ms")
    return None if value is None else float(value)


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of issue 50 with its measured value and whether it is met (``None``: not
    measured in this run, e.g. without PgBouncer)."""
    rows: list[dict[str, Any]] = []
    for what, k, top, bottom, figure, bound, sense in RATIOS:
        a, b = _figure(result, top, k, figure), _figure(result, bottom, k, figure)
        ratio = None if a is None or not b else a / b
        met = None if ratio is None else (ratio <= bound if sense == "<=" else ratio >= bound)
        rows.append(
            {
                "target": f"{what}, K={k}",
                "measured": ratio,
                "bound": f"{'≤' if sense == '<=' else '≥'} {bound:g}×",
                "met": met,
                "detail": _detail(a, b, figure),
            }
        )
    prism = result["recall"]["prism"]
    exact = [
        prism[f"{cls}_k{k}"]["recall_at_k"]
        for cls in ("all", "small", "medium", "largest")
        for k in KS
        if prism.get(f"{cls}_k{k}", {}).get("recall_at_k") is not None
    ]
    worst = min(exact) if exact else None
    short = int(prism["short_results"])
    rows.append(
        {
            "target": "exact, never short (recall@K vs numpy's truth; results short)",
            "measured": worst,
            "bound": "1.000, 0 short",
            "met": None if worst is None else worst >= 1.0 and short == 0,
            "detail": f"lowest recall@K {worst:.3f}, {short} short"
            if worst is not None
            else f"{short} short",
        }
    )
    if "pooled" in result["recall"]:
        pooled = result["recall"]["pooled"]
        differ = int(pooled["differs_from_direct"])
        rows.append(
            {
                "target": "PgBouncer: same answers (ids, in order, as direct)",
                "measured": float(differ),
                "bound": "0 differ",
                "met": differ == 0 and int(pooled["short_results"]) == 0,
                "detail": f"{differ} of {pooled['all_k10']['n'] * len(KS)} differ, "
                f"{pooled['short_results']} short",
            }
        )
    return rows


def _detail(a: float | None, b: float | None, figure: str) -> str:
    if a is None or b is None:
        return "not measured"
    unit = "qps" if figure == "qps" else "ms"
    digits = 0 if figure == "qps" else 2
    return f"{a:,.{digits}f} vs {b:,.{digits}f} {unit}"


def markdown(result: dict[str, Any]) -> str:
    """The targets table (with the run's date, machine and load average above it)."""
    ds = result["dataset"]
    v = result["versions"]
    lines = [
        f"#### Issue 50's targets, {result['date']}",
        "",
        f"{ds['rows']:,} rows x {ds['dimension']}, {ds['threads']} Zipf-sized threads over "
        f"{ds.get('tenants', 1)} tenants x {ds.get('resources', 1)} resources, loaded "
        f"{ds.get('load', '-')}, {ds['queries']} queries; PostgreSQL {v['postgresql']} + pgvector "
        f"{v['pgvector']}, PgBouncer {v.get('pgbouncer', '-')} (transaction mode); "
        f"{v['cpus']} CPUs ({v['machine']}); load average at the timing's start "
        f"{ds.get('load_average_timed', '-')}, at the end {ds.get('load_average', '-')}.",
        "",
        "| ratio (one run, interleaved) | measured | target | met | figures |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in result["targets"]:
        measured = row["measured"]
        if measured is None:
            shown = "-"
        elif row["bound"].endswith("×"):
            shown = f"{measured:.2f}×"
        elif row["bound"].startswith("1.000"):
            shown = f"{measured:.3f}"
        else:
            shown = f"{measured:.0f}"
        met = {True: "met", False: "**not met**", None: "not measured"}[row["met"]]
        lines.append(f"| {row['target']} | {shown} | {row['bound']} | {met} | {row['detail']} |")
    return "\n".join(lines) + "\n"
