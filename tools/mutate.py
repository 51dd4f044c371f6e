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
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import importlib.util
import os
import shutil
import signal
import sys
import tempfile
import time
import tomllib
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BACKUP = ROOT / ".mutation-backup"
EQUIVALENTS = ROOT / "tools" / "mutation-equivalents.toml"

#: module → the fast test files that cover it (the most specific first: ``-x`` stops at the first
#: failure, so a killed mutant usually costs one file).
MODULES: dict[str, list[str]] = {
    "prism_memory/ranking.py": [
        "tests/unit/test_ranking.py",
        "tests/unit/test_fusion_edges.py",
        "tests/unit/test_fusion_arithmetic.py",
        "tests/unit/test_memory_store.py",
    ],
    "prism_memory/stores/rules.py": [
        "tests/unit/test_inherited_tombstones.py",
        "tests/unit/test_memory_store.py",
        "tests/unit/test_travelling_scopes.py",
    ],
    "prism_memory/working.py": [
        "tests/unit/test_working_schema.py",
        "tests/unit/test_working_via_facade.py",
        "tests/unit/test_memory_store.py",
        "tests/unit/test_context_provider.py",
    ],
    "prism_memory/limits.py": [
        "tests/unit/test_limits.py",
        "tests/unit/test_limits_documented.py",
        "tests/unit/test_memory_store.py",
        "tests/unit/test_context_provider.py",
        "tests/unit/test_embedding.py",
    ],
    "prism_memory/context.py": [
        "tests/unit/test_context_provider.py",
        "tests/unit/test_context_edges.py",
    ],
    "prism_memory/redaction.py": [
        "tests/unit/test_redaction.py",
        "tests/unit/test_memory_store.py",
        "tests/unit/test_context_provider.py",
    ],
    "prism_memory/embedding.py": [
        "tests/unit/test_embedding.py",
        "tests/unit/test_hash_embedder_reference.py",
        "tests/unit/test_embedder_protocol.py",
        "tests/unit/test_memory_store.py",
    ],
    "prism_memory/lexical.py": [
        "tests/unit/test_lexical.py",
        "tests/unit/test_bm25_reference.py",
        "tests/unit/test_fusion.py",
        "tests/unit/test_fusion_arithmetic.py",
    ],
    "prism_memory/_cursor.py": [
        "tests/unit/test_cursor.py",
    ],
    "prism_memory/rag/_fusion.py": [
        "tests/unit/test_rag_fusion.py",
    ],
    "prism_memory/entries.py": [
        "tests/unit/test_entries.py",
    ],
    "prism_memory/invariants.py": [
        "tests/unit/test_invariants.py",
    ],
    "prism_memory/importing/_entry.py": [
        "tests/unit/test_import_entry.py",
    ],
    "prism_memory/_validation.py": [
        "tests/unit/test_model_checks.py",
    ],
    "prism_memory/_inputs.py": [
        "tests/unit/test_model_inputs.py",
        "tests/unit/test_model_checks.py",
    ],
    "prism_memory/_results.py": [
        "tests/unit/test_model_results.py",
        "tests/unit/test_entry_fields.py",
    ],
    "prism_memory/rag_types.py": [
        "tests/unit/test_rag_types.py",
        "tests/unit/test_rag_chunking.py",
    ],
    "prism_memory/rag/chunking.py": [
        "tests/unit/test_rag_chunking.py",
        "tests/unit/test_rag_chunking_bounds.py",
    ],
    "prism_memory/stores/_records.py": [
        "tests/unit/test_store_checks.py",
        "tests/unit/test_store_records.py",
    ],
    "prism_memory/indexing/policy.py": [
        "tests/unit/test_indexing_policy.py",
    ],
    "prism_memory/indexing/threads.py": [
        "tests/unit/test_indexing_threads.py",
    ],
    "prism_memory/postgres/_errors.py": [
        "tests/unit/test_db_errors.py",
    ],
    "prism_memory/stores/_governance.py": [
        "tests/unit/test_store_governance.py",
    ],
    # ---- modules whose tests need servers: PostgreSQL, PgBouncer, a streaming replica (started
    # once per session by :func:`servers`, shared by every forked run)
    "prism_memory/_memory/observed.py": [
        "tests/telemetry/test_observed_calls.py",
        "tests/telemetry/test_capture_switch.py",
        "tests/telemetry/test_traces_metrics.py",
    ],
    "prism_memory/_telemetry.py": [
        "tests/telemetry/test_telemetry_state.py",
        "tests/telemetry/test_telemetry_shim.py",
        "tests/telemetry/test_observed_calls.py",
        "tests/telemetry/test_capture_switch.py",
        "tests/telemetry/test_traces_metrics.py",
        "tests/telemetry/test_canary.py",
    ],
    "prism_memory/postgres/statements/_base.py": [
        "tests/unit/test_statement_base.py",
        "tests/unit/test_entry_fields.py",
        "tests/unit/test_tenant_routing.py",
        "tests/postgres/test_write_path.py",
        "tests/postgres/test_read_path.py",
        "tests/postgres/test_generations.py",
    ],
    "prism_memory/integrations/mcp/_identity.py": [
        "tests/mcp/test_mcp_identity_config.py",
        "tests/mcp/test_mcp_identity.py",
        "tests/mcp/test_mcp_http_edges.py",
        "tests/mcp/test_mcp_transports.py::test_http_refuses_a_request_without_a_valid_token",
        "tests/mcp/test_mcp_isolation.py::test_two_tokens_on_one_http_server_share_nothing",
    ],
    "prism_memory/integrations/mcp/_http.py": [
        "tests/mcp/test_mcp_identity.py",
        "tests/mcp/test_mcp_http_edges.py",
        "tests/mcp/test_mcp_transports.py::test_http_refuses_a_request_without_a_valid_token",
        "tests/mcp/test_mcp_isolation.py::test_two_tokens_on_one_http_server_share_nothing",
    ],
    "prism_memory/integrations/mcp/_server.py": [
        "tests/mcp/test_mcp_server_surface.py",
        "tests/mcp/test_mcp_identity.py",
        "tests/mcp/test_mcp_http_edges.py",
        "tests/mcp/test_mcp_transports.py::test_http_client_calls_every_tool",
        "tests/mcp/test_mcp_isolation.py::test_two_tokens_on_one_http_server_share_nothing",
    ],
    "prism_memory/integrations/mcp/_models.py": [
        "tests/mcp/test_mcp_server_surface.py",
        "tests/mcp/test_mcp_transports.py::test_http_client_calls_every_tool",
    ],
    "prism_memory/postgres/_executor.py": [
        "tests/unit/test_executor_helpers.py",
        "tests/postgres/test_executor_units.py",
        "tests/unit/test_replica_readiness.py",
        "tests/postgres/test_read_retry.py",
        "tests/topology/test_host_engine_reads.py",
        "tests/topology/test_pooler_session_state.py",
        "tests/topology/test_replica_routing.py",
        "tests/topology/test_replica.py",
        "tests/postgres/test_server_terminated.py",
        "tests/postgres/test_write_faults.py",
        # not tests/topology/test_replica_faults.py: it stops and freezes the standby, which only
        # a pair it started itself allows (the session's shared pair cannot be stopped)
    ],
    "prism_memory/postgres/_engine.py": [
        "tests/unit/test_engine_config.py",
        "tests/postgres/test_engine_codec.py",
        "tests/postgres/test_kept_connections.py",
        "tests/topology/test_pooler_session_state.py",
        "tests/topology/test_pooler.py",
        "tests/postgres/test_server_terminated.py",
        "tests/postgres/test_store.py",
        "tests/topology/test_replica.py",
    ],
}

