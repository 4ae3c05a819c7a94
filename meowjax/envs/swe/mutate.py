"""Bug planting by program mutation on the ``ast`` of a module.

A :class:`Mutation` names a top-level definition, a mutation kind, the position of the node in
``ast.walk`` of that definition and a variant. Kinds:

  operator        a + b -> a - b, * -> +, / -> *, // -> /, % -> //, ** -> *, also in ``x += 1``
  comparison      < <-> <=, > <-> >=, == <-> !=, in <-> not in, is <-> is not
  boolean         and <-> or
  off_by_one      an integer constant n -> n + 1 (variant 0) or n - 1 (variant 1)
  swap_args       f(a, b, ...) -> f(b, a, ...)
  swap_operands   a - b -> b - a for the non-commutative - / // % **
  negation        not x -> x
  missing_branch  an ``if`` statement without ``else`` deleted (the fix re-adds >= 2 lines)

All kinds except ``missing_branch`` change exactly one line of ``ast.unparse`` output. Whether a
mutation is a real bug (some test fails) is checked by running the tests, not here.
"""

from __future__ import annotations

import ast
import copy
import dataclasses

ONE_LINE_KINDS = ("operator", "comparison", "boolean", "off_by_one", "swap_args",
                  "swap_operands", "negation")
KINDS = ONE_LINE_KINDS + ("missing_branch",)

_BINOP_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Div: ast.Mult,
               ast.FloorDiv: ast.Div, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
_CMP_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
             ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
             ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
           ast.Eq: "==", ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is",
           ast.IsNot: "is not", ast.And: "and", ast.Or: "or"}


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One planted change: ``kind`` at node ``index`` of ``ast.walk(<def target>)``."""

    target: str
    kind: str
    index: int
    variant: int = 0


def _definition(tree: ast.Module, name: str) -> ast.FunctionDef | ast.ClassDef:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
    raise KeyError(f"no top-level definition {name!r} in module")


def _docstrings(definition: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(definition):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            ids.add(id(body[0].value))
    return ids


def _in_multi_stmt_body(definition: ast.AST) -> set[int]:
    """ids of ``if`` statements (no else) whose enclosing body keeps >= 1 statement without them."""
    ids = set()
    for node in ast.walk(definition):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and len(body) >= 2:
                ids.update(id(s) for s in body if isinstance(s, ast.If) and not s.orelse)
    return ids


def _sites(node: ast.AST, docstrings: set[int], removable_ifs: set[int]) -> list[tuple[str, int]]:
    """(kind, variant) pairs applicable to one node."""
    out = []
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BINOP_SWAP:
        out.append(("operator", 0))
    if (isinstance(node, ast.BinOp) and isinstance(node.op, _NON_COMMUTATIVE)
            and ast.unparse(node.left) != ast.unparse(node.right)):
        out.append(("swap_operands", 0))
    if isinstance(node, ast.Compare):
        out += [("comparison", i) for i, op in enumerate(node.ops) if type(op) in _CMP_SWAP]
    if isinstance(node, ast.BoolOp):
        out.append(("boolean", 0))
    if (isinstance(node, ast.Constant) and type(node.value) is int
            and id(node) not in docstrings):
        out += [("off_by_one", 0), ("off_by_one", 1)]
    if (isinstance(node, ast.Call) and len(node.args) >= 2
            and not any(isinstance(a, ast.Starred) for a in node.args[:2])
            and ast.unparse(node.args[0]) != ast.unparse(node.args[1])):
        out.append(("swap_args", 0))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        out.append(("negation", 0))
    if isinstance(node, ast.If) and id(node) in removable_ifs:
        out.append(("missing_branch", 0))
    return out


def find_mutations(tree: ast.Module, targets: list[str]) -> list[Mutation]:
    """Every applicable mutation inside the named top-level definitions, in a stable order."""
    found = []
    for name in targets:
        definition = _definition(tree, name)
        docstrings, removable = _docstrings(definition), _in_multi_stmt_body(definition)
        for index, node in enumerate(ast.walk(definition)):
            found += [Mutation(name, kind, index, variant)
                      for kind, variant in _sites(node, docstrings, removable)]
    return found


def _replace_child(root: ast.AST, old: ast.AST, new: ast.AST | None) -> None:
    """Replaces (or, for statements with ``new=None``, deletes) ``old`` wherever it hangs."""
    for parent in ast.walk(root):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list) and any(v is old for v in value):
                i = next(i for i, v in enumerate(value) if v is old)
                if new is None:
                    del value[i]
                else:
                    value[i] = new
                return
    raise ValueError("node not found under root")


def _apply_one(definition: ast.AST, node: ast.AST, m: Mutation) -> str:
    """Mutates ``node`` in place; returns a human description."""
    if m.kind == "operator":
        old = type(node.op)
        node.op = _BINOP_SWAP[old]()
        return f"{_SYMBOL[old]} -> {_SYMBOL[type(node.op)]}"
    if m.kind == "swap_operands":
        node.left, node.right = node.right, node.left
        return "swapped operands"
    if m.kind == "comparison":
        old = type(node.ops[m.variant])
        node.ops[m.variant] = _CMP_SWAP[old]()
        return f"{_SYMBOL[old]} -> {_SYMBOL[_CMP_SWAP[old]]}"
    if m.kind == "boolean":
        old = type(node.op)
        node.op = ast.Or() if old is ast.And else ast.And()
        return f"{_SYMBOL[old]} -> {_SYMBOL[type(node.op)]}"
    if m.kind == "off_by_one":
        old = node.value
        node.value = old + 1 if m.variant == 0 else old - 1
        return f"{old} -> {node.value}"
    if m.kind == "swap_args":
        node.args[0], node.args[1] = node.args[1], node.args[0]
        return "swapped the first two arguments"
    if m.kind == "negation":
        _replace_child(definition, node, node.operand)
        return "dropped a 'not'"
    if m.kind == "missing_branch":
        _replace_child(definition, node, None)
        return f"deleted the branch 'if {ast.unparse(node.test)}:'"
    raise ValueError(f"unknown mutation kind {m.kind!r}; known: {KINDS}")


def apply_mutations(tree: ast.Module, mutations: list[Mutation]) -> tuple[ast.Module, list[str]]:
    """A mutated deep copy of ``tree`` and one description per mutation (``tree`` is untouched).

    Nodes are looked up in the *unmutated* copy first, so several mutations of one definition
    refer to the same numbering as :func:`find_mutations`.
    """
    new = copy.deepcopy(tree)
    located = []
    for m in mutations:
        definition = _definition(new, m.target)
        nodes = list(ast.walk(definition))
        if m.index >= len(nodes):
            raise ValueError(f"mutation {m} points past the end of {m.target!r}")
        located.append((definition, nodes[m.index], m))
    descriptions = [f"{m.target}: {m.kind}: {_apply_one(d, n, m)}" for d, n, m in located]
    ast.fix_missing_locations(new)
    return new, descriptions
