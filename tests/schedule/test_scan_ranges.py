"""``te.scan`` time ranges (TVM v0.19's rule: one scan axis ``[init.shape[0],
update.shape[0])`` shared by every state): a symbolic number of init rows (checked
``1 <= L <= T`` at each call), and the refusal of states whose time extents or init rows
differ. Numeric results against numpy float64, poisoned outputs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand

import polytile
from polytile import te


def _ref(x, rows):
    out = x.astype("float64").copy()
    out[:rows] *= 2
    for t in range(rows, x.shape[0]):
        out[t] = out[t - 1] * 0.5 + x[t]
    return out


def test_scan_with_a_symbolic_number_of_init_rows():
    m, n, L = te.var("m"), te.var("n"), te.var("L")
    X = te.placeholder((m, n), name="X")
    st = te.placeholder((m, n), name="st")
    init = te.compute((L, n), lambda t, i: X[t, i] * 2, name="init")
    up = te.compute((m, n), lambda t, i: st[t - 1, i] * 0.5 + X[t, i], name="up")
    S = te.scan(init, up, st)
    s = te.create_schedule(S.op)
    s[S].vectorize(s[S].split(S.op.axis[1], factor=4)[1])
    text = str(polytile.lower(s, [X, init, S]))
    assert "assume (L - 1) >= 0" in text and "assume (m - L) >= 0" in text
    f = polytile.build(s, [X, init, S])
    for mm, nn, ll in [(9, 7, 3), (5, 1, 1), (4, 5, 4)]:
        x = rand((mm, nn), seed=mm + ll)
        o = np.full((mm, nn), np.nan, "float32")
        f(x, np.full((ll, nn), np.nan, "float32"), o)
        check(o, _ref(x, ll), k=mm)
    for ll in (0, 10):   # no init row, or more init rows than steps
        with pytest.raises(ValueError, match=r"(the L init rows of scan 'scan'|past its L init rows)"):
            f(rand((9, 7)), np.zeros((ll, 7), "float32"), np.zeros((9, 7), "float32"))


def test_states_of_different_time_ranges_are_refused():
    # TVM: every init has the scan axis's min rows, every state its min + extent rows
    m, n = 6, 3
    X = te.placeholder((m, n), name="X")
    s1, s2 = te.placeholder((m, n), name="s1"), te.placeholder((m, n), name="s2")
    u1 = te.compute((m, n), lambda t, i: s1[t - 1, i] + X[t, i], name="u1")
    u2 = te.compute((m, n), lambda t, i: s2[t - 2, i] * s1[t - 1, i], name="u2")
    i1 = te.compute((1, n), lambda t, i: X[t, i], name="i1")
    i2 = te.compute((2, n), lambda t, i: X[t, i], name="i2")
    with pytest.raises(ValueError, match=r"scan: init tensors have 2 and 1 rows; equal row "
                       r"counts: the scan axis of every state starts at init.shape\[0\]"):
        te.scan([i1, i2], [u1, u2], [s1, s2])
    L = te.var("L")
    j2 = te.compute((L, n), lambda t, i: X[t, i], name="j2")
    with pytest.raises(ValueError, match=r"init tensors have L and 1 rows"):
        te.scan([i1, j2], [u1, u2], [s1, s2])
    T = te.var("T")
    s3 = te.placeholder((T, n), name="s3")
    u3 = te.compute((T, n), lambda t, i: s3[t - 1, i] + 1.0, name="u3")
    with pytest.raises(ValueError, match=r"scan: states of the time extents \['6', 'T'\] "
                       r"\(dimension 0\); one time extent for every state[\s\S]*hint: scan "
                       r"the shorter state in a scan of its own"):
        te.scan([i1, i1], [u1, u3], [s1, s3])


def test_scan_with_a_symbolic_number_of_init_rows_compiles_for_cuda():
    from helpers import compile_with_nvcc

    from polytile.targets.c_printer import print_c_module
    from polytile.targets.cuda.dialect import CUDADialect

    m, n, L = te.var("m"), te.var("n"), te.var("L")
    X = te.placeholder((m, n), name="X")
    st = te.placeholder((m, n), name="st")
    init = te.compute((L, n), lambda t, i: X[t, i] * 2, name="init")
    up = te.compute((m, n), lambda t, i: st[t - 1, i] * 0.5 + X[t, i], name="up")
    S = te.scan(init, up, st)
    s = te.create_schedule(S.op)
    for T in (init, S):
        xo, xi = s[T].split(T.op.axis[1], factor=32)
        s[T].bind(xo, te.thread_axis("blockIdx.x"))
        s[T].bind(xi, te.thread_axis("threadIdx.x"))
    func = polytile.lower(s, [X, init, S], target="cuda", stop_after=None)
    code = print_c_module(func, CUDADialect()).source
    assert "(t < L)" in code
    compile_with_nvcc(code)
