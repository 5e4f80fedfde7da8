"""Numerics of the CUDA C printer: NaN in max/min and float16 sums accumulated in float32.

Each schedule is built for ``cuda``, its source compiled by ``nvcc -arch=sm_90`` (skipped
without nvcc), and run on a GPU (``gpu`` marker) and on the host emulation of the driver
(``cuda_emulator``: the same C compiled by g++), outputs poisoned, compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compile_with_nvcc, poison

import polytile
from polytile import te
from polytile.te import dtype as dt


def _run(s, args, inputs, build) -> np.ndarray:
    f = build(s, args)
    out_t = args[-1]
    out = polytile.nd.array(poison(out_t.shape, out_t.dtype), device="cuda")
    f(*[polytile.nd.array(x, device="cuda") for x in inputs], out)
    return out.numpy()


def _bind(s, T, factor=8):
    bo, to = s[T].split(T.op.axis[0], factor=factor)
    s[T].bind(bo, te.thread_axis("blockIdx.x"))
    s[T].bind(to, te.thread_axis("threadIdx.x"))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_max_min_propagate_nan(dtype, cuda_build):
    rows, cols = 13, 9
    A = te.placeholder((rows, cols), dtype, name="A")
    k = te.reduce_axis((0, cols), name="k")
    R = te.compute((rows,), lambda i: te.max(A[i, k], axis=k), name="R")
    Q = te.compute((rows,), lambda i: te.min(A[i, 0], A[i, 1], R[i]) + te.max(R[i], A[i, 2]),
                   name="Q")
    s = te.create_schedule(Q.op)
    _bind(s, R)
    _bind(s, Q)
    a = np.random.default_rng(1).uniform(-1, 1, (rows, cols)).astype(dtype)
    a[0, 0] = a[1, 1] = a[2, 8] = a[3, 2] = a[4, 4] = np.nan
    compile_with_nvcc(polytile.build(s, [A, Q], target="cuda").get_source())
    out = _run(s, [A, Q], [a], cuda_build)
    r = a.max(axis=1)
    want = np.minimum.reduce([a[:, 0], a[:, 1], r]) + np.maximum(r, a[:, 2])
    assert np.isnan(want[:5]).all() and not np.isnan(want[5:]).any()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_allclose(out[5:].astype("float64"), want[5:], rtol=1e-3)


def test_float16_sum_rounds_once(cuda_build):
    X = te.placeholder((4, 12), "float16", name="X")
    k = te.reduce_axis((0, 12), name="k")
    S = te.compute((4,), lambda i: te.sum(X[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=5)
    s[S].reorder(ko, S.op.axis[0], ki)
    _bind(s, S, factor=2)
    x = np.array([[2048] + [1] * 11, [32000] * 4 + [-32000] * 4 + [1] * 4,
                  [1] * 11 + [2048], [-3] * 12], "float16")
    compile_with_nvcc(polytile.build(s, [X, S], target="cuda").get_source())
    out = _run(s, [X, S], [x], cuda_build)
    np.testing.assert_array_equal(out, x.astype("float64").sum(axis=1).astype("float16"))


def _bf16(x) -> np.ndarray:
    """float32 ``x`` rounded to bfloat16, as float32."""
    return dt.bfloat16_values(dt.bfloat16_bits(np.asarray(x, np.float32)))


def test_bfloat16_operations_and_float32_sum(cuda_build):
    """__nv_bfloat16 storage, every operation in float32 rounded by __float2bfloat16_rn,
    constants as bit patterns, a sum accumulated in float32 (256 + 1 stalls in bfloat16)."""
    rows, K = 7, 37
    X = te.placeholder((rows, K), "bfloat16", name="X")
    k = te.reduce_axis((0, K), name="k")
    S = te.compute((rows,), lambda i: te.sum(X[i, k], axis=k), name="S")
    Q = te.compute((rows,), lambda i: te.if_then_else(
        X[i, 1] < 0, te.const(1.5, "bfloat16"),
        te.max(S[i] * X[i, 2] - 0.1, X[i, 3]) / X[i, 4] + te.exp(X[i, 5])), name="Q")
    s = te.create_schedule(Q.op)
    _bind(s, S, factor=4)
    _bind(s, Q, factor=4)
    g = np.random.default_rng(5)
    x = g.uniform(-2, 2, (rows, K)).astype(np.float32)
    x[0] = [256.0] + [1.0] * (K - 1)
    xb = dt.bfloat16_array(x)
    src = polytile.build(s, [X, Q], target="cuda").get_source()
    assert "#include <cuda_bf16.h>" in src and "__float2bfloat16_rn(" in src
    assert "__ushort_as_bfloat16((unsigned short)0x3fc0)" in src     # 1.5
    compile_with_nvcc(src)
    out = dt.bfloat16_values(_run(s, [X, Q], [xb], cuda_build))
    xv = dt.bfloat16_values(xb)
    sv = _bf16(xv.astype(np.float64).sum(axis=1))
    assert sv[0] == 292.0   # 256 + 36, exact in float32, rounded once
    want = np.where(xv[:, 1] < 0, 1.5, _bf16(
        _bf16(np.maximum(_bf16(_bf16(sv * xv[:, 2]) - _bf16(0.1)), xv[:, 3]) / xv[:, 4])
        + _bf16(np.exp(xv[:, 5]))))
    np.testing.assert_allclose(out, want, rtol=2.0**-7)
    exact = np.isclose(out, want, rtol=0, atol=0)
    assert exact.sum() >= rows - 1   # exp may differ by one unit in the last place
