"""Vectorizable elementary functions, emitted as LLVM IR with llvmlite's builder.

LLVM lowers ``llvm.exp.v16f32`` (and libm's ``tanhf``...) to one libm call per lane, so a
vectorized loop that calls them runs at scalar speed. This module emits, instead, straight-line
code of additions, multiplications, FMAs, one or two divisions, integer bit manipulation and
``select``\\ s: code that is the same for a scalar and for any ``<N x T>`` vector.

Each routine is an ``internal alwaysinline`` function ``polytile.<name>[.fast][.nofma].<type>``
(``polytile.exp.v16f32``) defined once per module and type. The scalar code generator and the
vector widener call the same routine, so an element gets the same bits whichever path computes
it (the tail of a vectorized loop, a ``<5 x float>`` remainder or a scalar build): the lane
operations are identical and none of them carries a fast-math flag that would let LLVM
reassociate. ``float16`` is computed in ``float32`` and rounded once.

Methods (all polynomials are weighted minimax fits, see ``tools/vecmath_fit.py``; the error of a
fit is far below the rounding errors of its evaluation):

* ``exp``: Cody–Waite range reduction (Cody & Waite 1980, *Software Manual for the Elementary
  Functions*, ch. 6): ``x = n ln2 + r`` with ``|r| <= ln2/2``, ``n = rint(x log2e)`` found by
  adding the constant ``1.5 * 2**p`` (the rounded sum holds ``n`` in its low mantissa bits,
  no float-to-int conversion, so NaN lanes stay defined), ``r`` computed exactly with ``ln2``
  split into a head with trailing zero bits and a tail. ``exp(r) = 1 + expm1(r)`` with
  ``expm1(r) = r + r**2 P(r)``. The result is scaled by ``2**n`` as two powers of two built
  from bits, ``2**(n//2) * 2**(n - n//2)``, so gradual underflow (denormal results) and
  overflow to ``inf`` round exactly once, as in Tang 1989 (ACM TOMS 15(2)). A vector whose
  lanes all lie in ``exp_fast_range`` (normal results) skips the clamp and scales in one
  step, with the same bits.
* ``exp2``: ``n = rint(x)``, ``r = x - n`` exact, ``exp(r ln2)`` with ``r ln2`` as two products.
* ``expm1``: the same reduction; ``2**n (1 + p) - 1`` as one FMA ``s p + (s - 1)``, exact for
  ``n = 0``; ``x`` itself below ``2**-25`` (float32) / ``2**-54`` (float64).
* ``log``/``log2``/``log1p``: ``x = 2**e m`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` read from
  the bits (denormals scaled first), ``f = m - 1``, ``s = f / (2 + f)`` and
  ``log(1 + f) = f - (f**2/2 - s (f**2/2 + R(s**2)))`` where ``R`` is the series of
  ``2 atanh(s)/s - 2`` (the arrangement of fdlibm's ``e_log.c``, Sun 1993: the large terms are
  exact, the rounding errors sit in small corrections). ``log1p`` adds the rounding error of
  ``u = 1 + x`` back as ``(x - (u - 1)) / u`` (Goldberg 1991, ACM Computing Surveys 23(1), thm 4).
* ``tanh``: ``x + x**3 P(x**2)`` for ``|x| < 0.625``; above, ``1 - 2 / (exp(2|x|) + 1)``
  where the subtracted term is below 0.45 (its rounding errors stay under an ulp of the
  result) and tends to 0 without overflow; sign by ``copysign``.
* ``sigmoid``: ``e = exp(-|x|)``, ``1 / (1 + e)`` for ``x >= 0`` and ``e / (1 + e)`` below, so
  that neither branch overflows and tiny results stay accurate (down to denormals).
* ``erf``: ``x + x (P(x**2) - 1)`` for ``|x| < 0.875``; above, ``1 - erfc(x)`` with
  ``erfc(x) = t exp(-x**2 + g(t))``, ``t = 2 / (2 + |x|)`` and ``g`` a polynomial (the change
  of variable of Press et al., *Numerical Recipes* 2nd ed. 1992, §6.2 ``erfcc``); ``x**2`` is
  split exactly with an FMA. ``|x|`` is clamped at 4 (float32) / 6 (float64) where ``erf``
  rounds to 1.

Special values follow numpy: NaN in, NaN out; ``exp(-inf) = 0``, ``exp(inf) = inf``,
``log(0) = -inf``, ``log(x < 0) = NaN``, ``log(inf) = inf``, ``tanh``/``erf`` of ``±inf`` is
``±1``; ``-0.0`` keeps its sign where numpy's does (``tanh``, ``erf``, ``expm1``, ``log1p``);
denormal arguments and results are exact or correctly rounded like the rest (no flush to
zero). Arithmetic exceptions are not raised (no FP status flags are produced on purpose).

Accuracy, in ulps of the result's dtype, against numpy's float64 functions for float32
arguments and numpy's long double ones for float64 arguments (``math.erf`` for ``erf``;
``sigmoid`` as ``1/(1 + exp(-x))``, ``exp(x)/(1 + exp(x))`` for ``x < 0``): *measured* is the
max over about 11 million arguments per case (dense sweeps of the function's range and of its
overflow/underflow edges, denormals, random bit patterns), with FMA / without FMA hardware;
*bound* is what ``tests/targets/test_vecmath.py`` asserts on its own samples. float16 is
computed in float32 and rounded once more: at most 0.501 ulp, checked on all 65536 values.

==========  ======================  ======================  ==========================
routine     float32 measured        float64 measured        bound (float32, float64)
==========  ======================  ======================  ==========================
exp         0.89 / 0.91             0.89 / 0.91             1, 1
exp2        1.04 / 1.05             1.01 / 1.08             1.5, 1.5
expm1       1.20 / 1.22             1.36 / 1.36             1.5, 1.5
log         0.84 / 0.84             0.81 / 0.81             1, 1
log2        0.89 / 1.24             0.86 / 1.23             1, 1 (1.5 without FMA)
log1p       0.84 / 0.84             0.81 / 0.81             1, 1
tanh        1.28 / 1.28             1.28 / 1.28             1.5, 1.5
sigmoid     1.96 / 1.96             1.73 / 1.73             2.5, 2.5
erf         1.58 / 1.58             1.00 / 1.00             2, 2
fast_exp    2.26 / 2.28             (= exp)                 3 on its range (below)
fast_tanh   5.21 / 5.86             (= tanh)                6
fast_erf    5.84 / 7.15             (= erf)                 7 (8 without FMA)
==========  ======================  ======================  ==========================

(For comparison, numpy's own float32 ``exp`` is 1.03 ulp off at ``x = 26.715694``.)

Fast variants (``te.fast_exp``/``fast_tanh``/``fast_erf``, and every ``exp``/``tanh``/
``erf``/``sigmoid`` under a ``-fast-math`` target; float32 and float16 only, float64 keeps the
accurate routine): ``fast_exp`` has a shorter polynomial and one scaling step, so it returns
``0`` below ``x ≈ -87.68`` (results under ``2**-126`` are still correct down to there) and
``inf`` from ``x ≈ 88.376`` on, where the exact result is between ``2**127.5`` and
``FLT_MAX``; ``fast_tanh`` and ``fast_erf`` are odd rational functions ``x P(x**2)/Q(x**2)`` of
``|x|`` clamped at 9.125 and 4 (one division, no exponential), bounded by 1 in magnitude. All
three propagate NaN and map ``±inf`` like the accurate ones; ``sigmoid`` built on ``fast_exp``
(under ``-fast-math``) is within 4 ulps on ``fast_exp``'s range. What ``-fast-math`` changes
on the CPU, in all: these four functions switch to their fast variants, and the loop body's
own float arithmetic gets LLVM's ``fast`` flags (reassociation, no NaN/inf/signed zeros
assumed, reciprocals); the routines themselves never carry flags, so their NaN and infinity
handling only goes if the surrounding ``fast`` code lets LLVM assume there are none.
"""

