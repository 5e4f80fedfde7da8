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
import re

import islpy as isl

from polytile.errors import InternalError, LoweringError, format_error
from polytile.te import dtype as dt
from polytile.te import symbolic as sym
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
    """Constraints ``lo <= name < lo + extent`` joined by ``and`` (``"true"`` if none);
    ``lo`` and ``extent`` may be symbolic (isl parameters)."""
    parts = [f"{num(lo)} <= {n} < {num(sym.add(lo, ext))}" for n, (lo, ext) in
             zip(names, ranges)]
    return " and ".join(parts) if parts else "1 = 1"


# symbolic sizes: te.var parameters as isl parameters ---------------------------------------
#
# Every free integer variable (``te.var``/``te.size_var``) that reaches isl text gets one
# generated isl name, ``_<k><name>`` (isl's own names never start with ``_``), for the whole
# process; :func:`pfx` declares the ones a text uses as its parameters, so that any set or
# map may mention them, and isl aligns the parameters of the operands of each operation.

_PARAM_NAME: dict[int, str] = {}
_PARAM_VAR: dict[str, Var] = {}
_PARAM_RE = re.compile(r"(?<![\w])_[0-9]+[A-Za-z0-9_]*")
_CONTEXT: list = [None]   # the parameter context of the lowering in progress
# ids of the size parameters of the lowering in progress (None outside a lowering: any
# free integer variable): a scalar argument used only in bodies stays opaque to isl, so a
# read A[i + s] of it is checked at run time instead of being refused for some s
_SIZES: list = [None]


def param_name(v: Var) -> str:
    """The isl name of free variable ``v`` (registered on first use)."""
    name = _PARAM_NAME.get(id(v))
    if name is None:
        clean = re.sub(r"[^A-Za-z0-9]", "", v.name)[:24]
        name = f"_{len(_PARAM_NAME)}{clean}"
        _PARAM_NAME[id(v)] = name
        _PARAM_VAR[name] = v
    return name


def param_var(name: str) -> Var | None:
    """The free variable of isl parameter ``name`` (``None`` for another name)."""
    return _PARAM_VAR.get(name)


def is_param(v) -> bool:
    """Whether ``v`` is an isl parameter when it reaches isl: a free integer variable
    that is a size parameter of the lowering in progress (any one outside a lowering)."""
    if not (isinstance(v, Var) and not v.is_axis and dt.is_int(v.dtype)):
        return False
    return _SIZES[0] is None or id(v) in _SIZES[0]


def pfx(text: str) -> str:
    """``text`` (an isl set or map, ``{ ... }`` or ``[p...] -> { ... }``) with the
    symbolic-size parameters it mentions declared."""
    used = list(dict.fromkeys(_PARAM_RE.findall(text)))
    if not used:
        return text
    if text.lstrip().startswith("["):
        head, rest = text.split("->", 1)
        have = [x.strip() for x in head.strip()[1:-1].split(",") if x.strip()]
        names = have + [u for u in used if u not in have]
        return f"[{', '.join(names)}] ->{rest}"
    return f"[{', '.join(used)}] -> {text}"


def pfx_list(text: str) -> str:
    """``text`` (an isl object without a parameter list, such as a multi union piecewise
    affine ``[{ ... }]``) with the symbolic-size parameters it mentions declared."""
    used = list(dict.fromkeys(_PARAM_RE.findall(text)))
    return f"[{', '.join(used)}] -> {text}" if used else text


def num(x) -> str:
    """isl syntax of an extent: an int, or an affine expression of free variables."""
    v = sym.static(x)
    if v is not None:
        return str(v)
    out = affine_str(sym.as_expr(x), {})
    if out is None:
        raise LoweringError(format_error(
            "lower", f"the symbolic size {x} is not affine in its parameters",
            "sizes such as n, n + 1, 2*n, (n + 31) // 32"))
    return out


def num_or_none(x) -> str | None:
    """:func:`num`, or ``None`` for a size that is not affine."""
    v = sym.static(x)
    return str(v) if v is not None else affine_str(sym.as_expr(x), {})


@contextlib.contextmanager
def parameter_context(ctx: isl.Set | None):
    """Make ``ctx`` (a parameter set: what every symbolic size satisfies) the context of
    the domains built in the ``with`` body (:func:`restrict`)."""
    old, old_sizes = _CONTEXT[0], _SIZES[0]
    _CONTEXT[0] = ctx
    _SIZES[0] = set()
    try:
        yield
    finally:
        _CONTEXT[0], _SIZES[0] = old, old_sizes


def set_context(ctx: isl.Set | None, sizes=()) -> None:
    """Set the parameter context and the size parameters (``Var``) inside a
    :func:`parameter_context` block."""
    _CONTEXT[0] = ctx
    _SIZES[0] = {id(v) for v in sizes}


