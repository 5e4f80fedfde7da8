"""Expression simplification: constant folding and canonical linear index arithmetic.

Assumes: expressions follow the semantics of :mod:`polytile.te.expr`. Guarantees: the
result computes the same value for every input (integer folding wraps like the machine;
float expressions are only folded when every operand is a constant and no rounding
difference can arise). Helps: loop extents such as ``(min(31, 100 - 32*c0) + 1) - 0`` become
``min(32, 101 - 32*c0)``, and full-tile extents become constants that vectorize and unroll
need.
"""

from __future__ import annotations

from polytile.te import dtype as dt
from polytile.te.expr import And, Binary, Cast, Cmp, Const, Expr, Not, Or, Select, Var
from polytile.te.visitor import ExprMutator, _Memo

from ..loop_ir import For, IfThenElse, SlotExprMutator, is_empty, seq


_wrap = dt.wrap  # folded integer arithmetic wraps in the operands' dtype


def _ci(e: Expr):
    if e.__class__ is Const and _is_int(e.dtype) and not isinstance(e.value, bool):
        return e.value
    return None


_INT_DTYPE: dict = {}


def _is_int(dtype: str) -> bool:
    """``dt.is_int``, remembered per dtype name (asked for every node the simplifier sees)."""
    r = _INT_DTYPE.get(dtype)
    if r is None:
        r = _INT_DTYPE[dtype] = dt.is_int(dtype)
    return r


