"""Vector dtypes as tensor elements (TVM TE's ``"float32x4"``; see ``polytile.te.vector``):
TVM's CUDA vectorize tests written for polytile, checked against numpy on ``llvm`` and the
loop-IR interpreter, their CUDA source compiled with nvcc; host arrays are ``(n, lanes)``
arrays of the base dtype, as TVM copies them into its NDArrays."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compile_with_nvcc

import polytile
from polytile import te, tir
from polytile.schedule import interpreter


def _gpu(s, B, factor=8):
    xo, xi = s[B].split(B.op.axis[0], factor=factor)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))


@pytest.mark.parametrize("dtype,lanes", [("float32", 2), ("float32", 3), ("float32", 4),
                                         ("int8", 4), ("uint8", 3), ("float16", 8)])
def test_vectorize_add(dtype, lanes):
    n = 37
    A = te.placeholder((n,), name="A", dtype=f"{dtype}x{lanes}")
    B = te.compute((n,), lambda i: A[i] + tir.const(1, A.dtype), name="B")
    assert A.shape == (n,) and B.shape == (n,) and B.dtype == f"{dtype}x{lanes}"
    rng = np.random.default_rng(lanes)
    a = (rng.uniform(-1, 1, (n, lanes)) if "float" in dtype
         else rng.integers(0, 100, (n, lanes))).astype(dtype)
    ref = a.astype(np.float64) + 1
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[-1])    # the lane axis
    f = polytile.build(s, [A, B])
    b = np.zeros((n, lanes), dtype)
    f(a, b)
    np.testing.assert_allclose(b.astype(np.float64), ref, rtol=1e-3 if dtype == "float16"
                               else 1e-6)
    s = te.create_schedule(B.op)
    _gpu(s, B)
    compile_with_nvcc(polytile.build(s, [A, B], target="cuda").get_source())
    b = np.zeros((n, lanes), dtype)
    interpreter.run(polytile.lower(s, [A, B], target="cuda"), a, b)
    np.testing.assert_allclose(b.astype(np.float64), ref, rtol=1e-3 if dtype == "float16"
                               else 1e-6)


def test_vectorize_load_copy_and_lanewise_arithmetic():
    n, lanes = 64, 16
    A = te.placeholder((n,), name="A", dtype=f"int8x{lanes}")
    B = te.compute((n,), lambda i: A[i], name="B")
    C = te.placeholder((n,), name="C", dtype="float32x4")
    D = te.placeholder((n,), name="D", dtype="float32x4")
    w = te.placeholder((n,), name="w")
    E = te.compute((n,), lambda i: (C[i] * w[i] - D[i] / 2.0).astype("float64x4") * -1,
                   name="E")
    F = te.compute((n,), lambda i: (C[i] > D[i]).astype("int32x4"), name="F")
    s = te.create_schedule([B.op, E.op, F.op])
    f = polytile.build(s, [A, C, D, w, B, E, F])
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 127, (n, lanes)).astype("int8")
    c, d = rng.uniform(-1, 1, (n, 4)).astype("float32"), rng.uniform(-1, 1, (n, 4)).astype(
        "float32")
    ww = rng.uniform(-1, 1, n).astype("float32")
    b, e, g = np.zeros((n, lanes), "int8"), np.full((n, 4), np.nan), np.full((n, 4), -5,
                                                                            "int32")
    f(a, c, d, ww, b, e, g)
    np.testing.assert_array_equal(b, a)
    # float32 lanes, and the LLVM backend lets `c * w - d / 2` contract into an FMA (as C's
    # -ffp-contract=on; whether it does depends on the CPU's cost model): each lane is
    # within 4 units of float32 rounding (2^-24) of the terms' magnitudes of the exact value,
    # an absolute bound, since the difference cancels (numpy's two roundings are not it)
    c64, d64, w64 = c.astype(np.float64), d.astype(np.float64), ww.astype(np.float64)[:, None]
    exact = -(c64 * w64 - d64 / 2)
    bound = 4 * 2.0 ** -24 * (np.abs(c64 * w64) + np.abs(d64 / 2))
    assert np.all(np.abs(e - exact) <= bound), np.max(np.abs(e - exact) / bound)
    np.testing.assert_array_equal(g, (c > d).astype("int32"))


def test_vector_dtype_refusals():
    n = 8
    A = te.placeholder((n,), name="A", dtype="int8x4")
    B = te.placeholder((n,), name="B", dtype="int8x4")
    Cs = te.placeholder((n,), name="C", dtype="int32")
    with pytest.raises(TypeError, match=r"call_extern: argument LaneVector\(int8x4\)"):
        te.compute((n,), lambda i: tir.call_pure_extern("int32", "__dp4a", A[i], B[i], Cs[i]))
    X = te.placeholder((n,), name="X", dtype="float32x2")
    with pytest.raises(TypeError, match="lanes 4 and 2 in one operation"):
        te.compute((n,), lambda i: A[i].astype("float32x4") + X[i].astype("float32x2"))
    with pytest.raises(TypeError, match="1 indices for a tensor of 2 dimensions"):
        te.placeholder((n, 3), dtype="float32x4")[1]
    with pytest.raises(TypeError, match=r"(?s)vector dtype: LaneVector\(int8x4\) where a "
                       r"scalar expression is needed.*write the lanes as an axis"):
        te.compute((n,), lambda i: te.exp(A[i]))
    with pytest.raises(TypeError, match="a truth value"):
        te.compute((n,), lambda i: A[i] if A[i] > B[i] else B[i])


def test_lanewise_select_on_llvm():
    n = 19
    A = te.placeholder((n,), name="A", dtype="float32x4")
    B = te.placeholder((n,), name="B", dtype="float32x4")
    C = te.compute((n,), lambda i: te.if_then_else(A[i] > B[i], A[i], B[i] * 2.0), name="C")
    f = polytile.build(te.create_schedule(C.op), [A, B, C])
    rng = np.random.default_rng(3)
    a, b = (rng.uniform(-1, 1, (n, 4)).astype("float32") for _ in range(2))
    c = np.full((n, 4), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, np.where(a > b, a, b * 2), rtol=1e-6)
