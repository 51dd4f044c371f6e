"""A store is its role objects, not a layer that forwards to them: no class of the stores or the
PostgreSQL adapter has more than five methods that only hand their call on to another object
(issue 49: the one-object stores forwarded 32-38 methods each). The compatibility stores reach
their role objects with ``via`` (stores/_delegation.py), which writes no method."""

from __future__ import annotations

import ast
from pathlib import Path

import prism_memory

PACKAGE = Path(prism_memory.__file__).parent
MAX_FORWARDERS = 5
WHERE = ("stores", "postgres")  # the facade (memory.py) delegates by design


def _parameters(function: ast.AsyncFunctionDef | ast.FunctionDef) -> set[str]:
    args = function.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}


def _only_forwards(function: ast.AsyncFunctionDef | ast.FunctionDef) -> bool:
    """The body (its docstring aside) is one call of ``self.<object>.<method>`` whose arguments
    are the function's own parameters or constants, returned or awaited as it is."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return False
    value = body[0].value
    if isinstance(value, ast.Await):
        value = value.value
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return False
    target = value.func.value
    while isinstance(target, ast.Attribute):
        target = target.value
    if not (isinstance(target, ast.Name) and target.id == "self"):
        return False
    if not isinstance(value.func.value, ast.Attribute):
        return False  # self.method(...): a call of its own class
    own = _parameters(function)
    arguments = [*value.args, *(k.value for k in value.keywords)]
    return all(
        (isinstance(a, ast.Name) and a.id in own) or isinstance(a, ast.Constant) for a in arguments
    )


def forwarders(source: str) -> dict[str, list[str]]:
    """Every class of ``source`` with the methods of it that only forward."""
    found: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            found[node.name] = [
                item.name
                for item in node.body
                if isinstance(item, ast.AsyncFunctionDef | ast.FunctionDef) and _only_forwards(item)
            ]
    return found


def test_no_store_class_forwards_more_than_five_methods() -> None:
    wide = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if not relative.startswith(WHERE):
            continue
        for name, methods in forwarders(path.read_text(encoding="utf-8")).items():
            if len(methods) > MAX_FORWARDERS:
                wide.append(f"{relative} {name}: {len(methods)} {methods}")
    assert not wide, f"classes forwarding more than {MAX_FORWARDERS} methods: {wide}"


def test_a_forwarding_method_is_counted() -> None:
    source = '''
class Store:
    async def a(self, scope, ids):
        """Doc."""
        return await self._writes.a(scope, ids)

    async def b(self, scope):
        return await self._reads.count(scope, "pending")

    async def c(self, scope, ids):
        check(ids)
        return await self._reads.c(scope, ids)

    def d(self):
        return self.rag.transaction()

    async def e(self, x):
        return await self.e2(x)
'''
    assert forwarders(source) == {"Store": ["a", "b", "d"]}
