"""Scans of several states written TVM's way (one update compute per state, as TVM's
``test_scan_multi_out``), and updates that read several stages which read the states;
symbolic and odd sizes against numpy, on the interpreter, LLVM and CUDA (nvcc)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, compile_schedule, compile_with_nvcc, rand, run_schedule

import polytile
from polytile import te
from polytile.errors import ScheduleError
from polytile.schedule import interpreter


def _two_states(m, n):
    x1 = te.placeholder((m, n), name="x1")
    x2 = te.placeholder((m, n), name="x2")
    s1 = te.placeholder((m, n), name="s1")
    s2 = te.placeholder((m, n), name="s2")
    i1 = te.compute((1, n), lambda _, i: x1[0, i], name="i1")
    i2 = te.compute((1, n), lambda _, i: x2[0, i] * 2.0, name="i2")
    u1 = te.compute((m, n), lambda t, i: s1[t - 1, i] + s2[t - 1, i] * 0.5 + x1[t, i],
                    name="u1")
    u2 = te.compute((m, n), lambda t, j: x2[t, j] - s2[t - 1, j] * 0.25, name="u2")
    r1, r2 = te.scan([i1, i2], [u1, u2], [s1, s2], name="multi")
    return (x1, x2), (i1, i2), (u1, u2), (r1, r2)


def _two_states_ref(a, b):
    a, b = a.astype("float64"), b.astype("float64")
    e1, e2 = np.zeros_like(a), np.zeros_like(a)
    if len(a):
        e1[0], e2[0] = a[0], 2 * b[0]
    for t in range(1, len(a)):
        e1[t] = e1[t - 1] + e2[t - 1] * 0.5 + a[t]
        e2[t] = b[t] - e2[t - 1] * 0.25
    return e1, e2


def test_surface_of_a_scan_with_one_compute_per_state():
    (x1, x2), _, (u1, u2), (r1, r2) = _two_states(5, 3)
    assert r1.op is r2.op and r1.shape == r2.shape == (5, 3)
    s = te.create_schedule([r1.op])
    assert s[u1] is s[u2] is s[r1]
    # axis k of the second update stands for axis k of the stage
    io, ii = s[u2].split(u2.op.axis[1], factor=2)
    assert s[r1].leaf_iter_vars == [u1.op.axis[0], io, ii]
    with pytest.raises(ScheduleError, match="already split"):
        s[u1].split(u1.op.axis[1], factor=2)


@pytest.mark.parametrize("m,n", [(1, 1), (7, 9), (13, 4)])
def test_two_states_one_compute_each(backend, m, n):
    xs, _, (u1, u2), rs = _two_states(m, n)
    s = te.create_schedule([r.op for r in rs])
    io, ii = s[u2].split(u2.op.axis[1], factor=4)
    s[u1].parallel(io)
    a, b = rand((m, n), seed=m), rand((m, n), seed=n + 50)
    o1, o2 = run_schedule(s, [*xs, *rs], [a, b], backend)
    e1, e2 = _two_states_ref(a, b)
    check(o1, e1, k=m)
    check(o2, e2, k=m)


def test_two_states_symbolic_sizes_on_llvm():
    m, n = te.var("m"), te.var("n")
    xs, inits, (u1, u2), rs = _two_states(m, n)
    s = te.create_schedule([r.op for r in rs])
    io, ii = s[u1].split(u1.op.axis[1], factor=8)
    s[u2].vectorize(ii)
    f = polytile.build(s, [*xs, *rs])
    for mm, nn in ((1, 1), (6, 17), (11, 8), (3, 0)):
        a, b = rand((mm, nn), seed=mm), rand((mm, nn), seed=nn + 3)
        o1, o2 = (np.full((mm, nn), np.nan, "float32") for _ in range(2))
        f(a, b, o1, o2)
        e1, e2 = _two_states_ref(a, b)
        check(o1, e1, k=mm)
        check(o2, e2, k=mm)


def test_two_states_on_the_gpu():
    m, n = 9, 37
    xs, (i1, i2), (u1, u2), rs = _two_states(m, n)
    s = te.create_schedule([r.op for r in rs])
    bx, tx = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    for init in (i1, i2):
        xo, xi = s[init].split(init.op.axis[1], factor=16)
        s[init].bind(xo, bx)
        s[init].bind(xi, tx)
    xo, xi = s[u2].split(u2.op.axis[1], factor=16)
    s[u1].bind(xo, bx)
    s[u2].bind(xi, tx)
    compile_with_nvcc(polytile.build(s, [*xs, *rs], target="cuda").get_source())
    a, b = rand((m, n), seed=1), rand((m, n), seed=2)
    o1, o2 = (np.full((m, n), np.nan, "float32") for _ in range(2))
    interpreter.run(polytile.lower(s, [*xs, *rs]), a, b, o1, o2)
    e1, e2 = _two_states_ref(a, b)
    check(o1, e1, k=m)
    check(o2, e2, k=m)


def test_update_reading_several_stages(backend):
    # the update reads two computes that read the state (one of them through the other),
    # and the state directly: all are computed within the step (inlined into the scan)
    m, n = 10, 7
    X = te.placeholder((m, n), name="X")
    st = te.placeholder((m, n), name="st")
    init = te.compute((2, n), lambda t, i: X[t, i], name="init")
    p = te.compute((m, n), lambda t, i: st[t - 1, i] * 0.5, name="p")
    q = te.compute((m, n), lambda t, i: p[t, (i + 1) % n] - st[t - 2, i], name="q")
    upd = te.compute((m, n), lambda t, i: p[t, i] + q[t, i] * 0.25 + X[t, i], name="upd")
    S = te.scan(init, upd, st)
    s = te.create_schedule(S.op)
    io, ii = s[upd].split(upd.op.axis[1], factor=3)
    s[upd].parallel(io)
    x = rand((m, n), seed=9)
    (out,) = run_schedule(s, [X, S], [x], backend)
    x64 = x.astype("float64")
    ref = x64.copy()
    for t in range(2, m):
        pt = ref[t - 1] * 0.5
        ref[t] = pt + (np.roll(pt, -1) - ref[t - 2]) * 0.25 + x64[t]
    check(out, ref, k=m)


def test_multi_state_definition_errors():
    m, n = 5, 3
    X = te.placeholder((m, n), name="X")
    s1, s2 = te.placeholder((m, n), name="s1"), te.placeholder((m, n + 1), name="s2")
    i1 = te.compute((1, n), lambda _, i: X[0, i], name="i1")
    i2 = te.compute((1, n + 1), lambda _, i: X[0, 0] + i, name="i2")
    u1 = te.compute((m, n), lambda t, i: s1[t - 1, i], name="u1")
    u2 = te.compute((m, n + 1), lambda t, i: s2[t - 1, i], name="u2")
    # extents that differ: padded (test_scan_states_of_different_shapes, and
    # test_scan_states_of_symbolic_widths); the time extents must agree
    te.scan([i1, i2], [u1, u2], [s1, s2])
    s4 = te.placeholder((m + 1, n), name="s4")
    i4 = te.compute((1, n), lambda _, i: X[0, i], name="i4")
    u4 = te.compute((m + 1, n), lambda t, i: s4[t - 1, i], name="u4")
    with pytest.raises(ValueError, match=r"scan: states of the time extents \['5', '6'\] "
                       r"\(dimension 0\); one time extent for every state[\s\S]*Scan: "
                       r"'scan', updates 'u1', 'u4'"):
        te.scan([i1, i4], [u1, u4], [s1, s4])
    k = te.reduce_axis((0, n), name="k")
    r = te.compute((m, n), lambda t, i: te.sum(s1[t - 1, k], axis=k), name="r")
    with pytest.raises(TypeError, match="scan: update 'r' is a reduction"):
        te.scan([i1, i1], [u1, r], [s1, s1])


def test_tvm_multi_stage_scan_cell_schedule(backend):
    # TVM's scan tutorial: s_update1 reads the state, s_update2 reads s_update1; TVM
    # attaches s_update1 inside s_update2's loop. polytile inlines it into the step, so that
    # compute_at is accepted and changes nothing; other primitives on it say why
    m, n = 6, 40
    X = te.placeholder((m, n), name="X")
    st = te.placeholder((m, n), name="st")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    u1 = te.compute((m, n), lambda t, i: st[t - 1, i] * 2, name="u1")
    u2 = te.compute((m, n), lambda t, i: u1[t, i] + X[t, i], name="u2")
    S = te.scan(init, u2, st, inputs=[X])
    s = te.create_schedule(S.op)
    xo, xi = s[u2].split(u2.op.axis[1], factor=32)
    s[u1].compute_at(s[u2], xo)
    s[u1].compute_inline()
    with pytest.raises(ScheduleError, match=r"split: stage 'u1' is inlined into the step of "
                       r"te.scan 'scan' and has no loops of its own"):
        s[u1].split(u1.op.axis[0], factor=2)
    other = te.compute((m, n), lambda t, i: S[t, i] + 1, name="other")
    s2 = te.create_schedule(other.op)
    with pytest.raises(ScheduleError, match="compute_at: stage 'u1' is computed inside the step"):
        s2[u1].compute_at(s2[other], other.op.axis[0])
    x = rand((m, n), seed=11)
    (out,) = run_schedule(s, [X, S], [x], backend)
    ref = x.astype("float64").copy()
    for t in range(1, m):
        ref[t] = ref[t - 1] * 2 + x[t]
    check(out, ref, k=m)


@pytest.mark.parametrize("roots", ["first", "both"])
@pytest.mark.parametrize("split", [False, True])
def test_scan_states_of_different_shapes(split, roots, backend):
    # TVM's scan tutorial, "multiple states", with constant state widths: the narrower
    # state is padded to the wider one's loop nest and returned as its own extents
    m, n, w = 6, 7, 4
    X = te.placeholder((m, n), name="X")
    s1, s2 = te.placeholder((m, n), name="s1"), te.placeholder((m, w), name="s2")
    i1 = te.compute((1, n), lambda _, i: X[0, i], name="i1")
    i2 = te.compute((1, w), lambda _, i: X[0, i] * 0.5, name="i2")
    u1 = te.compute((m, n), lambda t, i: s1[t - 1, i] + X[t, i], name="u1")
    u2 = te.compute((m, w), lambda t, i: s2[t - 1, i] + s1[t - 1, n - 1 - i], name="u2")
    r1, r2 = te.scan([i1, i2], [u1, u2], [s1, s2])
    assert r1.shape == (m, n) and r2.shape == (m, w)
    # TVM's tutorial schedules one state's op (TVM's states share one ScanOp): every
    # state of the scan is an output then
    s = te.create_schedule(r1.op if roots == "first" else [r1.op, r2.op])
    if split:   # the narrow update's axis stands for the wide one's
        s[u2].split(u2.op.axis[1], factor=3)
    x = rand((m, n), seed=5)
    x64 = x.astype("float64")
    a = np.cumsum(x64, 0)
    b = np.zeros((m, w))
    b[0] = x64[0, :w] * 0.5
    for t in range(1, m):
        b[t] = b[t - 1] + a[t - 1, n - 1 - np.arange(w)]
    out1, out2 = run_schedule(s, [X, r1, r2], [x], backend)
    check(out1, a, k=m)
    check(out2, b, k=m)


@pytest.mark.parametrize("roots", ["first", "second", "both"])
@pytest.mark.parametrize("wide", ["symbolic", "mixed"])
def test_scan_states_of_symbolic_widths(wide, roots, backend):
    # TVM's scan tutorial, "multiple states", as written there: widths n and l both
    # te.var (or one constant): the loop nest runs n + l wide, each state guarded to its
    # own width; one function for every m, n, l
    m, n = te.var("m"), te.var("n")
    w = te.var("l") if wide == "symbolic" else 3
    X = te.placeholder((m, n), name="X")
    s1, s2 = te.placeholder((m, n), name="s1"), te.placeholder((m, w), name="s2")
    i1 = te.compute((1, n), lambda _, i: X[0, i], name="i1")
    i2 = te.compute((1, w), lambda _, i: te.const(0.0, "float32"), name="i2")
    u1 = te.compute((m, n), lambda t, i: s1[t - 1, i] + X[t, i], name="u1")
    u2 = te.compute((m, w), lambda t, i: s2[t - 1, i] + s1[t - 1, 0], name="u2")
    r1, r2 = te.scan([i1, i2], [u1, u2], [s1, s2])
    # the tutorial: s = te.create_schedule(s_scan1.op); lower(s, [X, s_scan1, s_scan2])
    s = te.create_schedule({"first": r1.op, "second": r2.op, "both": [r1.op, r2.op]}[roots])
    f = compile_schedule(s, [X, r1, r2], backend)
    for M, N, L in ((6, 7, 3), (4, 2, 3), (1, 3, 3)):
        if wide == "symbolic":
            L = {6: 4, 4: 9, 1: 2}[M]
        x = rand((M, N), seed=M)
        out1, out2 = np.full((M, N), np.nan, "float32"), np.full((M, L), np.nan, "float32")
        f(x, out1, out2)
        a = np.cumsum(x.astype("float64"), 0)
        b = np.zeros((M, L))
        for t in range(1, M):
            b[t] = b[t - 1] + a[t - 1, 0]
        check(out1, a, k=M)
        check(out2, b, k=M)
