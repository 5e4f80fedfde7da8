"""TVM v0.19 tutorial code run with ``tvm`` replaced by ``polytile`` (a new user's port):
the names the tutorials reach through ``tvm.tir`` and the built modules, with numeric
checks against numpy at odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

import polytile as tvm
from polytile import te


def test_tuple_inputs_tutorial_argmax_with_tir_select():
    # TVM's "Use Tuple Inputs" / "Reduce" tutorials: an argmax comm_reducer built with
    # tvm.tir.Select, tvm.tir.const and tvm.te.min_value
    def fcombine(x, y):
        lhs = tvm.tir.Select((x[1] >= y[1]), x[0], y[0])
        rhs = tvm.tir.Select((x[1] >= y[1]), x[1], y[1])
        return lhs, rhs

    def fidentity(t0, t1):
        return tvm.tir.const(-1, t0), tvm.te.min_value(t1)

    argmax = te.comm_reducer(fcombine, fidentity, name="argmax")
    m, n = te.var("m"), te.var("n")
    idx = te.placeholder((m, n), name="idx", dtype="int32")
    val = te.placeholder((m, n), name="val", dtype="int32")
    k = te.reduce_axis((0, n), "k")
    T0, T1 = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    s = te.create_schedule(T0.op)
    f = tvm.build(s, [idx, val, T0, T1], "llvm")
    rng = np.random.default_rng(3)
    for rows, cols in ((7, 13), (1, 1), (5, 2)):
        iv = rng.integers(-50, 50, (rows, cols)).astype("int32")
        vv = rng.integers(-4, 4, (rows, cols)).astype("int32")     # ties: the first wins
        t0, t1 = np.full(rows, 99, "int32"), np.full(rows, 99, "int32")
        f(iv, vv, t0, t1)
        first = vv.argmax(axis=1)
        np.testing.assert_array_equal(t1, vv.max(axis=1))
        np.testing.assert_array_equal(t0, iv[np.arange(rows), first])


@pytest.mark.parametrize("name", ["exp", "sigmoid", "tanh", "sqrt", "log", "floor", "round"])
def test_tir_math_functions_are_te_s(name):
    # tvm.tir.exp & co. (TVM's intrinsics tutorial reaches some through tvm.tir)
    n = 19
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: getattr(tvm.tir, name)(te.abs(A[i]) + 0.25), name="B")
    s = te.create_schedule(B.op)
    a = np.random.default_rng(1).uniform(-3, 3, n).astype("float32")
    b = np.full(n, np.nan, "float32")
    tvm.build(s, [A, B], "llvm")(a, b)
    x = np.abs(a.astype("float64")) + 0.25
    ref = 1 / (1 + np.exp(-x)) if name == "sigmoid" else getattr(np, name)(x)
    np.testing.assert_allclose(b, ref, rtol=1e-6, atol=1e-6)


def test_tir_index_helpers_and_cast():
    # tvm.tir.indexdiv / indexmod floor, tvm.tir.Cast(dtype, value)
    n = 16
    A = te.placeholder((n,), name="A", dtype="int32")
    B = te.compute((n,), lambda i: tvm.tir.indexdiv(A[i], 3) * 10 + tvm.tir.indexmod(A[i], 3),
                   name="B")
    C = te.compute((n,), lambda i: tvm.tir.Cast("float32", B[i]) * 0.5, name="C")
    s = te.create_schedule(C.op)
    a = np.arange(-8, 8, dtype="int32")
    c = np.full(n, np.nan, "float32")
    tvm.build(s, [A, C], "llvm")(a, c)
    np.testing.assert_array_equal(c, ((a // 3) * 10 + a % 3) * 0.5)


@pytest.mark.parametrize("symbolic", [False, True])
def test_extern_written_with_ir_builder_buffer_ptr_and_if_scope(symbolic):
    # TVM's way of writing te.extern bodies (topi's externs): ib.buffer_ptr gives flat
    # element access, ib.if_scope / ib.else_scope branch, for_range(kind=...) is a hint
    n = te.var("n") if symbolic else 17
    A = te.placeholder((n, 3), name="A")

    def gen(ins, outs):
        ib = tvm.tir.ir_builder.create()
        a, b = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, ins[0].shape[0] * 3, name="i", kind="parallel") as i:
            with ib.if_scope(a[i] > 0.5):
                b[i] = a[i] + 1.0
            with ib.else_scope():
                b[i] = a[i] - 1.0
        return ib.get()

    B = te.extern((n, 3), [A], gen, name="B", dtype="float32")
    C = te.compute((n, 3), lambda i, j: B[i, j] * 2.0, name="C")
    f = tvm.build(te.create_schedule(C.op), [A, C], "llvm")
    a = np.random.default_rng(2).uniform(0, 1, (17, 3)).astype("float32")
    c = np.full((17, 3), np.nan, "float32")
    f(a, c)
    x = a.astype("float64")
    np.testing.assert_allclose(c, np.where(x > 0.5, x + 1, x - 1) * 2, rtol=1e-6)


def test_ir_builder_else_scope_without_if_scope_is_refused():
    ib = tvm.tir.ir_builder.create()
    with pytest.raises(tvm.errors.DefinitionValueError,
                       match="ir_builder.else_scope: it does not follow an if_scope"):
        with ib.else_scope():
            pass
