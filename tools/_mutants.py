"""Making mutants for :mod:`mutate` (``tools/mutate.py``): the operators, the mutable points of a
module's syntax tree, and each single-point change spliced back into the source text.

A private module of the tool: ``tools/mutate.py`` runs as a script, so ``tools/`` is first on
``sys.path`` and this file is imported as ``_mutants``.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from _mutation_modules import IMPORT_TIME, ROOT

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
