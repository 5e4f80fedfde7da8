"""Thread roles of GPU statements (schedule/threads.py): bound, idle, replicated; the
barriers they call for; the refusal of a stage every block would write."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.schedule import interpreter
from polytile.schedule.kinds import ThreadTag
from polytile.schedule.model import build_model
from polytile.schedule.threads import barrier_plans, roles


def _producer_consumer(scope=None):
    """P computed at C's row loop; C's columns bound to blockIdx.x."""
    A = te.placeholder((4, 6), name="A")
    P = te.compute((4, 6), lambda i, j: A[i, j] + 1.0, name="P")
    C = te.compute((4, 6), lambda i, j: P[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[P].compute_at(s[C], C.op.axis[0])
    s[C].bind(C.op.axis[1], te.thread_axis("blockIdx.x"))
    if scope:
        s[P].set_scope(scope)
    return s, [A, C]


def test_a_stage_every_block_would_write_is_refused():
    s, args = _producer_consumer()
    with pytest.raises(polytile.ScheduleError, match=r"compute_at: stage 'P' runs outside "
                       r"the loops of its kernel \(stage 'C'\) bound to 'blockIdx.x': every "
                       r"block would compute it into one global buffer"):
        polytile.lower(s, args)


def test_a_shared_stage_outside_the_block_loop_is_one_per_block():
    s, args = _producer_consumer("shared")
    a = np.arange(24, dtype="float32").reshape(4, 6) - 3.5
    c = np.full((4, 6), np.nan, "float32")
    interpreter.run(polytile.lower(s, args), a, c)
    np.testing.assert_array_equal(c, (a + 1) * 2)


def _roles_of(s, args):
    model = build_model(s, args, padded=True)
    return model, {r.stmt.plan.name: r for r in roles(model.nest).values()}


def test_roles_bound_idle_and_replicated():
    A = te.placeholder((3, 13), name="A")
    P = te.compute((3, 13), lambda i, j: A[i, j] * 2.0, name="P")
    L = te.compute((3, 13), lambda i, j: A[i, j] - 1.0, name="L")
    Q = te.compute((3, 13), lambda i, j: P[i, j] + L[i, 12 - j], name="Q")
    s = te.create_schedule(Q.op)
    s[P].compute_at(s[Q], Q.op.axis[0])
    s[L].compute_at(s[Q], Q.op.axis[0])
    s[L].set_scope("local")
    _, ji = s[P].split(P.op.axis[1], factor=8)
    s[P].bind(ji, te.thread_axis("threadIdx.x"))
    model, r = _roles_of(s, [A, Q])
    tx = ThreadTag("threadIdx.x")
    assert tx in r["P"].bound and not r["P"].idle and not r["P"].replicated
    assert r["Q"].idle == (tx,) and not r["Q"].bound   # thread 0 computes the root
    assert r["L"].replicated == (tx,)                   # every thread its own copy
    plans = {model.plans[k].name for k in barrier_plans(model, model.nest)}
    assert plans == {"P"}   # written by 8 threads, read by thread 0; L stays private
    a = np.arange(39, dtype="float32").reshape(3, 13) / 4
    q = np.full((3, 13), np.nan, "float32")
    interpreter.run(polytile.lower(s, [A, Q]), a, q)
    np.testing.assert_array_equal(q, 2 * a + (a[:, ::-1] - 1))
