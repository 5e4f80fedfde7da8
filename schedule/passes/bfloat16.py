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
only at stores; polytile rounds every operation, see :mod:`polytile.te.dtype`). The
rewrite of operations is :mod:`.storage_dtype`'s, shared with the int4 pass.
"""

from __future__ import annotations

from polytile.te.expr import Cast, Const, Expr

from ..loop_ir import LetStmt, Stmt
from .storage_dtype import WidenArithmetic, WidenStmts, uses_dtype

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


def _is_bf16(dtype: str) -> bool:
    return dtype == BF16


class _Exprs(WidenArithmetic):
    """bfloat16 values stay bfloat16; each operation converts its operands (``_up``) and
    rounds its result."""

    def narrow(self, dtype: str) -> bool:
        return _is_bf16(dtype)

    def wide(self, dtype: str) -> str:
        return F32

    def widen(self, x: Expr) -> Expr:
        return _up(x)

    def narrowed(self, x: Expr, dtype: str) -> Expr:
        return Cast(BF16, x)

    def visit_Cast(self, e: Cast):
        v = self.visit(e.value)
        if BF16 in (e.dtype, v.dtype):
            return _to(e.dtype, v)
        return e if v is e.value else Cast(e.dtype, v)


def _converted(value: Expr, dtype: str) -> Expr:
    """``value`` converted to ``dtype`` where one of the two is bfloat16 (a store or a
    ``LetStmt`` binding of another dtype)."""
    if BF16 in (dtype, value.dtype) and value.dtype != dtype:
        return _to(dtype, value)
    return value


class _Stmts(WidenStmts):
    def __init__(self):
        super().__init__(_Exprs())

    def stored(self, value: Expr, dtype: str) -> Expr:
        return _converted(value, dtype)

    def visit_LetStmt(self, s: LetStmt):
        out = self.generic_visit(s)
        v = _converted(out.value, out.var.dtype)
        return out if v is out.value else LetStmt(out.var, v, out.body)


def legalize_bfloat16(s: Stmt) -> Stmt:
    """Rewrite every ``bfloat16`` operation of ``s`` into ``float32`` arithmetic and one
    rounding conversion (see the module docstring). Returns ``s`` itself when it uses no
    ``bfloat16``."""
    if not uses_dtype(s, _is_bf16):
        return s
    return _Stmts().visit(s)
