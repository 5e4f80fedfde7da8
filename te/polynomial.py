"""Exact polynomials in a few variables, to prove identities of combiners symbolically.

A :class:`Poly` is a sum of monomials ``c * x0**e0 * x1**e1 * ...`` with exact coefficients:
``Fraction`` for the real numbers (float dtypes, whose rounding is ignored), or integers
modulo ``2**bits`` for an integer dtype, whose arithmetic wraps. Two polynomials with equal
coefficients are equal as functions, so an identity proven here holds for every value
(modulo ``2**bits``: the ring map from the integers keeps sums and products). The converse
fails modulo ``2**bits`` (``x*x - x`` is always even), so a difference of coefficients
refutes an identity only over the reals.

:func:`from_expr` reads an expression built from ``+``, ``-``, ``*``, division by a nonzero
constant (floats), shifts by a constant (integers), casts between float dtypes and constants;
anything else raises :class:`NotPolynomial`.
"""

from __future__ import annotations

import math
from fractions import Fraction

from . import dtype as dt
from .expr import Binary, Call, Cast, Const, Expr, Var

#: a proof gives up beyond this many monomials (the identities of small combiners are tiny)
MAX_TERMS = 4000


class NotPolynomial(Exception):
    """The expression is not a polynomial of the supported kind (the message says why)."""


class Poly:
    """An immutable polynomial: ``terms`` maps exponent tuples (one entry per variable) to
    nonzero coefficients; ``mod`` is ``2**bits`` for integer arithmetic, else ``None``."""

    __slots__ = ("terms", "mod", "nvars")

    def __init__(self, terms: dict, mod: int | None, nvars: int):
        if mod is not None:
            terms = {m: c % mod for m, c in terms.items()}
        self.terms = {m: c for m, c in terms.items() if c != 0}
        self.mod = mod
        self.nvars = nvars
        if len(self.terms) > MAX_TERMS:
            raise NotPolynomial(f"more than {MAX_TERMS} monomials")

    @classmethod
    def const(cls, c, mod: int | None, nvars: int) -> Poly:
        return cls({(0,) * nvars: c}, mod, nvars)

    @classmethod
    def var(cls, k: int, mod: int | None, nvars: int) -> Poly:
        return cls({tuple(int(i == k) for i in range(nvars)): 1}, mod, nvars)

    def __add__(self, o: Poly) -> Poly:
        t = dict(self.terms)
        for m, c in o.terms.items():
            t[m] = t.get(m, 0) + c
        return Poly(t, self.mod, self.nvars)

    def __neg__(self) -> Poly:
        return Poly({m: -c for m, c in self.terms.items()}, self.mod, self.nvars)

    def __sub__(self, o: Poly) -> Poly:
        return self + (-o)

    def __mul__(self, o: Poly) -> Poly:
        t: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in o.terms.items():
                m = tuple(a + b for a, b in zip(m1, m2))
                t[m] = t.get(m, 0) + c1 * c2
        return Poly(t, self.mod, self.nvars)

    def __eq__(self, o) -> bool:
        return isinstance(o, Poly) and self.terms == o.terms

    __hash__ = None

    def is_const(self) -> bool:
        return all(not any(m) for m in self.terms)

    def const_value(self):
        return self.terms.get((0,) * self.nvars, 0)

    def degree(self) -> int:
        return max((sum(m) for m in self.terms), default=0)

    def coefficients(self):
        return self.terms.values()

    def compose(self, args: list[Poly]) -> Poly:
        """``self(args[0], args[1], ...)``: each variable replaced by a polynomial."""
        nv = args[0].nvars
        out = Poly({}, self.mod, nv)
        powers: list[dict] = [{0: Poly.const(1, self.mod, nv)} for _ in args]
        for m, c in self.terms.items():
            term = Poly.const(c, self.mod, nv)
            for k, e in enumerate(m):
                if e:
                    term = term * _power(args[k], e, powers[k])
            out = out + term
        return out

    def evaluate(self, values: list):
        """The value at a point (exact)."""
        total = 0
        for m, c in self.terms.items():
            v = c
            for x, e in zip(values, m):
                v = v * x ** e
            total += v
        return total % self.mod if self.mod is not None else total


def _power(p: Poly, e: int, memo: dict) -> Poly:
    if e not in memo:
        memo[e] = _power(p, e - 1, memo) * p
    return memo[e]


def modulus(dtype: str) -> int | None:
    """``2**bits`` for an integer dtype, ``None`` for a float dtype (bool is not handled)."""
    if dt.is_float(dtype):
        return None
    if dt.is_int(dtype):
        return 1 << dt.bits(dtype)
    raise NotPolynomial(f"dtype {dtype}")


def from_expr(e: Expr, env: dict, mod: int | None, nvars: int, atoms=None) -> Poly:
    """The polynomial of ``e``: ``env`` maps the variables of ``e`` to polynomials, and
    ``atoms`` (optional) maps a sub-expression to a polynomial before it is read (a hook
    that lets ``exp(x)`` stand for a variable). Raises :class:`NotPolynomial`."""

    def go(x: Expr) -> Poly:
        if atoms is not None:
            hit = atoms(x)
            if hit is not None:
                return hit
        t = type(x)
        if t is Var:
            if x not in env:
                raise NotPolynomial(f"it reads the variable {x.name!r}")
            return env[x]
        if t is Const:
            return Poly.const(_exact(x), mod, nvars)
        if t is Cast:
            if dt.is_float(x.dtype) and dt.is_float(x.value.dtype) or x.dtype == x.value.dtype:
                return go(x.value)   # float rounding is ignored: real numbers throughout
            raise NotPolynomial(f"a cast from {x.value.dtype} to {x.dtype}")
        if t is Binary:
            if x.op in ("add", "sub", "mul"):
                a, b = go(x.a), go(x.b)
                return a + b if x.op == "add" else a - b if x.op == "sub" else a * b
            if x.op == "div" and mod is None:
                b = go(x.b)
                if b.is_const() and b.const_value() != 0:
                    return go(x.a) * Poly.const(1 / Fraction(b.const_value()), mod, nvars)
            if x.op == "shl" and mod is not None:
                # x << c == x * 2**c modulo 2**bits for 0 <= c < bits (larger: undefined)
                b = go(x.b)
                c = _signed(b.const_value(), mod) if b.is_const() else -1
                if 0 <= c < mod.bit_length() - 1:
                    return go(x.a) * Poly.const(1 << c, mod, nvars)
            raise NotPolynomial(f"the operation {x.op!r}")
        if t is Call:
            raise NotPolynomial(f"the call {x.name}(...)")
        raise NotPolynomial(f"a {t.__name__}")

    return go(e)


def _signed(v: int, mod: int) -> int:
    return v - mod if v >= mod // 2 else v


def _exact(c: Const):
    v = c.value
    if isinstance(v, float):
        if not math.isfinite(v):
            raise NotPolynomial(f"the constant {v}")
        return Fraction(v)
    return int(v)
