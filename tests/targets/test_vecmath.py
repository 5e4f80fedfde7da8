"""The vectorizable elementary functions of the LLVM backend (targets/llvm/vecmath.py).

Accuracy is measured in ulps of the result's dtype against numpy's float64 functions for
float16/float32 arguments and numpy's long double ones for float64 arguments (``math.erf``
for erf), on dense sweeps of each function's range and of its overflow/underflow edges, on
random bit patterns (every exponent, denormals, NaN, inf) and, for float16, on all 65536
values. ``BOUNDS`` are the bounds stated in the vecmath docstring.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import polytile
from polytile import te

LD = np.longdouble
F16, F32, F64 = np.float16, np.float32, np.float64

#: stated max ulp error: (float32, float64)
BOUNDS = {"exp": (1, 1), "exp2": (1.5, 1.5), "expm1": (1.5, 1.5), "log": (1, 1),
          "log2": (1, 1), "log1p": (1, 1), "tanh": (1.5, 1.5), "sigmoid": (2.5, 2.5),
          "erf": (2, 2), "fast_exp": (3, 1), "fast_tanh": (6, 1.5), "fast_erf": (7, 2)}
#: without FMA hardware (float32), where the bound differs
NOFMA_BOUNDS = {"log2": 1.5, "fast_erf": 8}
F16_BOUND = 0.501  # the float32 result rounded again: double rounding, rarely

# dense sweeps (float32, float64): the body of each function and its edges
SWEEPS = {
    "exp": ([(-104, 89), (-104, -87), (88.3, 88.8)], [(-746, 710), (-746, -707), (709, 710)]),
    "exp2": ([(-151, 129), (-151, -125), (127.5, 128.5)],
             [(-1076, 1025), (-1076, -1021), (1023, 1025)]),
    "expm1": ([(-20, 89), (-1, 1), (88.3, 88.8)], [(-40, 710), (-1, 1), (709, 710)]),
    "log": ([(0, 4), (0.99, 1.01), (1e37, 3e38)], [(0, 4), (0.99, 1.01), (1e307, 1.7e308)]),
    "log2": ([(0, 4), (0.99, 1.01)], [(0, 4), (0.99, 1.01)]),
    "log1p": ([(-1, 3), (-1e-3, 1e-3)], [(-1, 3), (-1e-3, 1e-3)]),
    "tanh": ([(-10, 10), (0.6, 0.65), (-1e-3, 1e-3)], [(-20, 20), (0.6, 0.65), (-1e-3, 1e-3)]),
    "sigmoid": ([(-105, 20), (-105, -86)], [(-746, 40), (-746, -700)]),
    "erf": ([(-4.5, 4.5), (0.85, 0.9), (3.8, 4.2)], [(-6.5, 6.5), (0.85, 0.9), (5.8, 6.2)]),
    "fast_exp": ([(-87.3, 88.37), (-87.3, -86)], [(-746, 710)]),
    "fast_tanh": ([(-10, 10), (-1e-3, 1e-3)], [(-20, 20)]),
    "fast_erf": ([(-4.5, 4.5), (-1e-3, 1e-3)], [(-6.5, 6.5)]),
}
NAMES = tuple(SWEEPS)

N = 4099  # kernel length: a prime, so that every vector width leaves a remainder


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_erf = np.vectorize(math.erf, otypes=[np.float64])
REF = {"exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
       "log1p": np.log1p, "tanh": np.tanh, "sigmoid": _sigmoid,
       "erf": lambda v: _erf(v.astype(np.float64))}


def reference(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(REF[name.removeprefix("fast_")](x.astype(LD if x.dtype == F64
                                                                   else np.float64)))


def ulp_errors(y: np.ndarray, ref: np.ndarray, dtype) -> np.ndarray:
    """``|y - ref|`` in ulps of ``dtype`` at ``ref``; infinities count as the first value
    past the largest finite one; NaN against NaN is 0, NaN against a number inf."""
    info = np.finfo(dtype)
    top = LD(float(info.max)) + LD(2.0) ** (int(info.maxexp) - 1 - info.nmant)
    with np.errstate(all="ignore"):
        r, v = (np.clip(np.nan_to_num(a.astype(LD), nan=0, posinf=top, neginf=-top), -top, top)
                for a in (ref, y))
    _, e = np.frexp(np.abs(r))
    ex = np.where(r == 0, info.minexp, np.maximum(e - 1, info.minexp))
    err = (np.abs(v - r) / np.ldexp(LD(1), ex - info.nmant)).astype(np.float64)
    nan_r, nan_y = np.isnan(ref), np.isnan(y)
    return np.where(nan_r | nan_y, np.where(nan_r & nan_y, 0.0, np.inf), err)


_KERNELS: dict = {}


def kernel(name: str, dtype: str, lanes, target: str = "llvm", n: int = N):
    """A build of ``C[i] = name(A[i])``; ``lanes`` None: scalar, an int: split by it and
    vectorize the inner loop, ``"all"``: vectorize the whole axis."""
    key = (name, dtype, lanes, target, n)
    if key not in _KERNELS:
        A = te.placeholder((n,), name="A", dtype=dtype)
        C = te.compute((n,), lambda i: getattr(te, name)(A[i]), name="C")
        s = te.create_schedule(C.op)
        if lanes == "all":
            s[C].vectorize(C.op.axis[0])
        elif lanes:
            s[C].vectorize(s[C].split(C.op.axis[0], factor=lanes)[1])
        _KERNELS[key] = polytile.build(s, [A, C], target=target)
    return _KERNELS[key]


def run(name: str, x: np.ndarray, lanes=16, target: str = "llvm") -> np.ndarray:
    f = kernel(name, x.dtype.name, lanes, target)
    xp = np.concatenate([x, np.ones(-x.size % N, x.dtype)])
    out = np.full_like(xp, np.nan)  # poisoned
    for k in range(0, xp.size, N):
        f(xp[k:k + N], out[k:k + N])
    return out[:x.size]


def random_bits(dtype, n: int, seed: int) -> np.ndarray:
    it = np.dtype(dtype).str.replace("f", "u")
    b = np.random.default_rng(seed).integers(0, np.iinfo(it).max, n, dtype=it, endpoint=True)
    return b.view(dtype)


def sample(name: str, dtype, n: int = 60_000, seed: int = 0) -> np.ndarray:
    ranges = SWEEPS[name][dtype == F64]
    with np.errstate(over="ignore"):  # float16: the float32 ranges, partly inf
        parts = [np.linspace(lo, hi, n).astype(dtype) for lo, hi in ranges]
    parts.append(random_bits(dtype, n, seed))
    if name.startswith("log"):
        parts.append(np.abs(random_bits(dtype, n, seed + 1)))  # every exponent, denormals
    tiny = np.finfo(dtype).tiny
    parts.append((np.random.default_rng(seed).uniform(-4, 4, 2000) * tiny).astype(dtype))
    x = np.concatenate(parts)
    if name == "fast_exp" and dtype == F32:  # flushed to 0 / overflowing early, by design
        x = x[(x >= -87.33) & (x <= 88.37) | ~np.isfinite(x)]
    return x


# ------------------------------------------------------------------------------ accuracy
@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_ulp_bound(name, dtype):
    x = sample(name, dtype)
    err = ulp_errors(run(name, x), reference(name, x), dtype)
    bound = BOUNDS[name][dtype == F64]
    worst = int(np.argmax(err))
    assert err[worst] <= bound, (name, x[worst], err[worst])
    assert err.max() > 0.3  # the measurement sees rounding: it can fail


@pytest.mark.parametrize("name", NAMES)
def test_ulp_bound_without_fma(name):
    """Targets without FMA evaluate ``a*b + c`` in two roundings (``.nofma`` routines)."""
    x = sample(name, F32, n=20_000, seed=3)
    y = run(name, x, target="llvm -mattr=-fma")
    assert "llvm.fma" not in kernel(name, "float32", 16, "llvm -mattr=-fma").get_source("ll")
    bound = NOFMA_BOUNDS.get(name, BOUNDS[name][0])
    assert ulp_errors(y, reference(name, x), F32).max() <= bound


@pytest.mark.parametrize("name", NAMES)
def test_float16_exhaustive(name):
    x = np.arange(1 << 16, dtype=np.uint16).view(F16)
    err = ulp_errors(run(name, x), reference(name, x), F16)
    if name == "fast_exp":  # beyond its range fast_exp flushes to 0 / overflows early
        err = err[~((x < -87.33) | (x > 88.37))]  # (no float16 is there: all checked)
    assert err.max() <= F16_BOUND


# ------------------------------------------------------------------------------ special values
def _specials(dtype):
    info = np.finfo(dtype)
    sub = np.array(info.smallest_subnormal, dtype)
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, info.max, -info.max,
                     info.tiny, -info.tiny, sub, -sub, 3 * sub, 0.5, -0.5, 2.0, -2.0,
                     float(info.max) ** 0.5, -float(info.max) ** 0.5], dtype=dtype)


@pytest.mark.parametrize("dtype", [F16, F32, F64], ids=["float16", "float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_special_values(name, dtype):
    x = _specials(dtype)
    for lanes in (None, 16):
        y = run(name, x, lanes=lanes)
        with np.errstate(over="ignore"):  # rounded: infinities, zeros, NaNs exactly
            ref = reference(name, x).astype(dtype)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg=f"{name} NaN {x}")
        exact = np.isinf(ref) | (ref == 0)
        np.testing.assert_array_equal(y[exact], ref[exact], err_msg=f"{name} {x[exact]}")
        np.testing.assert_array_equal(np.signbit(y[exact]), np.signbit(ref[exact]),
                                      err_msg=f"{name}: sign of zero at {x[exact]}")
        bound = F16_BOUND if dtype == F16 else BOUNDS[name][dtype == F64]
        assert ulp_errors(y, reference(name, x), dtype).max() <= bound


def test_special_values_named():
    """The numpy conventions, spelled out for float32."""
    x = np.array([np.nan, np.inf, -np.inf, -0.0, -1.0, -2.0], "float32")
    with np.errstate(all="ignore"):
        assert np.array_equal(run("exp", x), np.array([np.nan, np.inf, 0, 1, math.exp(-1),
                                                       math.exp(-2)], F32), equal_nan=True)
        log = run("log", x)
    assert np.isnan(log[0]) and log[1] == np.inf and np.isnan(log[2]) and log[3] == -np.inf
    assert np.isnan(log[4]) and np.isnan(log[5])
    assert list(run("tanh", x[1:4])) == [1, -1, 0] and np.signbit(run("tanh", x[3:4]))[0]
    assert list(run("erf", x[1:4])) == [1, -1, 0] and np.signbit(run("erf", x[3:4]))[0]
    assert list(run("sigmoid", x[1:4])) == [1, 0, 0.5]
    assert run("log1p", np.array([-1.0], "float32"))[0] == -np.inf
    assert run("expm1", np.array([-np.inf], "float32"))[0] == -1


# ------------------------------------------------------------------------------ consistency
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_scalar_and_vector_paths_agree_bitwise(name, dtype):
    """The same routine serves scalar code, the vector body and its remainder: a length-4099
    loop gives the same bits unvectorized, split by 4/8/16 and vectorized, and vectorized
    whole (strip-mined into native vectors plus a 4099 % lanes remainder vector)."""
    d = np.dtype(dtype).type
    x = np.concatenate([sample(name, d, n=300, seed=5), _specials(d)])[:N]
    scalar = run(name, x, lanes=None)
    for lanes in (4, 8, 16, "all"):
        y = run(name, x, lanes=lanes)
        same = (y.view(f"u{y.itemsize}") == scalar.view(f"u{y.itemsize}")) | \
            (np.isnan(y) & np.isnan(scalar))
        assert same.all(), (lanes, x[~same][:4], y[~same][:4], scalar[~same][:4])


def test_vectorized_code_has_no_libm_calls():
    for name in ("exp", "log", "tanh", "sigmoid", "erf"):
        ir_text = kernel(name, "float32", 16).get_source("ll")
        calls = [ln for ln in ir_text.splitlines() if " call " in ln and "@llvm." not in ln]
        assert not calls, (name, calls[:3])
        assert "x float>" in ir_text  # vector code


def test_routines_are_defined_once_per_type():
    A = te.placeholder((64,), name="A")
    C = te.compute((64,), lambda i: te.exp(A[i]) + te.tanh(A[i]) + te.sigmoid(A[i]), name="C")
    s = te.create_schedule(C.op)
    s[C].vectorize(s[C].split(C.op.axis[0], factor=8)[1])
    from polytile.targets.llvm.codegen import codegen_llvm
    from polytile.targets import Target

    text = str(codegen_llvm(polytile.lower(s, [A, C]), Target.parse("llvm")))
    assert text.count('define internal <8 x float> @"polytile.exp.v8f32"') == 1
    assert "alwaysinline" in text


# ------------------------------------------------------------------------------ fast math
@pytest.mark.parametrize("name", ["exp", "tanh", "erf", "sigmoid"])
def test_fast_math_target_uses_fast_variants(name):
    x = sample(name, F32, n=3000, seed=7)
    if name in ("exp", "sigmoid"):  # fast_exp's range
        x = x[(np.abs(x) <= 87.33) | ~np.isfinite(x)]
    fast = run(name, x, target="llvm -fast-math")
    if name != "sigmoid":
        assert np.array_equal(fast, run("fast_" + name, x), equal_nan=True)
    assert not np.array_equal(fast, run(name, x), equal_nan=True)
    bound = {"sigmoid": 4}.get(name) or BOUNDS["fast_" + name][0]
    assert ulp_errors(fast, reference(name, x), F32).max() <= bound


def test_fast_variants_of_float64_are_the_accurate_routines():
    x = sample("erf", F64, n=2000)
    for name in ("exp", "tanh", "erf"):
        assert np.array_equal(run("fast_" + name, x), run(name, x), equal_nan=True)
    assert np.array_equal(run("log", x, target="llvm -fast-math"), run("log", x),
                          equal_nan=True)


def test_fast_functions_need_float_arguments():
    A = te.placeholder((4,), name="A", dtype="int32")
    with pytest.raises(TypeError, match="te.fast_exp: .* has dtype int32; expected a float"):
        te.fast_exp(A[0])
    assert te.fast_tanh(A[0].astype("float16")).dtype == "float16"


def test_fast_functions_on_cuda_source():
    A = te.placeholder((32,), name="A")
    C = te.compute((32,), lambda i: te.fast_exp(A[i]) + te.fast_tanh(A[i]) + te.fast_erf(A[i]),
                   name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.x"))
    src = polytile.build(s, [A, C], target="cuda").get_source()
    assert "pt_fast_exp(" in src and "tanhf(" in src and "erff(" in src
    assert src.count("ex2.approx.ftz.f32") == 1   # the helper, defined once
