"""Running mutants for :mod:`mutate` (``tools/mutate.py``): test files in forked pytest runs,
code objects swapped into forks of one collected pytest session, and the guard that writes a
mutant over its file and always puts the original back (a copy under ``.mutation-backup/``
survives a hard kill).

A private module of the tool: ``tools/mutate.py`` runs as a script, so ``tools/`` is first on
``sys.path`` and this file is imported as ``_mutation_runner``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import shutil
import signal
import sys
import time
import types
from pathlib import Path
from typing import Any

from _mutants import Mutant
from _mutation_modules import ROOT

BACKUP = ROOT / ".mutation-backup"

PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header"]


def preload() -> None:
    """Import the heavy third-party packages once, so that every fork starts warm. Never imports
    ``prism_memory`` itself: each fork must read the mutated file."""
    import numpy  # noqa: F401
    import pydantic  # noqa: F401
    import pytest  # noqa: F401
    import sqlalchemy.ext.asyncio  # noqa: F401

    for optional in ("hypothesis", "pytest_asyncio", "asyncpg", "pgvector.sqlalchemy", "anyio"):
        with contextlib.suppress(ImportError):
            __import__(optional)
    assert "prism_memory" not in sys.modules, "the runner must not import prism_memory"


def run_tests(tests: list[str], timeout: float, log: Path) -> tuple[str, float]:
    """Run the test files one after another, stopping at the first that fails (most mutants die in
    the first file, and pytest collects every file it is given before running any):
    ``("passed"|"failed"|"timeout", seconds)``."""
    started = time.monotonic()
    for test in tests:
        outcome, _ = run_file(test, timeout - (time.monotonic() - started), log)
        if outcome != "passed":
            break
    return outcome, time.monotonic() - started


def run_file(test: str, timeout: float, log: Path) -> tuple[str, float]:
    """Run one test file with pytest in a forked child: ``("passed"|"failed"|"timeout", seconds)``."""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child
        code = 3
        try:
            os.setsid()
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(ROOT)
            import pytest

            code = int(pytest.main([*PYTEST_ARGS, test]))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            elapsed = time.monotonic() - started
            code = os.waitstatus_to_exitcode(status)
            return ("passed" if code == 0 else "failed"), elapsed
        if time.monotonic() - started > timeout:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - started
        time.sleep(0.02)


# ---- swapping code objects in a collected session ------------------------------------------------


def _function(holder: object) -> types.FunctionType:
    for _ in range(5):
        # a function made by a wrapping decorator (asynccontextmanager, functools.wraps) calls the
        # one it wraps: that one's code is the mutant's
        if isinstance(holder, types.FunctionType) and not hasattr(holder, "__wrapped__"):
            return holder
        for attribute in ("__func__", "wrapped", "fget", "__wrapped__"):
            if hasattr(holder, attribute):
                holder = getattr(holder, attribute)
                break
        else:
            break
    raise LookupError(f"not a function: {holder!r}")


def swap_in(mutant: Mutant) -> None:
    """Give the live function ``mutant.swap`` the mutated code object (no file is touched)."""
    assert mutant.swap is not None
    module = importlib.import_module(mutant.path.removesuffix(".py").replace("/", "."))
    if mutant.swap.startswith("="):  # a module constant read only inside functions
        _rebind(module, mutant)
        return
    code = compile(mutant.source, str(ROOT / mutant.path), "exec")
    holder: object = module
    for part in mutant.swap.split("."):
        holder = vars(holder)[part]
        with contextlib.suppress(LookupError):
            live = _function(holder)
            code = next(
                c
                for c in code.co_consts
                if isinstance(c, types.CodeType)
                and c.co_name == part
                and c.co_firstlineno == live.__code__.co_firstlineno
            )
            live.__code__ = code
            return
        code = next(
            c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == part
        )
    raise LookupError(f"no function {mutant.swap}")


def _rebind(module: types.ModuleType, mutant: Mutant) -> None:
    """Evaluate the constant's mutated value in the module and bind it under the same name in the
    module and in every package or test module that imported the same object by that name."""
    assert mutant.swap is not None
    name = mutant.swap[1:]
    statement = next(
        node
        for node in ast.parse(mutant.source).body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and isinstance(
            target := node.targets[0] if isinstance(node, ast.Assign) else node.target, ast.Name
        )
        and target.id == name
    )
    assert statement.value is not None
    expression = ast.fix_missing_locations(ast.Expression(statement.value))
    value = eval(compile(expression, str(ROOT / mutant.path), "eval"), vars(module))  # noqa: S307
    old = vars(module)[name]
    tests = str(ROOT / "tests")
    for loaded in list(sys.modules.values()):
        own = getattr(loaded, "__name__", "").startswith("prism_memory")
        ours = own or str(getattr(loaded, "__file__", "") or "").startswith(tests)
        if ours and vars(loaded).get(name) is old:
            setattr(loaded, name, value)


def _fork_items(items: list[Any], mutant: Mutant | None, timeout: float, log: Path) -> str:
    """In a fork of the collected session: swap the mutant in, run ``items`` until one fails."""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        code = 4
        try:
            os.setsid()
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            if mutant is not None:
                try:
                    swap_in(mutant)
                except Exception:
                    code = 5
                    raise
            from _pytest.runner import runtestprotocol

            code = 0
            for position, item in enumerate(items):
                after = items[position + 1] if position + 1 < len(items) else None
                if any(r.failed for r in runtestprotocol(item, nextitem=after, log=False)):
                    code = 1
                    break
        finally:
            os._exit(code)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                return {0: "passed", 5: "error"}.get(code, "failed")
            if time.monotonic() - started > timeout:
                return "timeout"
            time.sleep(0.01)
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


class _SwapLoop:
    """A pytest plugin: after collection, run every mutant's tests in forks of this session."""

    def __init__(self, mutants: list[Mutant], results: Path, log: Path, out: int) -> None:
        self.mutants, self.results, self.log, self.out = mutants, results, log, out

    def pytest_runtestloop(self, session: Any) -> bool:
        items = list(session.items)
        started = time.monotonic()
        outcome = _fork_items(items, None, 600, self.log)
        baseline = time.monotonic() - started
        with self.results.open("w") as results:
            if outcome != "passed":
                results.write(f"baseline {outcome}\n")
                return True
            timeout = max(10.0, 3 * baseline + 5)
            note = f"  (in-process: {len(items)} tests, {baseline:.1f}s unmutated)\n"
            os.write(self.out, note.encode())
            for m in self.mutants:
                outcome = _fork_items(items, m, timeout, self.log)
                results.write(f"{m.index} {outcome}\n")
                results.flush()
                os.write(self.out, MARKS[outcome].encode())
        return True


