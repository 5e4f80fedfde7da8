"""Scalar math functions (``te.exp``, ``te.sqrt``, ``te.power`` ...) and integer division
helpers (``te.floordiv`` ...): each builds one ``Call``/``Binary`` node.

Float functions take a float expression (an int argument raises ``TypeError``: cast it
first) and return the same dtype. ``round`` rounds half to even, as ``numpy.round``.
Tensor intrinsics (whole MMA-style instructions that ``tensorize`` maps a loop nest onto)
are a different thing: a backend lists the ones it offers in its ``DeviceLimits``.
"""

from __future__ import annotations

from polytile.errors import DefinitionTypeError

from . import dtype as dt
from .expr import Call, Expr, binary, cast, convert

FLOAT_UNARY = ("exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "sigmoid",
               "erf", "sin", "cos", "floor", "ceil", "round", "trunc", "tan", "asin", "acos",
               "atan", "sinh", "cosh", "log1p", "expm1")


def _float_arg(x, who: str) -> Expr:
    e = convert(x, "float32")
    if not dt.is_float(e.dtype):
        raise DefinitionTypeError(
            f"te.{who}: argument {e} has dtype {e.dtype}; expected a float "
            f"(use .astype('float32'))")
    return e


def _unary(name: str):
    def fn(x) -> Expr:
        e = _float_arg(x, name)
        return Call(e.dtype, name, (e,))

    fn.__name__ = name
    fn.__doc__ = f"Elementwise ``{name}`` of a float expression (same dtype)."
    return fn


exp = _unary("exp")
exp2 = _unary("exp2")
log = _unary("log")
log2 = _unary("log2")
log10 = _unary("log10")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
erf = _unary("erf")
sin = _unary("sin")
cos = _unary("cos")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")
trunc = _unary("trunc")
tan = _unary("tan")
asin = _unary("asin")
acos = _unary("acos")
atan = _unary("atan")
sinh = _unary("sinh")
cosh = _unary("cosh")
log1p = _unary("log1p")
expm1 = _unary("expm1")
nearbyint = round  # rounds half to even in the default rounding mode, as round does


def _fast(name: str, bound: str):
    base = name[len("fast_"):]

    def fn(x) -> Expr:
        e = _float_arg(x, name)
        return Call(e.dtype, name, (e,))

    fn.__name__ = name
    fn.__doc__ = (f"A faster, less accurate ``{base}`` (TVM's ``te.{name}``): {bound} for "
                  f"float32 and float16; float64 uses the accurate ``{base}``. NaN and "
                  "infinities map as numpy's. On CPU see :mod:`polytile.targets.llvm.vecmath`; "
                  "CUDA uses its fast intrinsic where one exists. A ``-fast-math`` target "
                  f"lowers ``te.{base}`` to this too.")
    return fn


fast_exp = _fast("fast_exp", "at most 3 ulp from the exact result for x in [-87.3, 88.37], "
                 "0 below x = -87.68 and inf from x = 88.376 on")
fast_tanh = _fast("fast_tanh", "at most 6 ulp, an odd rational function without exp")
fast_erf = _fast("fast_erf", "at most 7 ulp (8 without FMA), an odd rational function "
                 "without exp")


def abs(x) -> Expr:
    """Absolute value of an int or float expression (ints wrap at the minimum)."""
    e = convert(x)
    if dt.is_unsigned(e.dtype) or e.dtype == "bool":
        return e
    return Call(e.dtype, "abs", (e,))


def _int_arg(x, who: str, widths: tuple) -> Expr:
    e = convert(x, "int32")
    if not dt.is_int(e.dtype) or e.dtype == "bool" or dt.bits(e.dtype) not in widths:
        raise DefinitionTypeError(
            f"te.{who}: argument {e} has dtype {e.dtype}; expected an integer of "
            f"{'/'.join(map(str, widths))} bits (use .astype('int32'))")
    return e


