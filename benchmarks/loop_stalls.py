"""Print what ``benchmarks/loop_stalls/sitecustomize.py`` recorded: each callback that held an
event loop (wall and CPU ms, its most frequent stacks) and each long garbage collection, by
process. Given ``load.py --out`` results, only those of the loaded phase, on its clock::

    LOOP_STALLS=/tmp/stalls.jsonl PYTHONPATH=benchmarks/loop_stalls \\
        python benchmarks/load.py --backends memory --modes mcp --out /tmp/load.json
    python benchmarks/loop_stalls.py /tmp/stalls.jsonl /tmp/load.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    records = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
    begun, until = 0.0, float("inf")
    if len(sys.argv) > 2:
        result = json.loads(Path(sys.argv[2]).read_text())[0]
        begun, until = result["begun_unix_s"], result["recalled_at_s"] + 0.5
        print(f"big remember ended at {result['remembered_at_s']:.2f} s, recall at "
              f"{result['recalled_at_s']:.2f} s")  # fmt: skip
    for record in sorted(records, key=lambda r: r["wall"]):
        at = record["wall"] - begun
        if begun and not -0.5 <= at <= until:
            continue
        if "gc" in record:
            print(f"{at:8.3f} s  pid {record['pid']}  gc gen {record['gc']}: {record['ms']} ms")
            continue
        print(f"{at:8.3f} s  pid {record['pid']}  {record['ms']} ms, {record['cpu_ms']} ms CPU")
        for count, stack in record["top"][:2]:
            print(f"      {count:3d}  {' < '.join(stack[:8])}")


if __name__ == "__main__":
    main()
