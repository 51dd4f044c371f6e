"""What pooler mode costs per recall: a quick preset of ``speed.py``, which measures it.

``speed.py`` times ``Memory.recall`` on three routes interleaved in one run, on the same loaded
dataset and the same queries, beside its other contenders:

* **direct** -- the URL straight to PostgreSQL, the default mode (contender ``prism``): the baseline;
* **direct, transaction mode** -- the same URL with ``pooling="transaction"`` (``txn_direct``,
  ``--transaction-direct``): what the mode itself costs;
* **PgBouncer, transaction mode** -- through a real PgBouncer (``pool_mode = transaction``) in
  front of the same database (``pooled``, ``--pgbouncer``): the mode plus the pooler's hop, as a
  managed "pooled URL" runs.

This script runs it small (20,000 rows over 200 Zipf-sized threads, 200 queries, K=10 and K=32),
with all three routes, and writes ``benchmarks/results/pooler/speed-<rows>.{json,md}``. Other
``speed.py`` options pass through. Needs the ``pgbouncer`` program (Debian's package).

    .venv/bin/python benchmarks/pooler.py                      # 20,000 rows, a few minutes
    .venv/bin/python benchmarks/pooler.py --rows 100000
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import speed

PRESET = [
    "--rows", "20000", "--queries", "200", "--throughput-rounds", "5", "--no-langgraph",
    "--pgbouncer", "--transaction-direct", "--out", str(Path(__file__).parent / "results" / "pooler"),
]  # fmt: skip


def main() -> None:
    """``speed.py`` with the preset above; later options (the command line's) win."""
    sys.argv = [sys.argv[0], *PRESET, *sys.argv[1:]]
    speed.main()


if __name__ == "__main__":
    main()
