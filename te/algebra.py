"""The algebra of a combiner: which reorderings of a reduction keep its value.

A reduction ``acc = f(acc, v)`` run in one sequential order is defined for any ``f``.
Schedules that change the order need laws of ``f`` (with ``e`` its identity):

* reordering the updates of one element (reorder of reduction loops): the fold must not
  depend on the order of its values, ``f(f(a, x), y) == f(f(a, y), x)``;
* splitting the reduction into partial reductions combined by ``f`` (``rfactor``,
  cross-thread reductions): ``f`` commutative and associative, and ``e`` an identity,
  ``f(e, x) == x``.

A law is accepted only when it is *proven* for every value of the dtype; every caller
(rfactor, cross-thread ``bind``, the dependence check of ``reorder``) asks here. The proofs
cover these forms of ``f`` (after ``if_then_else(x > y, x, y)`` and its siblings -- a
selection of one of the two compared values, ``>``, ``>=``, ``<``, ``<=`` in any operand
order -- are read as ``max``/``min``, and casts between float dtypes are dropped):

* *one operator*: ``x op y op c1 op c2 ...`` for ``op`` one of ``+ * min max & | ^`` and
  constants ``c``, nested in any way, ``x`` and ``y`` once each: commutative and
  associative (``op`` is), with identity ``e`` exactly when ``e op c1 op ...`` is the
  neutral element of ``op`` in the dtype (0, 1, the top or bottom value, all ones);
* *polynomials* in ``x`` and ``y`` (``+ - *``, float division by a constant, integer shift
  by a constant): each law is an identity of exact polynomials, decided by comparing
  coefficients (integers modulo ``2**bits``, as their arithmetic wraps) -- ``x + y + 1``
  with identity ``-1``, ``x * y``, ``x + y + x * y``, and the order-free ``acc + v * v``;
* *conjugates* ``log(P(exp(x), exp(y)))`` (also ``log2``/``exp2``) with ``P`` a polynomial
  with positive coefficients, whose laws are those of ``P`` on positive numbers
  (``logsumexp``);
* ``bool`` combiners, checked on all values.

Combiners over tuples whose elements are independent (a ``(sum, max)`` pair) have the laws
of their elements; an argmax/argmin pair of elements that both select ``x`` when ``x[v] >
y[v] or (x[v] == y[v] and x[i] < y[i])`` (the better value, then on ties the better index:
a lexicographic total order; any strict comparisons, in any operand order) has the laws of
a maximum in that order, with the least pair as identity; others (TVM's tutorial argmax
``x[1] >= y[1]``, which keeps the accumulator on ties) are not proven: their reductions
keep their sequential order (no cross-thread bind or reorder of their reduction loops, no
rfactor). Anything
else is refused: first with a counterexample when one is found by evaluating ``f`` exactly
on sample values (small numbers, every constant of ``f`` and ``c +- 1``, ``-c``, negated
pairs, large magnitudes), else as "cannot prove", with the forms above as the hint. A
refusal of a lawful combiner is possible (keep the reduction sequential); an accepted
unlawful one is not, up to the float caveat: floats are treated as real numbers (rounding
and overflow ignored, as every compiler that reassociates a float reduction does; no NaN,
and ``-0.0 == 0.0``, so a select-max is ``max``).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

from . import dtype as dt
from . import polynomial as pl
from .expr import (And, Binary, Call, Cast, Cmp, CommReducer, Const, Expr, Not, Or, Select,
                   TupleCommReducer, Var)
from .visitor import ExprMutator, collect, structural_equal

#: the forms whose laws are proven, for messages
PROVABLE = ("x op y with op one of + * min max & | ^ (constants allowed), "
            "if_then_else(x > y, x, y) and the other max/min selections, polynomials in x "
            "and y, and log(P(exp(x), exp(y)))")


@dataclass(frozen=True)
class Violation:
    """Why a law of a combiner is not established: ``refuted`` when it fails (a
    counterexample, or an exact identity that does not hold), else polytile cannot prove
    it. ``str()`` gives the reason."""

    reason: str
    refuted: bool

    def __str__(self) -> str:
        return self.reason


@functools.lru_cache(maxsize=256)
def rfactor_violation(comb: CommReducer) -> Violation | None:
    """Why ``comb`` cannot be split into partial reductions, or ``None`` when it is proven
    commutative and associative with ``comb.identity`` as its identity (see the module
    docstring for what is proven and how floats are treated)."""
    return _first_violation(comb, ("comm", "assoc", "identity"))


@functools.lru_cache(maxsize=256)
def reorder_violation(comb: CommReducer) -> Violation | None:
    """Why the fold ``acc = comb(acc, v)`` may depend on the order of its values, or ``None``
    when ``f(f(a, x), y) == f(f(a, y), x)`` is proven (every proven commutative and
    associative combiner, and polynomial folds such as ``acc + v * v``)."""
    return _first_violation(comb, ("order",))


# --------------------------------------------------------------------------- laws
def _law_text(law: str, comb: CommReducer) -> str:
    return {"comm": "commutativity f(x, y) == f(y, x)",
            "assoc": "associativity f(f(x, y), z) == f(x, f(y, z))",
            "order": "order independence f(f(x, y), z) == f(f(x, z), y)",
            "identity": f"the identity law f({comb.identity}, x) == x"}[law]


def _first_violation(comb: CommReducer, laws: tuple) -> Violation | None:
    if isinstance(comb, TupleCommReducer):
        return _tuple_violation(comb, laws)
    bad = _unevaluable(comb)
    if bad:
        return Violation(bad, refuted=False)
    proof = _prove(comb)
    open_laws = [law for law in laws if proof.laws.get(law) is not True]
    if not open_laws:
        return None
    # a counterexample, when one exists among the samples, is the clearest message
    for law in open_laws:
        seen = _counterexample(comb, law)
        if seen:
            return Violation(seen, refuted=True)
    for law in open_laws:
        if proof.laws.get(law) is False:
            return Violation(f"{_law_text(law, comb)} does not hold ({proof.form})", True)
    law = open_laws[0]
    return Violation(f"{_law_text(law, comb)} cannot be proven: {proof.why_not}", False)


def _tuple_violation(comb: TupleCommReducer, laws: tuple) -> Violation | None:
    """A tuple combiner whose elements are independent (element ``k`` reads only ``x[k]``
    and ``y[k]``, e.g. a ``(sum, max)`` pair) or argmax/argmin pairs in a lexicographic
    order (:func:`_lexicographic_pairs`) has the laws of all its elements and pairs; any
    other is not proven."""
    pairs, why = _lexicographic_pairs(comb, laws)
    if why is not None:
        return why
    for k, r in enumerate(comb.result):
        own = {id(comb.lhs[k]), id(comb.rhs[k])}
        if k in pairs:
            continue
        if any(id(v) not in own for v in collect(r, Var)):
            # argmax as TVM's tutorial writes it keeps the accumulator on ties: it is not
            # commutative there, and its fold depends on the order of equal values
            return Violation(
                f"the laws of a combiner over tuples whose elements read each other "
                f"({comb.size} elements; element {k} is {r}) are not proven (an argmax/argmin "
                f"pair is proven when both elements select x where x[v] > y[v] or (x[v] == "
                f"y[v] and x[i] < y[i]), a total order; one that keeps the accumulator on "
                f"equal values depends on the order)", refuted=False)
    for k, r in enumerate(comb.result):
        if k in pairs:
            continue
        part = CommReducer(f"{comb.name}.v{k}", comb.lhs[k], comb.rhs[k], r,
                           comb.identity[k])
        why = _first_violation(part, laws)
        if why is not None:
            return Violation(f"element {k} of the tuple: {why}", why.refuted)
    return None


def _strict(c, x, y) -> str | None:
    """``"max"`` when condition ``c`` is ``x > y`` (or ``y < x``), ``"min"`` when it is
    ``x < y`` (or ``y > x``), else None."""
    if not (isinstance(c, Cmp) and c.op in ("gt", "lt")):
        return None
    if c.a is x and c.b is y:
        return "max" if c.op == "gt" else "min"
    if c.a is y and c.b is x:
        return "min" if c.op == "gt" else "max"
    return None


def _equal(c, x, y) -> bool:
    return isinstance(c, Cmp) and c.op == "eq" and {id(c.a), id(c.b)} == {id(x), id(y)}


def _beats(c, comb: TupleCommReducer) -> tuple | None:
    """``(v, i, vop, iop)`` when condition ``c`` says that ``x`` beats ``y`` in the
    lexicographic order of elements ``v`` then ``i``: ``x[v] op y[v] or (x[v] == y[v] and
    x[i] op' y[i])`` with ``op``, ``op'`` strict comparisons (``vop``/``iop``: ``"max"``
    when the larger wins), in any operand order; else None."""
    if not isinstance(c, Or):
        return None
    for first, second in ((c.a, c.b), (c.b, c.a)):
        if not isinstance(second, And):
            continue
        for same, tie in ((second.a, second.b), (second.b, second.a)):
            for v in range(comb.size):
                vop = _strict(first, comb.lhs[v], comb.rhs[v])
                if vop is None or not _equal(same, comb.lhs[v], comb.rhs[v]):
                    continue
                for i in range(comb.size):
                    iop = _strict(tie, comb.lhs[i], comb.rhs[i])
                    if i != v and iop is not None:
                        return v, i, vop, iop
    return None


def _lexicographic_pairs(comb: TupleCommReducer, laws: tuple) -> tuple:
    """The argmax/argmin pairs of a tuple combiner: elements ``i`` (an index) and ``v`` (a
    value) that both select ``x`` when ``x`` beats ``y`` in the lexicographic order "the
    better value, then on equal values the better index" (:func:`_beats`), else ``y``:
    ``f`` then returns the larger of two pairs in a total order (floats as real numbers,
    no NaN: the module's caveat), so it is commutative, associative and order-free, and
    its identity is the least pair: for each element the identity of the ``max``/``min``
    that its comparison picks (the lowest value for argmax, and the largest index where
    the smaller wins ties: ``min``'s identity). Returns
    ``(the elements in pairs, None)``, or ``({}, Violation)`` when a pair's identity is
    not the least pair. (TVM's tutorial argmax, ``x[1] >= y[1]``, keeps the accumulator
    on ties and is no such pair.)"""
    done: dict = {}
    for k, r in enumerate(comb.result):
        if k in done or not (isinstance(r, Select) and r.true_value is comb.lhs[k]
                             and r.false_value is comb.rhs[k]):
            continue
        order = _beats(r.cond, comb)
        if order is None:
            continue
        v, i, vop, iop = order
        if k not in (v, i) or v in done or i in done:
            continue
        other = comb.result[i if k == v else v]
        j = i if k == v else v
        if not (isinstance(other, Select) and other.true_value is comb.lhs[j]
                and other.false_value is comb.rhs[j]
                and structural_equal(other.cond, r.cond)):
            continue
        for elem, op in ((v, vop), (i, iop)):
            if "identity" not in laws:
                break
            part = CommReducer(f"{comb.name}.v{elem}", comb.lhs[elem], comb.rhs[elem],
                               Binary(comb.lhs[elem].dtype, op, comb.lhs[elem],
                                      comb.rhs[elem]), comb.identity[elem])
            bad = _first_violation(part, ("identity",))
            if bad is not None:
                return {}, Violation(
                    f"elements {i} (index) and {v} (value) of the tuple select the {vop} "
                    f"value, then the {'smallest' if iop == 'min' else 'largest'} index "
                    f"(a total order), but their identity is not the least pair: element "
                    f"{elem}: {bad}", bad.refuted)
        done[v] = done[i] = True
    return done, None


@dataclass
class _Proof:
    form: str = ""          # the recognised form, for messages
    why_not: str = ""       # why no form was recognised
    laws: dict = None       # law -> True (proven) / False (refuted exactly); absent: open


@functools.lru_cache(maxsize=256)
def _prove(comb: CommReducer) -> _Proof:
    dtype = comb.result.dtype
    if dt.is_bool(dtype):
        return _Proof("bool, checked on all values", "", _exhaustive(comb))
    r = _Normalise().visit(comb.result)
    laws = _one_operator(comb, r)
    if laws is not None:
        return _Proof("one commutative, associative operator", "", laws)
    try:
        laws = _polynomial(comb, r)
        return _Proof("a polynomial combiner", "", laws)
    except pl.NotPolynomial as ex:
        poly_why = str(ex)
    laws = _conjugate(comb, r)
    if laws is not None:
        return _Proof("a conjugate log(P(exp(x), exp(y)))", "", laws)
    return _Proof("", f"f(x, y) = {comb.result} is none of the forms polytile proves lawful "
                  f"({PROVABLE}); as a polynomial it has {poly_why}", {})


class _Normalise(ExprMutator):
    """Casts between float dtypes dropped (floats are real numbers here); a selection of
    one of two compared values read as ``max``/``min`` (ties pick equal values)."""

    def visit_Cast(self, e: Cast):
        v = self.visit(e.value)
        if dt.is_float(e.dtype) and dt.is_float(v.dtype):
            return v
        return e if v is e.value else Cast(e.dtype, v)

    def visit_Select(self, e: Select):
        e = self.generic_visit(e)
        c, t, f = e.cond, e.true_value, e.false_value
        if not (isinstance(c, Cmp) and c.op in ("gt", "ge", "lt", "le")):
            return e
        if not ((structural_equal(c.a, t) and structural_equal(c.b, f))
                or (structural_equal(c.a, f) and structural_equal(c.b, t))):
            return e
        larger_if_true = c.a if c.op in ("gt", "ge") else c.b
        return Binary(e.dtype, "max" if structural_equal(t, larger_if_true) else "min", t, f)


_AC_OPS = ("add", "mul", "min", "max", "bitand", "bitor", "bitxor")


def _one_operator(comb: CommReducer, r: Expr) -> dict | None:
    """Laws of ``x op y op c...`` (one associative, commutative ``op``), or ``None``."""
    if not (isinstance(r, Binary) and r.op in _AC_OPS):
        return None
    leaves: list = []

    def flat(e):
        if isinstance(e, Binary) and e.op == r.op:
            flat(e.a)
            flat(e.b)
        else:
            leaves.append(e)

    flat(r)
    xs = [v for v in leaves if v is comb.lhs or v is comb.rhs]
    if len(xs) != 2 or xs[0] is xs[1]:
        return None
    consts = []
    for c in leaves:
        if c is comb.lhs or c is comb.rhs:
            continue
        if collect(c, Var):
            return None
        try:
            consts.append(_eval(c, {}))
        except _Unknown:
            return None
    laws = {"comm": True, "assoc": True, "order": True}
    try:
        k = _eval(comb.identity, {})
        for c in consts:
            k = _num(_binary(r.op, k, c, r.dtype), r.dtype)
    except _Unknown:
        return laws
    laws["identity"] = _is_neutral(r.op, k, r.dtype)
    return laws


def _is_neutral(op: str, k, dtype: str) -> bool:
    """``k op x == x`` for every ``x`` of ``dtype`` (floats: every finite value)."""
    if op in ("add", "bitor", "bitxor"):
        return k == 0
    if op == "mul":
        return k == 1
    if op == "bitand":
        return k == dt.wrap(-1, dtype)
    top = dt.largest_finite(dtype) if dt.is_float(dtype) else dt.max_value(dtype)
    bottom = -top if dt.is_float(dtype) else dt.min_value(dtype)
    return k >= top if op == "min" else k <= bottom


def _polynomial(comb: CommReducer, r: Expr) -> dict:
    """Laws of a polynomial combiner, decided exactly; raises ``NotPolynomial``."""
    mod = pl.modulus(r.dtype)
    x, y = pl.Poly.var(0, mod, 2), pl.Poly.var(1, mod, 2)
    p = pl.from_expr(r, {comb.lhs: x, comb.rhs: y}, mod, 2)
    laws = _poly_laws(p, mod)
    try:
        e = pl.from_expr(comb.identity, {}, mod, 2)
        same = p.compose([e, x]) == x
        laws["identity"] = True if same else (False if mod is None else None)
    except pl.NotPolynomial:
        pass
    return {k: v for k, v in laws.items() if v is not None}


def _poly_laws(p: pl.Poly, mod: int | None) -> dict:
    """Commutativity, associativity and order independence of ``f = p`` (True; False when
    refuted over the reals; None when the coefficients differ modulo ``2**bits``)."""
    x2, y2 = pl.Poly.var(0, mod, 2), pl.Poly.var(1, mod, 2)
    x, y, z = (pl.Poly.var(k, mod, 3) for k in range(3))

    def verdict(same: bool):
        return True if same else (False if mod is None else None)

    xy = p.compose([x, y])
    left = p.compose([xy, z])
    return {"comm": verdict(p.compose([y2, x2]) == p),
            "assoc": verdict(left == p.compose([x, p.compose([y, z])])),
            "order": verdict(left == p.compose([p.compose([x, z]), y]))}


_CONJUGATES = {"log": "exp", "log2": "exp2"}


def _conjugate(comb: CommReducer, r: Expr) -> dict | None:
    """Laws of ``h(P(g(x), g(y)))`` for ``(h, g)`` = ``(log, exp)`` or ``(log2, exp2)`` and
    ``P`` with positive coefficients (so ``g(h(P)) == P`` on ``g``'s positive image), or
    ``None``."""
    if not (dt.is_float(r.dtype) and isinstance(r, Call) and r.name in _CONJUGATES
            and len(r.args) == 1):
        return None
    g = _CONJUGATES[r.name]
    x, y = pl.Poly.var(0, None, 2), pl.Poly.var(1, None, 2)

    def atom(e):
        if isinstance(e, Call) and e.name == g and len(e.args) == 1:
            return {id(comb.lhs): x, id(comb.rhs): y}.get(id(e.args[0]))
        return None

    try:
        p = pl.from_expr(r.args[0], {}, None, 2, atom)
    except pl.NotPolynomial:
        return None
    if not p.terms or any(c < 0 for c in p.coefficients()):
        return None
    laws = _poly_laws(p, None)
    ge = _exact_exp(g, comb.identity)
    if ge is not None:
        laws["identity"] = p.compose([pl.Poly.const(ge, None, 2), x]) == x
    return laws


def _exact_exp(g: str, e: Expr):
    """``g(e)`` as an exact rational, or ``None`` when it is not one."""
    try:
        v = _eval(e, {})
    except _Unknown:
        return None
    if v == float("-inf"):
        return Fraction(0)
    if not isinstance(v, Fraction):
        return None
    if v <= -2048:
        # underflows to exactly 0 in every float dtype (e**-745 is below float64's
        # smallest subnormal): te.min_value, TVM's finite identity of max-like reducers
        return Fraction(0)
    if v == 0:
        return Fraction(1)
    if g == "exp2" and v.denominator == 1:
        return Fraction(2) ** v.numerator
    return None


def _exhaustive(comb: CommReducer) -> dict:
    """Every law of a bool combiner, checked on all values (0 and 1)."""
    out = {}
    for law in ("comm", "assoc", "order", "identity"):
        try:
            out[law] = _counterexample(comb, law, (0, 1), strict=True) is None
        except _Unknown:
            pass
    return out


# ------------------------------------------------------------- exact evaluation
class _Unknown(Exception):
    """The expression cannot be evaluated here (an unsupported node or a domain error)."""


# small values first (readable counterexamples), the rest after the combiner's constants
_BASE_SIGNED = ((0, 1, -1, 2, -7, 12), (-2, 3, 7))
_BASE_UNSIGNED = ((0, 1, 2, 7, 12), (3,))
_BASE_FLOAT = (tuple(Fraction(v) for v in ("0", "1", "-1", "-1/2", "-7", "12", "3/4")),
               tuple(Fraction(v) for v in ("2", "7", "1/2", "-2", "-3/4")))
#: samples per variable: all for laws of one or two variables, fewer for three (the cube)
_MAX_SAMPLES, _MAX_SAMPLES_3 = 22, 13

_MATH = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "tanh": math.tanh,
         "exp2": lambda x: 2.0 ** x, "log2": math.log2, "log10": math.log10,
         "abs": abs, "floor": math.floor, "ceil": math.ceil, "log1p": math.log1p,
         "expm1": math.expm1, "hypot": math.hypot, "pow": math.pow,
         "sigmoid": lambda x: 1 / (1 + math.exp(-x))}


def _samples(comb: CommReducer) -> tuple:
    """Sample values for counterexamples: small numbers, each constant ``c`` of the
    combiner with ``c - 1``, ``c + 1``, ``-c`` (a threshold is crossed on both sides), large
    magnitudes, then more small numbers (negated pairs such as 7 and -7)."""
    dtype = comb.result.dtype
    if dt.is_bool(dtype):
        return (0, 1)
    first, rest = (_BASE_UNSIGNED if dt.is_unsigned(dtype) else _BASE_SIGNED
                   if dt.is_int(dtype) else _BASE_FLOAT)
    extra = []
    for c in collect(comb.result, Const):
        try:
            v = _eval(c, {})
        except _Unknown:
            continue
        if not isinstance(v, float):
            extra += [v, v - 1, v + 1, -v]
    big = 10 ** 6
    if dt.is_int(dtype):
        extra += [big, -big, dt.min_value(dtype), dt.max_value(dtype)]
    else:
        extra += [Fraction(big), Fraction(-big)]
    out: list = []
    for v in list(first) + extra + list(rest):
        v = _num(v, dtype)
        if v not in out and len(out) < _MAX_SAMPLES:
            out.append(v)
    return tuple(out)


def _counterexample(comb: CommReducer, law: str, xs: tuple | None = None,
                    strict: bool = False) -> str | None:
    """The first sample tuple where ``law`` fails, described; ``None`` if none fails.
    Tuples where ``f`` cannot be evaluated are skipped, or raise ``_Unknown`` when
    ``strict`` (a proof by exhaustion must see every tuple)."""
    xs = xs if xs is not None else _samples(comb)

    def f(a, b):
        return _eval(comb.result, {comb.lhs: a, comb.rhs: b})

    if law == "identity":
        e = _eval(comb.identity, {})
        arity, lhs, rhs = 1, (lambda x: f(e, x)), (lambda x: x)
    elif law == "comm":
        arity, lhs, rhs = 2, f, (lambda x, y: f(y, x))
    elif law == "assoc":
        arity, lhs, rhs = 3, (lambda x, y, z: f(f(x, y), z)), (lambda x, y, z: f(x, f(y, z)))
    else:
        arity, lhs, rhs = 3, (lambda x, y, z: f(f(x, y), z)), (lambda x, y, z: f(f(x, z), y))
    for v in itertools.product(xs[:_MAX_SAMPLES_3] if arity == 3 else xs, repeat=arity):
        try:
            a, b = lhs(*v), rhs(*v)
        except _Unknown:
            if strict:
                raise
            continue
        if not _same(a, b):
            at = ", ".join(f"{k}={_fmt(x)}" for k, x in zip("xyz", v))
            return f"{_law_text(law, comb)} fails at {at} ({_fmt(a)} != {_fmt(b)})"
    return None


def _num(value, dtype: str):
    """``value`` as a number of ``dtype``: integers wrap (two's complement), floats are
    exact (``Fraction``) unless already inexact (a math intrinsic's ``float``, infinity)."""
    if dt.is_bool(dtype):
        return int(bool(value))
    if dt.is_int(dtype):
        if isinstance(value, float) and not math.isfinite(value):
            raise _Unknown("non-finite integer")
        return dt.wrap(math.trunc(value), dtype)
    if isinstance(value, float):
        return value
    return Fraction(value)


def _eval(e: Expr, env: dict):
    """Exact value of ``e`` (integers wrapping as the machine's, rationals for floats)."""
    t = type(e)
    if t is Var:
        if e not in env:
            raise _Unknown(f"free variable {e.name!r}")
        return env[e]
    if t is Const:
        v = e.value
        exact = not isinstance(v, float) or math.isfinite(v)
        return _num(Fraction(v) if exact and dt.is_float(e.dtype) else v, e.dtype)
    if t is Cast:
        v = _eval(e.value, env)
        if dt.is_int(e.dtype) and dt.is_float(e.value.dtype) and not (
                math.isfinite(v) and dt.min_value(e.dtype) <= math.trunc(v)
                <= dt.max_value(e.dtype)):
            raise _Unknown("float to integer conversion out of range")
        return _num(v, e.dtype)
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
    if op in ("shl", "shr") and (b < 0 or b >= dt.bits(dtype)):
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


def _unevaluable(comb: CommReducer) -> str | None:
    """Why ``comb`` cannot even be evaluated (a free variable, an unsupported node)."""
    for v in collect(comb.result, Var):
        if v is not comb.lhs and v is not comb.rhs:
            return f"it uses the free variable {v.name!r}"
    try:
        _eval(comb.identity, {})
    except _Unknown as ex:
        return f"its identity cannot be evaluated ({ex})"
    return None
