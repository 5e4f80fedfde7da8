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
    X = te.placeholder((6, 8), name="X")
    P = te.compute((6, 8), lambda i, j: X[i, j] * 2, name="P")
    Q = te.compute((6, 8), lambda i, j: P[i, j] + 1, name="Q")
    s = te.create_schedule(Q.op)
    s[P].compute_at(s[Q], Q.op.axis[1])
    s[Q].vectorize(Q.op.axis[0])
    with pytest.raises(ScheduleError, match=r"vectorize: stage 'P' is computed at loop 'j', "
                       r"inside the vectorized loop 'i' of stage 'Q'; attach it outside"):
        polytile.lower(s, [X, Q])
