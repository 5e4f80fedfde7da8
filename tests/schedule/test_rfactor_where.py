"""rfactor of reductions with a data-dependent ``where=`` (case P1-4), and short-circuit
``and``/``or`` guards in the definition-bounds check.

A ragged split makes ``outer * f + inner`` pass the reduce range; rfactor's partial stage
guards those points with ``value < extent`` *before* the user's condition, and every
backend evaluates ``and`` lazily, so the where= reads only in-range elements. The
definition-bounds check must see the same: a read on the right of ``and`` (``or``) is
checked only where the left holds (fails). Every numeric test compares with a float64 numpy
reference on poisoned outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand, run1, run_schedule

import polytile
from polytile import ScheduleError, te
from polytile.schedule.interpreter import run as interpret


def test_P1_4_rfactor_of_where_after_ragged_split(backend):
    A = te.placeholder((5,), name="A")
    k = te.reduce_axis((0, 5), name="k")
    R = te.compute((1,), lambda z: te.sum(A[k], axis=k, where=A[k] > 0), name="R")
    s = te.create_schedule(R.op)
    ko, ki = s[R].split(k, factor=2)          # 5 = 2 + 2 + 1
    s.rfactor(R, ki)
    a = np.array([1, -2, 3, -4, 5], "float32")
    np.testing.assert_array_equal(run1(s, [A, R], [a], backend), [9.0])


def _masked_rows(dtype, m=3, n=11, lo=0, red="sum"):
    A = te.placeholder((m, n), dtype, name="A")
    M = te.placeholder((n,), dtype, name="M")
    k = te.reduce_axis((lo, n), name="k")
    f = {"sum": te.sum, "max": te.max}[red]
    B = te.compute((m,), lambda i: f(A[i, k] * 2, axis=k, where=(A[i, k] > 0) & (M[k] < 0)),
                   name="B")
    a, mk = rand((m, n), dtype, seed=1), rand((n,), dtype, seed=2)
    sel = (a[:, lo:] > 0) & (mk[lo:] < 0)
    v = a[:, lo:].astype("float64") * 2
    if red == "sum":
        ref = np.where(sel, v, 0).sum(axis=1)
    else:
        ref = np.where(sel, v, -np.inf).max(axis=1)
        assert sel.any(axis=1).all()
    return A, M, B, k, [a, mk], ref


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("factor", [2, 3, 4])
@pytest.mark.parametrize("which", ["inner", "outer"])
@pytest.mark.parametrize("factor_axis", [0, -1])
def test_rfactor_of_where_after_ragged_split_matrix(backend, dtype, factor, which,
                                                    factor_axis):
    A, M, B, k, ins, ref = _masked_rows(dtype, lo=1)      # 10 = never a multiple of 3, 4
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=factor)
    s.rfactor(B, ki if which == "inner" else ko, factor_axis=factor_axis)
    check(run1(s, [A, M, B], ins, backend), ref, k=10)


def test_rfactor_of_where_with_max_reducer(backend):
    A, M, B, k, ins, ref = _masked_rows("float32", red="max")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    s.rfactor(B, ko)
    check(run1(s, [A, M, B], ins, backend), ref)


@pytest.mark.parametrize("where", ["compute_at", "parallel"])
def test_rfactor_of_where_rf_stage_attached_or_parallel(backend, where):
    A, M, B, k, ins, ref = _masked_rows("float32", m=4, n=13)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=3)
    BF = s.rfactor(B, ki)
    if where == "compute_at":
        s[BF].compute_at(s[B], B.op.axis[0])
    else:
        s[BF].parallel(BF.op.axis[0])
    check(run1(s, [A, M, B], ins, backend), ref, k=13)


def test_nested_rfactor_of_where_with_two_ragged_splits(backend):
    A, M, B, k, ins, ref = _masked_rows("float32", n=13)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)          # 13 = 4 * 3 + 1
    BF = s.rfactor(B, ki)
    (r,) = s[BF].op.reduce_axis               # k.outer, 4 iterations
    ro, ri = s[BF].split(r, factor=3)         # 4 = 3 + 1
    BFF = s.rfactor(BF, ri)
    assert BFF.shape == (3, 4, 3)
    outs = run_schedule(s, [A, M, BF, B], ins, backend)
    check(outs[1], ref, k=13)


def test_rfactor_of_where_fused_reduce_axes(backend):
    A = te.placeholder((3, 5, 7), name="A")
    r1 = te.reduce_axis((0, 5), name="r1")
    r2 = te.reduce_axis((0, 7), name="r2")
    B = te.compute((3,), lambda i: te.sum(A[i, r1, r2], axis=[r1, r2],
                                          where=A[i, r1, r2] > 0), name="B")
    s = te.create_schedule(B.op)
    f = s[B].fuse(r1, r2)
    fo, fi = s[B].split(f, factor=4)          # 35 = 4 * 8 + 3
    s.rfactor(B, fi)
    a = rand((3, 5, 7))
    ref = np.where(a > 0, a, 0).astype("float64").sum(axis=(1, 2))
    check(run1(s, [A, B], [a], backend), ref, k=35)


def test_cross_thread_reduction_with_where_and_ragged_split():
    A = te.placeholder((5, 37), name="A")
    k = te.reduce_axis((0, 37), name="k")
    B = te.compute((5,), lambda i: te.sum(A[i, k], axis=k, where=A[i, k] > 0), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    a = rand((5, 37))
    out = np.full(5, np.nan, "float32")
    interpret(polytile.lower(s, [A, B]), a, out)
    check(out, np.where(a > 0, a, 0).astype("float64").sum(axis=1), k=37)


# ------------------------------------------------- short-circuit guards of the bounds check
def test_where_and_guards_a_read_past_the_tensor(backend):
    """``k < 5 and A[k] > 0`` over k in [0, 7): A[5], A[6] are never read."""
    A = te.placeholder((5,), name="A")
    k = te.reduce_axis((0, 7), name="k")
    R = te.compute((1,), lambda z: te.sum(te.if_then_else(k < 5, A[te.min(k, 4)], 0.0),
                                          axis=k, where=te.all(k < 5, A[k] > 0)), name="R")
    s = te.create_schedule(R.op)
    a = np.array([1, -2, 3, -4, 5], "float32")
    np.testing.assert_array_equal(run1(s, [A, R], [a], backend), [9.0])


def test_or_guards_a_read_past_the_tensor(backend):
    A = te.placeholder((5,), name="A")
    C = te.compute((7,), lambda i: te.if_then_else(te.any(i >= 5, A[i] < 0), 0.0, 1.0),
                   name="C")
    s = te.create_schedule(C.op)
    a = np.array([1, -2, 3, -4, 5], "float32")
    np.testing.assert_array_equal(run1(s, [A, C], [a], backend), [1, 0, 1, 0, 1, 0, 0])


@pytest.mark.parametrize("cond", ["and_wrong_side", "or_wrong_side", "unguarded"])
def test_reads_outside_the_short_circuit_guard_are_still_refused(cond):
    """The guard covers only the operand to its right; a read before it or on the wrong
    branch is refused with the read named."""
    A = te.placeholder((5,), name="A")
    k = te.reduce_axis((0, 7), name="k")
    where = {"and_wrong_side": lambda: te.all(A[k] > 0, k < 5),
             "or_wrong_side": lambda: te.any(k < 5, A[k] > 0),
             "unguarded": lambda: A[k] > 0}[cond]()
    R = te.compute((1,), lambda z: te.sum(te.if_then_else(k < 5, A[te.min(k, 4)], 0.0),
                                          axis=k, where=where), name="R")
    s = te.create_schedule(R.op)
    with pytest.raises(ScheduleError, match=r"lower: stage 'R' reads A\[5\] outside its "
                       r"shape \(5,\)"):
        polytile.lower(s, [A, R])
