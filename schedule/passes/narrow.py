"""Index narrowing: 64-bit index arithmetic becomes 32-bit where every value fits.

Assumes: a finalized function (flat indices). Guarantees: when every buffer holds fewer than
``LIMIT`` elements, every loop variable, hardware index, constant and operation of dtype
``int64`` becomes ``int32`` (scalar parameters of dtype int64 are cast at their uses);
otherwise the function is returned unchanged. Helps: GPUs execute 32-bit integer
multiply-adds natively, 64-bit ones as several instructions (TVM indexes in int32 for the
same reason). The margin below 2**31 covers the intermediate values of the affine index
expressions isl generates, whose terms are bounded by the buffers' extents.
"""

from __future__ import annotations

from polytile.te import symbolic as sym
from polytile.te.expr import Binary, Cast, Cmp, Const, Select, Var
from polytile.te.visitor import ExprMutator

from ..loop_ir import (Buffer, For, KernelLaunch, LetStmt, PrimFunc, StmtMutator, walk_stmts)
from .storage import _buffers_used

#: Functions whose buffers all hold fewer elements than this are narrowed.
LIMIT = 2**30


class _Narrow(ExprMutator):
    def __init__(self, vars_: dict, params: set):
        self.vars = vars_
        self.params = params

    def visit_Var(self, v: Var):
        if v.dtype != "int64":
            return v
        if id(v) in self.params:
            return Cast("int32", v)
        return self.vars.setdefault(v, Var("int32", v.name))

    def visit_Const(self, c: Const):
        if c.dtype == "int64":
            if not -(2**31) <= c.value < 2**31:
                raise OverflowError
            return Const("int32", c.value)
        return c

    def visit_Binary(self, e: Binary):
        a, b = self.visit(e.a), self.visit(e.b)
        return Binary("int32" if e.dtype == "int64" else e.dtype, e.op, a, b)

    def visit_Cmp(self, e: Cmp):
        return Cmp("bool", e.op, self.visit(e.a), self.visit(e.b))

    def visit_Select(self, e: Select):
        d = "int32" if e.dtype == "int64" else e.dtype
        return Select(d, self.visit(e.cond), self.visit(e.true_value), self.visit(e.false_value))

    def visit_Cast(self, e: Cast):
        v = self.visit(e.value)
        d = "int32" if e.dtype == "int64" else e.dtype
        return v if v.dtype == d else Cast(d, v)


class _NarrowStmt(StmtMutator):
    def __init__(self, ex: _Narrow):
        self.ex = ex

    def visit_expr(self, e):
        return self.ex.visit(e)

    def visit_For(self, s: For):
        s = self.generic_visit(s)
        return For(self.ex.visit(s.var), s.min, s.extent, s.kind, s.body, s.step, s.pragmas)

    def visit_LetStmt(self, s: LetStmt):
        s = self.generic_visit(s)
        return LetStmt(self.ex.visit(s.var), s.value, s.body)

    def visit_KernelLaunch(self, k: KernelLaunch):
        k = self.generic_visit(k)
        tv = tuple((self.ex.visit(v), tag) for v, tag in k.thread_vars)
        return KernelLaunch(k.name, k.grid, k.block, tv, k.body)


def narrow_indices(func: PrimFunc) -> PrimFunc:
    """See the module docstring."""
    bufs = [p for p in func.params if isinstance(p, Buffer)] + _buffers_used(func.body)
    if any(not all(sym.is_static(d) for d in b.shape) for b in bufs):
        return func   # symbolic sizes: any size may come at run time, keep 64-bit indices
    if any(b.size >= LIMIT for b in bufs):
        return func
    for s in walk_stmts(func.body):
        if isinstance(s, For) and s.step >= LIMIT:
            return func
    params = {id(p) for p in func.params if isinstance(p, Var)}
    try:
        body = _NarrowStmt(_Narrow({}, params)).visit(func.body)
    except OverflowError:
        return func
    return PrimFunc(func.name, func.params, body, func.attrs)
