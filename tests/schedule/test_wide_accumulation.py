"""float16 reductions accumulate in float32 and round once, whatever the schedule (case D4).

The data are chosen so that a float16 accumulator fails visibly (2048 + 1 == 2048 in
float16; 4 x 32000 overflows to inf) while a float32 accumulator is exact, so the expected
value is the exact sum rounded once to float16 and every output is compared *exactly*.
Each schedule runs on the interpreter and on LLVM; GPU schedules are interpreted, compiled
with nvcc and, on a device, run.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import poison, run1

import polytile
from polytile import te
from polytile.schedule.interpreter import run

M, K = 5, 13


def _rows() -> np.ndarray:
    """Rows whose float16 running sums lose (or overflow) but whose float32 sums are exact."""
    g = np.random.default_rng(3)
    rows = [[2048.0] + [1.0] * (K - 1),                       # float16 stalls at 2048
            [32000.0] * 4 + [-32000.0] * 4 + [0.5] * (K - 8),  # float16 overflows to inf
            [1.0] * (K - 1) + [2048.0],
            [-2048.0] + [-1.0] * (K - 2) + [3.0],
            g.integers(-8, 9, K).astype(float).tolist()]
    x = np.array(rows, dtype="float16")
    for r in range(M):  # a different order per row
        x[r] = x[r][g.permutation(K)]
    return x


def _want(x: np.ndarray) -> np.ndarray:
    return x.astype("float64").sum(axis=1).astype("float16")


def _sum_stage():
    X = te.placeholder((M, K), "float16", name="X")
    k = te.reduce_axis((0, K), name="k")
    S = te.compute((M,), lambda i: te.sum(X[i, k], axis=k), name="S")
    return X, S, k


def _consumer_stage():
    X, S, k = _sum_stage()
    T = te.compute((M,), lambda i: S[i] * te.const(1.0, "float16"), name="T")
    return X, S, k, T


def _split(s, S, k):
    s[S].split(k, factor=5)


def _reduce_outermost(s, S, k):
    ko, ki = s[S].split(k, factor=4)
    s[S].reorder(ko, S.op.axis[0], ki)


def _reorder_all(s, S, k):
    s[S].reorder(k, S.op.axis[0])


def _unroll(s, S, k):
    ko, ki = s[S].split(k, factor=4)
    s[S].unroll(ki)


def _vectorize(s, S, k):
    s[S].reorder(k, S.op.axis[0])
    s[S].vectorize(S.op.axis[0])


def _parallel(s, S, k):
    s[S].parallel(S.op.axis[0])


def _split_parallel(s, S, k):
    io, ii = s[S].split(S.op.axis[0], factor=2)
    s[S].reorder(io, k, ii)
    s[S].parallel(io)
    s[S].vectorize(ii)


def _nparts(s, S, k):
    ko, ki = s[S].split(k, nparts=3)
    s[S].reorder(ko, S.op.axis[0], ki)
    s[S].unroll(ko)


SCHEDULES = {f.__name__[1:]: f for f in (_split, _reduce_outermost, _reorder_all, _unroll,
                                         _vectorize, _parallel, _split_parallel, _nparts)}


def test_d4_case_values():
    """The case file's figures: 4 x 32000 - 4 x 32000 is 0 (was inf), and 4096 float16 ones
    sum to 4096 (a float16 accumulator stalls at 2048)."""
    X = te.placeholder((8,), "float16", name="X")
    k = te.reduce_axis((0, 8), name="k")
    S = te.compute((1,), lambda _: te.sum(X[k], axis=k), name="S")
    for sched in (None, 4):
        s = te.create_schedule(S.op)
        if sched:
            s[S].split(k, factor=sched)
        o = poison((1,), "float16")
        polytile.build(s, [X, S])(np.array([32000] * 4 + [-32000] * 4, "float16"), o)
        assert o[0] == 0
    Y = te.placeholder((4096,), "float16", name="Y")
    r = te.reduce_axis((0, 4096), name="r")
    T = te.compute((1,), lambda _: te.sum(Y[r], axis=r), name="T")
    o = poison((1,), "float16")
    polytile.build(te.create_schedule(T.op), [Y, T])(np.ones(4096, "float16"), o)
    assert o[0] == 4096


def test_default_schedule(backend):
    X, S, k = _sum_stage()
    x = _rows()
    out = run1(te.create_schedule(S.op), [X, S], [x], backend)
    np.testing.assert_array_equal(out, _want(x))


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_every_schedule_rounds_once(name, backend):
    X, S, k = _sum_stage()
    s = te.create_schedule(S.op)
    SCHEDULES[name](s, S, k)
    x = _rows()
    out = run1(s, [X, S], [x], backend)
    np.testing.assert_array_equal(out, _want(x))


@pytest.mark.parametrize("where", ["axis", "reduce_outer"])
def test_compute_at(where, backend):
    X, S, k, T = _consumer_stage()
    s = te.create_schedule(T.op)
    if where == "reduce_outer":
        s[S].reorder(k, S.op.axis[0])
    io, ii = s[T].split(T.op.axis[0], factor=2)
    s[S].compute_at(s[T], io)
    x = _rows()
    out = run1(s, [X, T], [x], backend)
    np.testing.assert_array_equal(out, _want(x))


def test_cache_write_local_and_parallel(backend):
    X, S, k = _sum_stage()
    s = te.create_schedule(S.op)
    SL = s.cache_write(S, "local")
    io, ii = s[S].split(S.op.axis[0], factor=2)
    s[S].parallel(io)
    s[SL].compute_at(s[S], io)
    s[SL].reorder(SL.op.reduce_axis[0], SL.op.axis[0])
    x = _rows()
    out = run1(s, [X, S], [x], backend)
    np.testing.assert_array_equal(out, _want(x))


def test_accumulator_is_a_register_when_spatial_loops_enclose_the_reduction():
    X, S, k = _sum_stage()
    s = te.create_schedule(S.op)
    io, ii = s[S].split(S.op.axis[0], factor=2)
    s[S].parallel(io)
    text = str(polytile.lower(s, [X, S]))
    assert "S_acc = alloc(float32[1]" in text
    # reduction loops outermost: one float32 element per output
    s = te.create_schedule(S.op)
    s[S].reorder(k, S.op.axis[0])
    assert f"S_acc = alloc(float32[{M}]" in str(polytile.lower(s, [X, S]))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "uint8"])
def test_other_dtypes_accumulate_in_their_own(dtype):
    X = te.placeholder((M, K), dtype, name="X")
    k = te.reduce_axis((0, K), name="k")
    S = te.compute((M,), lambda i: te.sum(X[i, k], axis=k), name="S")
    assert "_acc" not in str(polytile.lower(te.create_schedule(S.op), [X, S]))


def test_integer_sums_wrap_in_the_declared_dtype(backend):
    """int8 sums wrap modulo 256 (so any order agrees), as numpy's sum(dtype=int8)."""
    X = te.placeholder((3, 6), "int8", name="X")
    k = te.reduce_axis((0, 6), name="k")
    S = te.compute((3,), lambda i: te.sum(X[i, k], axis=k), name="S")
    x = np.array([[100, 100, 100, -100, 27, 1], [127] * 6, [-128] * 6], "int8")
    s = te.create_schedule(S.op)
    s[S].reorder(k, S.op.axis[0])
    out = run1(s, [X, S], [x], backend)
    np.testing.assert_array_equal(out, np.add.reduce(x, axis=1, dtype="int8"))


