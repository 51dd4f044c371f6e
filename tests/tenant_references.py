"""Every reference to a tenant-keyed table in one SQL statement, and whether it is constrained by
its tenant -- the per-reference routing rule of ``tests/unit/test_tenant_routing.py`` (issue 47).

A small reader of the PostgreSQL the adapter renders (``tests/sql_catalogue.py``), no database and
no SQL library: the statement is tokenized, parenthesized groups become a tree, and each query
block (a ``SELECT``, ``INSERT``, ``UPDATE`` or ``DELETE`` at one level: a CTE body, a sub-select,
a branch of a ``UNION``) lists the tables it reads (``FROM``, ``JOIN``, ``USING``, the target of an
``UPDATE``/``DELETE``/``INSERT``) and the equalities its ``WHERE`` and ``ON`` conditions hold at
their top level (through ``AND`` and plain parentheses, never through ``OR``).

A reference is constrained when

* its block holds ``<alias>.tenant_id = <bound parameter>`` (``:tenant``, ``$1``, ``$1::VARCHAR``;
  an unqualified ``tenant_id`` names the block's one tenant-keyed table), or
  ``ROW(<alias>.tenant_id, …) = ROW(<bound parameter>, …)``;
* or ``<alias>.tenant_id = <other>.tenant_id`` with ``<other>`` constrained -- a reference of the
  same block or of an enclosing one (a correlated sub-select), or a derived table / CTE whose every
  tenant-keyed reference is constrained;
* or, the target of an ``INSERT``, its ``tenant_id`` column is given a bound parameter (``VALUES``)
  or a constrained ``tenant_id`` / bound parameter by its ``SELECT``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["Reference", "references", "unconstrained"]

_TOKEN = re.compile(
    r"""
    (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<cast>::)
  | (?P<param>(?<![:\w]):[A-Za-z_]\w*|\$\d+)
  | (?P<word>[A-Za-z_][\w$]*)
  | (?P<number>\d+(?:\.\d+)?)
  | (?P<op><=|>=|<>|!=|=|<|>)
  | (?P<punct>[(),.;\[\]])
  | (?P<space>\s+)
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_QUERY_START = {"SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "VALUES"}
_CLAUSE_END = {
    "WHERE",
    "GROUP",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "HAVING",
    "WINDOW",
    "RETURNING",
    "SET",
    "ON",
    "FOR",
    "UNION",
    "INTERSECT",
    "EXCEPT",
    "VALUES",
    "SELECT",
    "FETCH",
}
_JOIN = {"JOIN"}
_JOIN_WORDS = {"INNER", "LEFT", "RIGHT", "FULL", "OUTER", "CROSS", "NATURAL", "LATERAL"}


@dataclass(frozen=True)
class Tok:
    """One token: its kind and text (words upper-cased, quoted names unquoted)."""

    kind: str
    text: str


@dataclass
class Group:
    """A parenthesized group (or the whole statement): tokens and nested groups."""

    items: list[Tok | Group] = field(default_factory=list)

    def is_query(self) -> bool:
        first = next((i for i in self.items if isinstance(i, Tok)), None)
        return first is not None and first.kind == "word" and first.text in _QUERY_START


@dataclass(frozen=True)
class Reference:
    """A tenant-keyed table named in a statement, by its alias in its query block."""

    table: str
    alias: str
    block: int


def _tokens(sql: str) -> list[Tok]:
    found: list[Tok] = []
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup or "other"
        text = match.group()
        if kind == "space":
            continue
        if kind == "quoted":
            kind, text = "name", text[1:-1].replace('""', '"')
        elif kind == "word":
            upper = text.upper()
            kind, text = ("word", upper) if upper in _KEYWORDS else ("name", text.lower())
        found.append(Tok(kind, text))
    return _dotted(found)


_KEYWORDS = _QUERY_START | _CLAUSE_END | _JOIN | _JOIN_WORDS
_KEYWORDS |= {"FROM", "AS", "AND", "OR", "NOT", "INTO", "USING", "ROW", "CAST", "ALL", "DISTINCT"}
_KEYWORDS |= {"EXISTS", "IN", "BY", "ANY", "IS", "NULL", "CASE", "WHEN", "THEN", "ELSE", "END"}
_KEYWORDS |= {"CONFLICT", "DO", "NOTHING", "ONLY", "RECURSIVE", "MATERIALIZED", "BETWEEN"}


def _dotted(tokens: list[Tok]) -> list[Tok]:
    """Join ``a.b.c`` into one ``name`` token ``a.b.c``."""
    out: list[Tok] = []
    for tok in tokens:
        if (
            tok.kind == "name"
            and len(out) >= 2
            and out[-1] == Tok("punct", ".")
            and out[-2].kind == "name"
        ):
            out.pop()
            out[-1] = Tok("name", f"{out[-1].text}.{tok.text}")
        elif tok.text == "*" and len(out) >= 2 and out[-1] == Tok("punct", "."):
            out.pop()
            out[-1] = Tok("name", f"{out[-1].text}.*")
        else:
            out.append(tok)
    return out


def _tree(tokens: list[Tok]) -> Group:
    stack = [Group()]
    for tok in tokens:
        if tok == Tok("punct", "("):
            stack.append(Group())
        elif tok == Tok("punct", ")"):
            done = stack.pop()
            stack[-1].items.append(done)
        else:
            stack[-1].items.append(tok)
    assert len(stack) == 1, "unbalanced parentheses"
    return stack[0]


def _split(items: list[Tok | Group], *words: str) -> list[list[Tok | Group]]:
    parts: list[list[Tok | Group]] = [[]]
    for item in items:
        if isinstance(item, Tok) and item.kind in ("word", "punct", "op") and item.text in words:
            parts.append([])
        else:
            parts[-1].append(item)
    return parts


def _word(item: Tok | Group | None, *texts: str) -> bool:
    return isinstance(item, Tok) and item.kind == "word" and item.text in texts


@dataclass
class _Block:
    """One query block: its sources (alias -> table, or a derived body), conditions, and so on."""

    number: int
    tables: dict[str, str] = field(default_factory=dict)  # alias -> tenant-keyed table
    derived: dict[str, list[_Block]] = field(default_factory=dict)  # alias -> blocks inside
    subqueries: set[str] = field(default_factory=set)  # the derived aliases that are not CTEs
    projection: list[list[Tok | Group]] = field(default_factory=list)  # a SELECT's output list
    other: set[str] = field(default_factory=set)  # aliases of anything else (unnest, …)
    equalities: list[tuple[Tok | Group, Tok | Group]] = field(default_factory=list)
    insert: tuple[str, list[str], list[Tok | Group] | Group] | None = None
    children: list[_Block] = field(default_factory=list)
    parent: _Block | None = None


class _Reader:
    def __init__(self, tenant_tables: set[str]) -> None:
        self.tenant_tables = tenant_tables
        self.blocks: list[_Block] = []
        self.ctes: dict[str, list[_Block]] = {}

    def _new(self, parent: _Block | None) -> _Block:
        block = _Block(len(self.blocks), parent=parent)
        self.blocks.append(block)
        if parent is not None:
            parent.children.append(block)
        return block

    # ---- statements and queries ------------------------------------------------------------

    def statement(self, sql: str) -> None:
        root = _tree(_tokens(sql))
        for part in _split(root.items, ";"):
            if Group(part).is_query():
                self.query(part, None)

    def query(self, items: list[Tok | Group], parent: _Block | None) -> list[_Block]:
        """The blocks of one query (a ``WITH`` list, then its body's ``UNION`` branches)."""
        made: list[_Block] = []
        if _word(items[0] if items else None, "WITH"):
            position = 1
            while position < len(items):
                item = items[position]
                if isinstance(item, Group) and item.is_query():
                    name = _cte_name(items, position)
                    body = self.query(item.items, parent)
                    made += body
                    if name:
                        self.ctes[name] = body
                    position += 1
                    if position < len(items) and items[position] == Tok("punct", ","):
                        position += 1
                        continue
                    if position < len(items) and isinstance(items[position], Tok):
                        tok = items[position]
                        assert isinstance(tok, Tok)
                        if tok.kind == "word" and tok.text in _QUERY_START:
                            items = items[position:]
                            break
                else:
                    position += 1
        for branch in _split(items, "UNION", "INTERSECT", "EXCEPT"):
            branch = [i for i in branch if not _word(i, "ALL", "DISTINCT")] or branch
            if len(branch) == 1 and isinstance(branch[0], Group) and branch[0].is_query():
                made += self.query(branch[0].items, parent)
            elif branch:
                made.append(self.block(branch, parent))
        return made

    def block(self, items: list[Tok | Group], parent: _Block | None) -> _Block:
        block = self._new(parent)
        head = items[0]
        if _word(head, "INSERT"):
            self._insert(block, items)
            return block
        if _word(head, "SELECT"):
            end = next((n for n, i in enumerate(items) if _word(i, "FROM")), len(items))
            block.projection = _split(items[1:end], ",")
        mode: str | None = None  # "from" | "where" | "on" | "set" | None
        condition: list[Tok | Group] = []
        expect_source = False
        position = 0
        if _word(head, "UPDATE"):
            position, _ = self._source(block, items, 1)
        elif _word(head, "DELETE"):
            position, _ = self._source(block, items, 2)  # DELETE FROM <table>
        while position < len(items):
            item = items[position]
            if _word(item, "FROM", "USING") and mode != "where":
                self._conditions(block, condition, mode)
                mode, condition, expect_source = "from", [], True
                position += 1
                continue
            if _word(item, "JOIN"):
                self._conditions(block, condition, mode)
                mode, condition, expect_source = "from", [], True
                position += 1
                continue
            if mode == "from" and (item == Tok("punct", ",") or _word(item, *_JOIN_WORDS)):
                expect_source = expect_source or item == Tok("punct", ",")
                position += 1
                continue
            if _word(item, "WHERE", "ON"):
                self._conditions(block, condition, mode)
                mode, condition = ("where" if _word(item, "WHERE") else "on"), []
                position += 1
                continue
            if isinstance(item, Tok) and item.kind == "word" and item.text in _CLAUSE_END:
                self._conditions(block, condition, mode)
                mode, condition = None, []
            if expect_source and mode == "from":
                position, _ = self._source(block, items, position)
                expect_source = False
                continue
            if mode in ("where", "on"):
                condition.append(item)
            elif isinstance(item, Group):
                self._nested(item, block)
            position += 1
        self._conditions(block, condition, mode)
        return block

    def _nested(self, group: Group, block: _Block) -> None:
        """Sub-selects anywhere in ``group`` (a select list, a function's arguments …)."""
        if group.is_query():
            self.query(group.items, block)
            return
        for item in group.items:
            if isinstance(item, Group):
                self._nested(item, block)

    def _source(self, block: _Block, items: list[Tok | Group], position: int) -> tuple[int, str]:
        """Read one ``FROM`` item at ``position``: a table, a derived table, a function call."""
        while _word(items[position] if position < len(items) else None, "LATERAL", "ONLY"):
            position += 1
        item = items[position]
        position += 1
        table: str | None = None
        derived: list[_Block] | None = None
        if isinstance(item, Group):
            derived = self.query(item.items, block) if item.is_query() else []
        elif item.kind == "name":
            called = position < len(items) and isinstance(items[position], Group)
            if called:  # a function in FROM: unnest(...), its arguments may hold sub-selects
                group = items[position]
                assert isinstance(group, Group)
                self._nested(group, block)
                position += 1
            else:
                table = item.text.rsplit(".", 1)[-1]
        name = table or ""
        if position < len(items) and _word(items[position], "WITH"):  # WITH ORDINALITY
            position += 2
        if position < len(items) and _word(items[position], "AS"):
            position += 1
        after = items[position] if position < len(items) else None
        if isinstance(after, Tok) and after.kind == "name":
            name = after.text
            position += 1
            if position < len(items) and isinstance(items[position], Group):
                position += 1  # column aliases
        if table is not None and table in self.tenant_tables:
            block.tables[name] = table
        elif table is not None and table in self.ctes:
            block.derived[name] = self.ctes[table]
        elif derived is not None:
            block.derived[name] = derived
            block.subqueries.add(name)
        else:
            block.other.add(name)
        return position, name

    def _insert(self, block: _Block, items: list[Tok | Group]) -> None:
        target = items[2]  # INSERT INTO <table> (<columns>) ...
        assert isinstance(target, Tok)
        table = target.text.rsplit(".", 1)[-1]
        columns_group = items[3] if len(items) > 3 else None
        columns = (
            [i.text for i in columns_group.items if isinstance(i, Tok) and i.kind == "name"]
            if isinstance(columns_group, Group)
            else []
        )
        rest = items[4:]
        source: list[Tok | Group] | Group = []
        conflict = next((n for n, i in enumerate(rest) if _word(i, "ON")), len(rest))
        body, tail = rest[:conflict], rest[conflict:]
        if body and _word(body[0], "VALUES"):
            source = body[1] if len(body) > 1 and isinstance(body[1], Group) else []
        elif body:
            query = body
            if len(body) == 1 and isinstance(body[0], Group):
                query = body[0].items
            selects = self.query(query, block)
            source = query
            block.derived["<insert source>"] = selects
        for item in tail:
            if isinstance(item, Group):
                self._nested(item, block)
        if table in self.tenant_tables:
            block.tables[table] = table
            block.insert = (table, columns, source)

    # ---- conditions --------------------------------------------------------------------------

    def _conditions(self, block: _Block, condition: list[Tok | Group], mode: str | None) -> None:
        if mode not in ("where", "on") or not condition:
            return
        for group in _groups(condition):
            self._nested(group, block)
        self._conjuncts(block, condition)

    def _conjuncts(self, block: _Block, condition: list[Tok | Group]) -> None:
        if len(_split(condition, "OR")) > 1:
            return  # an equality under OR constrains nothing
        for conjunct in _between_safe_and(condition):
            if len(conjunct) == 1 and isinstance(conjunct[0], Group):
                if not conjunct[0].is_query():
                    self._conjuncts(block, conjunct[0].items)
                continue
            sides = _split(conjunct, "=")
            if len(sides) != 2 or not sides[0] or not sides[1]:
                continue
            left, right = sides
            if _is_row(left) and _is_row(right):
                for a, b in zip(_row_items(left), _row_items(right), strict=False):
                    if len(a) == 1 and len(b) >= 1:
                        block.equalities.append((a[0], _operand(b)))
                continue
            if len(left) == 1:
                block.equalities.append((left[0], _operand(right)))


def _between_safe_and(condition: list[Tok | Group]) -> list[list[Tok | Group]]:
    parts: list[list[Tok | Group]] = [[]]
    between = False
    for item in condition:
        if _word(item, "BETWEEN"):
            between = True
        if _word(item, "AND") and not between:
            parts.append([])
            continue
        if _word(item, "AND"):
            between = False
        parts[-1].append(item)
    return parts


def _groups(items: list[Tok | Group]) -> Iterator[Group]:
    for item in items:
        if isinstance(item, Group):
            yield item


def _is_row(side: list[Tok | Group]) -> bool:
    return len(side) == 2 and _word(side[0], "ROW") and isinstance(side[1], Group)


def _row_items(side: list[Tok | Group]) -> list[list[Tok | Group]]:
    group = side[1]
    assert isinstance(group, Group)
    return _split(group.items, ",")


def _operand(side: list[Tok | Group]) -> Tok | Group:
    """A bound parameter (``$1``, ``$1::VARCHAR``, ``:tenant``) or a column, else the group."""
    if side and isinstance(side[0], Tok) and side[0].kind in ("param", "name"):
        rest = side[1:]
        if not rest or (len(rest) == 2 and rest[0] == Tok("cast", "::")):
            return side[0]
    return Group(list(side))


def _cte_name(items: list[Tok | Group], position: int) -> str | None:
    for back in range(position - 1, -1, -1):
        item = items[back]
        if isinstance(item, Tok) and item.kind == "name":
            return item.text
        if item == Tok("punct", ","):
            return None
    return None


# ---- the rule ------------------------------------------------------------------------------------


def _column(tok: Tok | Group, name: str = "tenant_id") -> str | None:
    """The qualifier of ``<qualifier>.tenant_id`` ("" unqualified), else ``None``."""
    if not isinstance(tok, Tok) or tok.kind != "name":
        return None
    parts = tok.text.split(".")
    if parts[-1] != name:
        return None
    return parts[-2] if len(parts) >= 2 else ""


def _is_param(tok: Tok | Group) -> bool:
    return isinstance(tok, Tok) and tok.kind == "param"


class _Judge:
    def __init__(self, blocks: list[_Block]) -> None:
        self.blocks = blocks
        self.constrained: dict[int, set[str]] = {b.number: set() for b in blocks}
        self._derived_memo: dict[int, bool] = {}

    def _owner(self, block: _Block, qualifier: str) -> tuple[_Block, str] | None:
        """The block (this one or an enclosing one) whose source ``qualifier`` names."""
        at: _Block | None = block
        while at is not None:
            if qualifier == "":
                keyed = list(at.tables)
                if at is block and len(keyed) == 1:
                    return at, keyed[0]
                return None
            if qualifier in at.tables or qualifier in at.derived or qualifier in at.other:
                return at, qualifier
            at = at.parent
        return None

    def _is_constrained(self, block: _Block, alias: str) -> bool:
        if alias in self.constrained[block.number]:
            return True
        if alias in block.derived:
            return self._derived_ok(block.derived[alias])
        return False

    def _derived_ok(self, blocks: list[_Block]) -> bool:
        inner = [(b, a) for b in self._all(blocks) for a in b.tables]
        return bool(inner) and all(a in self.constrained[b.number] for b, a in inner)

    def _all(self, blocks: list[_Block]) -> Iterator[_Block]:
        for block in blocks:
            yield block
            yield from self._all(block.children)

    def settle(self) -> None:
        changed = True
        while changed:
            changed = False
            for block in self.blocks:
                for alias in [*block.tables, *block.subqueries]:
                    if alias not in self.constrained[block.number] and self._holds(block, alias):
                        self.constrained[block.number].add(alias)
                        changed = True
                        if alias in block.subqueries:
                            self._push_into(block.derived[alias])

    def _push_into(self, blocks: list[_Block]) -> None:
        """A derived table filtered by tenant from outside: the tables whose ``tenant_id`` it
        passes on (``SELECT *``, ``e.*``, ``e.tenant_id``) are constrained by that filter."""
        for inner in blocks:
            for alias in inner.tables:
                if _passes_tenant(inner, alias):
                    self.constrained[inner.number].add(alias)

    def _holds(self, block: _Block, alias: str) -> bool:
        if block.insert is not None and block.insert[0] == alias:
            return self._insert_holds(block)
        for left, right in block.equalities:
            for mine, theirs in ((left, right), (right, left)):
                qualifier = _column(mine)
                if qualifier is None:
                    continue
                owner = self._owner(block, qualifier)
                if owner is None or owner != (block, alias):
                    continue
                if _is_param(theirs):
                    return True
                other = _column(theirs)
                if other is not None:
                    found = self._owner(block, other)
                    if (
                        found is not None
                        and found != (block, alias)
                        and self._is_constrained(*found)
                    ):
                        return True
        return False

    def _insert_holds(self, block: _Block) -> bool:
        assert block.insert is not None
        _, columns, source = block.insert
        if "tenant_id" not in columns:
            return False
        index = columns.index("tenant_id")
        if isinstance(source, Group):  # VALUES (...)
            values = _split(source.items, ",")
            return index < len(values) and len(values[index]) >= 1 and _is_param(values[index][0])
        selects = block.derived.get("<insert source>", [])
        if not selects:
            return False
        for select in selects:
            if select.parent is not block:
                continue
            projection = _projection(select, source)
            if projection is None or index >= len(projection):
                return False
            item = _operand(projection[index])
            if _is_param(item):
                continue
            qualifier = _column(item)
            found = None if qualifier is None else self._owner(select, qualifier)
            if found is None or not self._is_constrained(*found):
                return False
        return True


def _passes_tenant(block: _Block, alias: str) -> bool:
    for item in block.projection:
        if len(item) != 1 or not isinstance(item[0], Tok):
            continue
        text = item[0].text
        if text in ("*", f"{alias}.*", f"{alias}.tenant_id") or (
            text == "tenant_id" and len(block.tables) == 1
        ):
            return True
    return False


def _projection(
    select: _Block, source: list[Tok | Group] | Group
) -> list[list[Tok | Group]] | None:
    items = source.items if isinstance(source, Group) else source
    if not _word(items[0] if items else None, "SELECT"):
        return None
    end = next((n for n, i in enumerate(items) if _word(i, "FROM")), len(items))
    return _split(items[1:end], ",")


def references(sql: str, tenant_tables: set[str]) -> list[tuple[Reference, bool]]:
    """Every reference to a table of ``tenant_tables`` in ``sql``, and whether it is constrained."""
    reader = _Reader(tenant_tables)
    reader.statement(sql)
    judge = _Judge(reader.blocks)
    judge.settle()
    return [
        (Reference(table, alias, block.number), alias in judge.constrained[block.number])
        for block in reader.blocks
        for alias, table in block.tables.items()
    ]


def unconstrained(sql: str, tenant_tables: set[str]) -> list[Reference]:
    """The references of ``sql`` to ``tenant_tables`` that nothing constrains by tenant."""
    return [ref for ref, ok in references(sql, tenant_tables) if not ok]
