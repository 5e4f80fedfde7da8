"""Tensor arithmetic (``A + B`` on tensors) builds elementwise computes with numpy
broadcasting."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from helpers import check, rand, run1

from polytile import te

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


@pytest.mark.parametrize("sa, sb, sout", [((3, 1), (4,), (3, 4)), ((4,), (3, 1), (3, 4)),
                                          ((3, 1), (3,), (3, 3)), ((1, 5), (2, 1), (2, 5)),
                                          ((2, 3, 1), (1, 4), (2, 3, 4)), ((5,), (5,), (5,)),
                                          ((), (3, 2), (3, 2))])
def test_broadcast_shapes(sa, sb, sout):
    A = te.placeholder(sa, name="A")
    B = te.placeholder(sb, name="B")
    assert (A + B).shape == sout == np.broadcast_shapes(sa, sb)


def test_broadcast_reads_index_zero_on_size_one_dims():
    A = te.placeholder((3, 1), name="A")
    B = te.placeholder((4,), name="B")
    C = A + B
    assert str(C.op.body[0]) == "(A[i0, 0] + B[i1])"
    assert C.name == "T_add_A_B"


@pytest.mark.parametrize("op", sorted(OPS))
def test_broadcast_numeric(op, backend):
    A = te.placeholder((3, 1), name="A")
    B = te.placeholder((4,), name="B")
    C = OPS[op](A, B)
    a, b = rand((3, 1), seed=1), rand((4,), seed=2)
    out = run1(te.create_schedule(C.op), [A, B, C], [a, b], backend)
    check(out, OPS[op](a.astype("float64"), b.astype("float64")))


@pytest.mark.parametrize("op", sorted(OPS))
def test_tensor_with_scalar_both_sides(op, backend):
    A = te.placeholder((2, 5), name="A")
    C = OPS[op](A, 2.5)
    D = OPS[op](1.5, A)
    a = rand((2, 5), seed=3)
    a64 = a.astype("float64")
    check(run1(te.create_schedule(C.op), [A, C], [a], backend), OPS[op](a64, 2.5))
    check(run1(te.create_schedule(D.op), [A, D], [a], backend), OPS[op](1.5, a64))


def test_negation_and_chain_with_mixed_dtypes(backend):
    A = te.placeholder((3, 1), dtype="int16", name="A")
    B = te.placeholder((1, 4), dtype="int32", name="B")
    C = -(A * B) + A
    assert C.dtype == "int32" and C.shape == (3, 4)
    a = rand((3, 1), "int16", seed=4)
    b = rand((1, 4), "int32", seed=5)
    out = run1(te.create_schedule(C.op), [A, B, C], [a, b], backend)
    check(out, -(a.astype(np.int64) * b) + a)


def test_incompatible_shapes_raise():
    A = te.placeholder((3, 2), name="A")
    B = te.placeholder((4,), name="B")
    with pytest.raises(ValueError, match=r"shapes \(3, 2\) and \(4,\) do not broadcast"):
        A + B


def test_int_true_division_of_tensors_raises():
    A = te.placeholder((3,), dtype="int32", name="A")
    with pytest.raises(TypeError, match="true division needs floats"):
        A / 2
