"""Edges of reductions and shapes (issue 9), on the interpreter and on LLVM: empty
``reduce_axis`` ranges give the reducer's identity, reversed ones are refused at
definition, zero-size dimensions compute nothing (reductions over zero elements give the
identity), 0-rank stages build, and ``te.max``/``te.min`` propagate NaN as numpy's
``maximum``/``minimum`` in the elementwise and the reduction forms, whatever the operand
order. Outputs are poisoned before each run (``helpers.run1``).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand, run1

import polytile
from polytile import te
from polytile.errors import DefinitionValueError

M, K = 5, 7

_prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")

#: reducer -> (identity of float32, identity of int32)
IDENTITY = {"sum": (0.0, 0), "max": (-np.inf, np.iinfo("int32").min),
            "min": (np.inf, np.iinfo("int32").max), "prod": (1.0, 1)}
REDUCERS = {"sum": te.sum, "max": te.max, "min": te.min, "prod": _prod}


# ------------------------------------------------------------------ empty reduce ranges
@pytest.mark.parametrize("name", sorted(REDUCERS))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("lo", [0, 3, K])
def test_empty_reduce_range_gives_the_identity(backend, name, dtype, lo):
    A = te.placeholder((M, K), name="A", dtype=dtype)
    k = te.reduce_axis((lo, lo), name="k")
    R = te.compute((M,), lambda i: REDUCERS[name](A[i, k], axis=k), name="R")
    out = run1(te.create_schedule(R.op), [A, R], [rand((M, K), dtype, seed=1)], backend)
    ident = IDENTITY[name][dtype == "int32"]
    np.testing.assert_array_equal(out, np.full(M, ident, dtype))


def test_empty_reduce_range_split_and_scheduled(backend):
    A = te.placeholder((M, K), name="A")
    k = te.reduce_axis((2, 2), name="k")
    R = te.compute((M,), lambda i: te.sum(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    ko, ki = s[R].split(k, factor=3)
    s[R].reorder(ko, R.op.axis[0], ki)
    out = run1(s, [A, R], [rand((M, K), seed=2)], backend)
    np.testing.assert_array_equal(out, np.zeros(M, "float32"))


def test_empty_range_beside_a_full_one(backend):
    # a 2-D reduce domain with one empty axis is empty as a whole
    A = te.placeholder((M, K), name="A")
    k = te.reduce_axis((0, K), name="k")
    e = te.reduce_axis((1, 1), name="e")
    R = te.compute((M,), lambda i: te.max(A[i, k] + e, axis=[k, e]), name="R")
    out = run1(te.create_schedule(R.op), [A, R], [rand((M, K), seed=3)], backend)
    np.testing.assert_array_equal(out, np.full(M, -np.inf, "float32"))


@pytest.mark.parametrize("rng_", [(3, 1), (1, 0), (0, -2)])
def test_reversed_reduce_range_is_refused_at_definition(rng_):
    with pytest.raises(DefinitionValueError, match=r"reduce_axis: range of 'k' is reversed "
                                                   r".*it ends before it starts"):
        te.reduce_axis(rng_, name="k")


# ------------------------------------------------------------------ zero-size dimensions
@pytest.mark.parametrize("shape", [(0,), (0, 4), (4, 0), (3, 0, 2)])
def test_zero_size_elementwise(backend, shape):
    A = te.placeholder(shape, name="A")
    B = te.compute(shape, lambda *i: A[i] * 2.0 + 1.0, name="B")
    out = run1(te.create_schedule(B.op), [A, B], [np.zeros(shape, "float32")], backend)
    assert out.shape == shape


def test_zero_size_output_with_schedule(backend):
    A = te.placeholder((0, K), name="A")
    k = te.reduce_axis((0, K), name="k")
    R = te.compute((0,), lambda i: te.sum(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    io, ii = s[R].split(R.op.axis[0], factor=4)
    if backend == "llvm":
        s[R].parallel(io)
    out = run1(s, [A, R], [np.zeros((0, K), "float32")], backend)
    assert out.shape == (0,)


@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_reduction_over_a_zero_size_dimension(backend, name):
    A = te.placeholder((M, 0), name="A")
    k = te.reduce_axis((0, 0), name="k")
    R = te.compute((M,), lambda i: REDUCERS[name](A[i, k], axis=k), name="R")
    out = run1(te.create_schedule(R.op), [A, R], [np.zeros((M, 0), "float32")], backend)
    np.testing.assert_array_equal(out, np.full(M, IDENTITY[name][0], "float32"))
    if name == "sum":
        np.testing.assert_array_equal(out, np.zeros((M, 0)).sum(axis=1))


def test_zero_size_intermediate_feeding_a_reduction(backend):
    A = te.placeholder((M, 0), name="A")
    B = te.compute((M, 0), lambda i, j: A[i, j] * 3.0, name="B")
    k = te.reduce_axis((0, 0), name="k")
    R = te.compute((M,), lambda i: te.sum(B[i, k], axis=k), name="R")
    out = run1(te.create_schedule(R.op), [A, R], [np.zeros((M, 0), "float32")], backend)
    np.testing.assert_array_equal(out, np.zeros(M, "float32"))


# ------------------------------------------------------------------ 0-rank stages
def test_zero_rank_reduction(backend):
    A = te.placeholder((K,), name="A")
    k = te.reduce_axis((0, K), name="k")
    S = te.compute((), lambda: te.sum(A[k] * A[k], axis=k), name="S")
    a = rand((K,), seed=4)
    out = run1(te.create_schedule(S.op), [A, S], [a], backend)
    assert out.shape == ()
    check(out, np.asarray((a.astype("float64") ** 2).sum()), k=K)


def test_zero_rank_placeholder_and_chain(backend):
    A = te.placeholder((), name="A")
    X = te.placeholder((M,), name="X")
    B = te.compute((), lambda: A[()] * 2.0, name="B")
    C = te.compute((M,), lambda i: X[i] + B[()], name="C")
    a, x = np.array(0.75, "float32"), rand((M,), seed=5)
    out = run1(te.create_schedule(C.op), [A, X, C], [a, x], backend)
    check(out, x.astype("float64") + 1.5)


def test_zero_rank_max_of_empty_range(backend):
    A = te.placeholder((K,), name="A")
    k = te.reduce_axis((4, 4), name="k")
    S = te.compute((), lambda: te.max(A[k], axis=k), name="S")
    out = run1(te.create_schedule(S.op), [A, S], [rand((K,), seed=6)], backend)
    assert out.shape == () and out == -np.inf


# ------------------------------------------------------------------ NaN in max/min
_A = np.array([np.nan, 1.0, 2.0, np.nan, -np.inf, 5.0, np.inf, -3.0, 0.5], "float32")
_B = np.array([1.0, np.nan, 3.0, np.nan, np.nan, 4.0, np.nan, -2.0, np.nan], "float32")


@pytest.mark.parametrize("op,ref", [(te.max, np.maximum), (te.min, np.minimum)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_elementwise_max_min_propagate_nan_in_both_orders(backend, op, ref, dtype):
    n = len(_A)
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)
    C = te.compute((n,), lambda i: op(A[i], B[i]), name="C")
    D = te.compute((n,), lambda i: op(B[i], A[i]), name="D")
    a, b = _A.astype(dtype), _B.astype(dtype)
    out_c = run1(te.create_schedule(C.op), [A, B, C], [a, b], backend)
    out_d = run1(te.create_schedule(D.op), [A, B, D], [a, b], backend)
    np.testing.assert_array_equal(out_c, ref(a, b))
    np.testing.assert_array_equal(out_d, ref(b, a))


@pytest.mark.parametrize("op,ref", [(te.max, np.maximum), (te.min, np.minimum)])
def test_max_min_with_a_constant_propagate_nan(backend, op, ref):
    n = len(_A)
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: op(A[i], 0.0) + op(1.0, A[i]), name="C")
    out = run1(te.create_schedule(C.op), [A, C], [_A], backend)
    np.testing.assert_array_equal(out, ref(_A, 0.0) + ref(1.0, _A))


def _nan_rows():
    rows = rand((6, K), seed=7)
    rows[0, 0] = np.nan          # first
    rows[1, K // 2] = np.nan     # middle
    rows[2, K - 1] = np.nan      # last
    rows[3, :] = np.nan          # all
    rows[4, 1] = np.inf          # no NaN, an infinity
    return rows                  # row 5: no NaN


@pytest.mark.parametrize("op,ref", [(te.max, np.max), (te.min, np.min)])
@pytest.mark.parametrize("split", [None, 2, 3])
def test_max_min_reductions_propagate_nan(backend, op, ref, split):
    A = te.placeholder((6, K), name="A")
    k = te.reduce_axis((0, K), name="k")
    R = te.compute((6,), lambda i: op(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    if split is not None:  # another order of the reduction
        ko, ki = s[R].split(k, factor=split)
        s[R].reorder(ki, R.op.axis[0], ko)
    a = _nan_rows()
    out = run1(s, [A, R], [a], backend)
    np.testing.assert_array_equal(out, ref(a, axis=1))


@pytest.mark.parametrize("op,ref", [(te.max, np.max), (te.min, np.min)])
def test_rfactor_max_min_propagate_nan(backend, op, ref):
    A = te.placeholder((6, K), name="A")
    k = te.reduce_axis((0, K), name="k")
    R = te.compute((6,), lambda i: op(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    ko, ki = s[R].split(k, factor=3)
    s.rfactor(R, ki)
    a = _nan_rows()
    out = run1(s, [A, R], [a], backend)
    np.testing.assert_array_equal(out, ref(a, axis=1))


# ------------------------------------------------------------------ more than two operands
@pytest.mark.parametrize("op,ref", [(te.max, np.maximum), (te.min, np.minimum)])
def test_three_operands_fold_and_propagate_nan(backend, op, ref):
    # TVM folds the operands of te.max(a, b, c) pairwise; so does polytile, NaN included
    n = len(_A)
    X = [te.placeholder((n,), name=f"X{j}") for j in range(3)]
    C = te.compute((n,), lambda i: op(X[0][i], X[1][i], X[2][i]), name="C")
    xs = [_A, _B, np.roll(_A, 1)]
    out = run1(te.create_schedule(C.op), X + [C], xs, backend)
    np.testing.assert_array_equal(out, ref.reduce(xs))


def test_operands_and_reduction_arguments_do_not_mix():
    x, y, z = (te.var(n, "float32") for n in "xyz")
    with pytest.raises(polytile.errors.DefinitionTypeError,
                       match="axis=, where= and init= belong to a reduction"):
        te.max(x, y, z, where=x < y)