SERVED = ("tests/postgres/", "tests/topology/", "tests/mcp/", "tests/telemetry/")
"""Test paths that need the servers :func:`servers` starts."""

PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header"]

# ---- making mutants ------------------------------------------------------------------------------

_COMPARE_SWAPS: dict[type[ast.cmpop], list[type[ast.cmpop]]] = {
    ast.Lt: [ast.LtE, ast.Gt],
    ast.LtE: [ast.Lt, ast.Gt],
    ast.Gt: [ast.GtE, ast.Lt],
    ast.GtE: [ast.Gt, ast.Lt],
    ast.Eq: [ast.NotEq],
    ast.NotEq: [ast.Eq],
    ast.Is: [ast.IsNot],
    ast.IsNot: [ast.Is],
    ast.In: [ast.NotIn],
    ast.NotIn: [ast.In],
}
_BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitOr: ast.BitAnd,
    ast.BitAnd: ast.BitOr,
}
_NAME_SWAPS = {"min": "max", "max": "min", "any": "all", "all": "any"}

Mutator = Callable[[ast.AST], ast.AST]


@dataclass(frozen=True)
class Mutant:
    """One single-point change of one module."""

    path: str  # relative to ROOT
    index: int  # position in the module's deterministic mutant order
    line: int
    qualname: str
    description: str
    key: str  # stable across line shifts: path::qualname::description[#n]
    source: str  # the whole mutated module
    swap: str | None  # the function whose code object can be swapped in place, if any


