"""Stage.reorder: the positions held by the given axes are refilled in the given order."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, elementwise2d, leaf_names, loop_headers, matmul, rand, run1

from polytile import ScheduleError, te


def _cube(a=3, b=4, c=5):
    A = te.placeholder((a, b, c), name="A")
    B = te.compute((a, b, c), lambda i, j, k: A[i, j, k] + 1.0, name="B")
    x = rand((a, b, c))
    return A, B, x, x.astype("float64") + 1


def test_reorder_full_permutation():
    A, B, _, _ = _cube()
    s = te.create_schedule(B.op)
    i, j, k = B.op.axis
    s[B].reorder(k, i, j)
    assert leaf_names(s[B]) == ["k", "i", "j"]
    assert loop_headers(s, [A, B]) == ["for k in range(0, 5):", "for i in range(0, 3):",
                                       "for j in range(0, 4):"]


def test_reorder_subset_refills_their_positions():
    A, B, _, _ = _cube()
    s = te.create_schedule(B.op)
    i, j, k = B.op.axis
    s[B].reorder(k, i)       # positions 0 and 2 get k and i; j stays in the middle
    assert leaf_names(s[B]) == ["k", "j", "i"]


def test_reorder_after_split():
    w = elementwise2d(6, 7)
    s = w.schedule()
    i, j = w.C.op.axis
    io, ii = s[w.C].split(i, factor=2)
    jo, ji = s[w.C].split(j, factor=3)
    s[w.C].reorder(jo, io, ji, ii)
    assert leaf_names(s[w.C]) == ["j.outer", "i.outer", "j.inner", "i.inner"]


@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 1, 0), (1, 2, 0), (2, 0, 1), (0, 2, 1)])
def test_reorder_numeric(perm, backend):
    A, B, x, ref = _cube()
    s = te.create_schedule(B.op)
    s[B].reorder(*[B.op.axis[p] for p in perm])
    check(run1(s, [A, B], [x], backend), ref)


def test_reorder_reduce_axis_outermost(backend):
    w = matmul(4, 5, 6)
    s = w.schedule()
    i, j = w.C.op.axis
    s[w.C].reorder(w.r, j, i)
    assert leaf_names(s[w.C]) == ["k", "j", "i"]
    # init runs in its own nest before the reduction loop
    assert loop_headers(s, w.args)[:2] == ["for j in range(0, 5):", "for i in range(0, 4):"]
    w.check(s, backend)


def test_reorder_reduce_between_spatial(backend):
    w = matmul(4, 5, 6)
    s = w.schedule()
    i, j = w.C.op.axis
    ko, ki = s[w.C].split(w.r, factor=4)
    s[w.C].reorder(i, ko, j, ki)
    w.check(s, backend)


def test_reorder_split_reduce_axis_inner_outside(backend):
    w = matmul(4, 5, 6)
    s = w.schedule()
    ko, ki = s[w.C].split(w.r, factor=4)
    s[w.C].reorder(ki, ko)
    w.check(s, backend)


def test_reorder_two_reduce_axes(backend):
    A = te.placeholder((5, 6), name="A")
    k1 = te.reduce_axis((0, 5), "k1")
    k2 = te.reduce_axis((0, 6), "k2")
    C = te.compute((3,), lambda i: te.sum(A[k1, k2] * (i + 1).astype("float32"), axis=[k1, k2]),
                   name="C")
    s = te.create_schedule(C.op)
    s[C].reorder(k2, k1)
    a = rand((5, 6))
    check(run1(s, [A, C], [a], backend), a.astype("float64").sum() * np.arange(1, 4), k=30)


# ----------------------------------------------------------------------------- failures
def test_reorder_axis_of_another_stage_raises():
    w = elementwise2d(4, 4)
    s = w.schedule()
    with pytest.raises(ScheduleError, match=r"reorder: iter_var 'j' is not an axis of stage 'C' "
                       r"\(it belongs to stage 'B'\); expected one of \['i', 'j'\]"):
        s[w.C].reorder(w.B.op.axis[1], w.C.op.axis[0])


def test_reorder_duplicate_raises():
    w = elementwise2d(4, 4)
    s = w.schedule()
    i = w.C.op.axis[0]
    with pytest.raises(ScheduleError, match="reorder: iter_var 'i' appears twice"):
        s[w.C].reorder(i, i)


def test_reorder_split_parent_raises():
    w = elementwise2d(4, 4)
    s = w.schedule()
    i, j = w.C.op.axis
    s[w.C].split(i, factor=2)
    with pytest.raises(ScheduleError, match="was already split into 'i.outer' and 'i.inner'"):
        s[w.C].reorder(j, i)