from __future__ import annotations

from fractions import Fraction

import llvmlite.ir as ir

from . import vecmath_coeffs as C

#: the routines of this module (te call names)
NAMES = ("exp", "exp2", "expm1", "log", "log2", "log1p", "tanh", "sigmoid", "erf",
         "fast_exp", "fast_tanh", "fast_erf")
_FAST_NAMES = {"fast_exp": "exp", "fast_tanh": "tanh", "fast_erf": "erf"}
#: routines with a distinct fast float32 variant (used under ``-fast-math``)
_HAS_FAST = frozenset(("exp", "tanh", "erf", "sigmoid"))

_LN2 = Fraction("0.6931471805599453094172321214581765680755")
_LOG2E = Fraction("1.4426950408889634073599246810018921374266")


def _head(v: Fraction, bits: int) -> float:
    """``v`` truncated to ``bits`` significant bits (a float whose products with small
    integers are exact)."""
    e = 0
    while v >= 1:
        v, e = v / 2, e + 1
    while v < Fraction(1, 2):
        v, e = v * 2, e - 1
    m = int(v * 2**bits)
    return float(Fraction(m, 2**bits) * Fraction(2) ** e)


def _split(v: Fraction, bits: int) -> tuple[float, float]:
    hi = _head(v, bits)
    return hi, float(v - Fraction(hi))