MARKS = {"failed": ".", "timeout": "T", "passed": "S", "error": "?"}


def run_swapped(tests: list[str], mutants: list[Mutant], log: Path) -> dict[int, str] | None:
    """Collect ``tests`` once in a child, then run each mutant's tests in a fork of it with the
    mutated function's code swapped in: ``{index: outcome}``, or ``None`` if the unmutated tests
    fail."""
    results = log.with_suffix(".results")
    out = os.dup(1)
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(ROOT)
            fd = os.open(log.with_suffix(".collect"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            import pytest

            pytest.main(
                ["-q", "-p", "no:cacheprovider", "--no-header", *tests],
                plugins=[_SwapLoop(mutants, results, log, out)],
            )
        finally:
            os._exit(0)
    try:
        os.waitpid(pid, 0)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        raise
    finally:
        os.close(out)
    outcomes: dict[int, str] = {}
    for line in results.read_text().splitlines() if results.exists() else ["baseline missing"]:
        index, outcome = line.split()
        if index == "baseline":
            return None
        outcomes[int(index)] = outcome
    return outcomes


# ---- the file guard ------------------------------------------------------------------------------


class Guard:
    """Writes a mutant over its module and always puts the original back."""

    def __init__(self) -> None:
        self._originals: dict[Path, bytes] = {}

    def recover(self) -> None:
        """Restore files left mutated by a run that was killed hard (their backup survives)."""
        if not BACKUP.exists():
            return
        for saved in BACKUP.rglob("*.py"):
            target = ROOT / saved.relative_to(BACKUP)
            print(f"restoring {target.relative_to(ROOT)} from an interrupted run", file=sys.stderr)
            shutil.copyfile(saved, target)
        shutil.rmtree(BACKUP)

    @staticmethod
    def _forget_bytecode(target: Path) -> None:
        Path(importlib.util.cache_from_source(str(target))).unlink(missing_ok=True)

    def write(self, path: str, text: str) -> None:
        """Write ``text`` over ``path`` (backing the original up first)."""
        target = ROOT / path
        self._forget_bytecode(target)
        if target not in self._originals:
            self._originals[target] = target.read_bytes()
            saved = BACKUP / path
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_bytes(self._originals[target])
        target.write_text(text)

    def restore(self) -> None:
        """Put every original back and drop the backups."""
        for target, original in self._originals.items():
            target.write_bytes(original)
            self._forget_bytecode(target)
        self._originals.clear()
        if BACKUP.exists():
            shutil.rmtree(BACKUP)
