"""te.sum/max/min, te.comm_reducer and the two-argument elementwise form of reducers."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand, run1, run_schedule

import polytile
from polytile import te

N = 7


def test_comm_reducer_product(backend):
    A = te.placeholder((N, N), name="A")
    k = te.reduce_axis((0, N), "k")
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")
    P = te.compute((N,), lambda i: prod(A[i, k], axis=k), name="P")
    a = rand((N, N), seed=1, low=0.5, high=1.5)
    out = run1(te.create_schedule(P.op), [A, P], [a], backend)
    check(out, a.astype("float64").prod(axis=1), k=N)


def test_comm_reducer_with_python_identity_and_int_dtype(backend):
    A = te.placeholder((N, N), dtype="int32", name="A")
    k = te.reduce_axis((0, N), "k")
    bor = te.comm_reducer(lambda x, y: x | y, lambda t: 0, name="bitor")
    P = te.compute((N,), lambda i: bor(A[i, k], axis=k), name="P")
    a = rand((N, N), "int32", seed=2)
    out = run1(te.create_schedule(P.op), [A, P], [a], backend)
    check(out, np.bitwise_or.reduce(a, axis=1))


def test_custom_max_reducer(backend):
    A = te.placeholder((N, N), name="A")
    k = te.reduce_axis((0, N), "k")
    mymax = te.comm_reducer(lambda x, y: te.max(x, y), lambda t: te.min_value(t), name="mymax")
    P = te.compute((N,), lambda i: mymax(A[k, i], axis=k), name="P")
    a = rand((N, N), seed=3)
    out = run1(te.create_schedule(P.op), [A, P], [a], backend)
    check(out, a.max(axis=0))


def test_reducer_identity_must_be_constant():
    A = te.placeholder((N, N), name="A")
    k = te.reduce_axis((0, N), "k")
    bad = te.comm_reducer(lambda x, y: x + y, lambda t: A[0, 0], name="bad")
    with pytest.raises(TypeError, match="comm_reducer 'bad': identity .* expected a constant"):
        bad(A[0, k], axis=k)


def test_reducer_combiner_must_keep_dtype():
    A = te.placeholder((N, N), name="A")
    k = te.reduce_axis((0, N), "k")
    bad = te.comm_reducer(lambda x, y: (x + y).astype("float64"), lambda t: 0, name="bad")
    with pytest.raises(TypeError, match="combiner returns float64 for float32 operands"):
        bad(A[0, k], axis=k)


def test_reducer_two_expressions_is_the_combiner():
    x, y = te.var("x", "float32"), te.var("y", "float32")
    prod = te.comm_reducer(lambda a, b: a * b, lambda t: 1, name="prod")
    assert str(prod(x, y)) == "(x * y)"
    assert str(te.sum(x, y)) == "(x + y)"


def test_max_min_of_two_expressions_are_elementwise(backend):
    A = te.placeholder((N, N), name="A")
    E = te.compute((N, N), lambda i, j: te.max(A[i, j], 0.0) + te.min(A[i, j], A[j, i]),
                   name="E")
    a = rand((N, N), seed=4)
    out = run1(te.create_schedule(E.op), [A, E], [a], backend)
    check(out, np.maximum(a, 0) + np.minimum(a, a.T))


def test_max_of_two_expressions_promotes():
    i8 = te.var("a", "int8")
    assert te.max(i8, 3).dtype == "int8"
    assert te.max(i8, te.var("b", "float16")).dtype == "float16"
    assert str(te.min(i8, 3)) == "min(a, int8(3))"


def test_reducer_on_python_numbers_is_a_constant_expression():
    # D2: never the second-to-last operand, never the first pair only
    assert te.max(1, 2, 3, 4, 3, 2, 1).dtype == "int32"
    assert te.max(2, 3.5).dtype == "float32"


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64", "float16", "float64"])
def test_max_min_identities(dtype):
    A = te.placeholder((N,), dtype=dtype, name="A")
    k = te.reduce_axis((0, N), "k")
    mx = te.compute((1,), lambda i: te.max(A[k], axis=k))
    mn = te.compute((1,), lambda i: te.min(A[k], axis=k))
    info = np.finfo(dtype) if dtype.startswith("float") else np.iinfo(dtype)
    lo = -np.inf if dtype.startswith("float") else info.min
    hi = np.inf if dtype.startswith("float") else info.max
    assert mx.op.body[0].combiner.identity.value == lo
    assert mn.op.body[0].combiner.identity.value == hi


@pytest.mark.parametrize("reducer, ref", [("sum", np.sum), ("max", np.max), ("min", np.min)])
def test_builtin_reducers_over_two_axes_with_offsets(reducer, ref, backend):
    A = te.placeholder((N, N + 3), name="A")
    k1 = te.reduce_axis((1, 4), "k1")
    k2 = te.reduce_axis((3, 8), "k2")
    R = te.compute((N,), lambda i: getattr(te, reducer)(A[k1 + i // 2, k2], axis=[k1, k2]),
                   name="R")
    a = rand((N, N + 3), seed=5)
    want = np.array([ref(a[1 + i // 2:4 + i // 2, 3:8].astype("float64")) for i in range(N)])
    out = run1(te.create_schedule(R.op), [A, R], [a], backend)
    check(out, want, k=15)


def test_sum_with_where_and_init(backend):
    A = te.placeholder((N, N), name="A")
    k = te.reduce_axis((0, N), "k")
    R = te.compute((N,), lambda i: te.sum(A[i, k], axis=k, where=k > i, init=A[i, 0] * 2.0),
                   name="R")
    a = rand((N, N), seed=6)
    want = np.array([2 * float(a[i, 0]) + sum(float(a[i, j]) for j in range(N) if j > i)
                     for i in range(N)])
    out = run1(te.create_schedule(R.op), [A, R], [a], backend)
    check(out, want, k=N)


def test_max_with_where_empty_rows_give_identity(backend):
    A = te.placeholder((N, N), name="A")
    k = te.reduce_axis((0, N), "k")
    R = te.compute((N,), lambda i: te.max(A[i, k], axis=k, where=k < i), name="R")
    a = rand((N, N), seed=7)
    want = np.array([a[i, :i].max() if i else -np.inf for i in range(N)])
    out = run1(te.create_schedule(R.op), [A, R], [a], backend)
    check(out, want)


# ------------------------------------------------- D1: empty and reversed reduce ranges
def test_d1_reversed_reduce_range_is_refused_at_definition():
    with pytest.raises(ValueError, match=r"reduce_axis: range of 'rb' is reversed \(\(7, 0\)\)"):
        te.reduce_axis((7, 0), name="rb")
    with pytest.raises(ValueError, match="range of 'rv' is reversed"):
        te.reduce_axis(te.Range(2, -1))


def test_d1_case_empty_range_sums_to_zero(backend):
    T0 = te.placeholder((4, 3, 3, 10), "int8", name="T0")
    ra = te.reduce_axis((0, 4), name="ra")
    rb = te.reduce_axis((3, 3), name="rb")
    T1 = te.compute((3, 3), lambda m, u: te.sum(T0[ra, m, u, rb], axis=[ra, rb]), name="T1")
    t = rand((4, 3, 3, 10), "int8", seed=8)
    out = run1(te.create_schedule(T1.op), [T0, T1], [t], backend)
    np.testing.assert_array_equal(out, t[:, :, :, 3:3].sum(axis=(0, 3), dtype="int8"))


def _empty_schedules():
    def split(s, R, k):
        s[R].split(k, factor=4)

    def split_nparts(s, R, k):
        ko, ki = s[R].split(k, nparts=3)
        s[R].unroll(ki)

    def reorder_outermost(s, R, k):
        s[R].reorder(k, R.op.axis[0])
        s[R].vectorize(R.op.axis[0])

    def unroll(s, R, k):
        s[R].unroll(k)

    def parallel(s, R, k):
        s[R].parallel(R.op.axis[0])

    def rfactor(s, R, k):
        ko, ki = s[R].split(k, factor=2)
        s.rfactor(R, ki)

    def cache_write(s, R, k):
        RL = s.cache_write(R, "local")
        s[RL].compute_at(s[R], R.op.axis[0])

    return {f.__name__: f for f in (split, split_nparts, reorder_outermost, unroll, parallel,
                                    rfactor, cache_write)}


EMPTY = _empty_schedules()


@pytest.mark.parametrize("sched", [None] + sorted(EMPTY))
@pytest.mark.parametrize("reducer, dtype", [("sum", "float32"), ("max", "float16"),
                                            ("min", "int16"), ("max", "uint8"),
                                            ("sum", "float16")])
def test_d1_empty_range_gives_the_identity_under_schedules(reducer, dtype, sched, backend):
    A = te.placeholder((N, 5), dtype=dtype, name="A")
    k = te.reduce_axis((2, 2), name="k")
    R = te.compute((N,), lambda i: getattr(te, reducer)(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    if sched:
        EMPTY[sched](s, R, k)
    a = rand((N, 5), dtype, seed=9)
    out = run1(s, [A, R], [a], backend)
    if reducer == "sum":
        want = a[:, 2:2].sum(axis=1, dtype=dtype)
    else:
        ident = (-np.inf if reducer == "max" else np.inf) if dtype.startswith("float") else \
            getattr(np.iinfo(dtype), "min" if reducer == "max" else "max")
        want = np.full(N, ident, dtype)  # numpy's max over nothing raises; TVM's identity
    np.testing.assert_array_equal(out, want)


def test_d1_empty_range_with_init_and_where(backend):
    A = te.placeholder((N,), name="A")
    k = te.reduce_axis((0, 0), name="k")
    R = te.compute((N,), lambda i: te.sum(A[k], axis=k, where=A[k] > 0, init=A[i] * 2.0),
                   name="R")
    a = rand((N,), seed=10)
    out = run1(te.create_schedule(R.op), [A, R], [a], backend)
    np.testing.assert_array_equal(out, a * 2)


@pytest.mark.parametrize("sched", ["none", "split", "vectorize", "parallel", "compute_at"])
def test_d1_zero_size_dimensions_behave_as_numpy(sched, backend):
    A = te.placeholder((0, 6), "float16", name="A")
    k = te.reduce_axis((0, 0), name="k")
    S = te.compute((6,), lambda j: te.sum(A[k, j], axis=k), name="S")      # over 0 rows
    B = te.compute((0, 6), lambda i, j: A[i, j] + S[j], name="B")         # 0 x 6 result
    s = te.create_schedule([S.op, B.op])
    if sched == "split":
        s[B].split(B.op.axis[0], factor=4)
        s[S].split(k, nparts=2)
    elif sched == "vectorize":
        s[B].vectorize(B.op.axis[1])
        s[S].reorder(k, S.op.axis[0])
        s[S].vectorize(S.op.axis[0])
    elif sched == "parallel":
        s[B].parallel(B.op.axis[0])
        s[S].parallel(S.op.axis[0])
    elif sched == "compute_at":
        C = te.compute((0, 6), lambda i, j: A[i, j] * 2.0, name="C")
        D = te.compute((0, 6), lambda i, j: C[i, j] + 1.0, name="D")
        s = te.create_schedule(D.op)
        s[C].compute_at(s[D], D.op.axis[0])
        out = run1(s, [A, D], [np.zeros((0, 6), "float16")], backend)
        assert out.shape == (0, 6)
        return
    a = np.zeros((0, 6), "float16")
    outs = run_schedule(s, [A, S, B], [a], backend)
    np.testing.assert_array_equal(outs[0], a.sum(axis=0))
    assert outs[1].shape == (0, 6)


def test_d1_empty_range_bound_to_threads_is_refused():
    from polytile import ScheduleError

    A = te.placeholder((N, 5), name="A")
    k = te.reduce_axis((2, 2), name="k")
    R = te.compute((N,), lambda i: te.sum(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    s[R].bind(R.op.axis[0], te.thread_axis("blockIdx.x"))
    s[R].bind(k, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="bind: loop 'k' of stage 'R' has no iterations"):
        polytile.lower(s, [A, R])


# ------------------------------------------------------- D2: te.max/te.min of n operands
def test_d2_case_three_tensor_reads(backend):
    X = [te.placeholder((N,), name=f"X{k}") for k in range(3)]
    C = te.compute((N,), lambda i: te.max(X[0][i], X[1][i], X[2][i]), name="C")
    D = te.compute((N,), lambda i: te.min(X[0][i], X[1][i], X[2][i]), name="D")
    xs = [rand((N,), seed=11 + k) for k in range(3)]
    out = run1(te.create_schedule(C.op), X + [C], xs, backend)
    np.testing.assert_array_equal(out, np.maximum.reduce(xs))
    out = run1(te.create_schedule(D.op), X + [D], xs, backend)
    np.testing.assert_array_equal(out, np.minimum.reduce(xs))


def test_d2_case_python_numbers(backend):
    C = te.compute((2,), lambda i: te.max(1, 2, 3, 4, 3, 2, 1) + te.min(5, 4, 9, 4, 6) * i,
                   name="C")
    out = run1(te.create_schedule(C.op), [C], [], backend)
    np.testing.assert_array_equal(out, [4, 8])


def test_d2_mixed_operands_promote_like_binary_operators():
    a8 = te.var("a", "int8")
    assert te.max(a8, 3, 4).dtype == "int8"
    assert te.max(a8, te.var("b", "int16"), 3).dtype == "int16"
    assert te.max(a8, 2.5, te.var("c", "float16")).dtype == "float16"
    assert te.min(3, a8, 4.0).dtype == "float32"  # a Python float makes an int float32
    with pytest.raises(OverflowError, match="300 does not fit in int8"):
        te.max(a8, 1, 300)


def test_d2_custom_reducer_folds_over_every_operand():
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")
    x, y, z = (te.var(n, "float32") for n in "xyz")
    assert str(prod(x, y, z)) == "((x * y) * z)"


def test_d2_positional_reduction_form_still_works(backend):
    A = te.placeholder((N, N), name="A")
    k = te.reduce_axis((0, N), "k")
    R = te.compute((N,), lambda i: te.sum(A[i, k], k, k > i), name="R")
    a = rand((N, N), seed=12)
    out = run1(te.create_schedule(R.op), [A, R], [a], backend)
    check(out, np.array([a[i, i + 1:].astype("float64").sum() for i in range(N)]), k=N)


# -------------------------------------------------------------------- D3: NaN in max/min
def _nan_data(dtype: str, shape) -> np.ndarray:
    """Random data with NaN at several places (first, last, middle of a reduction)."""
    a = rand(shape, dtype, seed=13)
    a[0, 0] = np.nan            # first element of row 0
    a[1, -1] = np.nan           # last element of row 1
    a[2, shape[1] // 2] = np.nan
    a[3, :] = np.nan            # a row of NaN
    return a


def _nan_schedules():
    def split(s, R, k):
        s[R].split(k, factor=3)

    def unroll(s, R, k):
        ko, ki = s[R].split(k, factor=4)
        s[R].unroll(ki)

    def vectorize_4(s, R, k):
        io, ii = s[R].split(R.op.axis[0], factor=4)
        s[R].reorder(io, k, ii)
        s[R].vectorize(ii)

    def vectorize_16(s, R, k):
        s[R].reorder(k, R.op.axis[0])
        s[R].vectorize(R.op.axis[0])

    def parallel(s, R, k):
        s[R].parallel(R.op.axis[0])

    def rfactor(s, R, k):
        ko, ki = s[R].split(k, factor=4)
        RF = s.rfactor(R, ki)
        s[RF].parallel(RF.op.axis[0])

    return {f.__name__: f for f in (split, unroll, vectorize_4, vectorize_16, parallel,
                                    rfactor)}


NAN_SCHEDULES = _nan_schedules()


@pytest.mark.parametrize("sched", [None] + sorted(NAN_SCHEDULES))
@pytest.mark.parametrize("reducer", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_d3_reductions_propagate_nan_like_numpy(dtype, reducer, sched, backend):
    rows, cols = 16, 11
    A = te.placeholder((rows, cols), dtype, name="A")
    k = te.reduce_axis((0, cols), name="k")
    R = te.compute((rows,), lambda i: getattr(te, reducer)(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    if sched:
        NAN_SCHEDULES[sched](s, R, k)
    a = _nan_data(dtype, (rows, cols))
    out = run1(s, [A, R], [a], backend)
    want = getattr(np, reducer)(a, axis=1)
    assert np.isnan(want[:4]).all() and not np.isnan(want[4:]).any()
    np.testing.assert_array_equal(out, want)  # NaN positions must agree too


@pytest.mark.parametrize("vec", [None, 4, 8, 16])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_d3_elementwise_max_min_propagate_nan_in_either_operand(dtype, vec, backend):
    n = 32
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    C = te.compute((n,), lambda i: te.max(A[i], B[i]) + te.min(B[i], A[i]) * 2, name="C")
    D = te.compute((n,), lambda i: te.max(te.const(1.0, dtype), A[i], te.const(0.5, dtype)),
                   name="D")
    a, b = rand((n,), dtype, seed=14), rand((n,), dtype, seed=15)
    a[::3] = np.nan
    b[1::4] = np.nan
    with np.errstate(invalid="ignore"):
        want_c = np.maximum(a, b) + np.minimum(b, a) * 2
        want_d = np.maximum.reduce([np.ones_like(a), a, np.full_like(a, 0.5)])
    for T, args, ins, want in ((C, [A, B, C], [a, b], want_c), (D, [A, D], [a], want_d)):
        s = te.create_schedule(T.op)
        if vec:
            io, ii = s[T].split(T.op.axis[0], factor=vec)
            s[T].vectorize(ii)
        out = run1(s, args, ins, backend)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
        check(out, np.where(np.isnan(want), np.nan, want))


def test_d3_case_values(backend):
    A = te.placeholder((4,), name="A")
    k = te.reduce_axis((0, 4), name="k")
    M = te.compute((1,), lambda _: te.max(A[k], axis=k), name="M")
    E1 = te.compute((4,), lambda i: te.max(te.const(1.0, "float32"), A[i]), name="E1")
    E2 = te.compute((4,), lambda i: te.max(A[i], te.const(2.0, "float32")), name="E2")
    a = np.array([1, np.nan, 3, 0], "float32")
    assert np.isnan(run1(te.create_schedule(M.op), [A, M], [a], backend)).all()
    for E in (E1, E2):
        assert np.isnan(run1(te.create_schedule(E.op), [A, E], [a], backend)[1])


@pytest.mark.parametrize("reducer", ["max", "min"])
def test_d3_integer_max_min_unchanged(reducer, backend):
    A = te.placeholder((N, N), "uint64", name="A")
    k = te.reduce_axis((0, N), "k")
    R = te.compute((N,), lambda i: getattr(te, reducer)(A[i, k], axis=k), name="R")
    a = rand((N, N), "uint64", seed=16)
    a[0, 0] = 2**64 - 1
    out = run1(te.create_schedule(R.op), [A, R], [a], backend)
    np.testing.assert_array_equal(out, getattr(a, reducer)(axis=1))
