"""``te.scan`` as in TVM's scan tutorial (cumulative sum over rows) and beyond: several
states, an update through an intermediate compute, reads of rows further back; schedules
of the spatial axes (split, reorder, parallel, vectorize, bind) against numpy, and the
refusal of every schedule that runs the scan axis out of order."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, compile_with_nvcc, rand, rng, run1, run_schedule

import polytile
from polytile import te
from polytile.errors import ScheduleError
from polytile.schedule import interpreter


def _cumsum(m, n, rows=1):
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((rows, n), lambda t, i: X[t, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    return X, init, update, te.scan(init, update, state, inputs=[X])


def _cumsum_ref(x, rows=1):
    x = x.astype("float64")
    out = x.copy()
    for t in range(rows, x.shape[0]):
        out[t] = out[t - 1] + x[t]
    return out


def test_scan_surface():
    X, init, update, S = _cumsum(5, 3)
    assert S.shape == (5, 3) and S.dtype == "float32"
    assert isinstance(S.op, te.ScanOp) and S.op.scan_axis is update.op.axis[0]
    assert S.op.spatial_axis_ == update.op.axis[1:]
    s = te.create_schedule(S.op)
    assert s[update] is s[S] and s[init] is not s[S]


@pytest.mark.parametrize("m,n,rows", [(1, 1, 1), (9, 13, 1), (17, 5, 3), (4, 7, 4)])
def test_cumulative_sum_over_rows(backend, m, n, rows):
    X, init, update, S = _cumsum(m, n, rows)
    s = te.create_schedule(S.op)
    x = rand((m, n), seed=m + n)
    out = run1(s, [X, S], [x], backend)
    check(out, _cumsum_ref(x, rows), k=m)


@pytest.mark.parametrize("seed", range(6))
def test_random_schedules_of_the_spatial_axes(backend, seed):
    g = rng(300 + seed)
    m, n = int(g.integers(1, 12)), int(g.integers(1, 30))
    X, init, update, S = _cumsum(m, n)
    s = te.create_schedule(S.op)
    t, i = update.op.axis
    io, ii = s[update].split(i, int(g.integers(1, n + 2)))
    kind = int(g.integers(0, 4))
    if kind == 0:
        s[update].parallel(io)
        s[update].vectorize(ii)
    elif kind == 1:
        s[update].reorder(io, t, ii)   # the scan axis inside a spatial one: still in order
        s[update].parallel(io)
    elif kind == 2:
        to, ti = s[update].split(t, int(g.integers(1, m + 2)))
        s[update].unroll(ti) if m < 6 else None
    else:
        s[init].split(init.op.axis[1], 3)
        s[init].compute_at(s[S], io)
    x = rand((m, n), seed=seed)
    out = run1(s, [X, S], [x], backend)
    check(out, _cumsum_ref(x), k=m)


def test_two_states_and_an_intermediate_compute(backend):
    """A Fibonacci-like pair: a[t] = a[t-1] + b[t-1] * X[t], b[t] = a[t-2]-ish through an
    intermediate compute that reads the state (it is inlined into the scan)."""
    m, n = 11, 6
    X = te.placeholder((m, n), name="X")
    sa = te.placeholder((m, n), name="sa")
    sb = te.placeholder((m, n), name="sb")
    ia, ib = te.compute((2, n), lambda t, i: (X[t, i], X[t, i] * 2), name="init")
    mid = te.compute((m, n), lambda t, i: sa[t - 1, i] * 0.5, name="mid")
    ua, ub = te.compute((m, n), lambda t, i: (sa[t - 1, i] + sb[t - 1, i] * X[t, i],
                                               mid[t, i] - sa[t - 2, i]), name="upd")
    A, B = te.scan([ia, ib], [ua, ub], [sa, sb], name="pair")
    s = te.create_schedule(A.op)
    s[ua].parallel(ua.op.axis[1])
    x = rand((m, n), seed=4)
    a_out, b_out = run_schedule(s, [X, A, B], [x], backend)
    x64 = x.astype("float64")
    a, b = np.zeros((m, n)), np.zeros((m, n))
    a[:2], b[:2] = x64[:2], x64[:2] * 2
    for t in range(2, m):
        a[t] = a[t - 1] + b[t - 1] * x64[t]
        b[t] = a[t - 1] * 0.5 - a[t - 2]
    check(a_out, a, k=m)
    check(b_out, b, k=m)


def test_a_consumer_of_the_scan(backend):
    m, n = 7, 9
    X, init, update, S = _cumsum(m, n)
    Y = te.compute((m, n), lambda t, i: S[t, i] * 2 + 1, name="Y")
    s = te.create_schedule(Y.op)
    SL = s.cache_read(S, "local", [Y])
    s[SL].compute_at(s[Y], Y.op.axis[0])
    x = rand((m, n), seed=5)
    out = run1(s, [X, Y], [x], backend)
    check(out, _cumsum_ref(x) * 2 + 1, k=m)


# ------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("how", ["parallel", "vectorize", "reorder"])
def test_the_scan_axis_stays_serial(how):
    X, init, update, S = _cumsum(6, 5)
    s = te.create_schedule(S.op)
    t, i = update.op.axis
    if how == "reorder":
        to, ti = s[update].split(t, 2)
        s[update].reorder(ti, to)
    elif how == "vectorize":
        s[update].reorder(i, t)
        s[update].vectorize(t)
    else:
        getattr(s[update], how)(t)
    with pytest.raises(ScheduleError, match=f"(?s){how}: .*stage 'scan'.*Violating pair: "
                       r"scan.compute\[t="):
        polytile.lower(s, [X, S])


def test_a_read_of_a_neighbour_row_refuses_parallel_spatial_axes():
    m, n = 6, 5
    X = te.placeholder((m, n), name="X")
    st = te.placeholder((m, n), name="st")
    init = te.compute((1, n), lambda t, i: X[t, i], name="init")
    upd = te.compute((m, n), lambda t, i: te.if_then_else(
        i > 0, st[t - 1, te.max(i - 1, 0)], 0.0) + X[t, i], name="upd")
    S = te.scan(init, upd, st)
    s = te.create_schedule(S.op)
    s[upd].parallel(upd.op.axis[1])
    s[upd].reorder(upd.op.axis[1], upd.op.axis[0])
    with pytest.raises(ScheduleError, match="(?s)parallel: loop 'i' of stage 'scan'"):
        polytile.lower(s, [X, S])


def test_scan_definition_and_placement_errors():
    X, init, update, S = _cumsum(6, 5)
    st = te.placeholder((6, 5), name="st")
    with pytest.raises(ValueError, match="scan: shapes"):
        te.scan(te.compute((1, 4), lambda t, i: X[t, i]), update, st)
    with pytest.raises(ValueError, match="init has 7 rows for 6 steps"):
        te.scan(te.compute((7, 5), lambda t, i: X[0, i]), update, st)
    with pytest.raises(TypeError, match="not a placeholder"):
        te.scan(init, update, update)
    Y = te.compute((6, 5), lambda t, i: S[t, i] + 1, name="Y")
    s = te.create_schedule(Y.op)
    with pytest.raises(ScheduleError, match="compute_at: stage 'scan' is a te.scan"):
        s[S].compute_at(s[Y], Y.op.axis[0])
    with pytest.raises(ScheduleError, match="compute_inline: stage 'scan' is a te.scan"):
        s[S].compute_inline()
    with pytest.raises(ScheduleError, match="cache_write: stage 'scan' is a te.scan"):
        s.cache_write(S, "local")


# ------------------------------------------------------------------------- GPU
def test_tvm_scan_tutorial_schedule_on_the_gpu():
    m, n = 10, 37
    X, init, update, S = _cumsum(m, n)
    s = te.create_schedule(S.op)
    block_x, thread_x = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    xo, xi = s[init].split(init.op.axis[1], factor=16)
    s[init].bind(xo, block_x)
    s[init].bind(xi, thread_x)
    xo, xi = s[update].split(update.op.axis[1], factor=16)
    s[update].bind(xo, block_x)
    s[update].bind(xi, thread_x)
    compile_with_nvcc(polytile.build(s, [X, S], target="cuda").get_source())
    x = rand((m, n), seed=6)
    out = np.full((m, n), np.nan, "float32")
    interpreter.run(polytile.lower(s, [X, S]), x, out)
    check(out, _cumsum_ref(x), k=m)


@pytest.mark.parametrize("shift", [1, -1])
def test_a_read_of_the_current_row_is_refused(shift):
    m, n = 5, 4
    X = te.placeholder((m, n), name="X")
    st = te.placeholder((m, n), name="st")
    init = te.compute((1, n), lambda t, i: X[t, i], name="init")
    upd = te.compute((m, n), lambda t, i: st[t, (i + shift) % n] + X[t, i], name="upd")
    S = te.scan(init, upd, st)
    j = 1 if shift == 1 else n - 1
    with pytest.raises(ScheduleError, match=r"scan: stage 'scan' reads a value it has not "
                       r"computed yet: scan.compute\[t=1, i=0\] reads the element written by "
                       rf"scan.compute\[t=1, i={j}\]"):
        polytile.lower(te.create_schedule(S.op), [X, S])


@pytest.mark.parametrize("seed", range(3))
def test_random_gpu_schedules_of_a_scan(seed):
    g = rng(500 + seed)
    m, n = int(g.integers(1, 8)), int(g.integers(1, 50))
    X, init, update, S = _cumsum(m, n)
    s = te.create_schedule(S.op)
    f = int(g.integers(1, 33))
    xo, xi = s[update].split(update.op.axis[1], f)
    s[update].bind(xo, te.thread_axis("blockIdx.x"))
    s[update].bind(xi, te.thread_axis("threadIdx.x"))
    if g.integers(0, 2):
        s[update].split(update.op.axis[0], int(g.integers(1, m + 2)))
    io, ii = s[init].split(init.op.axis[1], f)
    s[init].bind(io, te.thread_axis("blockIdx.x"))
    s[init].bind(ii, te.thread_axis("threadIdx.x"))
    compile_with_nvcc(polytile.build(s, [X, S], target="cuda").get_source())
    x = rand((m, n), seed=seed)
    out = np.full((m, n), np.nan, "float32")
    interpreter.run(polytile.lower(s, [X, S]), x, out)
    check(out, _cumsum_ref(x), k=m)


def test_a_data_dependent_read_of_the_state_is_refused_clearly():
    m, n = 6, 5
    X = te.placeholder((m, n), name="X")
    st = te.placeholder((m, n), name="st")
    init = te.compute((1, n), lambda t, i: X[t, i], name="init")
    mid = te.compute((m, n), lambda t, i: st[t - 1, i] * 2, name="mid")
    upd = te.compute((m, n), lambda t, i: mid[t, te.max(st[t - 1, 0].astype("int32"), 0) % n]
                     + X[t, i], name="upd")
    S = te.scan(init, upd, st)
    with pytest.raises(ScheduleError, match=r"lower: stage 'scan' reads its own earlier values "
                       r"at scan\[.*an index or guard polytile cannot analyse"):
        polytile.lower(te.create_schedule(S.op), [X, S])
