"""rfactor: factoring a reduction into partial reductions over one of its loops."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand, run1

from polytile import ScheduleError, te


def _row_sum(m=5, n=37):
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="B")
    return A, B, k


def test_rfactor_structure():
    A, B, k = _row_sum()
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    BF = s.rfactor(B, ki)
    assert BF.shape == (8, 5)
    assert [iv.name for iv in BF.op.axis] == ["k.inner", "i"]
    assert [iv.name for iv in BF.op.reduce_axis] == ["k.outer"]
    assert [iv.name for iv in s[B].leaf_iter_vars] == ["i", "k.inner.v"]
    assert s[B].op.reduce_axis[0].dom.extent == 8


@pytest.mark.parametrize("factor_axis", [0, 1])
def test_rfactor_numeric_ragged_split(backend, factor_axis):
    A, B, k = _row_sum(5, 37)  # 37 = 4 * 8 + 5: the last partial sum is shorter
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    BF = s.rfactor(B, ki, factor_axis=factor_axis)
    s[BF].parallel(s[BF].op.axis[0])
    a = rand((5, 37))
    check(run1(s, [A, B], [a], backend), (a.astype("float64") * 2).sum(axis=1))


def test_rfactor_of_outer_loop_and_replay(backend):
    A, B, k = _row_sum(3, 50)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, nparts=4)
    s.rfactor(B, ko)
    a = rand((3, 50))
    check(run1(s.copy(), [A, B], [a], backend), (a.astype("float64") * 2).sum(axis=1))


def test_rfactor_of_max_keeps_the_identity(backend):
    A = te.placeholder((4, 23), name="A")
    k = te.reduce_axis((0, 23), name="k")
    B = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=5)
    s.rfactor(B, ki)
    a = rand((4, 23)) - 3.0  # all negative: a zero identity would show
    check(run1(s, [A, B], [a], backend), a.max(axis=1))


def test_rfactor_of_a_spatial_axis_is_refused():
    A, B, k = _row_sum()
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="rfactor: 'i' is a spatial loop of stage 'B'"):
        s.rfactor(B, B.op.axis[0])


def test_rfactor_of_non_reduction_is_refused():
    A = te.placeholder((4,), name="A")
    C = te.compute((4,), lambda i: A[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="rfactor: stage 'C' is not a reduction"):
        s.rfactor(C, C.op.axis[0])


def test_rfactor_after_annotating_is_refused():
    A, B, k = _row_sum()
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    s[B].unroll(ko)
    with pytest.raises(ScheduleError, match="rfactor before annotating"):
        s.rfactor(B, ki)


def test_rfactor_unlocks_parallel_reduction(backend):
    """parallel(k) is refused on the reduction, but legal on the factored axis."""
    A, B, k = _row_sum(2, 64)
    s = te.create_schedule(B.op)
    s[B].parallel(k)
    with pytest.raises(ScheduleError, match="carries a dependence"):
        run1(s, [A, B], [rand((2, 64))], backend)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, nparts=2)
    BF = s.rfactor(B, ko)
    s[BF].parallel(s[BF].op.axis[0])
    a = rand((2, 64))
    check(run1(s, [A, B], [a], backend), (a.astype("float64") * 2).sum(axis=1))
    assert np.isfinite(a).all()
