"""The algebra of a combiner: which reorderings of a reduction keep its value.

A reduction ``acc = f(acc, v)`` run in one sequential order is defined for any ``f``.
Schedules that change the order need laws of ``f`` (with ``e`` its identity):

* reordering the updates of one element (reorder of reduction loops): the fold must not
  depend on the order of its values, ``f(f(a, x), y) == f(f(a, y), x)``;
* splitting the reduction into partial reductions combined by ``f`` (``rfactor``,
  cross-thread reductions): ``f`` commutative and associative, and ``e`` an identity,
  ``f(e, x) == x``.

``te.sum``, ``te.max`` and ``te.min`` satisfy all of them. For a user ``te.comm_reducer`` the
laws are checked by evaluating ``f`` exactly (integers, fractions; floats only where a math
intrinsic forces them, compared to 1e-9 relative) on sample values of the dtype. This
proves nothing in general, but it refuses the usual mistakes (``x + y * y``, ``x - y``,
``2 * x + y``, a wrong identity) and accepts every lawful combiner. Floating-point
rounding is ignored, as every compiler that reassociates reductions does.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

from . import dtype as dt
from .expr import And, Binary, Call, Cast, Cmp, CommReducer, Const, Expr, Not, Or, Select, Var


class _Unknown(Exception):
    """The expression cannot be evaluated here (an unsupported node or a domain error)."""


_SAMPLES_SIGNED = (-7, -2, -1, 0, 1, 3, 12)
_SAMPLES_UNSIGNED = (0, 1, 2, 3, 7, 12)
_SAMPLES_FLOAT = (Fraction(-7), Fraction(-2), Fraction(-1, 2), Fraction(0), Fraction(1),
                  Fraction(3, 4), Fraction(12))

_MATH = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "tanh": math.tanh,
         "exp2": lambda x: 2.0 ** x, "log2": math.log2, "log10": math.log10,
         "abs": abs, "floor": math.floor, "ceil": math.ceil, "log1p": math.log1p,
         "expm1": math.expm1, "hypot": math.hypot, "pow": math.pow,
         "sigmoid": lambda x: 1 / (1 + math.exp(-x))}


def _samples(dtype: str) -> tuple:
    if dt.is_bool(dtype):
        return (0, 1)
    if dt.is_unsigned(dtype):
        return _SAMPLES_UNSIGNED
    if dt.is_int(dtype):
        return _SAMPLES_SIGNED
    return _SAMPLES_FLOAT


def _num(value, dtype: str):
    """``value`` as a number of ``dtype``: ints exact, floats exact (``Fraction``) unless
    already inexact (a Python ``float`` from a math intrinsic, or an infinity)."""
    if dt.is_bool(dtype):
        return int(bool(value))
    if dt.is_int(dtype):
        if isinstance(value, float) and not math.isfinite(value):
            raise _Unknown("non-finite integer")
        return math.trunc(value)
    if isinstance(value, float):
        return value
    return Fraction(value)


def _eval(e: Expr, env: dict):
    """Exact value of ``e`` (ints without wraparound, rationals for floats)."""
    t = type(e)
    if t is Var:
        return env[e]
    if t is Const:
        v = e.value
        exact = not isinstance(v, float) or math.isfinite(v)
        return _num(Fraction(v) if exact and dt.is_float(e.dtype) else v, e.dtype)
    if t is Cast:
        return _num(_eval(e.value, env), e.dtype)
    if t is Binary:
        return _num(_binary(e.op, _eval(e.a, env), _eval(e.b, env), e.dtype), e.dtype)
    if t is Cmp:
        a, b = _eval(e.a, env), _eval(e.b, env)
        return int({"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b,
                    "ge": a >= b}[e.op])
    if t is And:
        return int(bool(_eval(e.a, env)) and bool(_eval(e.b, env)))
    if t is Or:
        return int(bool(_eval(e.a, env)) or bool(_eval(e.b, env)))
    if t is Not:
        return int(not _eval(e.a, env))
    if t is Select:
        return _eval(e.true_value if _eval(e.cond, env) else e.false_value, env)
    if t is Call and e.name in ("abs", "floor", "ceil") and len(e.args) == 1:
        v = _eval(e.args[0], env)
        return _num({"abs": abs, "floor": math.floor, "ceil": math.ceil}[e.name](v), e.dtype)
    if t is Call and e.name in _MATH:
        try:
            r = _MATH[e.name](*[float(_eval(a, env)) for a in e.args])
        except (ValueError, OverflowError, ZeroDivisionError) as ex:
            raise _Unknown(str(ex)) from None
        return _num(r, e.dtype)
    raise _Unknown(f"cannot evaluate {type(e).__name__}")


def _binary(op: str, a, b, dtype: str):
    if op in ("add", "sub", "mul", "min", "max"):
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                "min": lambda: min(a, b), "max": lambda: max(a, b)}[op]()
    if b == 0 and op not in ("bitand", "bitor", "bitxor", "shl", "shr"):
        raise _Unknown("division by zero")
    if op == "div":
        return a / b
    if op == "floordiv":
        return math.floor(a / b) if dt.is_float(dtype) else a // b
    if op == "floormod":
        return a - math.floor(a / b) * b
    if op == "truncdiv":
        return math.trunc(Fraction(a) / b)
    if op == "truncmod":
        return a - math.trunc(Fraction(a) / b) * b
    if op in ("shl", "shr") and (b < 0 or b > 64):
        raise _Unknown("shift out of range")
    return {"bitand": lambda: a & b, "bitor": lambda: a | b, "bitxor": lambda: a ^ b,
            "shl": lambda: a << b, "shr": lambda: a >> b}[op]()


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return fa == fb or math.isclose(fa, fb, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _fmt(v) -> str:
    if isinstance(v, Fraction):
        return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"
    return repr(v)


class _Combiner:
    def __init__(self, comb: CommReducer):
        self.comb = comb
        self.xs = _samples(comb.result.dtype)

    def f(self, x, y):
        return _eval(self.comb.result, {self.comb.lhs: x, self.comb.rhs: y})

    def first_violation(self, arity: int, lhs, rhs, text: str) -> str | None:
        """The first sample tuple where ``lhs(*v) != rhs(*v)``, described with ``text``."""
        for v in itertools.product(self.xs, repeat=arity):
            try:
                a, b = lhs(*v), rhs(*v)
            except _Unknown:
                continue
            if not _same(a, b):
                names = dict(zip("xyz", v)) if arity <= 3 else {}
                at = ", ".join(f"{k}={_fmt(x)}" for k, x in names.items())
                return f"{text} fails at {at} ({_fmt(a)} != {_fmt(b)})"
        return None


_LAWFUL_OPS = ("add", "mul", "min", "max", "bitand", "bitor", "bitxor")


def _is_builtin_shape(comb: CommReducer) -> bool:
    """``f(x, y)`` is ``x op y`` for a commutative, associative ``op``: only the identity
    remains to check."""
    r = comb.result
    return (isinstance(r, Binary) and r.op in _LAWFUL_OPS
            and {id(r.a), id(r.b)} == {id(comb.lhs), id(comb.rhs)})


def _unevaluable(comb: CommReducer) -> str | None:
    c = _Combiner(comb)
    try:
        c.f(c.xs[0], c.xs[-1])
        _eval(comb.identity, {})
    except _Unknown as ex:
        return f"its algebra cannot be checked ({ex})"
    except KeyError as ex:
        return f"it uses the free variable {ex.args[0]!r}"
    return None


@functools.lru_cache(maxsize=256)
def rfactor_violation(comb: CommReducer) -> str | None:
    """Why ``comb`` cannot be split into partial reductions, or ``None`` when it is
    commutative, associative and ``comb.identity`` is its identity (on sample values)."""
    bad = _unevaluable(comb)
    if bad:
        return bad
    c = _Combiner(comb)
    e = _eval(comb.identity, {})
    identity = c.first_violation(1, lambda x: c.f(e, x), lambda x: x,
                                 f"the identity law f({_fmt(e)}, x) == x")
    if _is_builtin_shape(comb):
        return identity
    return (c.first_violation(2, c.f, lambda x, y: c.f(y, x), "commutativity f(x, y) == f(y, x)")
            or c.first_violation(3, lambda x, y, z: c.f(c.f(x, y), z),
                                 lambda x, y, z: c.f(x, c.f(y, z)),
                                 "associativity f(f(x, y), z) == f(x, f(y, z))")
            or identity)


@functools.lru_cache(maxsize=256)
def reorder_violation(comb: CommReducer) -> str | None:
    """Why the fold ``acc = comb(acc, v)`` depends on the order of its values, or ``None``
    when ``f(f(a, x), y) == f(f(a, y), x)`` on sample values (any commutative and
    associative combiner, and also folds such as ``acc + v * v``)."""
    if _is_builtin_shape(comb):
        return None
    bad = _unevaluable(comb)
    if bad:
        return bad
    c = _Combiner(comb)
    return c.first_violation(3, lambda x, y, z: c.f(c.f(x, y), z),
                             lambda x, y, z: c.f(c.f(x, z), y),
                             "order independence f(f(x, y), z) == f(f(x, z), y)")
