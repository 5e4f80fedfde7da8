"""Stage.fuse: ``fused = outer * extent(inner) + inner`` for adjacent loops."""

from __future__ import annotations

import pytest
from helpers import check, elementwise2d, leaf_extents, leaf_names, loop_headers, matmul, rand, run1

from polytile import ScheduleError, te


def _cube(a=3, b=4, c=5):
    A = te.placeholder((a, b, c), name="A")
    B = te.compute((a, b, c), lambda i, j, k: A[i, j, k] * 2.0 - 1.0, name="B")
    x = rand((a, b, c))
    return A, B, x, x.astype("float64") * 2 - 1


def test_fuse_two_axes_structure():
    w = elementwise2d(5, 7)
    s = w.schedule()
    f = s[w.C].fuse(w.C.op.axis[0], w.C.op.axis[1])
    assert f.name == "i.j.fused"
    assert leaf_names(s[w.C]) == ["i.j.fused"] and leaf_extents(s[w.C]) == [35]
    assert loop_headers(s, w.args)[-1] == "for i.j.fused in range(0, 35):"


def test_fuse_three_axes_structure():
    A, B, _, _ = _cube()
    s = te.create_schedule(B.op)
    f = s[B].fuse(*B.op.axis)
    assert f.name == "i.j.fused.k.fused"
    assert leaf_extents(s[B]) == [60]
    assert [st.primitive for st in s.trace] == ["fuse"]
    assert loop_headers(s, [A, B]) == ["for i.j.fused.k.fused in range(0, 60):"]


def test_fuse_single_axis_is_identity():
    A, B, _, _ = _cube()
    s = te.create_schedule(B.op)
    assert s[B].fuse(B.op.axis[1]) is B.op.axis[1]
    assert leaf_names(s[B]) == ["i", "j", "k"]


def test_fuse_after_split_structure():
    w = elementwise2d(5, 7)
    s = w.schedule()
    xo, xi = s[w.C].split(w.C.op.axis[0], factor=2)
    s[w.C].fuse(xi, w.C.op.axis[1])
    assert leaf_names(s[w.C]) == ["i.outer", "i.inner.j.fused"]
    assert leaf_extents(s[w.C]) == [3, 14]
    assert loop_headers(s, w.args)[-1] == \
        "for i.inner.j.fused in range(0, min(14, (35 - (14 * i.outer)))):"


@pytest.mark.parametrize("which", [(0, 1), (1, 2), (0, 1, 2)])
def test_fuse_numeric(which, backend):
    A, B, x, ref = _cube()
    s = te.create_schedule(B.op)
    s[B].fuse(*[B.op.axis[k] for k in which])
    check(run1(s, [A, B], [x], backend), ref)


@pytest.mark.parametrize("m, n, f", [(5, 7, 2), (6, 7, 3), (1, 5, 4), (7, 1, 3)])
def test_fuse_after_split_numeric(m, n, f, backend):
    w = elementwise2d(m, n)
    s = w.schedule()
    xo, xi = s[w.C].split(w.C.op.axis[0], factor=f)
    s[w.C].fuse(xi, w.C.op.axis[1])
    yo, yi = s[w.B].split(w.B.op.axis[1], factor=f)
    s[w.B].fuse(w.B.op.axis[0], yo)
    w.check(s, backend)


def test_fuse_then_split_numeric(backend):
    A, B, x, ref = _cube()
    s = te.create_schedule(B.op)
    f = s[B].fuse(*B.op.axis)
    fo, fi = s[B].split(f, factor=7)
    s[B].split(fo, nparts=3)
    check(run1(s, [A, B], [x], backend), ref)


def test_fuse_reduce_axes_numeric(backend):
    A = te.placeholder((4, 5, 6), name="A")
    k1 = te.reduce_axis((1, 5), "k1")
    k2 = te.reduce_axis((2, 6), "k2")
    C = te.compute((4,), lambda i: te.sum(A[i, k1, k2], axis=[k1, k2]), name="C")
    s = te.create_schedule(C.op)
    f = s[C].fuse(k1, k2)
    assert f.iter_type == "reduce" and leaf_extents(s[C]) == [4, 16]
    a = rand((4, 5, 6))
    check(run1(s, [A, C], [a], backend), a[:, 1:5, 2:6].astype("float64").sum((1, 2)), k=16)


def test_fuse_spatial_of_matmul_and_split_reduce(backend):
    w = matmul(4, 5, 6)
    s = w.schedule()
    f = s[w.C].fuse(*w.C.op.axis)
    s[w.C].split(f, factor=3)
    s[w.C].split(w.r, factor=4)
    w.check(s, backend)


# ----------------------------------------------------------------------------- failures
def test_fuse_non_adjacent_raises():
    A, B, _, _ = _cube()
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match=r"fuse: iter_vars 'i' and 'k' of stage 'B' are not "
                       r"adjacent in the loop order \['i', 'j', 'k'\]"):
        s[B].fuse(B.op.axis[0], B.op.axis[2])


def test_fuse_inner_before_outer_raises():
    A, B, _, _ = _cube()
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="outermost first"):
        s[B].fuse(B.op.axis[1], B.op.axis[0])


def test_fuse_spatial_with_reduce_raises():
    w = matmul(3, 4, 5)
    s = w.schedule()
    with pytest.raises(ScheduleError, match="'j' is a data_par axis and 'k' a reduce axis; fuse "
                       "axes of one kind"):
        s[w.C].fuse(w.C.op.axis[1], w.r)


def test_fuse_nothing_adds_a_singleton_loop():
    # TVM's special case (tests/schedule/test_tvm_surface.py has the numbers)
    A, B, _, _ = _cube()
    s = te.create_schedule(B.op)
    one = s[B].fuse()
    assert s[B].leaf_iter_vars[0] is one and one.dom.extent == 1


def test_fuse_already_fused_axis_raises():
    A, B, _, _ = _cube()
    s = te.create_schedule(B.op)
    s[B].fuse(B.op.axis[0], B.op.axis[1])
    with pytest.raises(ScheduleError, match="was already fused into 'i.j.fused'"):
        s[B].split(B.op.axis[0], factor=2)


def _fuse_refused_or_correct(w, s):
    """Fuse the two axes of ``w.C``: either fuse (or lower) refuses with a ScheduleError,
    or what the axes carried follows the fused loop and the result is right; an internal
    ValueError ("IterVar(j, ...) is not in list") is neither."""
    try:
        s[w.C].fuse(w.C.op.axis[0], w.C.op.axis[1])
        out = run1(s, w.args, w.inputs, "interp")
    except ScheduleError:
        return
    check(out, w.ref)


def test_fuse_of_annotated_axis_is_refused_or_carried():
    w = elementwise2d(3, 5)
    s = w.schedule()
    s[w.C].vectorize(w.C.op.axis[1])
    _fuse_refused_or_correct(w, s)


def test_fuse_of_attach_axis_is_refused_or_carried():
    w = elementwise2d(3, 5)
    s = w.schedule()
    s[w.B].compute_at(s[w.C], w.C.op.axis[1])
    _fuse_refused_or_correct(w, s)