def _fold_int(op: str, a: int, b: int, dtype: str):
    if op == "add":
        return _wrap(a + b, dtype)
    if op == "sub":
        return _wrap(a - b, dtype)
    if op == "mul":
        return _wrap(a * b, dtype)
    if op == "min":
        return min(a, b)
    if op == "max":
        return max(a, b)
    if b == 0:
        return None
    if op == "floordiv":
        return _wrap(a // b, dtype)
    if op == "floormod":
        return a % b
    if op == "truncdiv":
        q = abs(a) // abs(b)
        return _wrap(q if (a >= 0) == (b >= 0) else -q, dtype)
    if op == "truncmod":
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    return None


# linear forms: {var: coef} plus a constant, for int64 index arithmetic --------------------

#: Memo of :func:`_linear`, a pure function, by node identity: ``id -> (node, result)``
#: (holding the node keeps its id from being reused). Emptied when it reaches
#: :data:`MEMO_LIMIT` entries, so a long tuning session does not keep old programs alive.
_LINEAR: dict = {}
MEMO_LIMIT = 200_000


def _linear(e: Expr):
    """``(terms, const)`` if ``e`` is a sum of integer multiples of opaque sub-expressions.
    Memoized (the result is shared: callers never mutate it): without it the rewrite of
    each ``+`` of a chain re-walked the whole chain below it."""
    if e.dtype != "int64":
        return None
    hit = _LINEAR.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    out = _linear_of(e)
    if len(_LINEAR) >= MEMO_LIMIT:
        _LINEAR.clear()
    _LINEAR[id(e)] = (e, out)
    return out


def _linear_of(e: Expr):
    c = _ci(e)
    if c is not None:
        return {}, c
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        la, lb = _linear(e.a), _linear(e.b)
        if la is None or lb is None:
            return None
        terms = dict(la[0])
        sign = 1 if e.op == "add" else -1
        for k, v in lb[0].items():
            terms[k] = terms.get(k, 0) + sign * v
        return {k: v for k, v in terms.items() if v}, la[1] + sign * lb[1]
    if isinstance(e, Binary) and e.op == "mul":
        ca, cb = _ci(e.a), _ci(e.b)
        if ca is not None or cb is not None:
            k, other = (ca, e.b) if ca is not None else (cb, e.a)
            lo = _linear(other)
            if lo is None:
                return None
            return {t: v * k for t, v in lo[0].items() if v * k}, lo[1] * k
    return {e: 1}, 0


def _term(t: Expr, k: int) -> Expr:
    return t if k == 1 else Binary("int64", "mul", Const("int64", k), t)


def _rebuild(terms: dict, const: int) -> Expr:
    """Canonical text order: positive terms, then the constant, then negative terms
    (``9 - 4*x`` rather than ``-4*x + 9``)."""
    i64 = "int64"
    pos = [(t, k) for t, k in terms.items() if k > 0]
    neg = [(t, -k) for t, k in terms.items() if k < 0]
    out: Expr | None = None
    for t, k in pos:
        out = _term(t, k) if out is None else Binary(i64, "add", out, _term(t, k))
    if const or out is None:
        c = Const(i64, abs(const) if out is not None else const)
        out = c if out is None else Binary(i64, "add" if const > 0 else "sub", out, c)
    for t, k in neg:
        out = Binary(i64, "sub", out, _term(t, k))
    first = pos[0] if pos else None
    if out.__class__ is Binary and not (first is not None and first[1] == 1
                                        and first[0].__class__ is Binary
                                        and first[0].op in ("min", "max")):
        # (a sum led by a min or max is not kept: a new walk moves the rest inside it)
        if len(_CANON) >= MEMO_LIMIT:
            _CANON.clear()
        _CANON[id(out)] = out
    return out


#: The sums :func:`_rebuild` made, by id (each held, so its id is not reused): in canonical
#: form already (their terms were simplified, and a sum rebuilt from its own linear form is
#: the same text), so a walk of ``simplify(..., share=True)`` returns each as it is instead
#: of rebuilding it node by node. Emptied at :data:`MEMO_LIMIT` entries and by
#: :func:`forget`.
_CANON: dict = {}


class Simplifier(ExprMutator):
    """The expression rewrite of :func:`simplify_expr`; ``share``: canonical sums
    (:data:`_CANON`) are returned as they are, not rebuilt (see :func:`simplify`)."""

    def __init__(self, share: bool = False):
        self.share = share

    def visit(self, e):
        if e.__class__ is Var or e.__class__ is Const:
            return e    # nothing to simplify (and nothing worth a memo entry)
        if self.share and _CANON.get(id(e)) is e:
            return e
        return _Memo.visit(self, e)

    def simplified(self, e: Expr) -> Expr:
        """``visit(e)``, the result also remembered as the simplification of itself: a
        later visit of a node built around it (the load ``flatten_storage`` builds with
        it) keeps that node as it is, where a visit of the node built around ``e`` would
        have built the same node around the same result. (The result is a node of the
        input that its visit kept, so its own simplification, or a new node that nothing
        else holds.)"""
        out = self.visit(e)
        if out.__class__ is not Var and out.__class__ is not Const:
            memo = self.__dict__.setdefault("_memo", {})
            if id(out) not in memo:
                memo[id(out)] = (out, out)
        return out

    def visit_Binary(self, e: Binary):
        a, b = self.visit(e.a), self.visit(e.b)
        if not _is_int(e.dtype) and (a.__class__ is not Const or b.__class__ is not Const):
            # no rule below applies to a float operation with a non-constant operand (the
            # rules past the folding are for integers): the operands alone
            return e if (a is e.a and b is e.b) else Binary(e.dtype, e.op, a, b)
        ca, cb = _ci(a), _ci(b)
        if ca is not None and cb is not None:
            v = _fold_int(e.op, ca, cb, e.dtype)
            if v is not None:
                return Const(e.dtype, v)
        if _is_int(e.dtype):
            if e.op in ("add", "sub") and (cb == 0):
                return a
            if e.op == "add" and ca == 0:
                return b
            if e.op == "mul" and (ca == 1 or cb == 1):
                return b if ca == 1 else a
            if e.op == "mul" and (ca == 0 or cb == 0):
                return Const(e.dtype, 0)
            if e.op in ("floordiv", "truncdiv") and cb == 1:
                return a
            if e.op in ("floormod", "truncmod") and cb == 1:
                return Const(e.dtype, 0)
            if e.op in ("min", "max") and a is b:
                return a
        if (e.dtype == "int64" and e.op in ("add", "sub") and isinstance(a, Binary)
                and a.op in ("min", "max") and _linear(b) is not None):
            # min(x, y) + z -> min(x + z, y + z): partial-tile extents fold their offsets
            return self.visit(Binary(e.dtype, a.op, Binary(e.dtype, e.op, a.a, b),
                                     Binary(e.dtype, e.op, a.b, b)))
        out = e if (a is e.a and b is e.b) else Binary(e.dtype, e.op, a, b)
        if e.dtype == "int64" and e.op in ("add", "sub", "mul"):
            lin = _linear(out)
            if lin is not None:
                return _rebuild(*lin)
        if e.dtype == "int64" and e.op in ("min", "max"):
            la, lb = _linear(a), _linear(b)
            if la is not None and lb is not None and la[0] == lb[0]:
                pick = min if e.op == "min" else max
                return a if pick(la[1], lb[1]) == la[1] else b
        return out

    def visit_Cast(self, e: Cast):
        v = self.visit(e.value)
        c = _ci(v)
        if c is not None and _is_int(e.dtype):
            return Const(e.dtype, _wrap(c, e.dtype))
        if v.dtype == e.dtype:
            return v
        return e if v is e.value else Cast(e.dtype, v)

    def visit_Cmp(self, e: Cmp):
        a, b = self.visit(e.a), self.visit(e.b)
        ca, cb = _ci(a), _ci(b)
        if ca is None and cb is None and a.dtype == "int64":
            la, lb = _linear(a), _linear(b)
            if la is not None and lb is not None and la[0] == lb[0]:
                ca, cb = la[1], lb[1]
        if ca is not None and cb is not None:
            r = {"eq": ca == cb, "ne": ca != cb, "lt": ca < cb, "le": ca <= cb,
                 "gt": ca > cb, "ge": ca >= cb}[e.op]
            return Const("bool", r)
        return e if (a is e.a and b is e.b) else Cmp("bool", e.op, a, b)

    def visit_And(self, e: And):
        a, b = self.visit(e.a), self.visit(e.b)
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Const):
                return y if x.value else x
        return e if (a is e.a and b is e.b) else And("bool", a, b)

    def visit_Or(self, e: Or):
        a, b = self.visit(e.a), self.visit(e.b)
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Const):
                return x if x.value else y
        return e if (a is e.a and b is e.b) else Or("bool", a, b)

    def visit_Not(self, e: Not):
        a = self.visit(e.a)
        if isinstance(a, Const):
            return Const("bool", not a.value)
        return e if a is e.a else Not("bool", a)

    def visit_Select(self, e: Select):
        c = self.visit(e.cond)
        if isinstance(c, Const):
            return self.visit(e.true_value if c.value else e.false_value)
        t, f = self.visit(e.true_value), self.visit(e.false_value)
        if c is e.cond and t is e.true_value and f is e.false_value:
            return e
        return Select(e.dtype, c, t, f)


