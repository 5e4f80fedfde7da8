"""Every isl idiom polytile uses, in one place.

* the isl context and its options (set once per process; isl contexts are not thread-safe,
  so each process lowers with its own);
* translation of quasi-affine tensor expressions into isl syntax (``affine_str``,
  ``condition_str``); anything else is reported as non-affine (``None``);
* translation of isl AST expressions into loop-IR expressions (``ast_expr``);
* small helpers: boxes, statement maps, sampled points as text.

Statement dimension names are generated (``p<k>`` for attach-prefix coordinates, ``d<k>``
for the stage's own axes), so user names never reach isl's parser.
Reference: isl manual (Verdoolaege, ICMS 2010); islpy 2026.2.2.
"""

from __future__ import annotations

import contextlib

import islpy as isl

from polytile.errors import InternalError
from polytile.te import dtype as dt
from polytile.te.expr import (And, Binary, Cast, Cmp, Const, Expr, Not, Or, Select, Var,
                              logical_and, logical_or)
from polytile.te.tensor import Tensor

CTX = isl.DEFAULT_CONTEXT
CTX.set_ast_build_atomic_upper_bound(1)
CTX.set_ast_build_detect_min_max(1)
CTX.set_ast_build_exploit_nested_bounds(1)


class OperationLimit(Exception):
    """An isl computation under :func:`operation_limit` ran out of operations (or failed
    otherwise: a parse interrupted by the limit reports a syntax error)."""


@contextlib.contextmanager
def operation_limit(ops: int):
    """Run the isl computations of the ``with`` body with at most ``ops`` elementary isl
    operations (``isl_ctx_set_max_operations``; about a million per second); raise
    :class:`OperationLimit` when they need more, or when isl fails in them. For optional
    work only (a better loop nest, never a correct one): sets with many quasi-affine pieces
    can make ``subtract`` and ``coalesce`` exponential."""
    CTX.set_max_operations(ops)
    CTX.reset_operations()
    try:
        yield
    except isl.Error as exc:
        raise OperationLimit(str(exc)) from None
    finally:
        CTX.set_max_operations(0)
        CTX.reset_operations()


def coalesce(obj):
    """``obj.coalesce()`` (the same set or map with fewer pieces), or ``obj`` itself where
    isl's coalescing fails internally ("original tableau does not correspond to original
    basic map", seen on footprints with many quasi-affine pieces): coalescing only
    simplifies, so skipping it is exact."""
    try:
        return obj.coalesce()
    except isl.Error:
        try:
            return obj.detect_equalities().coalesce()
        except isl.Error:
            return obj


def box_str(names: list[str], ranges: list[tuple[int, int]]) -> str:
    """Constraints ``lo <= name < lo + extent`` joined by ``and`` (``"true"`` if none)."""
    parts = [f"{lo} <= {n} < {lo + ext}" for n, (lo, ext) in zip(names, ranges)]
    return " and ".join(parts) if parts else "1 = 1"


def tuple_str(name: str, dims: list[str]) -> str:
    return f"{name}[{', '.join(dims)}]"


def union_set(s: isl.Set | isl.UnionSet) -> isl.UnionSet:
    return s if isinstance(s, isl.UnionSet) else isl.UnionSet.from_set(s)


def name_range(pma: isl.PwMultiAff, name: str) -> isl.PwMultiAff:
    """``pma`` with its range tuple named ``name``.

    Composes with a parsed identity instead of ``set_tuple_id(isl.Id(name))``: an islpy
    ``Id`` carries a Python payload and never equals an id parsed from a string.
    """
    n = pma.dim(isl.dim_type.out)
    names = ", ".join(f"v{k}" for k in range(n))
    return isl.PwMultiAff(f"{{ [{names}] -> {name}[{names}] }}").pullback_pw_multi_aff(
        pma.reset_tuple_id(isl.dim_type.out))


def tensor_box(t: Tensor, tname: str) -> isl.Set:
    """``{ tname[x...] : 0 <= x_q < shape_q }``: the elements of tensor ``t``."""
    dims = [f"x{k}" for k in range(t.ndim)]
    return isl.Set(f"{{ {tuple_str(tname, dims)} : "
                   f"{box_str(dims, [(0, s) for s in t.shape])} }}")


# te expressions -> isl syntax --------------------------------------------------------------


def _const_int(e: Expr) -> int | None:
    if isinstance(e, Const) and not isinstance(e.value, (bool, float)):
        return int(e.value)
    if isinstance(e, Cast) and dt.is_int(e.dtype):
        return _const_int(e.value)
    return None


