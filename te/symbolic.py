"""Symbolic sizes: extents that are expressions of ``te.var``/``te.size_var`` parameters.

A shape dimension, a ``reduce_axis`` bound or a loop extent is either a Python ``int`` or
an integer :class:`~polytile.te.expr.Expr` affine in free variables (``n``, ``n + 1``,
``2*n``). The helpers below do arithmetic on both, folding ints and keeping expressions
otherwise, so that the schedule layer computes extents once for either kind. During
lowering the free variables become isl parameters (:mod:`polytile.schedule.isl_util`);
a built function reads their values off the shapes of its array arguments.

``te.size_var`` declares a variable known to be ``>= 0`` (TVM's ``SizeVar``); a ``te.var``
used as (part of) a shape dimension is assumed to make that dimension ``>= 0``.
"""

from __future__ import annotations

from .expr import Binary, Const, Expr, ExprOp, Var, binary, convert
from .visitor import collect

#: ``te.size_var`` variables (by id), known to be non-negative.
_SIZE_VARS: dict[int, Var] = {}


def mark_size_var(v: Var) -> Var:
    """Record ``v`` as a size variable (``>= 0``) and return it."""
    _SIZE_VARS[id(v)] = v
    return v


def is_size_var(v: Var) -> bool:
    """Whether ``v`` was made by ``te.size_var``."""
    return id(v) in _SIZE_VARS


#: derived sizes: a shape dimension not affine in the sizes (TVM's ``n // x``) stands for
#: a new size variable of its own; (printed form, ids of its variables) -> (Var, Expr)
_DERIVED: dict[tuple, tuple] = {}
_DERIVED_OF: dict[int, Expr] = {}


def derived_size(e: Expr) -> Var:
    """The size variable standing for the non-affine dimension ``e`` (``n // x``, ``n *
    m``): one per distinct expression, so that two tensors of shape ``(n // x, ...)`` share
    it. Lowering reads its value off an array argument of that dimension, like any size,
    and checks at each call that it equals ``e`` (:func:`derived_of`); isl sees it as a
    parameter of its own."""
    key = (str(e), tuple(id(v) for v in params_of(e)))
    hit = _DERIVED.get(key)
    if hit is not None:
        return hit[0]
    import re

    text = str(e)
    for a, b in (("//", " div "), ("%", " mod "), ("*", " mul "), ("+", " plus "),
                 ("-", " minus ")):
        text = text.replace(a, b)
    v = mark_size_var(Var(e.dtype, re.sub(r"\W+", "_", text).strip("_") or "size"))
    _DERIVED[key] = (v, e)
    _DERIVED_OF[id(v)] = e
    return v


#: the operations a derived size may use (those a call evaluates to check it)
DERIVED_OPS = ("add", "sub", "mul", "floordiv", "floormod", "min", "max")


def derivable(e: Expr) -> bool:
    """Whether ``e`` can stand for a derived size: an integer expression of variables and
    constants through :data:`DERIVED_OPS` and casts (no compute axis)."""
    from .expr import Cast

    if isinstance(e, Var):
        return not e.is_axis
    if isinstance(e, Const):
        return True
    if isinstance(e, Cast):
        return derivable(e.value)
    return isinstance(e, Binary) and e.op in DERIVED_OPS and derivable(e.a) and \
        derivable(e.b)


def derived_of(v: Var) -> Expr | None:
    """The expression a derived size variable stands for (:func:`derived_size`), else
    None."""
    return _DERIVED_OF.get(id(v))


def is_static(x) -> bool:
    """True for a plain integer extent."""
    return not isinstance(x, ExprOp) or (isinstance(x, Const) and isinstance(x.value, int))


def static(x) -> int | None:
    """The integer value of ``x`` when it is static, else ``None``."""
    if isinstance(x, Const):
        return int(x.value)
    if isinstance(x, ExprOp):
        return None
    return int(x)


def as_expr(x) -> Expr:
    """``x`` as an integer expression (an ``int`` becomes an ``int32``/``int64`` constant)."""
    return convert(x) if not isinstance(x, ExprOp) else x._expr()


def params_of(x) -> list[Var]:
    """The free variables of a symbolic extent (``[]`` for an int), in order of appearance."""
    if is_static(x):
        return []
    out: list[Var] = []
    for v in collect(as_expr(x), Var):
        if not v.is_axis and all(v is not w for w in out):
            out.append(v)
    return out


def same(a, b) -> bool:
    """Whether two extents are the same: equal ints, or the same expression (by identity
    or printed form; ``n`` and ``n`` of one ``te.var``)."""
    sa, sb = static(a), static(b)
    if sa is not None or sb is not None:
        return sa == sb
    return a is b or str(as_expr(a)) == str(as_expr(b)) and params_of(a) == params_of(b)


def same_shape(a, b) -> bool:
    """:func:`same` for every dimension of two shapes."""
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def add(a, b):
    """``a + b`` on extents."""
    sa, sb = static(a), static(b)
    if sa is not None and sb is not None:
        return sa + sb
    if sa == 0:
        return b
    if sb == 0:
        return a
    return binary("add", as_expr(a), as_expr(b))


def sub(a, b):
    """``a - b`` on extents."""
    sa, sb = static(a), static(b)
    if sa is not None and sb is not None:
        return sa - sb
    if sb == 0:
        return a
    return binary("sub", as_expr(a), as_expr(b))


def mul(a, b):
    """``a * b`` on extents (at least one of them static to stay affine)."""
    sa, sb = static(a), static(b)
    if sa is not None and sb is not None:
        return sa * sb
    if sa == 1:
        return b
    if sb == 1:
        return a
    return binary("mul", as_expr(a), as_expr(b))


def ceildiv(a, f: int):
    """``ceil(a / f)`` for a positive int ``f``."""
    sa = static(a)
    if sa is not None:
        return -(-sa // f)
    if f == 1:
        return a
    return binary("floordiv", binary("add", as_expr(a), f - 1), f)


def text(x) -> str:
    """How messages show an extent (``n``, ``(n + 1)``, ``32``)."""
    return str(static(x)) if is_static(x) else str(as_expr(x))


def is_affine(e) -> bool:
    """Whether ``e`` is an int or an integer expression affine in free variables (integer
    constants, variables, ``+``, ``-``, multiplication by a constant, floor division and
    modulo by a positive constant): what isl takes as a parameter expression."""
    if is_static(e):
        return True
    from polytile.te import dtype as dt
    from .expr import Cast

    e = as_expr(e)
    if not dt.is_int(e.dtype):
        return False
    if isinstance(e, Var):
        return not e.is_axis
    if isinstance(e, Cast):
        return is_affine(e.value)
    if isinstance(e, Binary):
        if e.op in ("add", "sub", "min", "max"):
            return is_affine(e.a) and is_affine(e.b)
        if e.op == "mul":
            return (is_static(e.a) and is_affine(e.b)) or (is_static(e.b) and is_affine(e.a))
        if e.op in ("floordiv", "floormod"):
            return is_affine(e.a) and static(e.b) is not None and static(e.b) > 0
    return False
