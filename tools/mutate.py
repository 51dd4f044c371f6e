"""Mutation testing of the pure modules: does the fast test suite notice when the code is wrong?

Run it as ``nox -s mutation`` (or ``python tools/mutate.py`` from the dev venv). For every module in
:data:`MODULES` it makes small, single-point changes to the source ("mutants": a flipped or
off-by-one comparison, ``and``/``or`` swapped, a changed constant, a dropped ``raise`` or
``return`` …), runs only the fast unit tests that cover that module, and counts a mutant *killed*
when a test fails (or the run times out). A *surviving* mutant is a change of behaviour no test
notices, unless it is listed as equivalent in ``tools/mutation-equivalents.toml`` with a reason.

Mutants are made on the abstract syntax tree, so decorated functions and methods (pydantic
validators, dataclasses) are mutated like any other code, and spliced back into the text so line
numbers stay true. A change inside a function body is run by swapping the mutated code object into
the live function, in a fork of a pytest session that collected the tests once (no file is
written); so is a change to a module constant that only function bodies read (its mutated value is
bound in the live modules). Any other change evaluated at import (constants, defaults, decorators)
is written over the real file and run in a fresh fork that imports ``prism_memory`` from it; the original is put back after
every mutant, on Ctrl-C and on SIGTERM, and a copy under ``.mutation-backup/`` restores it on the
next run even after a hard kill.

This file is the command line, the test servers and the report; the private modules next to it
hold the rest: ``_mutation_modules.py`` the module/test table and the allow-list of equivalent
mutants, ``_mutants.py`` the mutants made on the syntax tree, ``_mutation_runner.py`` the forked
test runs, the code swapping and the file guard.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _mutants import Mutant, make_mutants
from _mutation_modules import MODULES, ROOT, SERVED, load_equivalents
from _mutation_runner import MARKS, Guard, preload, run_swapped, run_tests

# ---- servers for the storage tests ---------------------------------------------------------------


def _serve() -> None:
    """``--serve``: start an embedded PostgreSQL, a PgBouncer in front of it and a primary with a
    streaming replica; print their addresses (one JSON line), stop them when stdin closes. A
    process of its own, so that the runner never imports ``prism_memory`` itself."""
    import json

    sys.path.insert(0, str(ROOT))
    from prism_memory.postgres.embedded import start_embedded_postgres
    from tests import topology_fixtures as topology

    program = topology.find_pgbouncer()
    if program is None:
        raise SystemExit("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    server = start_embedded_postgres()
    try:
        bouncer = topology.start_pgbouncer(server.url, program)
        try:
            pair = topology.start_replica_pair()
            try:
                print(
                    json.dumps(
                        {
                            "PRISM_TEST_POSTGRES_URL": server.url,
                            topology.PGBOUNCER_ENV: topology.describe(bouncer),
                            topology.REPLICA_PAIR_ENV: topology.describe(pair),
                        }
                    ),
                    flush=True,
                )
                sys.stdin.read()
            finally:
                pair.close()
        finally:
            bouncer.close()
    finally:
        server.close()


@contextlib.contextmanager
def servers(needed: bool) -> Iterator[None]:
    """When ``needed``: the servers of :func:`_serve`, named in the environment every forked test
    run inherits (``PRISM_REQUIRE_POSTGRES=1``: a test that cannot reach them fails, never
    skips), for the duration of the session."""
    if not needed:
        yield
        return
    import json
    import subprocess

    process = subprocess.Popen(  # noqa: S603 - this script, by its own path
        [sys.executable, str(Path(__file__).resolve()), "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise SystemExit("the test servers did not start (see the output above)")
        os.environ.update(json.loads(line))
        os.environ["PRISM_REQUIRE_POSTGRES"] = "1"
        yield
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---- reporting -----------------------------------------------------------------------------------


@dataclass
class Score:
    """Outcome counts of one module."""

    mutants: int = 0
    killed: int = 0
    timeout: int = 0
    equivalent: int = 0
    survivors: list[Mutant] = field(default_factory=list)

    @property
    def percent(self) -> float:
        """Killed (or timed out) share of the non-equivalent mutants."""
        relevant = self.mutants - self.equivalent
        return 100.0 if relevant == 0 else 100.0 * (self.killed + self.timeout) / relevant


def _print_table(scores: dict[str, Score]) -> None:
    print()
    print(
        f"{'module':32} {'mutants':>7} {'killed':>6} {'timeout':>7} {'equiv':>5} {'survived':>8} {'score':>7}"
    )
    for path, s in scores.items():
        print(
            f"{path:32} {s.mutants:7} {s.killed:6} {s.timeout:7} {s.equivalent:5} "
            f"{len(s.survivors):8} {s.percent:6.1f}%"
        )


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python tools/mutate.py [--module NAME ...] [--list] [--min-score 95]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--module",
        action="append",
        default=[],
        help="only modules whose path contains this (repeatable), e.g. --module limits",
    )
    parser.add_argument(
        "--function",
        action="append",
        default=[],
        help="only mutants in functions or classes whose name contains this (repeatable), "
        "e.g. --function _replica_ready: a time-boxed run of part of a module",
    )
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument(
        "--no-swap",
        action="store_true",
        help="import every mutant afresh from the file (slower; no in-process code swapping)",
    )
    parser.add_argument("--min-score", type=float, default=95.0, help="fail below this %%")
    parser.add_argument(
        "--show-equivalent", action="store_true", help="also print the allow-listed mutants"
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _serve()
        return 0
    selected = [p for p in MODULES if not args.module or any(m in p for m in args.module)]
    if not selected:
        parser.error(f"no module matches {args.module}; modules: {', '.join(MODULES)}")

    guard = Guard()
    guard.recover()
    equivalents = load_equivalents()
    plans = {
        path: [
            m
            for m in make_mutants(path)
            if not args.function or any(f in m.qualname for f in args.function)
        ]
        for path in selected
    }
    if args.list:
        for mutants in plans.values():
            for m in mutants:
                print(f"{m.path}:{m.line}  {m.key}")
        return 0

    # test the tree this file lives in, even if another checkout is installed in the venv
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    # Bytecode goes to a private cache (the unchanged modules and the rewritten tests compile
    # once); the mutated module's entry is dropped around every mutant, so a stale .pyc can never
    # stand in for a mutant.
    os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="prism-mutation-pyc-")
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    preload()

    def _terminate(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _terminate)
    log = Path(tempfile.mkdtemp(prefix="prism-mutation-")) / "pytest.log"
    scores: dict[str, Score] = {}
    used: set[str] = set()
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(servers(any(t.startswith(SERVED) for p in plans for t in MODULES[p])))
        for path, mutants in plans.items():
            tests = MODULES[path]
            score = scores[path] = Score(mutants=len(mutants))
            todo = []
            for m in mutants:
                if m.key in equivalents:
                    score.equivalent += 1
                    used.add(m.key)
                else:
                    todo.append(m)
            outcomes: dict[int, str] = {}
            print(f"{path}: {len(mutants)} mutants", flush=True)
            swappable = [m for m in todo if m.swap is not None]
            if swappable and not args.no_swap:
                swapped = run_swapped(tests, swappable, log)
                if swapped is None:
                    print(
                        f"{path}: the unmutated tests fail, see {log}:\n{log.read_text()[-3000:]}"
                    )
                    return 2
                outcomes.update({i: o for i, o in swapped.items() if o != "error"})
                print(flush=True)
            fresh = [m for m in todo if m.index not in outcomes]
            if fresh:
                outcome, baseline = run_tests(tests, timeout=600, log=log)
                if outcome != "passed":
                    print(
                        f"{path}: the unmutated tests fail, see {log}:\n{log.read_text()[-3000:]}"
                    )
                    return 2
                timeout = max(10.0, 3 * baseline + 5)
                print(f"  (imported afresh: tests {baseline:.1f}s unmutated)", flush=True)
                for m in fresh:
                    guard.write(path, m.source)
                    try:
                        outcome, _ = run_tests(tests, timeout=timeout, log=log)
                    finally:
                        guard.restore()
                    outcomes[m.index] = outcome
                    print(MARKS[outcome], end="", flush=True)
                print(flush=True)
            for m in todo:
                outcome = outcomes[m.index]
                if outcome == "failed":
                    score.killed += 1
                elif outcome == "timeout":
                    score.timeout += 1
                else:
                    score.survivors.append(m)
            print(flush=True)
            for m in score.survivors:
                print(f"  survived {m.path}:{m.line}  {m.qualname}: {m.description}", flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted; the sources are restored", file=sys.stderr)
        return 130
    finally:
        guard.restore()
        stack.close()

    _print_table(scores)
    survivors = [m for s in scores.values() for m in s.survivors]
    if survivors:
        print("\nsurvivors (add a test, or list in tools/mutation-equivalents.toml with a reason):")
        for m in survivors:
            print(f"  {m.path}:{m.line}  {m.qualname}: {m.description}")
            print(f"      key: {m.key}")
    if args.show_equivalent:
        print("\nequivalent (allow-listed):")
        for mutants in plans.values():
            for m in mutants:
                if m.key in equivalents:
                    print(f"  {m.path}:{m.line}  {m.description}\n      why: {equivalents[m.key]}")
    # against every mutant of the selected modules: a --function run uses only some entries
    made = used | {m.key for path in selected if args.function for m in make_mutants(path)}
    stale = [key for key in equivalents if key not in made and key.split("::")[0] in selected]
    if stale:
        print("\nallow-list entries that match no mutant any more (remove them):")
        for key in stale:
            print(f"  {key}")
    low = [p for p, s in scores.items() if s.percent < args.min_score]
    if low:
        print(f"\nbelow {args.min_score:.0f}%: {', '.join(low)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