def affine_str(e: Expr, names: dict) -> str | None:
    """isl syntax of ``e`` if it is quasi-affine in the variables of ``names``
    (``{Var: isl name}``), else ``None``.

    Quasi-affine: integer constants, the variables, ``+``, ``-``, multiplication by a
    constant, floor division and modulo by a positive constant, ``min``/``max``.
    """
    if isinstance(e, Const):
        return str(int(e.value)) if _const_int(e) is not None else None
    if isinstance(e, Var):
        return names.get(e)
    if isinstance(e, Cast):
        if not dt.is_int(e.dtype) or not dt.is_int(e.value.dtype):
            return None
        return affine_str(e.value, names)
    if isinstance(e, Binary):
        if not dt.is_int(e.dtype):
            return None
        a, b = affine_str(e.a, names), affine_str(e.b, names)
        if a is None or b is None:
            return None
        if e.op == "add":
            return f"({a} + {b})"
        if e.op == "sub":
            return f"({a} - {b})"
        if e.op == "mul":
            ca, cb = _const_int(e.a), _const_int(e.b)
            if ca is not None:
                return f"({ca} * {b})"
            if cb is not None:
                return f"({cb} * {a})"
            return None
        if e.op in ("floordiv", "floormod"):
            c = _const_int(e.b)
            if c is None or c <= 0:
                return None
            return f"floor(({a})/{c})" if e.op == "floordiv" else f"(({a}) mod {c})"
        if e.op in ("min", "max"):
            return f"{e.op}({a}, {b})"
    return None


_NEG = {"eq": "ne", "ne": "eq", "lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}
_ISL_CMP = {"eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def condition_str(e: Expr, names: dict, negate: bool = False,
                  memo: dict | None = None) -> str | None:
    """isl syntax of a boolean condition built from affine comparisons, ``and``, ``or``,
    ``not`` (``None`` when any part is not affine). ``memo`` (a dict kept by the caller)
    remembers the text of ``and``/``or`` nodes, for callers that ask about every prefix
    of a long chain."""
    if isinstance(e, Const) and e.dtype == "bool":
        return "1 = 1" if bool(e.value) != negate else "1 = 0"
    if isinstance(e, Not):
        return condition_str(e.a, names, not negate, memo)
    if isinstance(e, (And, Or)):
        key = (id(e), negate)
        if memo is not None and key in memo:
            return memo[key]
        a = condition_str(e.a, names, negate, memo)
        b = None if a is None else condition_str(e.b, names, negate, memo)
        conj = isinstance(e, And) != negate
        out = None if b is None else f"({a} {'and' if conj else 'or'} {b})"
        if memo is not None:
            memo[key] = out
        return out
    if isinstance(e, Cmp):
        if not dt.is_int(e.a.dtype):
            return None
        a, b = affine_str(e.a, names), affine_str(e.b, names)
        if a is None or b is None:
            return None
        op = _NEG[e.op] if negate else e.op
        return f"({a} {_ISL_CMP[op]} {b})"
    return None


# isl AST expressions -> loop IR -----------------------------------------------------------

_T = isl.ast_expr_op_type


def ast_expr(e: isl.AstExpr, var_of) -> Expr:
    """Convert an isl AST expression into a loop-IR ``int64`` (or ``bool``) expression.

    ``var_of(name)`` returns the :class:`Var` for an isl identifier. Division ops keep
    isl's meanings (isl manual, "AST expressions"): ``fdiv_q`` floors, ``pdiv_q``/``pdiv_r``
    have a non-negative dividend, ``zdiv_r`` is only compared with zero, ``div`` is exact.
    """
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return Const("int64", e.get_val().to_python())
    if t == isl.ast_expr_type.id:
        return var_of(e.get_id().get_name())
    op = e.get_op_type()
    args = [ast_expr(e.get_op_arg(k), var_of) for k in range(e.get_op_n_arg())]
    i64 = "int64"
    if op in _BIN:
        return Binary(i64, _BIN[op], args[0], args[1])
    if op == _T.minus:
        return Binary(i64, "sub", Const(i64, 0), args[0])
    if op in (_T.min, _T.max):
        name = "min" if op == _T.min else "max"
        out = args[-1]
        for a in reversed(args[:-1]):
            out = Binary(i64, name, a, out)
        return out
    if op in _CMP:
        return Cmp("bool", _CMP[op], args[0], args[1])
    if op in (_T.and_, _T.and_then, _T.or_, _T.or_else):
        # isl may write a trivially true or false operand as the integer 1 or 0
        args = [a if a.dtype == "bool" else Cmp("bool", "ne", a, Const(a.dtype, 0))
                for a in args]
        return logical_and(*args) if op in (_T.and_, _T.and_then) else logical_or(*args)
    if op in (_T.cond, _T.select):
        return Select(args[1].dtype, args[0], args[1], args[2])
    raise InternalError(f"isl AST expression {e.to_C_str()} uses an unsupported operation {op}")


_BIN = {_T.add: "add", _T.sub: "sub", _T.mul: "mul", _T.fdiv_q: "floordiv",
        _T.pdiv_q: "truncdiv", _T.pdiv_r: "truncmod", _T.zdiv_r: "truncmod", _T.div: "truncdiv"}
_CMP = {_T.eq: "eq", _T.le: "le", _T.lt: "lt", _T.ge: "ge", _T.gt: "gt"}


def point_coords(p: isl.Point, n: int) -> list[int]:
    """The first ``n`` set coordinates of a point as Python ints."""
    return [p.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(n)]