def simplify_expr(e: Expr) -> Expr:
    """Simplified ``e`` (see the module docstring)."""
    return Simplifier().visit(e)


#: Statements a ``simplify`` returned, by id (holding each keeps its id from being reused).
#: The simplifier reaches its fixed point in one pass and sees nothing but the statement
#: itself, so a statement it returned, met again by a later ``simplify`` (the passes in
#: between left it alone), is returned as it is instead of being rebuilt node by node.
_SIMPLIFIED: dict = {}


class _SimplifyStmt(SlotExprMutator):
    def __init__(self, share: bool = False, walker: Simplifier | None = None):
        # shared: one expression walker (and its memo) for the whole statement; else one
        # per expression slot (SlotExprMutator: the copies of an unrolled body share the
        # work on the nodes they share, and each statement keeps its sharing structure)
        self.ex = (walker or Simplifier(share=True)) if share else None

    def walker(self):
        return Simplifier()

    def visit(self, s):
        if _SIMPLIFIED.get(id(s)) is s:
            return s
        out = SlotExprMutator.visit(self, s)
        if out is not None:
            if len(_SIMPLIFIED) >= MEMO_LIMIT:
                _SIMPLIFIED.clear()
            _SIMPLIFIED[id(out)] = out
        return out

    def visit_expr(self, e):
        return SlotExprMutator.visit_expr(self, e) if self.ex is None else self.ex.visit(e)

    def visit_IfThenElse(self, s: IfThenElse):
        s = self.generic_visit(s)
        if isinstance(s.cond, Const):
            return s.then_case if s.cond.value else s.else_case
        other = s.else_case if s.else_case is not None and not is_empty(s.else_case) else None
        if is_empty(s.then_case):
            return IfThenElse(simplify_expr(Not("bool", s.cond)), other) if other else None
        if other is not s.else_case:
            return IfThenElse(s.cond, s.then_case)
        return s

    def visit_For(self, s: For):
        s = self.generic_visit(s)
        if (isinstance(s.extent, Const) and s.extent.value <= 0) or is_empty(s.body):
            return None
        return s


def forget() -> None:
    """Empty the memos of this module (``lower`` calls it when a lowering ends: nothing of
    one program is met again in the next)."""
    _LINEAR.clear()
    _SIMPLIFIED.clear()
    _CANON.clear()


def simplify(stmt, share: bool = False, walker: Simplifier | None = None):
    """Simplify every expression of a statement; drop branches and loops that never run.

    ``share``: one memo for all expressions of ``stmt``, and the sums an earlier walk of
    this lowering rebuilt are kept as they are (:data:`_CANON`), so a sub-expression met in
    several expressions is one shared result. Only where no later pass tells shared nodes
    apart: ``share_subexpressions`` binds a shared node once, so before it, each
    expression's result must be its own tree. ``walker``: with ``share``, the
    ``Simplifier(share=True)`` to walk with (one that already simplified parts of
    ``stmt``, see :func:`~.storage.flatten_storage`)."""
    out = _SimplifyStmt(share, walker).visit(stmt)
    return out if out is not None else seq()