@dataclass
class _Point:
    node: ast.AST
    qualname: str
    swap: str | None
    mutators: list[tuple[str, Mutator]] = field(default_factory=list)


def _with_op(op: type[ast.AST], position: int | None = None) -> Mutator:
    def apply(node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Compare):
            assert position is not None
            node.ops[position] = op()  # type: ignore[assignment]
        else:
            node.op = op()  # type: ignore[attr-defined]
        return node

    return apply


def _constant(value: object) -> Mutator:
    def apply(node: ast.AST) -> ast.AST:
        return ast.copy_location(ast.Constant(value), node)

    return apply


def _negated(node: ast.AST) -> ast.AST:
    assert isinstance(node, ast.expr)
    return ast.copy_location(ast.UnaryOp(ast.Not(), node), node)


def _operand(node: ast.AST) -> ast.AST:
    assert isinstance(node, ast.UnaryOp)
    return node.operand


def _renamed(name: str) -> Mutator:
    def apply(node: ast.AST) -> ast.AST:
        return ast.copy_location(ast.Name(name, ast.Load()), node)

    return apply


def _statement(text: str) -> Mutator:
    def apply(node: ast.AST) -> ast.AST:
        return ast.copy_location(ast.parse(text).body[0], node)

    return apply


def _mutators(node: ast.AST, conditions: set[int]) -> list[tuple[str, Mutator]]:
    found: list[tuple[str, Mutator]] = []
    if isinstance(node, ast.Compare):
        found.extend(
            ("compare", _with_op(swap, position))
            for position, op in enumerate(node.ops)
            for swap in _COMPARE_SWAPS.get(type(op), [])
        )
    elif isinstance(node, ast.BoolOp):
        found.append(("boolop", _with_op(ast.Or if isinstance(node.op, ast.And) else ast.And)))
    elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _BINOP_SWAPS:
        found.append(("arith", _with_op(_BINOP_SWAPS[type(node.op)])))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub):
        found.append(("unary", _operand))
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            found.append(("constant", _constant(not value)))
        elif isinstance(value, int):
            found.append(("constant", _constant(value + 1)))
        elif isinstance(value, float):
            found.append(("constant", _constant(value + 1.0)))
        elif isinstance(value, str):
            found.append(("constant", _constant(f"XX{value}XX")))
    elif isinstance(node, ast.Name) and node.id in _NAME_SWAPS:
        found.append(("name", _renamed(_NAME_SWAPS[node.id])))
    elif isinstance(node, ast.Raise):
        found.append(("statement", _statement("pass")))
    elif isinstance(node, ast.Return) and node.value is not None:
        if not (isinstance(node.value, ast.Constant) and node.value.value in (None, False)):
            found.append(("statement", _statement("return None")))
    elif isinstance(node, ast.Continue):
        found.append(("statement", _statement("break")))
    elif isinstance(node, ast.Break):
        found.append(("statement", _statement("continue")))
    if id(node) in conditions and not isinstance(node, ast.Compare | ast.UnaryOp | ast.BoolOp):
        found.append(("condition", _negated))
    return found


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _is_dunder_all(node: ast.AST) -> bool:
    return isinstance(node, ast.Assign | ast.AnnAssign) and any(
        isinstance(t, ast.Name) and t.id == "__all__"
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
    )


