"""te.sum/max/min, te.comm_reducer and the two-argument elementwise form of reducers."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand, run1

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
