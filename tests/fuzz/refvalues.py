"""Values of the reference evaluator (:mod:`.reference`) and the elementwise operations on
them: numpy arrays with error bounds, magnitudes and masks (see that module for the rules)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polytile.te import dtype as dt


class ReferenceError(Exception):
    """The definition itself is ill-formed (an out-of-bounds read it performs)."""


#: unit roundoff (half an ulp of 1.0) per float dtype
UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24,
        "float64": 2.0 ** -53}
#: dtype of the accumulator of a float reduction (the project's rule)
ACCUMULATOR = {"float16": "float32", "bfloat16": "float32", "float32": "float32",
               "float64": "float64"}


class _BF16Info:
    """``np.finfo`` of bfloat16 (numpy has no bfloat16)."""

    max = float((2 - 2.0 ** -7) * 2.0 ** 127)
    tiny = 2.0 ** -126


def finfo(dtype: str):
    """``np.finfo(dtype)``, bfloat16 included."""
    return _BF16Info if dtype == "bfloat16" else np.finfo(dtype)


def storage_dtype(dtype: str) -> str:
    """The numpy dtype holding values of ``dtype`` in the reference: ``float32`` for
    bfloat16 (exact), ``int8``/``uint8`` for int4/uint4 (unpacked), else ``dtype``."""
    return {"bfloat16": "float32", "int4": "int8", "uint4": "uint8"}.get(dtype, dtype)
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


def mask_or(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a | b


def err_add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def round_to(x, dtype: str):
    """``x`` (float64) rounded to float ``dtype`` and back."""
    if dtype == "float64":
        return np.asarray(x, dtype=np.float64)
    if dtype == "bfloat16":  # through float32, to nearest even (te/dtype.py)
        return dt.bfloat16_to_float32(dt.bfloat16_bits(x)).astype(np.float64)
    with np.errstate(all="ignore"):
        return np.asarray(x, dtype=np.float64).astype(dtype).astype(np.float64)


def ulp(x, dtype: str):
    """Spacing of float ``dtype`` at ``|x|`` (float64; the largest finite spacing above)."""
    with np.errstate(all="ignore"):
        a = np.abs(np.asarray(x, dtype=np.float64))
        fin = finfo(dtype)
        a = np.where(np.isfinite(a), np.minimum(a, float(fin.max)), float(fin.max))
        if dtype == "bfloat16":  # float32's spacing, 16 bits fewer
            a = round_to(a, dtype).astype(np.float32)
            return np.spacing(a).astype(np.float64) * 65536.0
        return np.spacing(a.astype(dtype)).astype(np.float64)


def rounded(r, dtype: str, err, mag, unsure=None, extra=None) -> Val:
    """Round the exact float64 result ``r`` of an op of ``dtype`` whose inputs carried the
    propagated error ``err`` (plus ``extra``, an error of the op itself)."""
    e = err_add(err, extra)
    v = round_to(r, dtype)
    if e is not None:
        e = np.where(e > 0, e + ulp(np.abs(v) + e, dtype), 0.0)
        with np.errstate(all="ignore"):
            fmax = float(finfo(dtype).max)
            near = (np.abs(r) + e > fmax) & np.isfinite(v) & (e > 0)
        unsure = mask_or(unsure, near)
    return Val(v, dtype, e, mag, None, unsure)


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
                unsure = mask_or(unsure, (x.err > 0) & (np.abs(x.v) <= x.err))
            return Val(np.asarray(x.v != 0), "bool", unsure=unsure, oob=x.oob)
        if dt.is_float(to):
            if not dt.is_float(src):
                v = x.v.astype(np.float64)
                return Val(round_to(v, to), to, unsure=x.unsure, oob=x.oob)
            out = rounded(x.v, to, x.err, x.mag, x.unsure)
            out.oob = x.oob
            if x.fma is not None:
                # an exact conversion may vanish from the compiled code (fpext folds into
                # a fused multiply-add, fptrunc(fpext p) into p), so the product under it
                # stays fusable (fuzz seed llvm 22074: f16(f32(j * a)) - j)
                out.fma = np.where(out.v == x.v, x.fma, 0.0)
            return out
        # to an integer
        if dt.is_float(src):
            t = np.trunc(x.v)
            lo, hi = dt.min_value(to), dt.max_value(to)
            unsure = mask_or(x.unsure, ~np.isfinite(t) | (t < lo) | (t > hi))
            if x.err is not None:
                unsure = mask_or(unsure, np.trunc(x.v - x.err) != np.trunc(x.v + x.err))
            t = np.where(unsure, 0, t)
            return Val(t.astype(storage_dtype(to)), to, unsure=unsure, oob=x.oob)
        return Val(wrap(np.asarray(x.v).astype(np.int64), to), to, unsure=x.unsure,
                   oob=x.oob)


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
            return Val(wrap(r, dtype), dtype)
        if op in ("min", "max"):
            return Val(np.asarray((np.minimum if op == "min" else np.maximum)(x, y)), dtype)
        if op in ("floordiv", "floormod", "truncdiv", "truncmod"):
            zero = y == 0    # INT_MIN / -1 wraps to INT_MIN (numpy), below
            unsure = zero if np.any(zero) else None
            xw, yw = x.astype(wide), np.where(y == 0, 1, y).astype(wide)
            if op == "floordiv":
                r = xw // yw
            elif op == "floormod":
                r = xw % yw
            else:
                q = _trunc_div(xw, yw)
                r = q if op == "truncdiv" else xw - q * yw
            return Val(wrap(r, dtype), dtype, unsure=unsure)
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
            return Val(wrap(r, dtype), dtype, unsure=unsure)
    raise ReferenceError(f"reference: integer op {op!r} on {dtype}")


def wrap(r, dtype: str):
    """Integers ``r`` wrapped into ``dtype`` (two's complement; int4/uint4 modulo 16)."""
    if dtype == "bool":
        return np.asarray(r != 0)
    if dt.is_int4(dtype):
        x = np.asarray(r).astype(np.int64) & 15
        if dtype == "int4":
            x = np.where(x >= 8, x - 16, x)
        return x.astype(storage_dtype(dtype))
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
            err = err_add(ea, eb)
            fused = err_add(a.fma, b.fma)  # a * b + c may run as one fused multiply-add
            mag = a.m() + b.m()
            return rounded(r, dtype, err, mag, None, fused)
        if op == "mul":
            r = x * y
            err = None
            if ea is not None or eb is not None:
                err = np.abs(x) * b.e() + np.abs(y) * a.e() + a.e() * b.e()
            out = rounded(r, dtype, err, a.m() * b.m())
            out.fma = np.abs(r - out.v)
            # x * -1 is folded into a negation, which the consumer's subtraction absorbs:
            # a product under it stays fusable (fuzz seed llvm 15522: -(p * a) - a)
            for p, q in ((a, y), (b, x)):
                if p.fma is not None:
                    out.fma = np.where(np.abs(q) == 1, np.maximum(out.fma, p.fma), out.fma)
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
            return rounded(r, dtype, err, a.m() / np.abs(y), unsure)
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
        return Val(wrap(np.abs(np.asarray(args[0].v).astype(np.int64)), dtype), dtype)
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
            image, unsure = _image(name, fn, [(a.v - a.e(), a.v + a.e()) for a in args], r)
            if name in _STEP_CALLS:
                for c in image:
                    unsure |= c != r
            else:
                err = np.zeros(np.shape(r))
                for c in image:
                    err = np.maximum(err, np.abs(c - r))
                err = np.where(unsure | np.isnan(err), 0.0, err)
        if name not in _EXACT_CALLS:
            err = err_add(err, LIBM_ULPS * ulp(v, dtype))
        if err is not None:
            err = np.where(err > 0, err + ulp(np.abs(v) + err, dtype), 0.0)
    return Val(v, dtype, err, np.abs(v), None, unsure)


#: functions continuous but not monotonic on their domain: (argument positions, the
#: critical points where an extreme lies inside an argument's interval); ``"sincos"`` stands
#: for the extremes of sin/cos, which repeat every pi
_CRITICAL = {"abs": {0: 0.0}, "cosh": {0: 0.0}, "hypot": {0: 0.0, 1: 0.0},
             "pow": {0: 0.0}, "copysign": {0: 0.0},
             "sin": {0: "sincos"}, "cos": {0: "sincos"}}


def _points(name: str, pos: int, lo, hi) -> list:
    """The argument values at which ``name`` may take its extremes over ``[lo, hi]``:
    the interval's ends, and every critical point inside it (clipped into the interval
    where it lies outside, which repeats an end)."""
    crit = _CRITICAL.get(name, {}).get(pos)
    pts = [lo, hi]
    if crit == "sincos":
        # sin has extremes at pi/2 + k*pi, cos at k*pi; the first two at or above `lo`
        # are a maximum and a minimum, and both are inside the interval when it is pi wide
        phase = np.pi / 2 if name == "sin" else 0.0
        first = phase + np.ceil((lo - phase) / np.pi) * np.pi
        pts += [np.clip(first, lo, hi), np.clip(first + np.pi, lo, hi)]
    elif crit is not None:
        pts.append(np.clip(crit, lo, hi))
    return pts


def _discontinuous(name: str, lo_hi) -> np.ndarray | bool:
    """Where ``name`` jumps (or has a pole) inside the box ``lo_hi`` of its arguments: the
    image of the box is then not bounded by values at points of it."""
    (lo, hi) = lo_hi[0]
    if name == "tan":    # poles at pi/2 + k*pi
        return np.floor((lo - np.pi / 2) / np.pi) != np.floor((hi - np.pi / 2) / np.pi)
    if name in ("rsqrt", "log", "log2", "log10"):    # a pole at 0 (and NaN below it)
        return lo <= 0
    if name == "log1p":
        return lo <= -1
    if name == "copysign":    # the sign of the second argument
        return (lo_hi[1][0] <= 0) & (lo_hi[1][1] >= 0)
    if name == "atan2":    # the branch cut along y = 0, x < 0 (and the origin)
        (ylo, yhi), (xlo, _) = lo_hi
        return (ylo <= 0) & (yhi >= 0) & (xlo <= 0)
    if name in ("fmod", "pow"):
        # fmod jumps where x / y crosses an integer or y crosses 0; pow has poles at x = 0
        # for negative exponents and NaN for negative bases: both are left to the caller's
        # test of non-finite values except for fmod's jumps
        if name == "pow":
            return False
        (xlo, xhi), (ylo, yhi) = lo_hi
        q = [np.trunc(a / b) for a in (xlo, xhi) for b in (ylo, yhi)]
        return (ylo <= 0) & (yhi >= 0) | (q[0] != q[1]) | (q[0] != q[2]) | (q[0] != q[3])
    return False


def _image(name: str, fn, lo_hi, r):
    """Bounds of the image of the box ``lo_hi`` (a ``(lo, hi)`` pair per argument) under
    math function ``name``: its values at the points where the extremes can lie (the
    corners, and critical points inside), and where no bound holds (``unsure``: a jump, a
    pole, or a point outside the domain, NaN or infinite where the value ``r`` is finite).

    Values at the corners alone bound only a monotonic function (fuzz seed llvm 98688:
    ``sqrt(|x|)`` with ``x`` straddling 0 gave NaN corners, which zeroed the bound)."""
    per_arg = [_points(name, k, lo, hi) for k, (lo, hi) in enumerate(lo_hi)]
    image = [np.asarray(fn(*p), dtype=np.float64) for p in _product(per_arg)]
    unsure = np.zeros(np.shape(r), bool) | _discontinuous(name, lo_hi)
    finite = np.isfinite(r)
    for c in image:
        unsure |= finite & ~np.isfinite(c)
    return image, unsure


def _product(per_arg):
    if not per_arg:
        yield ()
        return
    for tail in _product(per_arg[1:]):
        for p in per_arg[0]:
            yield (p,) + tail