def context() -> isl.Set | None:
    """The parameter context of the lowering in progress (``None``: no parameters)."""
    return _CONTEXT[0]


def restrict(s):
    """``s`` with its parameters restricted to the current context."""
    ctx = _CONTEXT[0]
    return s if ctx is None else s.intersect_params(ctx)


def pw_aff_expr(pa: isl.PwAff) -> Expr:
    """A loop-IR ``int64`` expression of a piecewise affine function of the parameters
    (built by isl's AST generator within the current context), with floor divisions so
    that it stays quasi-affine (:func:`num`)."""
    ctx = _CONTEXT[0]
    if ctx is None:
        ctx = isl.Set("{ : }")
    build = isl.AstBuild.from_context(ctx.params() if ctx.dim(isl.dim_type.set) else ctx)

    def var_of(name: str):
        v = param_var(name)
        if v is None:
            raise InternalError(f"unknown isl parameter {name}")
        return v if v.dtype == "int64" else Cast("int64", v)

    return ast_expr(build.expr_from_pw_aff(pa), var_of, floor_divs=True)


def pw_aff_upper_expr(pa: isl.PwAff) -> Expr:
    """:func:`pw_aff_expr` of ``pa``, or when isl writes it piecewise (a ``select``), the
    maximum of its pieces: an upper bound, affine, equal to ``pa`` where one piece is
    defined (for buffer sizes and loop boxes that guards or exact domains refine)."""
    e = pw_aff_expr(pa)
    if num_or_none(e) is not None:
        return e
    pieces = [pw_aff_expr(isl.PwAff.from_aff(aff)) for _, aff in pa.get_pieces()]
    out = pieces[0]
    for x in pieces[1:]:
        out = Binary("int64", "max", out, x)
    return out


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
    return PwMultiAff(f"{{ [{names}] -> {name}[{names}] }}").pullback_pw_multi_aff(
        pma.reset_tuple_id(isl.dim_type.out))


def tensor_box(t: Tensor, tname: str) -> isl.Set:
    """``{ tname[x...] : 0 <= x_q < shape_q }``: the elements of tensor ``t``."""
    dims = [f"x{k}" for k in range(t.ndim)]
    return isl.Set(pfx(f"{{ {tuple_str(tname, dims)} : "
                       f"{box_str(dims, [(0, s) for s in t.shape])} }}"))


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
        got = names.get(e)
        return got if got is not None or not is_param(e) else param_name(e)
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


def ast_expr(e: isl.AstExpr, var_of, floor_divs: bool = False) -> Expr:
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
    args = [ast_expr(e.get_op_arg(k), var_of, floor_divs) for k in range(e.get_op_n_arg())]
    i64 = "int64"
    if op in _BIN:
        name = _BIN[op]
        if floor_divs:   # isl's dividend is >= 0 there: floor and C division agree
            name = {"truncdiv": "floordiv", "truncmod": "floormod"}.get(name, name)
        return Binary(i64, name, args[0], args[1])
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


# isl objects parsed from text with their symbolic-size parameters declared (see ``pfx``).
# The phases of one lowering parse many texts more than once (the domain of a statement,
# the same access map of several statements), and the candidates of a tuning run share
# about half of their texts (tensor boxes, domains and accesses of the stages a knob does
# not change); isl objects are values (every operation returns a new one) and a text
# names everything it depends on (its parameters are declared in it), so one parse serves
# them all: ``(class, text) -> object``, kept across lowerings and emptied when it
# reaches :data:`PARSED_LIMIT` entries or by :func:`forget`.
_PARSED: dict = {}
PARSED_LIMIT = 20_000


def _parse(cls, text: str):
    text = pfx(text)
    hit = _PARSED.get((cls, text))
    if hit is None:
        if len(_PARSED) >= PARSED_LIMIT:
            _PARSED.clear()
        hit = _PARSED[cls, text] = cls(text)
    return hit


def forget() -> None:
    """Empty the memo of parsed texts (a build then costs what a build of a schedule
    unlike any earlier one does: ``benchmarks/build_time.py`` measures that)."""
    _PARSED.clear()


def Set(text: str) -> isl.Set:  # noqa: N802 - named after the isl class it builds
    return _parse(isl.Set, text)


def Map(text: str) -> isl.Map:  # noqa: N802
    return _parse(isl.Map, text)


def UnionSet(text: str) -> isl.UnionSet:  # noqa: N802
    return _parse(isl.UnionSet, text)


def UnionMap(text: str) -> isl.UnionMap:  # noqa: N802
    return _parse(isl.UnionMap, text)


def PwMultiAff(text: str) -> isl.PwMultiAff:  # noqa: N802
    return _parse(isl.PwMultiAff, text)
