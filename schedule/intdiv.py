"""Floor division and modulo rewritten into C-style (truncating) operations.

The one shared lowering of ``floordiv``/``floormod`` (see DESIGN.md §3 and isl NOTES §2.6):
the LLVM backend and the C printer both call these functions and emit only ``truncdiv``/
``truncmod`` (``sdiv``/``srem``, C's ``/`` and ``%``), comparisons and selects.

Identities used, with ``q = truncdiv(a, b)`` and ``r = truncmod(a, b)`` (so ``a = q*b + r``
and ``r`` has the sign of ``a``):

* the true quotient is below ``q`` exactly when the remainder is non-zero and its sign
  differs from the sign of ``b``: ``floordiv = q - ((r != 0) & ((r < 0) != (b < 0)))``,
  and then ``floormod = r + b`` (else ``r``);
* for a constant ``b > 0`` this is ``q - (r < 0)`` and ``select(r < 0, r + b, r)``;
* for a constant ``b < 0`` this is ``q - (r > 0)`` and ``select(r > 0, r + b, r)``;
* unsigned operands: floor and truncation agree, so ``truncdiv``/``truncmod`` as is;
* floats: ``floordiv = floor(a / b)`` (it can differ from numpy's carefully rounded
  ``floor_divide`` near exact multiples), and ``floormod`` from the exact ``r = fmod(a, b)``
  adjusted like the ints, ``select(adjust, r + b, r)``, as CPython's float ``%`` does
  (``a - floor(a / b) * b`` would cancel catastrophically in ``float16``).

Unlike isl's ``floord`` macro, nothing is negated, so ``INT_MIN`` is handled without
overflow. ``truncdiv(INT_MIN, -1)`` wraps to ``INT_MIN`` and ``truncmod(INT_MIN, -1)`` is 0,
as in numpy: every code generator guards a divisor that may be -1 (C and LLVM leave it
undefined, and x86's ``idiv`` traps), so the floor forms built here wrap too.

Every division produced also appears, as the *same node*, in the condition of the
``Select`` that uses it, so a code generator may evaluate both operands of those selects
eagerly: the condition already performed every division they contain.
"""

from __future__ import annotations

from polytile.te import dtype as dt
from polytile.te.expr import And, Binary, Call, Cast, Cmp, Const, Expr, Select


def _check(a: Expr, b: Expr, who: str) -> str:
    if a.dtype != b.dtype:
        raise TypeError(f"{who}: operands have dtypes {a.dtype} and {b.dtype}; "
                        f"expected one common dtype")
    if a.dtype == "bool":
        raise TypeError(f"{who}: operands are bool; expected numbers")
    return a.dtype


def _parts(a: Expr, b: Expr, t: str):
    """``(q, r, adjust)``: truncated quotient and remainder, and the bool condition under
    which the floor result differs from the truncated one."""
    q = Binary(t, "truncdiv", a, b)
    r = Binary(t, "truncmod", a, b)
    zero = Const(t, 0)
    if isinstance(b, Const) and b.value > 0:
        adjust = Cmp("bool", "lt", r, zero)
    elif isinstance(b, Const) and b.value < 0:
        adjust = Cmp("bool", "gt", r, zero)
    else:
        adjust = And("bool", Cmp("bool", "ne", r, zero),
                     Cmp("bool", "ne", Cmp("bool", "lt", r, zero), Cmp("bool", "lt", b, zero)))
    return q, r, adjust


def floordiv_expr(a: Expr, b: Expr) -> Expr:
    """``a // b`` (rounding toward negative infinity) without ``floordiv`` nodes.

    Parameters
    ----------
    a, b : Expr
        Dividend and divisor of one common int, uint or float dtype.

    Returns
    -------
    Expr
        An expression built from ``truncdiv``, ``truncmod``, comparisons and a bool→int
        cast (ints), or ``floor(a / b)`` (floats).

    Raises
    ------
    TypeError
        If the dtypes differ or are ``bool``.
    """
    t = _check(a, b, "floordiv_expr")
    if dt.is_float(t):
        return Call(t, "floor", (Binary(t, "div", a, b),))
    if dt.is_unsigned(t):
        return Binary(t, "truncdiv", a, b)
    if isinstance(b, Const) and b.value == 1:
        return a
    q, _, adjust = _parts(a, b, t)
    return Binary(t, "sub", q, Cast(t, adjust))


def floormod_expr(a: Expr, b: Expr) -> Expr:
    """``a % b`` with the sign of ``b`` (Python's ``%``) without ``floormod`` nodes.

    Parameters
    ----------
    a, b : Expr
        Dividend and divisor of one common int, uint or float dtype.

    Returns
    -------
    Expr
        ``select(adjust, r + b, r)`` with ``r = truncmod(a, b)`` (ints) or
        ``r = fmod(a, b)`` (floats).

    Raises
    ------
    TypeError
        If the dtypes differ or are ``bool``.
    """
    t = _check(a, b, "floormod_expr")
    if dt.is_float(t):
        r = Call(t, "fmod", (a, b))
        zero = Const(t, 0.0)
        adjust = And("bool", Cmp("bool", "ne", r, zero),
                     Cmp("bool", "ne", Cmp("bool", "lt", r, zero), Cmp("bool", "lt", b, zero)))
        return Select(t, adjust, Binary(t, "add", r, b), r)
    if dt.is_unsigned(t):
        return Binary(t, "truncmod", a, b)
    if isinstance(b, Const) and b.value == 1:
        return Const(t, 0)
    _, r, adjust = _parts(a, b, t)
    return Select(t, adjust, Binary(t, "add", r, b), r)