def popcount(x) -> Expr:
    """The number of set bits of an integer expression, of its dtype (TVM's
    ``tir.popcount``): the bits of the two's complement value, so ``popcount(int8(-1))`` is
    8. LLVM ``ctpop``; CUDA/HIP ``__popc``/``__popcll``.

    Raises
    ------
    DefinitionTypeError
        For a float, bool or 4-bit argument.
    """
    e = _int_arg(x, "popcount", (8, 16, 32, 64))
    return Call(e.dtype, "popcount", (e,))


def clz(x) -> Expr:
    """The number of leading zero bits of a 32- or 64-bit integer, as ``int32`` (TVM's
    ``tir.clz``). ``clz(0)`` is the bit width (32 or 64), where TVM leaves it undefined;
    a negative signed value has none. LLVM ``ctlz``; CUDA/HIP ``__clz``/``__clzll``.

    Raises
    ------
    DefinitionTypeError
        For a float, bool or integer of another width (TVM takes 32 and 64 bits only).
    """
    e = _int_arg(x, "clz", (32, 64))
    # the count has the operand's dtype inside (one intrinsic per width), int32 outside
    c = Call(e.dtype, "clz", (e,))
    return c if e.dtype == "int32" else cast(c, "int32")


def isnan(x) -> Expr:
    """True where a float expression is NaN."""
    e = _float_arg(x, "isnan")
    return Call("bool", "isnan", (e,))


def isinf(x) -> Expr:
    """True where a float expression is +inf or -inf."""
    e = _float_arg(x, "isinf")
    return Call("bool", "isinf", (e,))


def isfinite(x) -> Expr:
    """True where a float expression is neither infinite nor NaN."""
    e = _float_arg(x, "isfinite")
    return Call("bool", "isfinite", (e,))


def _float_pair(a, b, who: str) -> tuple[Expr, Expr]:
    ea = convert(a, None) if hasattr(a, "_expr") else None
    eb = convert(b, None) if hasattr(b, "_expr") else None
    if ea is None and eb is None:
        raise DefinitionTypeError(f"te.{who}: at least one operand must be an expression")
    ea = ea if ea is not None else convert(a, eb.dtype)
    eb = eb if eb is not None else convert(b, ea.dtype)
    d = dt.promote(ea.dtype, eb.dtype)
    if not dt.is_float(d):
        raise DefinitionTypeError(
            f"te.{who}: operands have dtype {d}; expected floats "
            f"(use .astype('float32'))")
    return cast(ea, d), cast(eb, d)


def power(a, b) -> Expr:
    """``a ** b`` for float expressions."""
    ea, eb = _float_pair(a, b, "power")
    return Call(ea.dtype, "pow", (ea, eb))


pow = power


def atan2(a, b) -> Expr:
    """The angle of the point ``(b, a)``: ``atan(a / b)`` in the right quadrant (floats)."""
    ea, eb = _float_pair(a, b, "atan2")
    return Call(ea.dtype, "atan2", (ea, eb))


def hypot(a, b) -> Expr:
    """``sqrt(a*a + b*b)`` without undue overflow (floats)."""
    ea, eb = _float_pair(a, b, "hypot")
    return Call(ea.dtype, "hypot", (ea, eb))


def copysign(a, b) -> Expr:
    """The magnitude of ``a`` with the sign of ``b`` (floats)."""
    ea, eb = _float_pair(a, b, "copysign")
    return Call(ea.dtype, "copysign", (ea, eb))


def fmod(a, b) -> Expr:
    """C ``fmod``: remainder with the sign of ``a`` (floats)."""
    ea, eb = _float_pair(a, b, "fmod")
    return Call(ea.dtype, "fmod", (ea, eb))


def floordiv(a, b) -> Expr:
    """Division rounding toward negative infinity (ints); ``floor(a / b)`` for floats."""
    return binary("floordiv", a, b)


def floormod(a, b) -> Expr:
    """``a - floordiv(a, b) * b``: the remainder takes the sign of ``b``."""
    return binary("floormod", a, b)


def truncdiv(a, b) -> Expr:
    """Division rounding toward zero (C's ``/`` on ints)."""
    return binary("truncdiv", a, b)


def truncmod(a, b) -> Expr:
    """C's ``%``: the remainder takes the sign of ``a``."""
    return binary("truncmod", a, b)
