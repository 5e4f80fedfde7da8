"""Offline generator of the polynomial coefficients in ``targets/llvm/vecmath_coeffs.py``.

Run ``python3 tools/vecmath_fit.py > targets/llvm/vecmath_coeffs.py`` (about a minute;
needs ``mpmath`` and ``scipy``, which polytile itself does not). Nothing imports this module at
run time.

Each polynomial is a weighted minimax approximation found with the Remez exchange
algorithm (Remez 1934; as presented in Muller, *Elementary Functions: Algorithms and
Implementation*, 3rd ed. 2016, ch. 3): on a reference of ``n + 1`` points solve the linear
system that makes the weighted error equioscillate with level ``E``, then move the reference
to the alternating extrema of the error on a dense grid, until the extrema are all as large
as ``|E|``. The arithmetic is mpmath's at 60 digits, so the float64 coefficients are exact
to their last bit before they are rounded. The approximated quantities are chosen so that the
leading terms are fixed exactly (``expm1(r) = r + r**2 * P(r)``) and so that the weight makes
the error relative to the final function value (see ``_specs``). The fast float32 tanh
and erf are odd rational functions instead, fitted by :func:`rational_odd`.
"""

from __future__ import annotations

import sys


def _mp():
    import mpmath

    mpmath.mp.dps = 60
    return mpmath


def remez(f, basis, weight, a, b, grid: int = 3000, iters: int = 40):
    """Coefficients ``c`` minimising ``max |weight(x) * (f(x) - sum c_j basis_j(x))|`` on
    ``[a, b]`` and that maximum; ``f``/``basis``/``weight`` take and return mpmath numbers."""
    mp = _mp()
    n = len(basis)
    a, b = mp.mpf(a), mp.mpf(b)
    # the grid avoids the end points where some targets have removable singularities
    xs = [(a + b) / 2 - (b - a) / 2 * mp.cos(mp.pi * (i + 0.5) / grid) for i in range(grid)]
    fx = [f(x) for x in xs]
    wx = [weight(x) for x in xs]
    bx = [[phi(x) for phi in basis] for x in xs]
    ref = [int(round((grid - 1) * (1 - mp.cos(mp.pi * i / n)) / 2)) for i in range(n + 1)]
    best = None
    for _ in range(iters):
        m = mp.matrix(n + 1, n + 1)
        rhs = mp.matrix(n + 1, 1)
        for r, i in enumerate(ref):
            for j in range(n):
                m[r, j] = bx[i][j]
            m[r, n] = (-1) ** r / wx[i]
            rhs[r] = fx[i]
        sol = mp.lu_solve(m, rhs)
        c = [sol[j] for j in range(n)]
        err = [wx[i] * (fx[i] - mp.fsum(cj * p for cj, p in zip(c, bx[i])))
               for i in range(grid)]
        emax = max(abs(e) for e in err)
        if best is None or emax < best[1]:
            best = (c, emax)
        level = abs(sol[n])
        if emax <= level * (1 + mp.mpf("1e-4")):
            break
        ref = _exchange(err, n + 1)
    return best


def _exchange(err, k: int) -> list:
    """``k`` grid indices of alternating-sign extrema of ``err`` holding its global max."""
    segs = []  # (index of the largest |err| in a run of one sign)
    start = 0
    for i in range(1, len(err) + 1):
        if i == len(err) or (err[i] >= 0) != (err[start] >= 0):
            j = max(range(start, i), key=lambda t: abs(err[t]))
            segs.append(j)
            start = i
    while len(segs) > k:
        # drop the smaller end, which keeps the alternation
        if abs(err[segs[0]]) < abs(err[segs[-1]]):
            segs.pop(0)
        else:
            segs.pop()
    if len(segs) < k:  # too few sign changes: keep the old shape, spread the points
        n = len(err)
        segs = sorted(set(segs) | {int(i * (n - 1) / (k - 1)) for i in range(k)})[:k]
    return segs


