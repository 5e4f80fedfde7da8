"""Outer-loop vectorization: ``vectorize`` of a spatial loop with serial loops inside it
(TVM, Halide): the inner loops run once over vectors of lanes. Lowered as the vectorized
loop moved innermost (``schedule/validate.py``, ``interchange_outer_vectorized``); checked
against numpy on the interpreter and LLVM (odd sizes, ragged tiles, poisoned outputs),
on the GPU interpreter with its CUDA source compiled by nvcc, and for its refusals."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import check, compile_with_nvcc, elementwise2d, lowered, poison, rand, run1

import polytile
from polytile import ScheduleError, te
from polytile.schedule import interpreter


def _matmul(m, n, k, dtype):
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` accumulated in int32 (int8) or float32."""
    A = te.placeholder((m, k), name="A", dtype=dtype)
    B = te.placeholder((k, n), name="B", dtype=dtype)
    r = te.reduce_axis((0, k), name="k")
    acc = "int32" if dtype == "int8" else "float32"
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype(acc) * B[r, j].astype(acc),
                                               axis=r), name="C")
    if dtype == "int8":
        g = np.random.default_rng(3)
        a = g.integers(-128, 128, (m, k)).astype("int8")
        b = g.integers(-128, 128, (k, n)).astype("int8")
    else:
        a, b = rand((m, k)), rand((k, n))
    return A, B, C, a, b, a.astype("float64") @ b.astype("float64")


def _outer_vectorized(C, factor):
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=factor)
    s[C].reorder(i, jo, ji, C.op.reduce_axis[0])
    s[C].vectorize(ji)
    return s


@pytest.mark.parametrize("dtype", ["int8", "float32"])
@pytest.mark.parametrize("m, n, k, factor", [(13, 37, 29, 8), (5, 16, 1, 16), (1, 7, 3, 4)])
def test_matmul_vectorized_over_j_with_k_inside(backend, dtype, m, n, k, factor):
    A, B, C, a, b, want = _matmul(m, n, k, dtype)
    s = _outer_vectorized(C, factor)
    before = [str(x) for x in s.trace]
    text = str(lowered(s, [A, B, C]))
    # the reduction loop now runs around the vector lanes
    if k > 1:
        assert re.search(r"for k in range\(0, \d+\):\n\s+for j.inner in vectorized", text)
    assert [str(x) for x in s.trace] == before   # the user's schedule is unchanged
    check(run1(s, [A, B, C], [a, b], backend), want, "float32" if dtype == "float32"
          else None, k)


