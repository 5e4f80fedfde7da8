"""floordiv/floormod/truncdiv/truncmod (and ``//``/``%``) on negative operands, evaluated
through lowered 1-D computes whose index range includes negatives."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, run1

from polytile import te

N = 15  # i - 7 covers -7..7


def _trunc_div(a, b):
    return (np.abs(a) // np.abs(b)) * np.sign(a) * np.sign(b)


def _trunc_mod(a, b):
    return a - _trunc_div(a, b) * b


REF = {
    "floordiv": lambda a, b: np.floor_divide(a, b),
    "floormod": lambda a, b: np.mod(a, b),  # sign of the divisor
    "truncdiv": _trunc_div,
    "truncmod": _trunc_mod,                # sign of the dividend
}


@pytest.mark.parametrize("divisor", [3, -3, 1, 7, -8])
@pytest.mark.parametrize("op", sorted(REF))
def test_on_loop_index_with_constant_divisor(op, divisor, backend):
    fn = getattr(te, op)
    T = te.compute((N,), lambda i: fn(i - 7, divisor), name="T")
    out = run1(te.create_schedule(T.op), [T], [], backend)
    check(out, REF[op](np.arange(N) - 7, divisor))


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("op", sorted(REF))
def test_on_tensor_operands_of_both_signs(op, dtype, backend):
    A = te.placeholder((N,), dtype=dtype, name="A")
    B = te.placeholder((N,), dtype=dtype, name="B")
    fn = getattr(te, op)
    T = te.compute((N,), lambda i: fn(A[i], B[i]), name="T")
    a = (np.arange(N) - 7).astype(dtype)
    b = np.array([3, -3, 2, -2, 5, -5, 1, -1, 4, -4, 7, -7, 3, -3, 2], dtype=dtype)
    out = run1(te.create_schedule(T.op), [A, B, T], [a, b], backend)
    check(out, REF[op](a.astype(np.int64), b.astype(np.int64)))


def test_python_operators_are_floor_semantics(backend):
    T = te.compute((N,), lambda i: (i - 7) // 4 * 100 + (i - 7) % 4, name="T")
    out = run1(te.create_schedule(T.op), [T], [], backend)
    x = np.arange(N) - 7
    check(out, x // 4 * 100 + x % 4)


def test_reflected_floordiv_with_negative_divisor(backend):
    # 20 // (i - 7): divisor takes both signs (i = 7 excluded)
    T = te.compute((N,), lambda i: te.if_then_else(i == 7, 0, 20 // (i - 7)) * 10
                   + te.if_then_else(i == 7, 0, -20 % (i - 7)), name="T")
    out = run1(te.create_schedule(T.op), [T], [], backend)
    x = np.arange(N) - 7
    safe = np.where(x == 0, 1, x)
    check(out, np.where(x == 0, 0, 20 // safe) * 10 + np.where(x == 0, 0, -20 % safe))


def test_unsigned_division(backend):
    A = te.placeholder((N,), dtype="uint8", name="A")
    T = te.compute((N,), lambda i: A[i] // 3 + te.truncmod(A[i], 5), name="T")
    a = np.arange(250, 250 - N, -1).astype("uint8")
    out = run1(te.create_schedule(T.op), [A, T], [a], backend)
    check(out, a // 3 + a % 5)


def test_float_floordiv_and_floormod(backend):
    A = te.placeholder((N,), name="A")
    T = te.compute((N,), lambda i: A[i] // 0.75 + te.floormod(A[i], -0.75) * 10.0, name="T")
    a = np.linspace(-3.3, 3.1, N).astype("float32")
    out = run1(te.create_schedule(T.op), [A, T], [a], backend)
    a64 = a.astype("float64")
    check(out, np.floor(a64 / 0.75) + (a64 - np.floor(a64 / -0.75) * -0.75) * 10)


def test_floordiv_in_index_is_affine(backend):
    # a quasi-affine index with a negative offset: A[floordiv(i - 7, 2) + 4]
    A = te.placeholder((8,), name="A")
    T = te.compute((N,), lambda i: A[te.floordiv(i - 7, 2) + 4], name="T")
    a = np.arange(8, dtype="float32") + 1
    out = run1(te.create_schedule(T.op), [A, T], [a], backend)
    check(out, a[(np.arange(N) - 7) // 2 + 4])


def test_bool_operands_refused_by_mod():
    b = te.var("b", "bool")
    with pytest.raises(TypeError, match="operands are bool"):
        te.floormod(b, b)