class _Consts:
    """Per-precision constants; ``LN2_CW`` is Cody & Waite's split of ``ln2`` whose head
    times any reduction multiple ``|n| < 2**11`` is exact."""

    def __init__(self, f64: bool):
        self.f64 = f64
        self.mant = 52 if f64 else 23
        self.bias = 1023 if f64 else 127
        self.nbits = 64 if f64 else 32
        prec = 53 if f64 else 24
        self.ln2_cw = _split(_LN2, prec - 12)
        self.ln2 = _split(_LN2, prec)  # head representable in the dtype
        self.log2e = _split(_LOG2E, prec)
        self.shifter = 1.5 * 2.0**self.mant
        self.min_normal = 2.0**(1 - self.bias)
        self.denorm_scale = 54 if f64 else 25
        # clamps of the exp family: beyond them the result is 0 / inf (or -1 for expm1)
        self.exp_lo, self.exp_hi = (-746.0, 710.0) if f64 else (-104.0, 89.0)
        self.exp2_lo, self.exp2_hi = (-1076.0, 1025.0) if f64 else (-151.0, 129.0)
        # exp's one-step range: 2**n normal and exp(x) normal and finite, n = rint(x log2e)
        # (float32: n in [-125, 127]; float64: n in [-1020, 1023])
        self.exp_fast_range = (-707.0, 709.0) if f64 else (-86.5, 88.0)
        self.expm1_tiny = 2.0**-54 if f64 else 2.0**-25
        sfx = "F64" if f64 else "F32"
        self.expm1 = getattr(C, "EXPM1_" + sfx)
        self.log = getattr(C, "LOG_" + sfx)
        self.tanh = getattr(C, "TANH_" + sfx)
        self.erf_small = getattr(C, "ERF_SMALL_" + sfx)
        self.erfc = getattr(C, "ERFC_" + sfx)
        self.erfc_mid = getattr(C, f"ERFC_{sfx}_MID")
        self.erf_max = C.ERF_MAX_F64 if f64 else C.ERF_MAX_F32


_CONSTS = {False: _Consts(False), True: _Consts(True)}


