"""bfloat16 legalisation: every ``bfloat16`` operation becomes a ``float32`` one, rounded.

Assumes: the loop IR of :mod:`polytile.schedule.loop_ir`, with ``bfloat16`` meaning what
:mod:`polytile.te.dtype` says: each operation computes in ``float32`` and rounds its
result to ``bfloat16`` (to nearest even), and a conversion to ``bfloat16`` from anything
but ``float32`` goes through ``float32``.

Guarantees: afterwards ``bfloat16`` values are only constants, variables, loads, stores,
``Select`` operands and the two conversions ``Cast("float32", x)`` (exact: a ``bfloat16``
is a ``float32`` with 16 zero low bits) and ``Cast("bfloat16", y)`` with ``y`` of dtype
``float32`` (the rounding). Arithmetic, comparisons, math calls and every other
conversion of ``bfloat16`` are written out in ``float32``::

    x + y        ->  bfloat16(float32(x) + float32(y))
    x < y        ->  float32(x) < float32(y)
    exp(x)       ->  bfloat16(exp(float32(x)))
    int32(x)     ->  int32(float32(x))
    bfloat16(d)  ->  bfloat16(float32(d))         (d: float64 or an integer)

so that a backend implements two conversions and 16-bit storage, never bfloat16
arithmetic, and every backend (the interpreter included) computes the same bits. Stores
and ``LetStmt`` bindings of another dtype into a ``bfloat16`` buffer or variable get the
same explicit conversion.

Helps: CPUs have no bfloat16 arithmetic; CUDA's ``__nv_bfloat16`` operators differ between
architectures. Models: TVM's ``BF16ComputeLegalize``/``BF16StorageLegalize`` (which round
only at stores; polytile rounds every operation, see :mod:`polytile.te.dtype`).
"""

from __future__ import annotations

from polytile.te.expr import Binary, Call, Cast, Cmp, Const, Expr
from polytile.te.visitor import ExprMutator, post_order_visit

from ..loop_ir import LetStmt, Stmt, StmtMutator, Store, stmt_exprs, walk_stmts

BF16, F32 = "bfloat16", "float32"


def _up(x: Expr) -> Expr:
    """``x`` (bfloat16 or float32) as a float32 expression; exact."""
    if x.dtype == F32:
        return x
    if isinstance(x, Const):
        return Const(F32, x.value)
    return Cast(F32, x)


def _to(dtype: str, x: Expr) -> Expr:
    """A legal conversion of legalised ``x`` to ``dtype``."""
    if x.dtype == dtype:
        return x
    if dtype == BF16 and x.dtype != F32:
        return Cast(BF16, Cast(F32, x))
    if x.dtype == BF16 and dtype != F32:
        return Cast(dtype, Cast(F32, x))
    return Cast(dtype, x)


class _Exprs(ExprMutator):
    def visit_Binary(self, e: Binary):
        a, b = self.visit(e.a), self.visit(e.b)
        if e.dtype == BF16:
            return Cast(BF16, Binary(F32, e.op, _up(a), _up(b)))
        return e if a is e.a and b is e.b else Binary(e.dtype, e.op, a, b)

    def visit_Cmp(self, e: Cmp):
        a, b = self.visit(e.a), self.visit(e.b)
        if a.dtype == BF16:
            return Cmp(e.dtype, e.op, _up(a), _up(b))
        return e if a is e.a and b is e.b else Cmp(e.dtype, e.op, a, b)

    def visit_Call(self, e: Call):
        args = tuple(self.visit(a) for a in e.args)
        if e.dtype != BF16 and all(a.dtype != BF16 for a in args):
            return e if all(x is y for x, y in zip(args, e.args)) else Call(e.dtype, e.name,
                                                                             args)
        up = tuple(_up(a) if a.dtype == BF16 else a for a in args)
        if e.dtype == BF16:
            return Cast(BF16, Call(F32, e.name, up))
        return Call(e.dtype, e.name, up)

    def visit_Cast(self, e: Cast):
        v = self.visit(e.value)
        if BF16 in (e.dtype, v.dtype):
            return _to(e.dtype, v)
        return e if v is e.value else Cast(e.dtype, v)


class _Stmts(StmtMutator):
    def __init__(self):
        self.exprs = _Exprs()

    def visit_expr(self, e: Expr) -> Expr:
        return self.exprs.visit(e)

    def visit_Store(self, s: Store):
        out = self.generic_visit(s)
        if BF16 in (out.buffer.dtype, out.value.dtype) and out.value.dtype != out.buffer.dtype:
            return Store(out.buffer, out.indices, _to(out.buffer.dtype, out.value))
        return out

    def visit_LetStmt(self, s: LetStmt):
        out = self.generic_visit(s)
        if BF16 in (out.var.dtype, out.value.dtype) and out.value.dtype != out.var.dtype:
            return LetStmt(out.var, _to(out.var.dtype, out.value), out.body)
        return out


def _uses_bfloat16(s: Stmt) -> bool:
    found = []

    def see(e: Expr) -> None:
        if e.dtype == BF16:
            found.append(e)

    for x in walk_stmts(s):
        if isinstance(x, Store) and x.buffer.dtype == BF16:
            return True
        for e in stmt_exprs(x):
            post_order_visit(e, see)
            if found:
                return True
    return False


def legalize_bfloat16(s: Stmt) -> Stmt:
    """Rewrite every ``bfloat16`` operation of ``s`` into ``float32`` arithmetic and one
    rounding conversion (see the module docstring). Returns ``s`` itself when it uses no
    ``bfloat16``."""
    if not _uses_bfloat16(s):
        return s
    return _Stmts().visit(s)
