"""TVM's ``Stage.env_threads`` (threads launched around a scan's time loop) and
``Stage.rolling_buffer`` (a sliding-window buffer): accepted with the same values,
checked like TVM, refused clearly otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, compile_with_nvcc, rand

import polytile
from polytile import ScheduleError, te
from polytile.schedule import interpreter
from polytile.schedule.schedule import replay


def _cumsum(m, n):
    X = te.placeholder((m, n), name="X")
    st = te.placeholder((m, n), name="st")
    init = te.compute((1, n), lambda t, i: X[0, i], name="init")
    upd = te.compute((m, n), lambda t, i: st[t - 1, i] + X[t, i], name="upd")
    return X, init, upd, te.scan(init, upd, st)


def _bound_scan(m=9, n=37, env=True):
    X, init, upd, S = _cumsum(m, n)
    s = te.create_schedule(S.op)
    bx, tx = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    if env:
        s[S.op].env_threads([bx, tx])
    xo, xi = s[init].split(init.op.axis[1], factor=16)
    s[init].bind(xo, bx)
    s[init].bind(xi, tx)
    xo, xi = s[upd].split(upd.op.axis[1], factor=16)
    s[upd].bind(xo, bx)
    s[upd].bind(xi, tx)
    return X, S, s


def test_env_threads_persistent_scan_kernel():
    m, n = 9, 37
    X, S, s = _bound_scan(m, n)
    text = str(polytile.lower(s, [X, S]))
    # one kernel holds the whole time loop
    assert text.count("launch ") == 2 and "    for t in range(0, 9):" in text
    compile_with_nvcc(polytile.build(s, [X, S], target="cuda").get_source())
    x = rand((m, n), seed=2)
    out = np.full((m, n), np.nan, "float32")
    interpreter.run(polytile.lower(s, [X, S]), x, out)
    check(out, np.cumsum(x.astype("float64"), axis=0), k=m)
    s2 = replay(s.trace, te.create_schedule(S.op))
    assert str(polytile.lower(s2, [X, S])) == text


def test_env_threads_needs_a_bound_axis():
    X, init, upd, S = _cumsum(4, 8)
    s = te.create_schedule(S.op)
    s[S.op].env_threads([te.thread_axis("threadIdx.x")])
    with pytest.raises(ScheduleError, match=r"env_threads: thread axis 'threadIdx.x' of "
                       r"te.scan 'scan' is bound to no loop of the scan"):
        polytile.lower(s, [X, S])


def test_env_threads_of_a_compute_or_a_loop_is_refused():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match=r"env_threads: stage 'B' is not a te.scan"):
        s[B].env_threads([te.thread_axis("threadIdx.x")])
    X, init, upd, S = _cumsum(4, 8)
    s = te.create_schedule(S.op)
    with pytest.raises(ScheduleError, match=r"env_threads: 'i' given to stage 'scan' is not "
                       r"a thread axis"):
        s[S].env_threads([upd.op.axis[1]])


def _pools(n=29, w=3):
    """Two 1-D sliding sums (TVM's rolling_buffer test: pooling after pooling)."""
    A = te.placeholder((n,), name="A")
    k1 = te.reduce_axis((0, w), name="k1")
    B = te.compute((n - w + 1,), lambda i: te.sum(A[i + k1], axis=k1), name="B")
    k2 = te.reduce_axis((0, w), name="k2")
    C = te.compute((n - 2 * w + 2,), lambda i: te.sum(B[i + k2], axis=k2), name="C")
    a = rand((n,), seed=4)
    b = sum(a.astype("float64")[k:k + n - w + 1] for k in range(w))
    c = sum(b[k:k + n - 2 * w + 2] for k in range(w))
    return A, B, C, a, c


def test_rolling_buffer_same_values():
    A, B, C, a, ref = _pools()
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    s[B].rolling_buffer()
    out = np.full(ref.shape, np.nan, "float32")
    polytile.build(s, [A, C])(a, out)
    check(out, ref, k=9)


def test_rolling_buffer_at_the_root_is_refused():
    A, B, C, a, ref = _pools()
    s = te.create_schedule(C.op)
    s[B].rolling_buffer()
    with pytest.raises(ScheduleError, match=r"rolling_buffer: stage 'B' is computed at the "
                       r"root; a stage computed at a loop of its consumer"):
        polytile.lower(s, [A, C])