def _suffix(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{t.element.intrinsic_name}"
    return t.intrinsic_name


class _Ops:
    """Lane-polymorphic arithmetic on one float type (scalar or vector) inside a routine."""

    def __init__(self, b: ir.IRBuilder, ty: ir.Type, fma: bool, call):
        self.b, self.ty, self.use_fma, self.call = b, ty, fma, call
        vec = isinstance(ty, ir.VectorType)
        self.lanes = ty.count if vec else 1
        self.k = _CONSTS[isinstance(ty.element if vec else ty, ir.DoubleType)]
        it = ir.IntType(self.k.nbits)
        self.ity = ir.VectorType(it, self.lanes) if vec else it

    def _splat(self, t: ir.Type, c: ir.Constant) -> ir.Constant:
        return ir.Constant(t, [c] * self.lanes) if isinstance(t, ir.VectorType) else c

    def c(self, v: float) -> ir.Constant:
        el = self.ty.element if isinstance(self.ty, ir.VectorType) else self.ty
        return self._splat(self.ty, ir.Constant(el, float(v)))

    def i(self, v: int) -> ir.Constant:
        return self._splat(self.ity, ir.Constant(ir.IntType(self.k.nbits), int(v)))

    def intrinsic(self, base: str, *args) -> ir.Value:
        m = self.b.module
        name = f"llvm.{base}.{_suffix(self.ty)}"
        fn = m.globals.get(name) or ir.Function(
            m, ir.FunctionType(self.ty, [a.type for a in args]), name=name)
        return self.b.call(fn, list(args))

    add = property(lambda self: self.b.fadd)
    sub = property(lambda self: self.b.fsub)
    mul = property(lambda self: self.b.fmul)
    div = property(lambda self: self.b.fdiv)
    sel = property(lambda self: self.b.select)

    def fma(self, a, x, y) -> ir.Value:
        """``a * x + y``: one rounding with FMA hardware, two without."""
        if self.use_fma:
            return self.intrinsic("fma", a, x, y)
        return self.b.fadd(self.b.fmul(a, x), y)

    def horner(self, x, coeffs) -> ir.Value:
        acc = self.c(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(c))
        return acc

    def cmp(self, op: str, a, b) -> ir.Value:
        return self.b.fcmp_ordered(op, a, b)  # false on NaN

    def clamp(self, x, lo: float, hi: float) -> ir.Value:
        """``x`` limited to ``[lo, hi]``; NaN stays NaN."""
        x = self.sel(self.cmp("<", x, self.c(lo)), self.c(lo), x)
        return self.sel(self.cmp(">", x, self.c(hi)), self.c(hi), x)

    def at_most_one(self, y) -> ir.Value:
        return self.sel(self.cmp(">", y, self.c(1.0)), self.c(1.0), y)

    def fabs(self, x) -> ir.Value:
        return self.intrinsic("fabs", x)

    def copysign(self, mag, sign) -> ir.Value:
        return self.intrinsic("copysign", mag, sign)

    def bits(self, x) -> ir.Value:
        return self.b.bitcast(x, self.ity)

    def pow2(self, n) -> ir.Value:
        """``2.0**n`` for an int ``n`` in the normal exponent range, from its bits."""
        return self.b.bitcast(self.b.shl(self.b.add(n, self.i(self.k.bias)), self.i(self.k.mant)),
                              self.ty)


# ----------------------------------------------------------------------- exp family
def _reduce(o: _Ops, x, with_lo: bool = False):
    """``x = n ln2 + r``: ``(n as float, n as int, r)`` for a clamped ``x``, and with
    ``with_lo`` the rounding error ``r_lo`` of ``r`` too (``x - n ln2 = r + r_lo``)."""
    k = o.k
    sh = o.c(k.shifter)
    kf = o.fma(x, o.c(float(_LOG2E)), sh)
    nf = o.sub(kf, sh)
    ni = o.b.sub(o.bits(kf), o.bits(sh))
    r_hi = o.fma(nf, o.c(-k.ln2_cw[0]), x)  # exact
    r = o.fma(nf, o.c(-k.ln2_cw[1]), r_hi)
    if not with_lo:
        return nf, ni, r
    return nf, ni, r, o.fma(nf, o.c(-k.ln2_cw[1]), o.sub(r_hi, r))


def _expm1_poly(o: _Ops, r):
    return o.fma(o.mul(r, r), o.horner(r, o.k.expm1), r)


def _scale2(o: _Ops, p, n):
    """``(1 + p) * 2**n`` for ``n`` up to twice the exponent range: one rounding in the FMA
    ``s1 p + s1`` with ``s1 = 2**(n//2)`` (a normal number), then an exact scaling by
    ``2**(n - n//2)`` unless the result is denormal or overflows, which rounds once more."""
    n1 = o.b.ashr(n, o.i(1))
    s1 = o.pow2(n1)
    return o.mul(o.fma(s1, p, s1), o.pow2(o.b.sub(n, n1)))


def _exp(o: _Ops, x, fast: bool):
    k = o.k
    if fast:  # one scaling step: n = -127 gives 0.0, n = 128 gives inf, from the bits
        nf, n, r = _reduce(o, o.clamp(x, -88.0, 89.0))
        p = o.fma(o.mul(r, r), o.horner(r, C.EXP_FAST_F32), r)
        return o.mul(o.add(p, o.c(1.0)), o.pow2(n))
    if o.lanes == 1:
        return _exp_accurate(o, x, clamp=True)
    # vectors: the lanes are all in the normal range (n = rint(x log2e) within the normal
    # exponents, the result normal) almost always; then no clamp is needed and 2**n scales
    # in one step (the same bits as the two steps: one rounding in the FMA, the second
    # product exact). Else (any lane out of it, or NaN) the full routine, which scalars
    # always take. The clamp (4 operations) and the second scaling (5) go for two compares
    # and a mask test; softmax's exponential pass is compute-bound (4096 x 4096, 1 thread,
    # CPU time, interleaved: 5.67 -> 5.34 ms).
    lo, hi = k.exp_fast_range
    inside = o.b.and_(o.cmp(">=", x, o.c(lo)), o.cmp("<=", x, o.c(hi)))  # false on NaN
    all_in = o.b.call(_reduce_and(o.b.module, inside.type), [inside])
    b = o.b
    fast_bb, slow_bb, done_bb = (b.append_basic_block(nm) for nm in ("normal", "edge", "done"))
    b.cbranch(all_in, fast_bb, slow_bb)
    b.position_at_end(fast_bb)
    y_fast = _exp_accurate(o, x, clamp=False)
    fast_end = b.block
    b.branch(done_bb)
    b.position_at_end(slow_bb)
    y_slow = _exp_accurate(o, x, clamp=True)
    slow_end = b.block
    b.branch(done_bb)
    b.position_at_end(done_bb)
    y = b.phi(o.ty)
    y.add_incoming(y_fast, fast_end)
    y.add_incoming(y_slow, slow_end)
    return y


def _reduce_and(module: ir.Module, ty: ir.VectorType) -> ir.Function:
    name = f"llvm.vector.reduce.and.v{ty.count}i1"
    return module.globals.get(name) or ir.Function(
        module, ir.FunctionType(ir.IntType(1), [ty]), name=name)


def _exp_accurate(o: _Ops, x, clamp: bool):
    """``exp(x)`` to 1 ulp; with ``clamp=False`` only for ``x`` in ``exp_fast_range``
    (every lane): no clamp, and ``2**n`` in one scaling step."""
    k = o.k
    xc = o.clamp(x, k.exp_lo, k.exp_hi) if clamp else x
    nf, n, r, r_lo = _reduce(o, xc, with_lo=True)
    p = o.add(r, o.fma(o.mul(r, r), o.horner(r, k.expm1), r_lo))
    if clamp:
        return _scale2(o, p, n)
    s = o.pow2(n)
    return o.fma(s, p, s)


def _exp2(o: _Ops, x, fast: bool):
    k = o.k
    xc = o.clamp(x, k.exp2_lo, k.exp2_hi)
    sh = o.c(k.shifter)
    kf = o.add(xc, sh)
    r = o.sub(xc, o.sub(kf, sh))
    n = o.b.sub(o.bits(kf), o.bits(sh))
    t = o.fma(r, o.c(k.ln2[0]), o.mul(r, o.c(k.ln2[1])))
    return _scale2(o, _expm1_poly(o, t), n)


def _expm1(o: _Ops, x, fast: bool):
    k = o.k
    nf, n, r, r_lo = _reduce(o, o.clamp(x, -80.0, k.exp_hi), with_lo=True)
    # expm1(r + r_lo) = r + q; r_lo matters where s (1 + r) is about as large as the result
    q = o.fma(o.mul(r, r), o.horner(r, k.expm1), r_lo)
    bias = o.i(k.bias)
    n1 = o.sel(o.b.icmp_signed(">", n, bias), bias, n)  # the top binade: finish with 2**n2
    s = o.pow2(n1)
    # s r + (s - 1) first, often exact, then the small s q: two roundings instead of the
    # rounding of expm1(r) magnified by s
    y = o.fma(s, q, o.fma(s, r, o.sub(s, o.c(1.0))))
    # where s - 1 is inexact the -1 hardly matters: s (r + q) + s rounds once
    y = o.sel(o.b.icmp_signed(">", n, o.i(k.mant + 1)), o.fma(s, o.add(r, q), s), y)
    y = o.mul(y, o.pow2(o.b.sub(n, n1)))
    return o.sel(o.cmp("<", o.fabs(x), o.c(k.expm1_tiny)), x, y)


# ----------------------------------------------------------------------- log family
def _log_parts(o: _Ops, u):
    """``log(u) = e ln2 + f - (hfsq - corr)`` for finite ``u > 0``: ``(e as float, f, hfsq,
    corr)``; garbage elsewhere (the callers select the special values)."""
    k, b = o.k, o.b
    tiny = o.cmp("<", u, o.c(k.min_normal))
    us = o.sel(tiny, o.mul(u, o.c(2.0**k.denorm_scale)), u)
    bits = o.bits(us)
    e = b.sub(b.ashr(bits, o.i(k.mant)),
              b.add(o.i(k.bias), b.select(tiny, o.i(k.denorm_scale), o.i(0))))
    one = o.bits(o.c(1.0))
    m = b.bitcast(b.or_(b.and_(bits, o.i((1 << k.mant) - 1)), one), o.ty)  # in [1, 2)
    big = o.cmp(">", m, o.c(2.0**0.5))
    m = o.sel(big, o.mul(m, o.c(0.5)), m)
    e = b.add(e, b.zext(big, o.ity))
    f = o.sub(m, o.c(1.0))
    s = o.div(f, o.add(f, o.c(2.0)))
    z = o.mul(s, s)
    rz = o.mul(z, o.horner(z, k.log))
    hfsq = o.mul(o.c(0.5), o.mul(f, f))
    corr = o.mul(s, o.add(hfsq, rz))
    return b.sitofp(e, o.ty), f, hfsq, corr


def _log_special(o: _Ops, x, y):
    """``y`` where ``0 < x < inf``; numpy's value at ``0``, negatives, ``inf`` and NaN."""
    ok = o.b.and_(o.cmp(">", x, o.c(0.0)), o.cmp("<", x, o.c(float("inf"))))
    sp = o.sel(o.cmp("==", x, o.c(0.0)), o.c(float("-inf")),
               o.sel(o.cmp("<", x, o.c(0.0)), o.c(float("nan")), x))
    return o.sel(ok, y, sp)


def _log(o: _Ops, x, fast: bool):
    ln2 = o.k.ln2_cw
    ef, f, hfsq, corr = _log_parts(o, x)
    low = o.sub(f, o.sub(hfsq, o.fma(ef, o.c(ln2[1]), corr)))
    return _log_special(o, x, o.fma(ef, o.c(ln2[0]), low))


def _log2(o: _Ops, x, fast: bool):
    l2e = o.k.log2e
    ef, f, hfsq, corr = _log_parts(o, x)
    # log(1 + f) = h + l with h = f - hfsq and l its rounding error (exact: |f| >= hfsq)
    # plus corr; only the product h log2e_hi and the final sum round at full size
    h = o.sub(f, hfsq)
    l = o.add(o.sub(o.sub(f, h), hfsq), corr)
    small = o.fma(h, o.c(l2e[1]), o.mul(l, o.c(l2e[0])))
    y = o.add(ef, o.fma(h, o.c(l2e[0]), small))
    return _log_special(o, x, y)


def _log1p(o: _Ops, x, fast: bool):
    ln2 = o.k.ln2_cw
    u = o.add(x, o.c(1.0))
    ef, f, hfsq, corr = _log_parts(o, u)
    c = o.div(o.sub(x, o.sub(u, o.c(1.0))), u)  # the rounding error of 1 + x, relative
    low = o.sub(f, o.sub(hfsq, o.fma(ef, o.c(ln2[1]), o.add(corr, c))))
    y = _log_special(o, u, o.fma(ef, o.c(ln2[0]), low))
    return o.sel(o.cmp("==", x, o.c(0.0)), x, y)


# ----------------------------------------------------------------------- tanh, sigmoid, erf
def _odd_rational(o: _Ops, x, a, top: float, p, q):
    """The fast forms of the odd functions tanh and erf: ``sign(x) min(1, a P(a^2) /
    Q(a^2))`` with ``a = |x|`` clamped to ``top``, where the function is 1 in float32."""
    ac = o.sel(o.cmp(">", a, o.c(top)), o.c(top), a)
    t = o.mul(ac, ac)
    y = o.div(o.mul(ac, o.horner(t, p)), o.horner(t, q))
    return o.copysign(o.at_most_one(y), x)


def _tanh(o: _Ops, x, fast: bool):
    a = o.fabs(x)
    if fast:
        return _odd_rational(o, x, a, C.TANH_FAST_MAX, C.TANH_FAST_F32_P, C.TANH_FAST_F32_Q)
    t2 = o.mul(a, a)
    small = o.fma(o.mul(a, t2), o.horner(t2, o.k.tanh), a)
    # 2/(e + 1) <= 0.45 here, so its rounding errors are below an ulp of the result
    big = o.sub(o.c(1.0), o.div(o.c(2.0), o.add(o.call("exp", o.add(a, a)), o.c(1.0))))
    return o.copysign(o.sel(o.cmp("<", a, o.c(C.TANH_SMALL)), small, big), x)


def _sigmoid(o: _Ops, x, fast: bool):
    e = o.call("exp", o.b.fneg(o.fabs(x)))
    pos = o.cmp(">=", x, o.c(0.0))
    d = o.add(e, o.c(1.0))
    q = o.div(o.sel(pos, o.c(1.0), e), d)  # NaN: e / d, which is NaN
    if fast:
        return q
    # d rounded 1 + e by d_lo (exact, as 1 >= e); q / (1 + d_lo/d) = q - q d_lo / d with
    # 1/d = q or 1 - q
    d_lo = o.sub(e, o.sub(d, o.c(1.0)))
    inv = o.sel(pos, q, o.sub(o.c(1.0), q))
    return o.fma(o.b.fneg(o.mul(q, inv)), d_lo, q)


def _erf(o: _Ops, x, fast: bool):
    k = o.k
    a = o.fabs(x)
    if fast:
        return _odd_rational(o, x, a, C.ERF_MAX_F32, C.ERF_FAST_F32_P, C.ERF_FAST_F32_Q)
    # a + a (P(a**2) - 1): the rounding error of the polynomial is scaled by |P - 1| <= 0.13
    small = o.fma(a, o.horner(o.mul(a, a), (k.erf_small[0] - 1.0,) + k.erf_small[1:]), a)
    ac = o.sel(o.cmp(">", a, o.c(k.erf_max)), o.c(k.erf_max), a)
    t = o.div(o.c(2.0), o.add(ac, o.c(2.0)))
    g = o.horner(o.sub(t, o.c(k.erfc_mid)), k.erfc)
    sq = o.mul(ac, ac)
    arg = o.sub(g, sq)
    if o.use_fma:  # the rounding error of ac*ac, exactly
        arg = o.sub(arg, o.fma(ac, ac, o.b.fneg(sq)))
    big = o.sub(o.c(1.0), o.mul(t, o.call("exp", arg)))
    return o.copysign(o.sel(o.cmp("<", a, o.c(C.ERF_SMALL)), small, big), x)


_BODIES = {"exp": _exp, "exp2": _exp2, "expm1": _expm1, "log": _log, "log2": _log2,
           "log1p": _log1p, "tanh": _tanh, "sigmoid": _sigmoid, "erf": _erf}


def _routine(module: ir.Module, name: str, ty: ir.Type, fast: bool, fma: bool) -> ir.Function:
    """The function ``polytile.<name>...`` of ``ty -> ty`` in ``module``, defined once."""
    key = f"polytile.{name}{'.fast' if fast else ''}{'' if fma else '.nofma'}.{_suffix(ty)}"
    fn = module.globals.get(key)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(ty, [ty]), name=key)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def call(other: str, v):
        return b.call(_routine(module, other, ty, fast and other in _HAS_FAST, fma), [v])

    b.ret(_BODIES[name](_Ops(b, ty, fma, call), fn.args[0], fast))
    return fn


