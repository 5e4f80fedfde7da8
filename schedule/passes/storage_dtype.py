"""Narrow storage, wide arithmetic: the rewrite that the bfloat16 and int4 passes share.

A *narrow* dtype (``bfloat16``; ``int4``/``uint4``) has storage of its own but no
arithmetic on any backend: :mod:`polytile.te.dtype` defines each of its operations as the
operation in a *wide* dtype (``float32``; the 8-bit carrier ``int8``/``uint8``) followed by
a narrowing of the result (rounding; wrapping modulo 16). This module holds what the two
legalisations have in common:

* :func:`uses_dtype`: whether a statement touches the narrow dtype at all (each pass
  returns its input itself when not);
* :class:`WidenArithmetic`: the expression rewrite of operations, ``Binary``, ``Cmp`` and
  ``Call``, through four hooks::

      x op y   ->  narrowed(wide(x) op wide(y))      (x op y of a narrow dtype)
      x < y    ->  widen(x) < widen(y)               (narrow operands)
      f(x)     ->  narrowed(f(widen(x)))             (f of a narrow dtype)

* :class:`WidenStmts`: the statements around it, with the conversion of a value stored
  into a narrow buffer (``stored``).

What each dtype means stays in its own pass: its conversions (``Cast``), how its values
reach the wide dtype (bfloat16 converts each operand where it is used; int4 converts every
leaf, loads, constants and variables, so that its operands are already wide) and how a
result is narrowed (:mod:`.bfloat16`, :mod:`.int4`).
"""

from __future__ import annotations

from collections.abc import Callable

from polytile.te.expr import Binary, Call, Cmp, Expr
from polytile.te.visitor import ExprMutator, post_order_visit

from ..loop_ir import Allocate, Stmt, StmtMutator, Store, TensorCall, stmt_exprs, walk_stmts


def uses_dtype(s: Stmt, narrow: Callable[[str], bool]) -> bool:
    """Whether ``s`` stores into, allocates or passes to a tensor intrinsic a buffer whose
    dtype satisfies ``narrow``, or computes an expression of such a dtype."""
    found = []

    def see(e: Expr) -> None:
        if narrow(e.dtype):
            found.append(e)

    for x in walk_stmts(s):
        if isinstance(x, (Store, Allocate)) and narrow(x.buffer.dtype):
            return True
        if isinstance(x, TensorCall) and any(narrow(b.dtype) for b in x.buffers):
            return True
        for e in stmt_exprs(x):
            post_order_visit(e, see)
            if found:
                return True
    return False


class WidenArithmetic(ExprMutator):
    """Operations of a narrow dtype computed in the wide one (see the module docstring).

    Subclasses define :meth:`narrow` (is a dtype narrow), :meth:`wide` (its wide dtype),
    :meth:`widen` (a rewritten operand of a narrow dtype in the wide one) and
    :meth:`narrowed` (a wide result brought back to the narrow ``dtype``), and their own
    ``visit_Cast`` and leaves."""

    def narrow(self, dtype: str) -> bool:
        raise NotImplementedError

    def wide(self, dtype: str) -> str:
        raise NotImplementedError

    def widen(self, x: Expr) -> Expr:
        raise NotImplementedError

    def narrowed(self, x: Expr, dtype: str) -> Expr:
        raise NotImplementedError

    def visit_Binary(self, e: Binary):
        a, b = self.visit(e.a), self.visit(e.b)
        if self.narrow(e.dtype):
            return self.narrowed(Binary(self.wide(e.dtype), e.op, self.widen(a),
                                        self.widen(b)), e.dtype)
        return e if a is e.a and b is e.b else Binary(e.dtype, e.op, a, b)

    def visit_Cmp(self, e: Cmp):
        a, b = self.visit(e.a), self.visit(e.b)
        if self.narrow(a.dtype):
            return Cmp(e.dtype, e.op, self.widen(a), self.widen(b))
        return e if a is e.a and b is e.b else Cmp(e.dtype, e.op, a, b)

    def visit_Call(self, e: Call):
        args = tuple(self.visit(a) for a in e.args)
        if not self.narrow(e.dtype) and not any(self.narrow(a.dtype) for a in args):
            return e if all(x is y for x, y in zip(args, e.args)) else Call(e.dtype, e.name,
                                                                             args)
        up = tuple(self.widen(a) if self.narrow(a.dtype) else a for a in args)
        if self.narrow(e.dtype):
            return self.narrowed(Call(self.wide(e.dtype), e.name, up), e.dtype)
        return Call(e.dtype, e.name, up)


class WidenStmts(StmtMutator):
    """Every expression of the statements rewritten by ``exprs`` (one
    :class:`WidenArithmetic`, so that nodes shared between statements are rewritten once),
    and the value of each store passed through :meth:`stored`."""

    def __init__(self, exprs: WidenArithmetic):
        self.exprs = exprs

    def visit_expr(self, e: Expr) -> Expr:
        return self.exprs.visit(e)

    def stored(self, value: Expr, dtype: str) -> Expr:
        """``value`` (rewritten) as stored into a buffer of ``dtype``; ``value`` itself when
        it needs no conversion."""
        raise NotImplementedError

    def visit_Store(self, s: Store):
        out = self.generic_visit(s)
        v = self.stored(out.value, out.buffer.dtype)
        return out if v is out.value else Store(out.buffer, out.indices, v)