def test_conv2d_vectorized_over_w_with_the_reduction_loops_inside(backend):
    """NCHW conv2d, 3x3 window: ``w.inner`` vectorized, ``rc, ry, rx`` inside it."""
    c, h, w, f = 3, 9, 13, 2
    X = te.placeholder((c, h + 2, w + 2), name="X")
    W = te.placeholder((f, c, 3, 3), name="W")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    Y = te.compute((f, h, w), lambda o, y, x: te.sum(
        X[rc, y + ry, x + rx] * W[o, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    s = te.create_schedule(Y.op)
    o, y, x = Y.op.axis
    xo, xi = s[Y].split(x, factor=8)
    s[Y].reorder(o, y, xo, xi, rc, ry, rx)
    s[Y].vectorize(xi)
    xa, wa = rand((c, h + 2, w + 2)), rand((f, c, 3, 3))
    want = np.zeros((f, h, w))
    for dy in range(3):
        for dx in range(3):
            want += np.einsum("ocz,cyx->oyx", wa[:, :, dy, dx].reshape(f, c, 1),
                              xa[:, dy:dy + h, dx:dx + w].astype("float64"))
    check(run1(s, [X, W, Y], [xa, wa], backend), want, "float32", 27)


def test_vectorize_of_an_outer_spatial_loop(backend):
    """``i`` vectorized with ``j`` inside (no reduction): lanes over rows."""
    w = elementwise2d(5, 7)
    s = w.schedule()
    s[w.C].vectorize(w.C.op.axis[0])
    w.check(s, backend)


def test_outer_vectorized_loop_on_the_gpu():
    """On a GPU a vectorized loop is unrolled; with ``k`` inside, per thread."""
    A, B, C, a, b, want = _matmul(13, 37, 29, "float32")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=4)
    s[C].reorder(i, jo, ji, C.op.reduce_axis[0])
    s[C].bind(i, te.thread_axis("blockIdx.x"))
    s[C].bind(jo, te.thread_axis("threadIdx.x"))
    s[C].vectorize(ji)
    compile_with_nvcc(polytile.build(s, [A, B, C], target="cuda").get_source())
    out = poison((13, 37), "float32")
    interpreter.run(polytile.lower(s, [A, B, C]), a, b, out)
    check(out, want, "float32", 29)


def test_outer_vectorize_refusals():
    A, B, C, a, b, want = _matmul(6, 8, 5, "float32")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[C].vectorize(i)
    s[C].parallel(j)
    with pytest.raises(ScheduleError, match=r"vectorize: loop 'i' of stage 'C' has the "
                       r"parallel loop 'j' inside it; serial or unrolled loops inside a "
                       r"vectorized loop"):
        polytile.lower(s, [A, B, C])


# ------------------------------------------------------- stages attached at or inside the lanes
def _taps(m, n, dtype):
    """``P = X * 3 - j`` (m + 2, n + 2); ``Q[i, j] = P[i // 2, j] + P[i + 2, (j * 2) % n] *
    P[m + 1 - i, j + 1]`` (quasi-affine taps: each lane reads several rows and columns);
    the arguments, the input and the float64 (or exact int) reference."""
    X = te.placeholder((m + 2, n + 2), dtype, name="X")
    P = te.compute((m + 2, n + 2), lambda i, j: X[i, j] * 3 - j.astype(dtype), name="P")
    Q = te.compute((m, n), lambda i, j: P[i // 2, j] + P[i + 2, (j * 2) % n]
                   * P[m + 1 - i, j + 1], name="Q")
    g = np.random.default_rng(7)
    if dtype == "int32":
        x = g.integers(-50, 50, (m + 2, n + 2)).astype(dtype)
    else:
        x = g.uniform(-1, 1, (m + 2, n + 2)).astype(dtype)
    p = x.astype("float64") * 3 - np.arange(n + 2)
    i, j = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    want = p[i // 2, j] + p[i + 2, (j * 2) % n] * p[m + 1 - i, j + 1]
    return X, P, Q, x, want


def _schedule_taps(P, Q, how):
    s = te.create_schedule(Q.op)
    i, j = Q.op.axis
    if how == "at-vector-loop":                # the lanes are j.inner
        jo, ji = s[Q].split(j, factor=4)
        s[P].compute_at(s[Q], ji)
        s[Q].vectorize(ji)
    elif how == "at-outermost-vector-loop":    # i vectorized, outermost: P at the root
        s[P].compute_at(s[Q], i)
        s[Q].vectorize(i)
    elif how == "inside-outer-vector-loop":    # j.inner vectorized with i inside
        jo, ji = s[Q].split(j, factor=8)
        s[Q].reorder(jo, ji, i)
        s[P].compute_at(s[Q], i)
        s[Q].vectorize(ji)
    elif how == "cache-inside-producer":       # P.local at the lanes of P, P at Q's lanes
        jo, ji = s[Q].split(j, factor=4)
        s[P].compute_at(s[Q], ji)
        s[Q].vectorize(ji)
        XL = s.cache_read(P.op.input_tensors[0], "local", [P])
        s[XL].compute_at(s[P], P.op.axis[1])
        s[P].vectorize(P.op.axis[1])
    return s


@pytest.mark.parametrize("how", ["at-vector-loop", "at-outermost-vector-loop",
                                 "inside-outer-vector-loop", "cache-inside-producer"])
@pytest.mark.parametrize("dtype, m, n", [("float32", 7, 13), ("int32", 5, 9), ("float32", 1, 1)])
def test_stage_computed_at_or_inside_a_vectorized_loop(backend, how, dtype, m, n):
    """A stage computed at a vectorized loop (or at a loop inside an outer-vectorized one)
    computes the region of all the lanes, at the loop around them (TVM widens its buffer by
    the lanes): the values of the definition, the user's schedule unchanged (fuzz llvm
    93235: a cache_read computed at the vectorized loop was refused)."""
    X, P, Q, x, want = _taps(m, n, dtype)
    s = _schedule_taps(P, Q, how)
    before = [str(t) for t in s.trace]
    out = run1(s, [X, Q], [x], backend)
    assert [str(t) for t in s.trace] == before
    check(out, want, dtype if dtype == "float32" else None, 3)


def test_stage_computed_at_a_vectorized_loop_of_an_attached_consumer(backend):
    """Q's vectorized loop is its outermost and Q is computed at R's loop: P goes there."""
    m, n = 6, 11
    X, P, Q, x, want = _taps(m, n, "float32")
    R = te.compute((m, n), lambda i, j: Q[i, j] * 2, name="R")
    s = te.create_schedule(R.op)
    s[Q].compute_at(s[R], R.op.axis[0])
    s[P].compute_at(s[Q], Q.op.axis[1])
    s[Q].vectorize(Q.op.axis[1])
    check(run1(s, [X, R], [x], backend), want * 2, "float32", 3)


def test_stage_computed_at_a_vectorized_loop_on_the_gpu():
    """On a GPU (the vectorized loop unrolled per thread): the interpreter's values and
    CUDA source that nvcc compiles."""
    m, n = 9, 12
    X, P, Q, x, want = _taps(m, n, "float32")
    s = te.create_schedule(Q.op)
    i, j = Q.op.axis
    jo, ji = s[Q].split(j, factor=4)
    s[Q].bind(i, te.thread_axis("blockIdx.x"))
    s[Q].bind(jo, te.thread_axis("threadIdx.x"))
    s[P].compute_at(s[Q], ji)
    s[Q].vectorize(ji)
    compile_with_nvcc(polytile.build(s, [X, Q], target="cuda").get_source())
    out = poison((m, n), "float32")
    interpreter.run(polytile.lower(s, [X, Q]), x, out)
    check(out, want, "float32", 3)