def emit(b: ir.IRBuilder, name: str, x: ir.Value, dtype: str, *, fast: bool = False,
         fma: bool = True) -> ir.Value:
    """Emit ``name(x)`` at ``b``'s position (a call of the module's routine, inlined by
    LLVM's optimizer).

    Parameters
    ----------
    b : llvmlite.ir.IRBuilder
    name : str
        One of :data:`NAMES`; ``fast_exp``/``fast_tanh``/``fast_erf`` are the fast variants.
    x : llvmlite.ir.Value
        A ``half``/``float``/``double`` scalar or vector of any number of lanes.
    dtype : str
        ``float16``, ``float32`` or ``float64``: the dtype of ``x``'s lanes.
    fast : bool
        Use the fast variant of ``exp``/``tanh``/``erf``/``sigmoid`` (a ``-fast-math``
        target); ignored for float64 and for the other routines.
    fma : bool
        The target has FMA instructions (``llvm.fma``); else ``a*b + c`` is two roundings.

    Returns
    -------
    llvmlite.ir.Value
        The result, of ``x``'s type.
    """
    if name in _FAST_NAMES:
        name, fast = _FAST_NAMES[name], True
    if dtype == "float16":
        lanes = x.type.count if isinstance(x.type, ir.VectorType) else 1
        ft = ir.VectorType(ir.FloatType(), lanes) if lanes > 1 else ir.FloatType()
        y = emit(b, name, b.fpext(x, ft), "float32", fast=fast, fma=fma)
        return b.fptrunc(y, x.type)
    fast = fast and dtype == "float32" and name in _HAS_FAST
    return b.call(_routine(b.module, name, x.type, fast, fma), [x])