@pytest.mark.parametrize("red", ["max", "min"])
def test_max_and_min_of_float16_need_no_accumulator(red, backend):
    X, _, k = _sum_stage()
    S = te.compute((M,), lambda i: getattr(te, red)(X[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    assert "_acc" not in str(polytile.lower(s, [X, S]))
    x = _rows()
    np.testing.assert_array_equal(run1(s, [X, S], [x], backend), getattr(x, red)(axis=1))


def test_product_and_user_reducer_accumulate_wide(backend):
    X = te.placeholder((2, 4), "float16", name="X")
    k = te.reduce_axis((0, 4), name="k")
    prod = te.comm_reducer(lambda a, b: a * b, lambda t: te.const(1, t), name="prod")
    sumsq = te.comm_reducer(lambda a, b: a + b, lambda t: te.const(0, t), name="mysum")
    P = te.compute((2,), lambda i: prod(X[i, k], axis=k), name="P")
    Q = te.compute((2,), lambda i: sumsq(X[i, k], axis=k, init=te.const(1024, "float16")),
                   name="Q")
    x = np.array([[256, 256, 1 / 256, 1 / 256], [512, 1 / 256, 512, 1 / 256]], "float16")
    s = te.create_schedule(P.op)
    np.testing.assert_array_equal(run1(s, [X, P], [x], backend), [1, 4])  # float16: inf
    x = np.array([[2048, 1, 1, 1], [1, 1, 1, 1]], "float16")
    s = te.create_schedule(Q.op)
    np.testing.assert_array_equal(run1(s, [X, Q], [x], backend),
                                  np.float16([1024 + 2051, 1028]))


def test_where_and_init_with_wide_accumulator(backend):
    X, _, k = _sum_stage()
    S = te.compute((M,), lambda i: te.sum(X[i, k], axis=k, where=X[i, k] > 0,
                                          init=te.const(-3, "float16")), name="S")
    x = _rows()
    with np.errstate(over="ignore"):  # 4 x 32000 is inf in float16
        want = (np.where(x > 0, x, 0).astype("float64").sum(axis=1) - 3).astype("float16")
    np.testing.assert_array_equal(run1(te.create_schedule(S.op), [X, S], [x], backend), want)


def test_rfactor_of_a_float16_sum_builds(backend):
    """rfactor's partial tensor is another stage (float16 today): it must lower and run;
    on data whose partial sums are exact in float16 the result is exact."""
    X, S, k = _sum_stage()
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=4)
    s.rfactor(S, ki)
    x = np.random.default_rng(0).integers(-8, 9, (M, K)).astype("float16")
    np.testing.assert_array_equal(run1(s, [X, S], [x], backend), _want(x))


# ------------------------------------------------------------------- tiled float16 matmul
MM, MN, MK = 7, 11, 9


def _matmul_data():
    g = np.random.default_rng(5)
    a = g.integers(-3, 4, (MM, MK)).astype("float16")
    b = g.integers(-3, 4, (MK, MN)).astype("float16")
    a[:, 3] = 1024
    b[3, :] = 2  # one product of 2048 per output: float16 running sums lose the odd parts
    return a, b, (a.astype("float64") @ b.astype("float64")).astype("float16")


def _matmul():
    A = te.placeholder((MM, MK), "float16", name="A")
    B = te.placeholder((MK, MN), "float16", name="B")
    r = te.reduce_axis((0, MK), name="r")
    C = te.compute((MM, MN), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C, r


def _register_tile(s, C, r):
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 3, 4)
    s[C].reorder(io, jo, r, ii, ji)
    s[C].vectorize(ji)
    s[C].unroll(ii)
    s[C].parallel(io)


def _k_split_between(s, C, r):
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=2)
    ro, ri = s[C].split(r, factor=4)
    s[C].reorder(io, ro, j, ri, ii)


def _reduction_outermost(s, C, r):
    s[C].reorder(r, *C.op.axis)
    s[C].vectorize(C.op.axis[1])


MATMUL = {f.__name__[1:]: f for f in (_register_tile, _k_split_between, _reduction_outermost)}


@pytest.mark.parametrize("name", sorted(MATMUL))
def test_tiled_float16_matmul(name, backend):
    A, B, C, r = _matmul()
    s = te.create_schedule(C.op)
    MATMUL[name](s, C, r)
    a, b, want = _matmul_data()
    np.testing.assert_array_equal(run1(s, [A, B, C], [a, b], backend), want)


def test_float16_matmul_computed_at_its_consumer(backend):
    A, B, C, r = _matmul()
    D = te.compute((MM, MN), lambda i, j: C[i, j] + te.const(0.5, "float16"), name="D")
    s = te.create_schedule(D.op)
    io, jo, ii, ji = s[D].tile(D.op.axis[0], D.op.axis[1], 3, 4)
    s[C].compute_at(s[D], jo)
    s[C].reorder(r, *C.op.axis)
    a, b, want = _matmul_data()
    out = run1(s, [A, B, D], [a, b], backend)
    np.testing.assert_array_equal(out, (want.astype("float32") + 0.5).astype("float16"))


# ------------------------------------------------------------------------------ GPU
def _gpu_schedules():
    def threads():
        X, S, k = _sum_stage()
        s = te.create_schedule(S.op)
        s[S].bind(S.op.axis[0], te.thread_axis("threadIdx.x"))
        return s, [X, S]

    def reduce_outer():
        X, S, k = _sum_stage()
        s = te.create_schedule(S.op)
        ko, ki = s[S].split(k, factor=4)
        s[S].reorder(ko, S.op.axis[0], ki)
        s[S].bind(S.op.axis[0], te.thread_axis("threadIdx.x"))
        return s, [X, S]

    def blocks_threads():
        X, S, k = _sum_stage()
        s = te.create_schedule(S.op)
        bo, to = s[S].split(S.op.axis[0], factor=2)
        s[S].bind(bo, te.thread_axis("blockIdx.x"))
        s[S].bind(to, te.thread_axis("threadIdx.x"))
        return s, [X, S]

    def cache_write_local():
        X, S, k = _sum_stage()
        s = te.create_schedule(S.op)
        SL = s.cache_write(S, "local")
        bo, to = s[S].split(S.op.axis[0], factor=2)
        s[S].bind(bo, te.thread_axis("blockIdx.x"))
        s[S].bind(to, te.thread_axis("threadIdx.x"))
        s[SL].compute_at(s[S], to)
        return s, [X, S]

    def cross_thread():
        # one element per thread: the float16 partials are exact, their sum is float32
        X, S, k = _sum_stage()
        s = te.create_schedule(S.op)
        s[S].bind(S.op.axis[0], te.thread_axis("blockIdx.x"))
        s[S].bind(k, te.thread_axis("threadIdx.x"))
        return s, [X, S]

    return {f.__name__: f for f in (threads, reduce_outer, blocks_threads, cache_write_local,
                                     cross_thread)}


GPU = _gpu_schedules()


@pytest.mark.parametrize("name", sorted(GPU))
def test_gpu_lowering_rounds_once(name):
    s, args = GPU[name]()
    x = _rows()
    out = poison((M,), "float16")
    run(polytile.lower(s, args), x, out)
    np.testing.assert_array_equal(out, _want(x))


@pytest.mark.parametrize("name", sorted(GPU))
def test_gpu_source_compiles_with_nvcc(name):
    from helpers import compile_with_nvcc

    s, args = GPU[name]()
    src = polytile.build(s, args, target="cuda").get_source()
    assert re.search(r"float S(_local)?_acc\b", src)
    compile_with_nvcc(src)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU))
def test_gpu_on_device_rounds_once(name):
    s, args = GPU[name]()
    f = polytile.build(s, args, target="cuda")
    x = _rows()
    out = polytile.nd.array(poison((M,), "float16"), device="cuda")
    f(polytile.nd.array(x, device="cuda"), out)
    np.testing.assert_array_equal(out.numpy(), _want(x))
