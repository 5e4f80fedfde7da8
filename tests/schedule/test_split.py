"""Stage.split: ``parent = outer * factor + inner``; factor/nparts, non-divisible tails,
size-1 and prime extents."""

from __future__ import annotations

import pytest
from helpers import elementwise2d, leaf_extents, leaf_names, loop_headers, lowered, matmul

from polytile import ScheduleError, te


def _vec(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return A, B


# --------------------------------------------------------------------------- structure
@pytest.mark.parametrize("n, factor, extents", [(10, 4, [3, 4]), (12, 4, [3, 4]),
                                                (10, 1, [10, 1]), (10, 10, [1, 10]),
                                                (10, 13, [1, 13]), (1, 3, [1, 3]),
                                                (13, 5, [3, 5])])
def test_split_factor_leaves(n, factor, extents):
    A, B = _vec(n)
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=factor)
    assert (xo.name, xi.name) == ("i.outer", "i.inner")
    assert leaf_names(s[B]) == ["i.outer", "i.inner"]
    assert leaf_extents(s[B]) == extents


@pytest.mark.parametrize("n, nparts, extents", [(10, 3, [3, 4]), (12, 3, [3, 4]),
                                                (13, 13, [13, 1]), (7, 1, [1, 7]),
                                                (7, 10, [7, 1])])
def test_split_nparts_leaves(n, nparts, extents):
    A, B = _vec(n)
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], nparts=nparts)
    assert leaf_extents(s[B]) == extents


def test_split_non_divisible_lowered_text():
    A, B = _vec(10)
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    assert loop_headers(s, [A, B]) == [
        "for i.outer in range(0, 3):",
        "for i.inner in range(0, min(4, (10 - (4 * i.outer)))):",
    ]
    assert "B[((4 * i.outer) + i.inner)] = (A[((4 * i.outer) + i.inner)] + 1.0f)" in \
        lowered(s, [A, B])


def test_split_divisible_has_constant_inner_extent():
    A, B = _vec(12)
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    assert loop_headers(s, [A, B]) == ["for i.outer in range(0, 3):",
                                       "for i.inner in range(0, 4):"]


def test_split_twice_nests_names():
    A, B = _vec(30)
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=6)
    xio, xii = s[B].split(xi, factor=4)
    xoo, xoi = s[B].split(xo, nparts=2)
    assert leaf_names(s[B]) == ["i.outer.outer", "i.outer.inner", "i.inner.outer",
                                "i.inner.inner"]
    assert leaf_extents(s[B]) == [2, 3, 2, 4]


def test_split_of_reduce_axis_keeps_kind_and_order():
    w = matmul(5, 6, 7)
    s = w.schedule()
    ko, ki = s[w.C].split(w.r, factor=3)
    assert leaf_names(s[w.C]) == ["i", "j", "k.outer", "k.inner"]
    assert ko.iter_type == ki.iter_type == "reduce"
    assert leaf_extents(s[w.C]) == [5, 6, 3, 3]


# ----------------------------------------------------------------------------- numeric
@pytest.mark.parametrize("m, n", [(1, 1), (5, 7), (13, 11)])
@pytest.mark.parametrize("how", ["factor=1", "factor=2", "factor=3", "factor=5", "factor=16",
                                 "nparts=2", "nparts=3", "nparts=7"])
def test_split_numeric(m, n, how, backend):
    w = elementwise2d(m, n)
    s = w.schedule()
    kw = {how.split("=")[0]: int(how.split("=")[1])}
    s[w.C].split(w.C.op.axis[0], **kw)
    s[w.C].split(w.C.op.axis[1], **kw)
    s[w.B].split(w.B.op.axis[1], **kw)
    w.check(s, backend)


@pytest.mark.parametrize("factor", [1, 2, 4, 7, 11])
def test_split_reduce_axis_numeric(factor, backend):
    w = matmul(5, 3, 11)
    s = w.schedule()
    ko, ki = s[w.C].split(w.r, factor=factor)
    s[w.C].split(ki, factor=2)
    w.check(s, backend)


def test_split_reduce_axis_with_nonzero_min(backend):
    from helpers import check, rand, run1
    A = te.placeholder((6, 11), name="A")
    k = te.reduce_axis((3, 10), name="k")
    C = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].split(k, factor=3)
    a = rand((6, 11))
    check(run1(s, [A, C], [a], backend), a[:, 3:10].astype("float64").sum(1), k=7)


# ----------------------------------------------------------------------------- failures
def test_split_axis_twice_raises():
    A, B = _vec(10)
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"split: iter_var 'i' of stage 'B' was already split "
                       r"into 'i.outer' and 'i.inner'; use one of those instead"):
        s[B].split(B.op.axis[0], factor=2)


@pytest.mark.parametrize("kw, msg", [({}, "give exactly one of factor= and nparts="),
                                     ({"factor": 2, "nparts": 2}, "give exactly one of"),
                                     ({"factor": 0}, r"factor=0 for iter_var 'i'"),
                                     ({"nparts": -1}, r"nparts=-1"),
                                     ({"factor": 2.0}, r"factor=2.0 .*expected a positive int"),
                                     ({"factor": True}, r"factor=True")])
def test_split_bad_factor_raises(kw, msg):
    A, B = _vec(10)
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match=msg):
        s[B].split(B.op.axis[0], **kw)


def test_split_factor_expression_of_the_wrong_kind_raises():
    # symbolic factors are integer expressions of sizes and scalars (tests/symbolic)
    A, B = _vec(10)
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="split: factor=f for iter_var 'i' of stage 'B'; "
                       "an int or an integer expression of size parameters"):
        s[B].split(B.op.axis[0], factor=te.var("f", "float32"))
    with pytest.raises(ScheduleError, match="no loop variables"):
        s[B].split(B.op.axis[0], factor=B.op.axis[0].var + 1)


def test_split_axis_of_another_stage_raises():
    w = elementwise2d(4, 4)
    s = w.schedule()
    with pytest.raises(ScheduleError, match=r"split: iter_var 'i' is not an axis of stage 'C' "
                       r"\(it belongs to stage 'B'\)"):
        s[w.C].split(w.B.op.axis[0], factor=2)


def test_split_placeholder_raises():
    w = elementwise2d(4, 4)
    s = w.schedule()
    with pytest.raises(ScheduleError, match="stage 'A' is a placeholder"):
        s[w.A].split(w.C.op.axis[0], factor=2)


def test_split_non_itervar_raises():
    w = elementwise2d(4, 4)
    s = w.schedule()
    with pytest.raises(ScheduleError, match="is not an IterVar"):
        s[w.C].split("i", factor=2)


def test_failed_split_leaves_schedule_unchanged():
    w = elementwise2d(4, 4)
    s = w.schedule()
    with pytest.raises(ScheduleError):
        s[w.C].split(w.C.op.axis[0], factor=0)
    assert s.trace == []
    assert leaf_names(s[w.C]) == ["i", "j"]
