"""A numpy evaluator of tensor-expression definitions, independent of polytile's lowering.

:func:`evaluate` walks the *definition* (``te`` expression nodes, ``ComputeOp`` bodies,
``Reduce`` with its combiner, ``where`` and ``init``) and computes every tensor with
vectorized numpy over index grids: a compute of shape ``(E0, E1)`` reducing over
``(R0,)`` evaluates its body once on a broadcast grid of shape ``(E0, E1, R0)`` and reduces
the last axis. No schedule, loop IR or code generator is involved.

Semantics (those of ``te/expr.py``; see its module docstring):

* integers are computed in their declared dtype with two's-complement wrap-around;
  ``floordiv``/``floormod`` round toward negative infinity, ``truncdiv``/``truncmod``
  toward zero;
* floats are computed in float64 and rounded to the declared dtype after every operation
  (numpy's float16/float32 arithmetic is correctly rounded, as IEEE code without fast-math
  is), so an exactly representable computation is reproduced bit for bit;
* float16 (and bfloat16) reductions accumulate in float32 and are rounded once at the end
  (the project's rule; float32 and float64 reductions accumulate in their own dtype);
* ``max``/``min`` propagate NaN like ``np.maximum``/``np.minimum``, elementwise and in
  reductions; ``Select`` uses only the chosen operand.

Error bounds. Next to each value the evaluator carries a rigorous bound on how far a correct
compiled program may be from it, per element (``err``). It is zero for integers and for
float computations that are exact, and grows only where a correct compiler may legitimately
differ: the order of a float reduction (``u * (n - 1) * sum|x|`` unless every partial sum is
exactly representable), fused multiply-add contraction of ``a * b + c`` (the rounding of the
product), and math-library functions (2 ulps of the result). Errors are propagated through
later operations (``|a| e_b + |b| e_a`` for products, the image of ``[x - e, x + e]`` for
functions) and every rounding of an inexact value adds one ulp. ``mag`` is the magnitude of
the computation (the same expression over absolute values), for targets that may keep float16
intermediates in float32.

Elements whose correct value a compiler may legitimately choose are *unsure* and not
compared: a comparison or float-to-int cast of an inexact value whose interval straddles the
threshold, integer division by zero, an out-of-range float-to-int cast, or a shift by the
bit width or more (undefined behaviour). An out-of-bounds read that the definition performs
(not one guarded away by ``if_then_else``) raises :class:`ReferenceError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polytile.te import dtype as dt
from polytile.te.expr import (And, Binary, Call, Cast, Cmp, Const, Not, Or, Reduce, Select,
                              TensorRead, Var)
from polytile.te.tensor import ComputeOp, PlaceholderOp, Tensor


class ReferenceError(Exception):
    """The definition itself is ill-formed (an out-of-bounds read it performs)."""


#: unit roundoff (half an ulp of 1.0) per float dtype
UNIT = {"float16": 2.0 ** -11, "float32": 2.0 ** -24, "float64": 2.0 ** -53}
#: dtype of the accumulator of a float reduction (the project's rule)
ACCUMULATOR = {"float16": "float32", "float32": "float32", "float64": "float64"}
#: ulps a math function of the target may be off by
LIBM_ULPS = 2.0
#: functions implemented exactly (IEEE correctly rounded or exact by construction)
_EXACT_CALLS = ("abs", "floor", "ceil", "round", "trunc", "sqrt", "copysign", "fmod",
                "isnan", "isinf", "isfinite")
_STEP_CALLS = ("floor", "ceil", "round", "trunc")


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


_MATH = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "erf": _erf, "sin": np.sin,
    "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
    "abs": np.abs, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "log1p": np.log1p, "expm1": np.expm1,
    "pow": np.power, "fmod": np.fmod, "atan2": np.arctan2, "hypot": np.hypot,
    "copysign": np.copysign,
}


@dataclass
class Val:
    """One evaluated expression over (a broadcastable part of) the index grid.

    ``v``: values (ints and bools in their dtype, floats as float64 holding values of the
    declared dtype); ``err``: error bound (floats; None means zero); ``mag``: magnitude
    (floats; None means ``|v|``); ``fma``: rounding error of a product that a compiler may
    fuse into an enclosing add (None means zero); ``unsure``/``oob``: bool masks (None means
    all False).
    """

    v: np.ndarray
    dtype: str
    err: np.ndarray | None = None
    mag: np.ndarray | None = None
    fma: np.ndarray | None = None
    unsure: np.ndarray | None = None
    oob: np.ndarray | None = None

    def e(self):
        return 0.0 if self.err is None else self.err

    def m(self):
        return np.abs(self.v) if self.mag is None else self.mag


@dataclass
class Result:
    """A tensor computed by :func:`evaluate`: ``value`` (numpy array of the tensor's dtype),
    ``err`` and ``mag`` (float64 arrays, floats only, else None) and ``unsure`` (bool)."""

    value: np.ndarray
    err: np.ndarray | None
    mag: np.ndarray | None
    unsure: np.ndarray


def _or(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a | b


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def round_to(x, dtype: str):
    """``x`` (float64) rounded to float ``dtype`` and back."""
    if dtype == "float64":
        return np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        return np.asarray(x, dtype=np.float64).astype(dtype).astype(np.float64)


def ulp(x, dtype: str):
    """Spacing of float ``dtype`` at ``|x|`` (float64; the largest finite spacing above)."""
    with np.errstate(all="ignore"):
        a = np.abs(np.asarray(x, dtype=np.float64))
        fin = np.finfo(dtype)
        a = np.where(np.isfinite(a), np.minimum(a, float(fin.max)), float(fin.max))
        return np.spacing(a.astype(dtype)).astype(np.float64)


def _rounded(r, dtype: str, err, mag, unsure=None, extra=None) -> Val:
    """Round the exact float64 result ``r`` of an op of ``dtype`` whose inputs carried the
    propagated error ``err`` (plus ``extra``, an error of the op itself)."""
    e = _add(err, extra)
    v = round_to(r, dtype)
    if e is not None:
        e = np.where(e > 0, e + ulp(np.abs(v) + e, dtype), 0.0)
        with np.errstate(all="ignore"):
            fmax = float(np.finfo(dtype).max)
            near = (np.abs(r) + e > fmax) & np.isfinite(v) & (e > 0)
        unsure = _or(unsure, near)
    return Val(v, dtype, e, mag, None, unsure)


class _Eval:
    def __init__(self, tensors: dict):
        self.tensors = tensors   # id(op) -> (Result, oob-free)
        self.env: dict = {}

    # ------------------------------------------------------------------ leaves
    def visit(self, e) -> Val:
        return getattr(self, "visit_" + type(e).__name__)(e)

    def visit_Const(self, e: Const) -> Val:
        if e.dtype == "bool":
            return Val(np.array(bool(e.value)), "bool")
        if dt.is_float(e.dtype):
            return Val(round_to(float(e.value), e.dtype), e.dtype)
        return Val(np.array(e.value, dtype=e.dtype), e.dtype)

    def visit_Var(self, e: Var) -> Val:
        if e not in self.env:
            raise ReferenceError(f"reference: free variable {e.name!r} (scalar parameters "
                                 f"are not supported)")
        return self.env[e]

    def visit_TensorRead(self, e: TensorRead) -> Val:
        res: Result = self.tensors[id(e.tensor.op)]
        shape = e.tensor.shape
        idx = [self.visit(i) for i in e.indices]
        unsure = None
        for i in idx:
            unsure = _or(unsure, i.unsure)
        if not idx:
            v = res.value[()]
            err = None if res.err is None else res.err[()]
            mag = None if res.mag is None else res.mag[()]
            return Val(np.asarray(v if e.dtype == "bool" or dt.is_int(e.dtype)
                                  else np.float64(v)), e.dtype, err, mag, None,
                       _or(unsure, np.asarray(res.unsure[()])))
        arrays = np.broadcast_arrays(*[i.v.astype(np.int64) for i in idx])
        oob = None
        clipped = []
        for a, n in zip(arrays, shape):
            bad = (a < 0) | (a >= n)
            if bad.any():
                oob = _or(oob, bad)
            clipped.append(np.clip(a, 0, n - 1))
        key = tuple(clipped)
        v = res.value[key]
        if dt.is_float(e.dtype):
            v = v.astype(np.float64)
        err = None if res.err is None else res.err[key]
        mag = None if res.mag is None else res.mag[key]
        unsure = _or(unsure, res.unsure[key] if res.unsure.any() else None)
        fma = None
        if (isinstance(e.tensor.op, ComputeOp) and isinstance(e.tensor.op.body[0], Binary)
                and e.tensor.op.body[0].op == "mul" and dt.is_float(e.dtype)):
            fma = ulp(v, e.dtype) / 2  # the stored product may be fused downstream
        return Val(v, e.dtype, err, mag, fma, unsure, oob)

    # ------------------------------------------------------------------ structure
    def visit_Cast(self, e: Cast) -> Val:
        x = self.visit(e.value)
        return cast(x, e.dtype)

    def visit_Select(self, e: Select) -> Val:
        c = self.visit(e.cond)
        t = self.visit(e.true_value)
        f = self.visit(e.false_value)
        cv = c.v.astype(bool)
        v = np.where(cv, t.v, f.v)
        err = None if t.err is None and f.err is None else np.where(cv, t.e(), f.e())
        mag = None
        if t.mag is not None or f.mag is not None:
            mag = np.where(cv, t.m(), f.m())
        fma = None
        if t.fma is not None or f.fma is not None:
            fma = np.where(cv, 0.0 if t.fma is None else t.fma, 0.0 if f.fma is None
                           else f.fma)

        def pick(a, b):
            if a is None and b is None:
                return None
            return np.where(cv, False if a is None else a, False if b is None else b)

        return Val(v, e.dtype, err, mag, fma, _or(pick(t.unsure, f.unsure), c.unsure),
                   _or(pick(t.oob, f.oob), c.oob))

    def visit_And(self, e: And) -> Val:
        a, b = self.visit(e.a), self.visit(e.b)
        return Val(a.v.astype(bool) & b.v.astype(bool), "bool", unsure=_or(a.unsure, b.unsure),
                   oob=_or(a.oob, b.oob))

    def visit_Or(self, e: Or) -> Val:
        a, b = self.visit(e.a), self.visit(e.b)
        return Val(a.v.astype(bool) | b.v.astype(bool), "bool", unsure=_or(a.unsure, b.unsure),
                   oob=_or(a.oob, b.oob))

    def visit_Not(self, e: Not) -> Val:
        a = self.visit(e.a)
        return Val(~a.v.astype(bool), "bool", unsure=a.unsure, oob=a.oob)

    def visit_Cmp(self, e: Cmp) -> Val:
        a, b = self.visit(e.a), self.visit(e.b)
        ops = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}
        with np.errstate(all="ignore"):
            v = ops[e.op](a.v, b.v)
            unsure = _or(a.unsure, b.unsure)
            if a.err is not None or b.err is not None:
                tol = a.e() + b.e()
                unsure = _or(unsure, (tol > 0) & (np.abs(a.v - b.v) <= tol))
        return Val(np.asarray(v), "bool", unsure=unsure, oob=_or(a.oob, b.oob))

    def visit_Binary(self, e: Binary) -> Val:
        a, b = self.visit(e.a), self.visit(e.b)
        out = (float_binary if dt.is_float(e.dtype) else int_binary)(e.op, a, b, e.dtype)
        out.oob = _or(a.oob, b.oob)
        out.unsure = _or(out.unsure, _or(a.unsure, b.unsure))
        return out

    def visit_Call(self, e: Call) -> Val:
        args = [self.visit(x) for x in e.args]
        out = call(e.name, args, e.dtype)
        for x in args:
            out.unsure = _or(out.unsure, x.unsure)
            out.oob = _or(out.oob, x.oob)
        return out

    def visit_Reduce(self, e: Reduce) -> Val:
        raise ReferenceError("reference: a reduction inside an expression")


# ---------------------------------------------------------------------------- operations
def cast(x: Val, to: str) -> Val:
    """``x`` converted to dtype ``to`` with C rules (see ``te/expr.py``)."""
    src = x.dtype
    if src == to:
        return x
    with np.errstate(all="ignore"):
        if to == "bool":
            unsure = x.unsure
            if x.err is not None:
                unsure = _or(unsure, (x.err > 0) & (np.abs(x.v) <= x.err))
            return Val(np.asarray(x.v != 0), "bool", unsure=unsure, oob=x.oob)
        if dt.is_float(to):
            if not dt.is_float(src):
                v = x.v.astype(np.float64)
                return Val(round_to(v, to), to, unsure=x.unsure, oob=x.oob)
            out = _rounded(x.v, to, x.err, x.mag, x.unsure)
            out.oob = x.oob
            return out
        # to an integer
        if dt.is_float(src):
            t = np.trunc(x.v)
            lo, hi = dt.min_value(to), dt.max_value(to)
            unsure = _or(x.unsure, ~np.isfinite(t) | (t < lo) | (t > hi))
            if x.err is not None:
                unsure = _or(unsure, np.trunc(x.v - x.err) != np.trunc(x.v + x.err))
            t = np.where(unsure, 0, t)
            return Val(t.astype(to), to, unsure=unsure, oob=x.oob)
        return Val(np.asarray(x.v).astype(to), to, unsure=x.unsure, oob=x.oob)


def _trunc_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def int_binary(op: str, a: Val, b: Val, dtype: str) -> Val:
    """Integer (or bool) ``a op b`` in ``dtype``, wrapping around."""
    x, y = np.asarray(a.v), np.asarray(b.v)
    unsure = None
    wide = np.int64 if dt.bits(dtype) <= 32 or dtype == "bool" else object
    with np.errstate(all="ignore"):
        if op in ("add", "sub", "mul"):
            xw, yw = x.astype(wide), y.astype(wide)
            r = {"add": xw + yw, "sub": xw - yw, "mul": xw * yw}[op]
            return Val(_wrap(r, dtype), dtype)
        if op in ("min", "max"):
            return Val(np.asarray((np.minimum if op == "min" else np.maximum)(x, y)), dtype)
        if op in ("floordiv", "floormod", "truncdiv", "truncmod"):
            zero = y == 0
            if dt.is_signed(dtype):  # INT_MIN / -1 overflows: undefined, as in C
                zero = zero | ((y == -1) & (x == dt.min_value(dtype)))
            unsure = zero if np.any(zero) else None
            xw, yw = x.astype(wide), np.where(y == 0, 1, y).astype(wide)
            if op == "floordiv":
                r = xw // yw
            elif op == "floormod":
                r = xw % yw
            else:
                q = _trunc_div(xw, yw)
                r = q if op == "truncdiv" else xw - q * yw
            return Val(_wrap(r, dtype), dtype, unsure=unsure)
        if op in ("bitand", "bitor", "bitxor"):
            fn = {"bitand": np.bitwise_and, "bitor": np.bitwise_or,
                  "bitxor": np.bitwise_xor}[op]
            return Val(np.asarray(fn(x, y)), dtype)
        if op in ("shl", "shr"):
            bits = dt.bits(dtype)
            bad = (y < 0) | (y >= bits)
            unsure = bad if np.any(bad) else None
            ys = np.where(bad, 0, y).astype(wide)
            xw = x.astype(wide)
            r = xw << ys if op == "shl" else xw >> ys
            return Val(_wrap(r, dtype), dtype, unsure=unsure)
    raise ReferenceError(f"reference: integer op {op!r} on {dtype}")


def _wrap(r, dtype: str):
    if dtype == "bool":
        return np.asarray(r != 0)
    if r.dtype == object:
        bits = dt.bits(dtype)
        m = 1 << bits
        f = np.vectorize(lambda v: ((int(v) + (m >> 1)) % m) - (m >> 1) if dt.is_signed(dtype)
                         else int(v) % m, otypes=[object])
        return f(r).astype(dtype)
    return np.asarray(r).astype(dtype)


def float_binary(op: str, a: Val, b: Val, dtype: str) -> Val:
    """Float ``a op b`` in ``dtype`` (see the module docstring for the error bounds)."""
    x, y = a.v, b.v
    ea, eb = a.err, b.err
    with np.errstate(all="ignore"):
        if op in ("add", "sub"):
            r = x + y if op == "add" else x - y
            err = _add(ea, eb)
            fused = _add(a.fma, b.fma)  # a * b + c may run as one fused multiply-add
            mag = a.m() + b.m()
            return _rounded(r, dtype, err, mag, None, fused)
        if op == "mul":
            r = x * y
            err = None
            if ea is not None or eb is not None:
                err = np.abs(x) * b.e() + np.abs(y) * a.e() + a.e() * b.e()
            out = _rounded(r, dtype, err, a.m() * b.m())
            out.fma = np.abs(r - out.v)
            return out
        if op == "div":
            r = x / y
            err = None
            unsure = None
            if ea is not None or eb is not None:
                den = np.abs(y) - b.e()
                unsure = den <= 0
                err = np.where(unsure, 0.0, (a.e() + np.abs(r) * b.e()) / np.where(
                    unsure, 1.0, den))
            return _rounded(r, dtype, err, a.m() / np.abs(y), unsure)
        if op in ("min", "max"):
            r = (np.minimum if op == "min" else np.maximum)(x, y)
            err = None if ea is None and eb is None else np.maximum(a.e(), b.e())
            return Val(np.asarray(r), dtype, err, np.maximum(a.m(), b.m()))
        if op == "floordiv":
            q = round_to(x / y, dtype)
            r = np.floor(q)
            unsure = None
            if ea is not None or eb is not None:
                unsure = np.ones(np.shape(r), bool) & ((a.e() + b.e()) > 0)
            return Val(r, dtype, None, np.abs(r), None, unsure)
        if op == "floormod":
            m = np.fmod(x, y)
            adjust = (m != 0) & ((m < 0) != (y < 0))
            r = round_to(np.where(adjust, m + y, m), dtype)
            unsure = None
            if ea is not None or eb is not None:
                unsure = np.ones(np.shape(r), bool) & ((a.e() + b.e()) > 0)
            return Val(r, dtype, None, np.maximum(np.abs(r), np.abs(y)), None, unsure)
    raise ReferenceError(f"reference: float op {op!r} on {dtype}")


def call(name: str, args: list, dtype: str) -> Val:
    """A math intrinsic applied to evaluated arguments."""
    if name == "isnan":
        return Val(np.isnan(args[0].v), "bool")
    if name == "isinf":
        return Val(np.isinf(args[0].v), "bool")
    if name == "isfinite":
        return Val(np.isfinite(args[0].v), "bool")
    if name == "abs" and not dt.is_float(dtype):
        return Val(_wrap(np.abs(np.asarray(args[0].v).astype(np.int64)), dtype), dtype)
    fn = _MATH.get(name)
    if fn is None:
        raise ReferenceError(f"reference: unknown intrinsic {name!r}")
    with np.errstate(all="ignore"):
        vals = [a.v for a in args]
        r = np.asarray(fn(*vals), dtype=np.float64)
        v = round_to(r, dtype)
        err = None
        unsure = None
        if any(a.err is not None for a in args):
            # the image of the error box: evaluate at its corners
            lo_hi = [(a.v - a.e(), a.v + a.e()) for a in args]
            corners = [np.asarray(fn(*c), dtype=np.float64)
                       for c in _corners(lo_hi)]
            if name in _STEP_CALLS:
                unsure = np.zeros(np.shape(v), bool)
                for c in corners:
                    unsure |= c != r
            else:
                err = np.zeros(np.shape(r))
                for c in corners:
                    err = np.maximum(err, np.abs(c - r))
                err = np.where(np.isnan(err), 0.0, err)
        if name not in _EXACT_CALLS:
            err = _add(err, LIBM_ULPS * ulp(v, dtype))
        if err is not None:
            err = np.where(err > 0, err + ulp(np.abs(v) + err, dtype), 0.0)
    return Val(v, dtype, err, np.abs(v), None, unsure)


def _corners(lo_hi):
    if not lo_hi:
        yield ()
        return
    (lo, hi), rest = lo_hi[0], lo_hi[1:]
    for tail in _corners(rest):
        yield (lo,) + tail
        yield (hi,) + tail


# ---------------------------------------------------------------------------- reductions
def _combiner_op(red: Reduce) -> str | None:
    """``add``/``max``/``min`` when the combiner is that op of its two variables."""
    r = red.combiner.result
    lhs, rhs = red.combiner.lhs, red.combiner.rhs
    if isinstance(r, Binary) and r.op in ("add", "max", "min") and {id(r.a), id(r.b)} == {
            id(lhs), id(rhs)}:
        return r.op
    return None


def _exact_sum(x, acc: str):
    """True where every partial sum of ``x`` over its last axis is exact in dtype ``acc``:
    all terms are multiples of ``2**-s`` and ``sum|x| * 2**s < 2**p`` for some ``s``."""
    p = {"float16": 11, "float32": 24, "float64": 53}[acc]
    ok = np.zeros(x.shape[:-1], bool)
    total = np.sum(np.abs(x), axis=-1)
    with np.errstate(all="ignore"):
        for s in (0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 30):
            scaled = x * 2.0 ** s
            whole = np.all(scaled == np.round(scaled), axis=-1)
            ok |= whole & (total * 2.0 ** s < 2.0 ** p)
    return ok


def reduce(red: Reduce, src: Val, cond: Val | None, init: Val | None, nred: int,
           shape: tuple) -> Val:
    """Reduce ``src`` (over the full grid ``shape``) over its last ``nred`` axes."""
    axes = tuple(range(len(shape) - nred, len(shape)))
    op = _combiner_op(red)
    if op is None:
        raise ReferenceError(f"reference: combiner {red.combiner.name!r} is not one of "
                             f"sum/max/min")
    dtype = red.dtype
    v = np.broadcast_to(src.v, shape)
    live = np.ones(shape, bool) if cond is None else np.broadcast_to(
        cond.v.astype(bool), shape)
    unsure = oob = None
    if src.unsure is not None:
        unsure = np.any(np.broadcast_to(src.unsure, shape) & live, axis=axes)
    if src.oob is not None:
        oob = np.any(np.broadcast_to(src.oob, shape) & live, axis=axes)
    if cond is not None:
        if cond.unsure is not None:
            unsure = _or(unsure, np.any(np.broadcast_to(cond.unsure, shape), axis=axes))
        if cond.oob is not None:
            oob = _or(oob, np.any(np.broadcast_to(cond.oob, shape), axis=axes))
    identity = red.combiner.identity.value
    with np.errstate(all="ignore"):
        if not dt.is_float(dtype):
            if op == "add":
                wide = np.where(live, v, 0).astype(np.int64 if dt.bits(dtype) <= 32 else object)
                r = _wrap(np.sum(wide, axis=axes), dtype)
            else:
                fill = np.array(identity).astype(dtype)
                r = (np.min if op == "min" else np.max)(np.where(live, v, fill), axis=axes)
            out = Val(np.asarray(r).astype(dtype), dtype, unsure=unsure, oob=oob)
            if init is not None:
                out = int_binary(op, init, out, dtype)
                out.unsure, out.oob = _or(out.unsure, init.unsure), _or(oob, init.oob)
            return out
        e = np.broadcast_to(src.e(), shape)
        mag = np.broadcast_to(src.m(), shape)
        if op == "add":
            acc = ACCUMULATOR[dtype]
            x = np.where(live, v, 0.0)
            total = np.sum(x, axis=axes)
            n = np.sum(live, axis=axes)
            abs_sum = np.sum(np.abs(x), axis=axes)
            # the accumulation `acc + a * b` may be fused into one multiply-add
            fused = 0.0 if src.fma is None else np.broadcast_to(src.fma, shape)
            err = np.sum(np.where(live, e + fused, 0.0), axis=axes)
            if init is not None:
                total = total + init.v
                abs_sum = abs_sum + np.abs(init.v)
                n = n + 1
                err = err + init.e()
            exact = _exact_sum(x.reshape(x.shape[:len(shape) - nred] + (-1,)), acc)
            if init is not None:
                exact = exact & (init.e() == 0)
            # any order of accumulation in `acc` (and our own float64 sum) is within this
            order = np.where(exact | (n <= 1), 0.0,
                             (UNIT[acc] + UNIT["float64"]) * np.maximum(n - 1, 0) * abs_sum)
            r_acc = round_to(total, acc)
            err_acc = err + order
            out = _rounded(r_acc, dtype, np.where(err_acc > 0, err_acc + ulp(r_acc, acc), 0.0),
                           np.sum(np.where(live, mag, 0.0), axis=axes) + (
                               0.0 if init is None else init.m()), unsure)
            out.oob = oob
            return out
        fill = -np.inf if op == "max" else np.inf
        base = np.where(live, v, fill)
        r = (np.max if op == "max" else np.min)(base, axis=axes)  # NaN propagates
        any_live = np.any(live, axis=axes)
        r = np.where(any_live, r, float(identity))
        err = np.max(np.where(live, e, 0.0), axis=axes) if src.err is not None else None
        out = Val(np.asarray(r, dtype=np.float64), dtype, err,
                  np.max(np.where(live, mag, 0.0), axis=axes), None, unsure, oob)
        if init is not None:
            out2 = float_binary(op, init, out, dtype)
            out2.unsure, out2.oob = _or(unsure, init.unsure), _or(oob, init.oob)
            return out2
        return out


# ---------------------------------------------------------------------------- driver
def _topo(outputs) -> list:
    order, seen = [], set()

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for t in outputs:
        visit(t.op if isinstance(t, Tensor) else t)
    return order


def _grid(axes, ndim: int, first: int) -> dict:
    env = {}
    for k, iv in enumerate(axes):
        shape = [1] * ndim
        shape[first + k] = iv.dom.extent
        a = np.arange(iv.dom.min, iv.dom.min + iv.dom.extent, dtype=iv.var.dtype)
        env[iv.var] = Val(a.reshape(shape), iv.var.dtype)
    return env


def evaluate(outputs, inputs: dict) -> dict:
    """Evaluate the definitions of ``outputs`` on ``inputs``.

    Parameters
    ----------
    outputs : list of Tensor
        Tensors to compute (with every compute they read).
    inputs : dict
        Placeholder tensor (or its name) -> numpy array of its shape and dtype.

    Returns
    -------
    dict
        Tensor name -> :class:`Result`, for every tensor computed (inputs included).

    Raises
    ------
    ReferenceError
        For a read outside a tensor that the definition performs, a free scalar variable,
        or a combiner other than sum/max/min.
    """
    by_name = {(k if isinstance(k, str) else k.name): v for k, v in inputs.items()}
    ev = _Eval({})
    results = {}
    for op in _topo(outputs):
        if isinstance(op, PlaceholderOp):
            a = np.asarray(by_name[op.name])
            if a.shape != op.shape or a.dtype != np.dtype(op.dtype):
                raise ValueError(f"reference: input {op.name!r} has shape {a.shape} and dtype "
                                 f"{a.dtype}; expected {op.shape} {op.dtype}")
            res = Result(a, None, None, np.zeros(a.shape, bool))
        else:
            res = _compute(ev, op)
        ev.tensors[id(op)] = res
        results[op.name] = res
    return results


def _compute(ev: _Eval, op: ComputeOp) -> Result:
    body = op.body[0]
    shape = tuple(iv.dom.extent for iv in op.axis)
    ns = len(op.axis)
    if isinstance(body, Reduce):
        nr = len(body.axis)
        full = shape + tuple(iv.dom.extent for iv in body.axis)
        ev.env = {**_grid(op.axis, ns + nr, 0), **_grid(body.axis, ns + nr, ns)}
        src = ev.visit(body.source)
        cond = ev.visit(body.condition) if body.condition is not None else None
        init = None
        if body.init is not None:
            ev.env = _grid(op.axis, ns, 0)
            init = ev.visit(body.init)
        val = reduce(body, src, cond, init, nr, full)
    else:
        ev.env = _grid(op.axis, ns, 0)
        val = ev.visit(body)
    if val.oob is not None and np.any(val.oob):
        where = np.argwhere(np.broadcast_to(val.oob, shape))[0]
        raise ReferenceError(f"reference: stage {op.name!r} reads outside a tensor at "
                             f"{tuple(int(x) for x in where)}")
    value = np.broadcast_to(val.v, shape)
    dtype = op.output(0).dtype
    with np.errstate(all="ignore"):
        value = value.astype(dtype) if dtype != "float64" else value.astype(np.float64)
    err = mag = None
    if dt.is_float(dtype):
        err = np.array(np.broadcast_to(val.e(), shape), dtype=np.float64)
        mag = np.array(np.broadcast_to(val.m(), shape), dtype=np.float64)
    unsure = np.zeros(shape, bool) if val.unsure is None else np.array(
        np.broadcast_to(val.unsure, shape))
    return Result(np.ascontiguousarray(value), err, mag, unsure)


def tolerance(res: Result, dtype: str, relaxed: bool = False) -> np.ndarray:
    """Allowed ``|out - ref|`` per element: the error bound plus one ulp of the result
    (``relaxed``: plus ``8 u * mag`` for targets that keep float16 intermediates in float32)."""
    tol = res.err + ulp(res.value.astype(np.float64), dtype)
    if relaxed:
        tol = tol + 8 * UNIT[dtype] * res.mag
    return tol