def _late_bound(tree: ast.Module) -> set[str]:
    """Module constants whose value can be swapped into the live module instead of a fresh import.

    A name qualifies when the module assigns it once, at module level, and reads it only inside
    function bodies (never at import: not in another constant, a class body, a default argument,
    a decorator or an annotation), so every use looks the current binding up when it runs.
    """
    assigned: dict[str, int] = {}
    for node in tree.body:
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else node.target
            if isinstance(node, ast.AnnAssign) and node.value is not None
            else None
        )
        if isinstance(target, ast.Name):
            assigned[target.id] = assigned.get(target.id, 0) + 1
    early: set[str] = set()

    def walk(node: ast.AST, later: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            arguments = node.args
            at_def = [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]
            if not isinstance(node, ast.Lambda):
                at_def += [*node.decorator_list, *([node.returns] if node.returns else [])]
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
            at_def += [a.annotation for a in every if a.annotation is not None]
            for child in at_def:
                walk(child, later)
            for child in node.body if isinstance(node.body, list) else [node.body]:
                walk(child, True)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and not later:
            early.add(node.id)
        for child in ast.iter_child_nodes(node):
            walk(child, later)

    walk(tree, False)
    return {name for name, count in assigned.items() if count == 1 and name not in early}


def _points(tree: ast.Module) -> Iterator[_Point]:
    """Every mutable node in a deterministic order, skipping docstrings, annotations, ``__all__``,
    f-strings and exception messages (text for humans, not behaviour)."""
    conditions = {
        id(n.test) for n in ast.walk(tree) if isinstance(n, ast.If | ast.While | ast.IfExp)
    }
    late = _late_bound(tree)

    stack: list[ast.AST] = []

    def visit(node: ast.AST, qualname: str, swap: str | None) -> Iterator[_Point]:
        if _is_docstring(node) or _is_dunder_all(node) or isinstance(node, ast.JoinedStr):
            return
        if isinstance(node, ast.ImportFrom | ast.Import):
            return
        mutators = _mutators(node, conditions)
        if mutators:
            yield _Point(node, qualname, swap, mutators)
        body_swap = value_swap = swap
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            qualname = f"{qualname}.{node.name}" if qualname else node.name
            if not isinstance(node, ast.ClassDef) and swap is None:
                # a change inside this body lives in its code object; defaults and decorators
                # are evaluated at import, so changes there need the module imported afresh
                body_swap = qualname
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            # name module- and class-level constants, so keys survive edits elsewhere
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and not any(
                isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in stack
            ):
                qualname = f"{qualname}.{target.id}" if qualname else target.id
                if len(stack) == 1 and swap is None and target.id in late:
                    value_swap = f"={target.id}"  # rebound in the live modules, see swap_in
        elif isinstance(node, ast.keyword) and node.arg:
            qualname = f"{qualname}({node.arg}=)"
        stack.append(node)
        for name, value in ast.iter_fields(node):
            if name in ("annotation", "returns", "type_comment"):
                continue
            if isinstance(node, ast.Raise) and name in ("exc", "cause"):
                continue  # the message; dropping the raise is the mutant that matters
            children = value if isinstance(value, list) else [value]
            for position, child in enumerate(children):
                if not isinstance(child, ast.AST):
                    continue
                inner = qualname
                if isinstance(node, ast.Dict) and name == "values":
                    key = node.keys[position]
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        inner = f"{qualname}[{key.value}]"
                inherited = body_swap if name == "body" else swap
                yield from visit(child, inner, value_swap if name == "value" else inherited)
        stack.pop()

    yield from visit(tree, "", None)


def _splice(source: str, node: ast.AST, replacement: ast.AST) -> str:
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line.encode()))
    raw = source.encode()
    begin = starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
    end = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
    # keep every later line where it was: line numbers in reports and code objects stay true
    newlines = "\n" * raw[begin:end].count(b"\n")
    text = ast.unparse(replacement)
    text = f"({text}{newlines})" if isinstance(replacement, ast.expr) else f"{text}{newlines}"
    return (raw[:begin] + text.encode() + raw[end:]).decode()


