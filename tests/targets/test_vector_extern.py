"""Calls inside vectorized loops on ``llvm``: math intrinsics stay vector code on every
float dtype, a pure extern C function or an LLVM intrinsic is called once per lane (in
lane order), a C function with side effects runs the loop as scalar code. Values against
numpy float64 at odd sizes (partial vectors and strip-mined loops)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check

import polytile
from polytile import te, tir

COUNTER = r"""
static int calls = 0;
float counted(float x) { calls += 1; return x + (float)calls; }
"""


def _vec(C, n_factor=8):
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=n_factor)
    s[C].vectorize(xi)
    return s, xo


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("n, factor", [(37, 8), (5, 16), (131, 64)])
def test_vectorized_math_calls(dtype, n, factor):
    A = te.placeholder((n,), name="A", dtype=dtype)
    C = te.compute((n,), lambda i: te.exp(A[i]) + te.log(A[i] + te.const(2, dtype))
                   + te.sqrt(A[i]) * te.tanh(A[i]), name="C")
    s, _ = _vec(C, factor)
    a = np.random.default_rng(n).uniform(0.1, 1.5, n).astype(dtype)
    c = np.full(n, np.nan, dtype)
    polytile.build(s, [A, C])(a, c)
    x = a.astype("float64")
    check(c, np.exp(x) + np.log(x + 2) + np.sqrt(x) * np.tanh(x))


@pytest.mark.parametrize("n, factor", [(37, 8), (3, 4), (130, 64)])
def test_pure_extern_in_a_vectorized_loop_is_called_per_lane(n, factor):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: tir.call_pure_extern("float32", "mix", A[i], B[i], 3.0)
                   + tir.call_llvm_intrin("float32", "llvm.fabs.f32", A[i] - 0.5), name="C")
    s, xo = _vec(C, factor)
    s[C].pragma(xo, "import_c", "float mix(float a, float b, float k) { return a * k - b; }")
    f = polytile.build(s, [A, B, C])
    assert "insertelement" in f.get_source("ll")
    g = np.random.default_rng(1)
    a, b = g.uniform(-1, 1, n).astype("float32"), g.uniform(-1, 1, n).astype("float32")
    c = np.full(n, np.nan, "float32")
    f(a, b, c)
    check(c, a.astype("float64") * 3 - b + np.abs(a.astype("float64") - 0.5))


def test_extern_with_side_effects_in_a_vectorized_loop_runs_in_loop_order():
    n = 19
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: tir.call_extern("float32", "counted", A[i]), name="C")
    s, xo = _vec(C, 8)
    s[C].pragma(xo, "import_c", COUNTER)
    a = np.zeros(n, "float32")
    c = np.full(n, np.nan, "float32")
    polytile.build(s, [A, C])(a, c)
    # the k-th call (in the serial order of i) returns k
    check(c, np.arange(1, n + 1, dtype="float64"))