# -- the approximated quantities ------------------------------------------------------------
def _specs():
    mp = _mp()
    ln2 = mp.log(2)
    rexp = ln2 / 2 * (1 + mp.mpf(2) ** -8)  # slack for the reduction without FMA
    zlog = ((mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)) ** 2 * (1 + mp.mpf(2) ** -8)

    def erfc_g(t):
        x = 2 / t - 2
        return mp.log(mp.erfc(x) / t) + x * x

    def erfc_w(t):
        x = 2 / t - 2
        return mp.erfc(x) / mp.erf(x)

    def spec_expm1(deg):
        # expm1(r) = r + r**2 * (c0 + c1 r + ...), error relative to expm1(r)
        return (lambda r: mp.expm1(r) - r, [lambda r, k=k: r ** (k + 2) for k in range(deg - 1)],
                lambda r: 1 / abs(mp.expm1(r)), -rexp, rexp)

    def spec_log(deg):
        # log(1+f) = f - hfsq + s (hfsq + R(z)), z = s**2, R(z) = z (c0 + c1 z + ...)
        return (lambda z: 2 * mp.atanh(mp.sqrt(z)) / mp.sqrt(z) - 2,
                [lambda z, k=k: z ** (k + 1) for k in range(deg)], lambda z: mp.mpf(1),
                0, zlog)

    def spec_tanh(deg, hi):
        # tanh(x) = x + x * t * (c0 + c1 t + ...), t = x**2, relative error
        return (lambda t: mp.tanh(mp.sqrt(t)) / mp.sqrt(t) - 1,
                [lambda t, k=k: t ** (k + 1) for k in range(deg)],
                lambda t: mp.sqrt(t) / mp.tanh(mp.sqrt(t)), 0, hi * hi)

    def spec_erf_small(deg, hi):
        # erf(x) = x (c0 + c1 t + ...), t = x**2, relative error
        return (lambda t: mp.erf(mp.sqrt(t)) / mp.sqrt(t),
                [lambda t, k=k: t ** k for k in range(deg)],
                lambda t: mp.sqrt(t) / mp.erf(mp.sqrt(t)), 0, hi * hi)

    def spec_erfc(deg, lo, hi):
        # erfc(x) = t exp(-x**2 + g(t)), t = 2 / (2 + x); g in powers of (t - mid); the
        # weight erfc/erf makes the error relative to erf(x) = 1 - erfc(x)
        t0, t1 = 2 / (2 + mp.mpf(hi)), 2 / (2 + mp.mpf(lo))
        mid = (t0 + t1) / 2
        return (erfc_g, [lambda t, k=k: (t - mid) ** k for k in range(deg)], erfc_w, t0, t1,
                mid)

    def spec_exp_rel(deg):
        # exp(r) = 1 + r + r**2 * (c0 + c1 r + ...), error relative to exp(r)
        return (lambda r: mp.exp(r) - 1 - r, [lambda r, k=k: r ** (k + 2) for k in range(deg - 1)],
                lambda r: 1 / mp.exp(r), -rexp, rexp)

    return {
        "EXPM1_F32": spec_expm1(6),
        "EXPM1_F64": spec_expm1(11),
        "EXP_FAST_F32": spec_exp_rel(5),
        "LOG_F32": spec_log(3),
        "LOG_F64": spec_log(7),
        "TANH_F32": spec_tanh(5, TANH_SMALL),
        "TANH_F64": spec_tanh(11, TANH_SMALL),
        "ERF_SMALL_F32": spec_erf_small(6, ERF_SMALL),
        "ERF_SMALL_F64": spec_erf_small(11, ERF_SMALL),
        "ERFC_F32": spec_erfc(5, ERF_SMALL, ERF_MAX_F32),
        "ERFC_F64": spec_erfc(14, ERF_SMALL, ERF_MAX_F64),
    }


