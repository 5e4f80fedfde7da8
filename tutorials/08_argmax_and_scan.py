"""Several outputs, tuple reducers and scans: argmax, a two-output compute, a cumulative sum.

TVM's reduction tutorial defines argmax with ``te.comm_reducer`` over ``(index, value)``
pairs; TVM's scan tutorial sums rows cumulatively with ``te.scan``. Both run here after
changing the imports. One stage computes all outputs of a multi-output compute in one loop
nest. Ties: the combiner keeps the accumulator when values are equal, and polytile never
reorders the fold of a tuple reducer, so argmax returns the first index (as numpy). A
scan's time axis stays serial; its spatial axes are scheduled as usual.
Run: ``python tutorials/08_argmax_and_scan.py [--n 64]``.
"""

from __future__ import annotations

import argparse

import numpy as np

import polytile
from polytile import te


def run(s, args, inputs, title: str) -> list:
    """Print the loop nest of ``s``, build it and return its (poisoned, then written)
    outputs."""
    print(f"=== {title}")
    print(polytile.lower(s, args))
    f = polytile.build(s, args, target="llvm")
    outs = [np.full(t.shape, -7 if t.dtype.startswith("int") else np.nan, t.dtype)
            for t in args[len(inputs):]]
    f(*inputs, *outs)
    return outs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64, help="problem size (default 64)")
    n = ap.parse_args(argv).n
    m = n + 3
    rng = np.random.default_rng(0)
    a = rng.integers(-5, 6, size=(m, n)).astype("float32")   # many ties

    # --- argmax over (index, value) pairs -----------------------------------------------
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return te.if_then_else(keep, x[0], y[0]), te.if_then_else(keep, x[1], y[1])

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value(t1)

    argmax = te.comm_reducer(fcombine, fidentity, name="argmax")
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    idx, val = te.compute((m,), lambda i: argmax((k, A[i, k]), axis=k), name="T")
    s = te.create_schedule(idx.op)
    io, ii = s[idx].split(idx.op.axis[0], 8)
    s[idx].parallel(io)
    s[idx].split(idx.op.reduce_axis[0], 4)     # the fold keeps its order
    i_out, v_out = run(s, [A, idx, val], [a], "argmax (first index on ties)")
    np.testing.assert_array_equal(i_out, a.argmax(axis=1))
    np.testing.assert_array_equal(v_out, a.max(axis=1))
    print("result matches numpy\n")
    try:
        te.create_schedule(idx.op).rfactor(idx, idx.op.reduce_axis[0])
    except polytile.errors.ScheduleError as e:
        print("rfactor refused:", str(e).splitlines()[0][:100], "...\n")

    # --- a compute with two outputs, attached to its consumer -----------------------------
    P, Q = te.compute((m, n), lambda i, j: (A[i, j] * 2, A[i, j] - 1), name="PQ")
    R = te.compute((m, n), lambda i, j: P[i, j] * Q[i, j], name="R")
    s = te.create_schedule(R.op)
    s[P].compute_at(s[R], R.op.axis[0])
    (r_out,) = run(s, [A, R], [a], "two outputs, one loop nest")
    a64 = a.astype("float64")
    np.testing.assert_allclose(r_out, a64 * 2 * (a64 - 1), rtol=1e-6)
    print("result matches numpy\n")

    # --- te.scan: a cumulative sum over rows ------------------------------------------------
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    S = te.scan(init, update, state, inputs=[X])
    s = te.create_schedule(S.op)
    xo, xi = s[update].split(update.op.axis[1], 8)
    s[update].parallel(xo)
    s[update].vectorize(xi)
    x = rng.uniform(-1, 1, size=(m, n)).astype("float32")
    (c_out,) = run(s, [X, S], [x], "scan: cumulative sum over rows")
    np.testing.assert_allclose(c_out, np.cumsum(x.astype("float64"), axis=0), rtol=1e-5,
                               atol=1e-5 * m)
    print("result matches numpy\n")
    s[update].parallel(update.op.axis[0])
    try:
        polytile.lower(s, [X, S])
    except polytile.errors.ScheduleError as e:
        print("parallel scan axis refused:", str(e).splitlines()[0])


if __name__ == "__main__":
    main()