def _short(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


IMPORT_TIME: dict[str, set[str]] = {
    "prism_memory/_memory/observed.py": {"public_call"},
    "prism_memory/_telemetry.py": {"traced"},
}
"""Functions that run at import -- decorator factories applied to the package's own classes and
functions -- per module: swapping their code afterwards would change nothing already decorated, so
a change inside them (their inner functions included) is run from the file instead."""


def _runs_at_import(path: str, swap: str | None) -> bool:
    return swap is not None and swap.split(".")[0] in IMPORT_TIME.get(path, set())


def make_mutants(path: str) -> list[Mutant]:
    """Every mutant of the module at ``path`` (relative to the repository root)."""
    source = (ROOT / path).read_text()
    mutants: list[Mutant] = []
    seen: dict[str, int] = {}
    for point in _points(ast.parse(source)):
        for _kind, mutator in point.mutators:
            original = ast.unparse(point.node)
            replacement = mutator(copy.deepcopy(point.node))
            mutated = _splice(source, point.node, replacement)
            try:
                ast.parse(mutated)
            except SyntaxError:
                continue
            if ast.dump(ast.parse(mutated)) == ast.dump(ast.parse(source)):
                continue
            description = f"{_short(original)}  →  {_short(ast.unparse(replacement))}"
            base = f"{path}::{point.qualname or '<module>'}::{description}"
            seen[base] = seen.get(base, 0) + 1
            key = base if seen[base] == 1 else f"{base}#{seen[base]}"
            mutants.append(
                Mutant(
                    path=path,
                    index=len(mutants),
                    line=point.node.lineno,  # type: ignore[attr-defined]
                    qualname=point.qualname or "<module>",
                    description=description,
                    key=key,
                    source=mutated,
                    swap=None if _runs_at_import(path, point.swap) else point.swap,
                )
            )
    return mutants


# ---- running tests in a fork ---------------------------------------------------------------------


def _preload() -> None:
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
                os.write(self.out, _MARKS[outcome].encode())
        return True


_MARKS = {"failed": ".", "timeout": "T", "passed": "S", "error": "?"}


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


# ---- reporting -----------------------------------------------------------------------------------


def load_equivalents() -> dict[str, str]:
    """The allow-list: mutant key → why that mutant cannot change behaviour."""
    if not EQUIVALENTS.exists():
        return {}
    entries = tomllib.loads(EQUIVALENTS.read_text()).get("equivalent", [])
    listed: dict[str, str] = {}
    for entry in entries:
        reason = str(entry.get("reason", "")).strip()
        if not reason:
            raise SystemExit(f"{EQUIVALENTS.name}: {entry.get('mutant')!r} has no reason")
        listed[str(entry["mutant"])] = reason
    return listed


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
    _preload()

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
                    print(_MARKS[outcome], end="", flush=True)
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