def rational_odd(f, hi: float, n_p: int, n_q: int, grid: int = 3000, iters: int = 15):
    """Odd rational ``x P(x**2) / Q(x**2)`` (``Q(0) = 1``) of least max relative error to the
    numpy function ``f`` on ``[0, hi]``, by the differential correction algorithm (Cheney &
    Loeb 1961): each step solves, as a linear program (scipy's HiGHS), the minimax problem
    linearised with the previous denominator. Float64 arithmetic: enough for float32 use.
    Returns ``(P coefficients, Q coefficients, max relative error)``."""
    import numpy as np
    from scipy.optimize import linprog

    x = hi * (1 - np.cos(np.pi * (np.arange(grid) + 0.5) / grid)) / 2
    fx = f(x)
    t = x * x
    q_prev = np.ones_like(x)
    best = None
    for _ in range(iters):
        w = 1 / (np.abs(fx) * q_prev)
        a = np.concatenate([x[:, None] * t[:, None] ** np.arange(n_p),
                            -fx[:, None] * t[:, None] ** np.arange(1, n_q + 1)], axis=1)
        a *= w[:, None]
        nv = a.shape[1]
        ones = np.ones((grid, 1))
        res = linprog(np.r_[np.zeros(nv), 1.0], A_ub=np.block([[a, -ones], [-a, -ones]]),
                      b_ub=np.r_[fx * w, -fx * w], bounds=[(None, None)] * nv + [(0, None)],
                      method="highs")
        p, q = res.x[:n_p], np.r_[1.0, res.x[n_p:nv]]
        q_prev = np.polyval(q[::-1], t)
        err = np.max(np.abs(x * np.polyval(p[::-1], t) / q_prev / fx - 1))
        if best is None or err < best[2]:
            best = (p, q, err)
    return best


def _rationals():
    import math

    import numpy as np

    return {"TANH_FAST_F32": (np.tanh, TANH_FAST_MAX, 5, 5),
            "ERF_FAST_F32": (np.vectorize(math.erf), ERF_MAX_F32, 7, 5)}


#: interval ends shared with :mod:`.vecmath` (through the generated module)
TANH_SMALL = 0.625
ERF_SMALL = 0.875
ERF_MAX_F32 = 4.0
ERF_MAX_F64 = 6.0
TANH_FAST_MAX = 9.125


def main(names=None) -> None:
    mp = _mp()
    specs = _specs()
    out = ['"""Polynomial coefficients of :mod:`.vecmath`, lowest degree first.', "",
           "Generated by ``python3 targets/llvm/vecmath_fit.py`` (weighted Remez fits in "
           "mpmath);", 'do not edit by hand. Each comment gives the weighted max '
           'error of the fit before rounding."""', "",
           f"TANH_SMALL = {TANH_SMALL!r}", f"ERF_SMALL = {ERF_SMALL!r}",
           f"ERF_MAX_F32 = {ERF_MAX_F32!r}", f"ERF_MAX_F64 = {ERF_MAX_F64!r}",
           f"TANH_FAST_MAX = {TANH_FAST_MAX!r}", ""]
    for name, spec in specs.items():
        if names and name not in names:
            continue
        f, basis, w, a, b = spec[:5]
        c, e = remez(f, basis, w, a, b)
        out.append(f"# max weighted error {mp.nstr(e, 3)} on [{mp.nstr(a, 6)}, {mp.nstr(b, 6)}]")
        if len(spec) > 5:
            out.append(f"{name}_MID = {float(spec[5])!r}")
        out.append(f"{name} = (")
        out += [f"    {float(x)!r}," for x in c]
        out.append(")")
        print(name, mp.nstr(e, 3), file=sys.stderr)
    for name, (f, hi, n_p, n_q) in _rationals().items():
        if names and name not in names:
            continue
        p, q, e = rational_odd(f, hi, n_p, n_q)
        out.append(f"# x P(x**2) / Q(x**2), max relative error {e:.3g} on [0, {hi}]")
        for suffix, c in (("P", p), ("Q", q)):
            out.append(f"{name}_{suffix} = (")
            out += [f"    {float(v)!r}," for v in c]
            out.append(")")
        print(name, f"{e:.3g}", file=sys.stderr)
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:] or None)
