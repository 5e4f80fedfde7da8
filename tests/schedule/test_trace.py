"""Schedules are data: every primitive appends a Step to ``s.trace``; ``Schedule.copy()`` and
``replay`` rebuild the same schedule (same lowered text)."""

from __future__ import annotations

import json

import pytest
from helpers import elementwise2d, lowered, matmul, stencil1d

from polytile import ScheduleError, te
from polytile.schedule import Step, replay


def _tiled_matmul_relu():
    w = matmul(7, 9, 5)
    D = te.compute((7, 9), lambda i, j: te.max(w.C[i, j], 0.0), name="D")
    s = te.create_schedule(D.op)
    return w, D, s


def sched_split_reorder_annotate():
    w = matmul(7, 9, 5)
    s = w.schedule()
    io, jo, ii, ji = s[w.C].tile(w.C.op.axis[0], w.C.op.axis[1], 2, 4)
    ko, ki = s[w.C].split(w.r, factor=2)
    s[w.C].reorder(io, jo, ko, ii, ki, ji)
    s[w.C].vectorize(ji)
    s[w.C].parallel(io)
    s[w.C].unroll(ki)
    return s, w.args


def sched_fuse_split_pragma():
    w = elementwise2d(6, 7)
    s = w.schedule()
    f = s[w.C].fuse(*w.C.op.axis)
    fo, fi = s[w.C].split(f, nparts=3)
    s[w.C].pragma(fo, "parallel_launch_point")
    s[w.B].compute_inline()
    return s, w.args


def sched_inline_root():
    w = elementwise2d(6, 7)
    s = w.schedule()
    s[w.B].compute_inline()
    s[w.B].compute_root()
    s[w.B].split(w.B.op.axis[1], factor=3)
    return s, w.args


def sched_compute_at_root_axis():
    w = elementwise2d(6, 7)
    s = w.schedule()
    s[w.B].compute_at(s[w.C], w.C.op.axis[0])
    return s, w.args


def sched_compute_at_split_axis():
    w = stencil1d(11)
    s = w.schedule()
    xo, xi = s[w.C].split(w.C.op.axis[0], factor=4)
    s[w.B].compute_at(s[w.C], xo)
    return s, w.args


def sched_compute_at_tile():
    w, D, s = _tiled_matmul_relu()
    io, jo, ii, ji = s[D].tile(D.op.axis[0], D.op.axis[1], 2, 4)
    s[w.C].compute_at(s[D], jo)
    ko, ki = s[w.C].split(w.r, factor=2)
    s[w.C].reorder(ko, *w.C.op.axis, ki)
    s[D].vectorize(ji)
    s[D].parallel(io)
    return s, [w.A, w.B, D]


NO_ATTACH = [sched_split_reorder_annotate, sched_fuse_split_pragma, sched_inline_root]
ATTACH = [sched_compute_at_root_axis, sched_compute_at_split_axis, sched_compute_at_tile]


def test_trace_records_each_primitive_once():
    s, _ = sched_split_reorder_annotate()
    assert [str(st) for st in s.trace] == [
        "s[C].tile(i, j, 2, 4)",
        "s[C].split(k, factor=2)",
        "s[C].reorder(i.outer, j.outer, k.outer, i.inner, k.inner, j.inner)",
        "s[C].vectorize(j.inner)",
        "s[C].parallel(i.outer)",
        "s[C].unroll(k.inner)",
    ]
    assert repr(s).startswith("Schedule(\n  s[C].tile(i, j, 2, 4)")


def test_trace_steps_are_frozen():
    s, _ = sched_split_reorder_annotate()
    with pytest.raises(AttributeError):
        s.trace[0].primitive = "fuse"


@pytest.mark.parametrize("make", NO_ATTACH, ids=lambda f: f.__name__)
def test_copy_lowers_identically(make):
    s, args = make()
    c = s.copy()
    assert c is not s and c.trace == s.trace
    assert lowered(c, args) == lowered(s, args)


@pytest.mark.parametrize("make", NO_ATTACH, ids=lambda f: f.__name__)
def test_json_round_trip_replays_identically(make):
    s, args = make()
    steps = [Step.from_json(json.loads(json.dumps(st.to_json()))) for st in s.trace]
    assert steps == s.trace
    fresh = te.create_schedule(s.outputs)
    assert lowered(replay(steps, fresh), args) == lowered(s, args)


@pytest.mark.parametrize("make", ATTACH, ids=lambda f: f.__name__)
def test_copy_of_compute_at_lowers_identically(make):
    s, args = make()
    c = s.copy()
    try:
        text = lowered(c, args)
    except ScheduleError as ex:  # e.g. "computed at the vectorized loop" after a bad replay
        pytest.fail(f"the copy does not lower: {ex}")
    assert text == lowered(s, args)


def test_replay_refuses_an_axis_whose_name_does_not_match():
    w = elementwise2d(4, 4)
    bad = [Step("split", "C", (("iv", -1, "i"),), (("factor", 2),))]
    with pytest.raises(ScheduleError, match="replay"):
        replay(bad, w.schedule())


def test_copy_is_independent_of_the_original():
    s, args = sched_inline_root()
    before = lowered(s, args)
    c = s.copy()
    w_stage = next(st for st in c.stages if st.name == "C")
    w_stage.split(w_stage.leaf_iter_vars[0], factor=2)
    assert lowered(s, args) == before
    assert len(c.trace) == len(s.trace) + 1


def test_replay_unknown_stage_raises():
    w = elementwise2d(4, 4)
    with pytest.raises(ScheduleError, match=r"replay: no stage named 'Z'; one of \['A', 'B', "
                       r"'C'\]"):
        replay([Step("split", "Z", (("iv", 0, "i"),), (("factor", 2),))], w.schedule())


def test_replay_unknown_axis_raises():
    w = elementwise2d(4, 4)
    with pytest.raises(ScheduleError, match="replay: stage .C. has no iter_var .i. at position 99"):
        replay([Step("split", "C", (("iv", 99, "i"),), (("factor", 2),))], w.schedule())


def test_replay_unknown_primitive_raises():
    w = elementwise2d(4, 4)
    with pytest.raises(ScheduleError, match="replay: unknown primitive 'frobnicate'"):
        replay([Step("frobnicate", "C")], w.schedule())


def test_replay_of_an_illegal_step_raises_schedule_error():
    w = elementwise2d(4, 4)
    steps = [Step("split", "C", (("iv", 0, "i"),), (("factor", 2),)),
             Step("split", "C", (("iv", 0, "i"),), (("factor", 2),))]
    with pytest.raises(ScheduleError, match="was already split"):
        replay(steps, w.schedule())
