"""Reads whose index isl cannot bound (data-dependent gathers, te.var offsets) are checked
at run time: out of bounds raises IndexError instead of reading garbage."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compile_with_nvcc, run1

import polytile
from polytile import te


def _gather(guarded: bool):
    A = te.placeholder((10,), name="A")
    I = te.placeholder((6,), dtype="int32", name="I")
    if guarded:
        G = te.compute((6,), lambda i: te.if_then_else(I[i] >= 0, A[I[i]], -1.0), name="G")
    else:
        G = te.compute((6,), lambda i: A[I[i]] * 2.0, name="G")
    return te.create_schedule(G.op), [A, I, G]


def test_gather_in_bounds(backend):
    s, args = _gather(guarded=False)
    a = np.arange(10, dtype="float32") + 1
    idx = np.array([0, 9, 3, 3, 7, 1], dtype="int32")
    np.testing.assert_array_equal(run1(s, args, [a, idx], backend), a[idx] * 2)


def test_gather_out_of_bounds_raises(backend):
    s, args = _gather(guarded=False)
    a = np.arange(10, dtype="float32")
    with pytest.raises(IndexError, match="stage 'G' reads A\\[I\\[i\\]\\] outside its shape"):
        run1(s, args, [a, np.array([0, 1, 10, 2, 3, 4], dtype="int32")], backend)
    with pytest.raises(IndexError, match="outside its shape"):
        run1(s, args, [a, np.array([0, 1, -1, 2, 3, 4], dtype="int32")], backend)


def test_guarded_gather_does_not_fire(backend):
    s, args = _gather(guarded=True)
    a = np.arange(10, dtype="float32")
    idx = np.array([-5, 9, -1, 3, 0, -100], dtype="int32")
    out = run1(s, args, [a, idx], backend)
    np.testing.assert_array_equal(out, np.where(idx >= 0, a[np.maximum(idx, 0)], -1.0))


def test_check_in_a_parallel_loop_raises(backend):
    s, args = _gather(guarded=False)
    G = args[-1]
    o, _ = s[G].split(G.op.axis[0], factor=2)
    s[G].parallel(o)
    with pytest.raises(IndexError, match="outside its shape"):
        run1(s, args, [np.zeros(10, "float32"), np.full(6, 11, dtype="int32")], backend)


def test_var_offset_out_of_bounds_raises():
    A = te.placeholder((10,), name="A")
    n = te.var("n")
    E = te.compute((5,), lambda i: A[i + n], name="E")
    f = polytile.build(te.create_schedule(E.op), [A, n, E])
    a = np.arange(10, dtype="float32")
    e = np.zeros(5, "float32")
    f(a, 5, e)
    np.testing.assert_array_equal(e, a[5:])
    with pytest.raises(IndexError, match="stage 'E' reads A"):
        f(a, 6, e)


def test_cuda_check_compiles_to_a_trap():
    s, args = _gather(guarded=False)
    G = args[-1]
    s[G].bind(G.op.axis[0], te.thread_axis("threadIdx.x"))
    src = polytile.build(s, args, target="cuda").get_source()
    assert "__trap();" in src
    compile_with_nvcc(src)


def _division(guarded: bool):
    A = te.placeholder((8,), dtype="int32", name="A")
    B = te.placeholder((8,), dtype="int32", name="B")
    if guarded:
        C = te.compute((8,), lambda i: te.if_then_else(B[i] != 0, A[i] // B[i], -1), name="C")
    else:
        C = te.compute((8,), lambda i: te.truncmod(A[i], B[i]), name="C")
    return te.create_schedule(C.op), [A, B, C]


def test_division_by_a_zero_datum_raises(backend):
    s, args = _division(guarded=False)
    a = np.arange(8, dtype="int32") - 3
    with pytest.raises(ZeroDivisionError, match="stage 'C' divides by zero"):
        run1(s, args, [a, np.array([1, 2, 3, 0, 1, 1, 1, 1], "int32")], backend)
    b = np.array([1, 2, 3, -4, 5, -6, 7, 8], "int32")
    np.testing.assert_array_equal(run1(s, args, [a, b], backend), np.fmod(a, b))


def test_guarded_division_by_zero_is_fine(backend):
    s, args = _division(guarded=True)
    a = np.arange(8, dtype="int32") - 3
    b = np.array([1, 0, 3, 0, -2, 1, 0, 1], "int32")
    expect = np.where(b != 0, a // np.where(b == 0, 1, b), -1)
    np.testing.assert_array_equal(run1(s, args, [a, b], backend), expect)


def test_division_by_constant_zero_is_refused():
    A = te.placeholder((8,), dtype="int32", name="A")
    with pytest.raises(ZeroDivisionError, match="floordiv: integer division by the constant 0"):
        te.compute((8,), lambda i: A[i] // 0)


def test_gather_from_a_tensor_of_symbolic_size(backend):
    # the run-time bound of a read isl cannot bound is the tensor's symbolic extent (the
    # check was built as a constant of a variable, and crashed code generation)
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    I = te.placeholder((6,), dtype="int32", name="I")
    G = te.compute((6,), lambda i: A[I[i]] * 2.0, name="G")
    s = te.create_schedule(G.op)
    a = np.arange(11, dtype="float32") + 1
    idx = np.array([0, 10, 3, 3, 7, 1], dtype="int32")
    np.testing.assert_array_equal(run1(s, [A, I, G], [a, idx], backend), a[idx] * 2)
    with pytest.raises(IndexError, match=r"reads A\[I\[i\]\] outside its shape \(n,\)"):
        run1(s, [A, I, G], [a[:10], idx], backend)
