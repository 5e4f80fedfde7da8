"""Stage.tile: split both axes and reorder to (x.outer, y.outer, x.inner, y.inner)."""

from __future__ import annotations

import pytest
from helpers import elementwise2d, leaf_extents, leaf_names, loop_headers, matmul

from polytile import ScheduleError


def test_tile_leaves_and_returned_axes():
    w = elementwise2d(5, 7)
    s = w.schedule()
    xo, yo, xi, yi = s[w.C].tile(w.C.op.axis[0], w.C.op.axis[1], 2, 3)
    assert [v.name for v in (xo, yo, xi, yi)] == ["i.outer", "j.outer", "i.inner", "j.inner"]
    assert leaf_names(s[w.C]) == ["i.outer", "j.outer", "i.inner", "j.inner"]
    assert leaf_extents(s[w.C]) == [3, 3, 2, 3]
    assert list(s[w.C].leaf_iter_vars) == [xo, yo, xi, yi]


def test_tile_is_one_trace_step():
    w = elementwise2d(5, 7)
    s = w.schedule()
    s[w.C].tile(w.C.op.axis[0], w.C.op.axis[1], 2, 3)
    assert [st.primitive for st in s.trace] == ["tile"]
    assert str(s.trace[0]) == "s[C].tile(i, j, 2, 3)"


def test_tile_loop_nest():
    w = elementwise2d(6, 7)
    s = w.schedule()
    s[w.C].tile(w.C.op.axis[0], w.C.op.axis[1], 2, 3)
    heads = loop_headers(s, w.args)
    assert heads[-4:] == ["for i.outer in range(0, 3):", "for j.outer in range(0, 3):",
                          "for i.inner in range(0, 2):",
                          "for j.inner in range(0, min(3, (7 - (3 * j.outer)))):"]


@pytest.mark.parametrize("m, n, fx, fy", [(1, 1, 1, 1), (5, 7, 2, 3), (13, 11, 4, 4),
                                          (13, 11, 16, 1), (12, 9, 3, 9)])
def test_tile_numeric(m, n, fx, fy, backend):
    w = elementwise2d(m, n)
    s = w.schedule()
    s[w.C].tile(w.C.op.axis[0], w.C.op.axis[1], fx, fy)
    s[w.B].tile(w.B.op.axis[0], w.B.op.axis[1], fy, fx)
    w.check(s, backend)


def test_tile_matmul_with_reduction_inside(backend):
    w = matmul(7, 9, 5)
    s = w.schedule()
    io, jo, ii, ji = s[w.C].tile(w.C.op.axis[0], w.C.op.axis[1], 3, 4)
    ko, ki = s[w.C].split(w.r, factor=2)
    s[w.C].reorder(io, jo, ko, ii, ki, ji)
    w.check(s, backend)


def test_tile_failures():
    w = elementwise2d(5, 7)
    s = w.schedule()
    with pytest.raises(ScheduleError, match=r"split: factor=0"):
        s[w.C].tile(w.C.op.axis[0], w.C.op.axis[1], 0, 2)
    s2 = w.schedule()
    with pytest.raises(ScheduleError, match="is not an axis of stage 'C'"):
        s2[w.C].tile(w.C.op.axis[0], w.B.op.axis[1], 2, 2)
    s3 = w.schedule()
    with pytest.raises(ScheduleError, match="was already split"):
        s3[w.C].tile(w.C.op.axis[0], w.C.op.axis[0], 2, 2)
