"""Edges of reductions and shapes on CUDA (issue 9): 0-rank stages (a kernel of one
thread), zero-size dimensions (nothing launched), empty reduce ranges, and NaN in
``te.max``/``te.min``. Run on the emulated driver (``cuda_emulator``) and on a GPU where
there is one (``gpu`` marker); the generated source is also compiled by nvcc here.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, compile_with_nvcc, poison, rand

import polytile
from polytile import te
from polytile.errors import ScheduleError
from polytile.targets.cuda import compile as cc

K = 7


def _run(f, inputs, out_shape, dtype="float32"):
    dev = [polytile.nd.array(x, device="cuda") for x in inputs]
    out = polytile.nd.array(poison(out_shape, dtype), device="cuda")
    f(*dev, out)
    return out.numpy()


def _bind_1d(s, T, factor=4):
    bx, tx = s[T].split(T.op.axis[0], factor=factor)
    s[T].bind(bx, te.thread_axis("blockIdx.x"))
    s[T].bind(tx, te.thread_axis("threadIdx.x"))


# ------------------------------------------------------------------ 0-rank stages
def _dot():
    A = te.placeholder((K,), name="A")
    k = te.reduce_axis((0, K), name="k")
    S = te.compute((), lambda: te.sum(A[k] * A[k], axis=k), name="S")
    return A, S


def test_zero_rank_stage_is_one_thread(cuda_build):
    build, drv = cuda_build, cuda_build.driver
    A, S = _dot()
    f = build(te.create_schedule(S.op), [A, S])
    assert [(k.grid, k.block) for k in f.kernels] == [((1, 1, 1), (1, 1, 1))]
    a = rand((K,), seed=1)
    out = _run(f, [a], ())
    assert out.shape == ()
    check(out, np.asarray((a.astype("float64") ** 2).sum()), k=K)
    if drv is not None:
        assert [x[1:3] for x in drv.launches] == [((1, 1, 1), (1, 1, 1))]


def test_zero_rank_stage_feeding_a_bound_stage(cuda_build):
    build = cuda_build
    A, S = _dot()
    C = te.compute((K,), lambda i: A[i] / S[()], name="C")
    s = te.create_schedule(C.op)
    _bind_1d(s, C)
    f = build(s, [A, C])
    a = rand((K,), seed=2)
    check(_run(f, [a], (K,)), a / (a.astype("float64") ** 2).sum())


def test_zero_rank_and_zero_size_sources_compile_with_nvcc():
    A, S = _dot()
    E = te.placeholder((0,), name="E")
    F = te.compute((0,), lambda i: E[i] + 1.0, name="F")
    s = te.create_schedule([S.op, F.op])
    _bind_1d(s, F)
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    src = polytile.build(s, [A, E, S, F], "cuda -arch=sm_90", compiler="nvcc").get_source()
    assert src.count("__launch_bounds__(1)") == 1 and "__launch_bounds__(4)" in src
    compile_with_nvcc(src)


def test_unbound_stage_of_rank_one_is_still_refused():
    A = te.placeholder((K,), name="A")
    B = te.compute((K,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(ScheduleError, match="no loop of the schedule is bound to a GPU index"):
        polytile.lower(te.create_schedule(B.op), [A, B], target="cuda")


# ------------------------------------------------------------------ zero-size dimensions
def test_zero_size_dimension_launches_nothing(cuda_build):
    build, drv = cuda_build, cuda_build.driver
    A = te.placeholder((0, 4), name="A")
    B = te.compute((0, 4), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x"))
    f = build(s, [A, B])
    assert f.kernels[0].grid == (0, 1, 1)
    assert _run(f, [np.zeros((0, 4), "float32")], (0, 4)).shape == (0, 4)
    if drv is not None:
        assert drv.launches == []
    r = f.time_evaluator(number=2, repeat=2)(polytile.nd.empty((0, 4), "float32", "cuda"),
                                             polytile.nd.empty((0, 4), "float32", "cuda"))
    assert len(r.results) == 2


def test_zero_size_stage_beside_a_full_one(cuda_build):
    build, drv = cuda_build, cuda_build.driver
    A = te.placeholder((K,), name="A")
    E = te.placeholder((0,), name="E")
    B = te.compute((K,), lambda i: A[i] * 2.0, name="B")
    F = te.compute((0,), lambda i: E[i] + 1.0, name="F")
    s = te.create_schedule([B.op, F.op])
    _bind_1d(s, B)
    _bind_1d(s, F)
    f = build(s, [A, E, B, F])
    a = rand((K,), seed=3)
    dev = [polytile.nd.array(a, device="cuda"), polytile.nd.empty((0,), "float32", "cuda")]
    out_b = polytile.nd.array(poison((K,), "float32"), device="cuda")
    out_f = polytile.nd.empty((0,), "float32", "cuda")
    f(*dev, out_b, out_f)
    check(out_b.numpy(), a.astype("float64") * 2.0)
    if drv is not None:
        assert len(drv.launches) == 1


def test_reduction_over_a_zero_size_dimension(cuda_build):
    build = cuda_build
    A = te.placeholder((5, 0), name="A")
    k = te.reduce_axis((0, 0), name="k")
    R = te.compute((5,), lambda i: te.min(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    s[R].bind(R.op.axis[0], te.thread_axis("threadIdx.x"))
    out = _run(build(s, [A, R]), [np.zeros((5, 0), "float32")], (5,))
    np.testing.assert_array_equal(out, np.full(5, np.inf, "float32"))


@pytest.mark.parametrize("reducer,ident", [(te.sum, 0), (te.max, np.iinfo("int32").min)])
def test_empty_reduce_range(cuda_build, reducer, ident):
    build = cuda_build
    A = te.placeholder((9, K), name="A", dtype="int32")
    k = te.reduce_axis((3, 3), name="k")
    R = te.compute((9,), lambda i: reducer(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    _bind_1d(s, R)
    out = _run(build(s, [A, R]), [rand((9, K), "int32", seed=4)], (9,), "int32")
    np.testing.assert_array_equal(out, np.full(9, ident, "int32"))


def test_binding_an_empty_reduce_loop_is_still_refused():
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis((2, 2), name="k")
    R = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    s[R].bind(R.op.axis[0], te.thread_axis("blockIdx.x"))
    s[R].bind(k, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="bind: loop 'k' of stage 'R' has no iterations"):
        polytile.lower(s, [A, R], target="cuda")


# ------------------------------------------------------------------ NaN in max/min
_A = np.array([np.nan, 1.0, 2.0, np.nan, -np.inf, 5.0, np.inf, -3.0, 0.5], "float32")
_B = np.array([1.0, np.nan, 3.0, np.nan, np.nan, 4.0, np.nan, -2.0, np.nan], "float32")


@pytest.mark.parametrize("op,ref", [(te.max, np.maximum), (te.min, np.minimum)])
def test_elementwise_nan(cuda_build, op, ref):
    build = cuda_build
    n = len(_A)
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: op(A[i], B[i]) + op(B[i], A[i]), name="C")
    s = te.create_schedule(C.op)
    _bind_1d(s, C)
    out = _run(build(s, [A, B, C]), [_A, _B], (n,))
    np.testing.assert_array_equal(out, ref(_A, _B) + ref(_B, _A))


@pytest.mark.parametrize("op,ref", [(te.max, np.max), (te.min, np.min)])
def test_reduction_nan(cuda_build, op, ref):
    build = cuda_build
    a = rand((6, K), seed=5)
    a[0, 0] = a[1, K // 2] = a[2, K - 1] = np.nan
    a[3, :] = np.nan
    A = te.placeholder((6, K), name="A")
    k = te.reduce_axis((0, K), name="k")
    R = te.compute((6,), lambda i: op(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    s[R].bind(R.op.axis[0], te.thread_axis("threadIdx.x"))
    out = _run(build(s, [A, R]), [a], (6,))
    np.testing.assert_array_equal(out, ref(a, axis=1))
