"""compute_inline (substitution into consumers) and compute_root (own loop nest at the top,
the default; also undoes inline and compute_at)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (check, elementwise2d, loop_headers, lowered, matmul, rand, run1, sizes_for,
                     stencil1d)

from polytile import ScheduleError, te


# ------------------------------------------------------------------------ compute_inline
def test_inline_structure():
    w = elementwise2d(4, 5)
    s = w.schedule()
    s[w.B].compute_inline()
    assert s[w.B].attach_type == "inline"
    text = lowered(s, w.args)
    assert "alloc" not in text
    assert loop_headers(s, w.args) == ["for i in range(0, 4):", "for j in range(0, 5):"]
    # B's body is inlined once and shared by its three reads (share_subexpressions)
    assert "cse0 = ((A[i, j] * 2.0f) + 1.0f)\n      C[i, j] = ((cse0 * cse0) - cse0)" in text


def test_inline_numeric(backend):
    m, n = sizes_for(backend, (4, 5), (63, 65))
    w = elementwise2d(m, n)
    s = w.schedule()
    s[w.B].compute_inline()
    w.check(s, backend)


def test_inline_stencil_numeric(backend):
    w = stencil1d(sizes_for(backend, 11, 257))
    s = w.schedule()
    s[w.B].compute_inline()
    s[w.C].split(w.C.op.axis[0], factor=4)
    w.check(s, backend)


def test_inline_chain_numeric(backend):
    A = te.placeholder((7,), name="A")
    B = te.compute((7,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((7,), lambda i: B[6 - i] * 2.0, name="C")
    D = te.compute((7,), lambda i: C[i] - B[i], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_inline()
    s[C].compute_inline()
    a = rand((7,))
    b = a.astype("float64") + 1
    check(run1(s, [A, D], [a], backend), b[::-1] * 2 - b)
    assert "alloc" not in lowered(s, [A, D])


def test_inline_into_reduction_numeric(backend):
    m, n, k = sizes_for(backend, (4, 5, 6), (31, 33, 35))
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    P = te.compute((m, k), lambda i, kk: te.exp(A[i, kk]), name="P")
    r = te.reduce_axis((0, k), "k")
    C = te.compute((m, n), lambda i, j: te.sum(P[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    s[P].compute_inline()
    a, b = rand((m, k)), rand((k, n), seed=1)
    check(run1(s, [A, B, C], [a, b], backend), np.exp(a.astype("float64")) @ b, k=k)


def test_inline_producer_of_attached_stage(backend):
    A = te.placeholder((9,), name="A")
    B = te.compute((9,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((9,), lambda i: B[i] + 1.0, name="C")
    D = te.compute((7,), lambda i: C[i] + C[i + 2], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_inline()
    xo, xi = s[D].split(D.op.axis[0], factor=3)
    s[C].compute_at(s[D], xo)
    a = rand((9,))
    c = a.astype("float64") * 2 + 1
    check(run1(s, [A, D], [a], backend), c[:-2] + c[2:])


def test_inline_reduction_raises():
    w = matmul(3, 4, 5)
    D = te.compute((3, 4), lambda i, j: w.C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"compute_inline: stage 'C' is a reduction; only "
                       r"elementwise computes can be inlined\n.*hint: use compute_at"):
        s[w.C].compute_inline()


def test_inline_output_raises():
    w = elementwise2d(3, 4)
    s = w.schedule()
    with pytest.raises(ScheduleError, match="compute_inline: stage 'C' is an output of the "
                       "schedule; inline intermediate stages only"):
        s[w.C].compute_inline()


def test_inline_placeholder_raises():
    w = elementwise2d(3, 4)
    s = w.schedule()
    with pytest.raises(ScheduleError, match="compute_inline: stage 'A' is a placeholder"):
        s[w.A].compute_inline()


def test_inlined_tensor_in_args_raises():
    w = elementwise2d(3, 4)
    s = w.schedule()
    s[w.B].compute_inline()
    with pytest.raises(ScheduleError, match="lower: tensor 'B' in args is inlined"):
        lowered(s, [w.A, w.B, w.C])


# -------------------------------------------------------------------------- compute_root
def test_root_is_default_structure():
    w = elementwise2d(4, 5)
    s = w.schedule()
    assert s[w.B].attach_type == "root"
    text = lowered(s, w.args)
    assert "B = alloc(float32[4, 5]" in text
    assert loop_headers(s, w.args) == ["for i in range(0, 4):", "for j in range(0, 5):"] * 2


def test_root_undoes_compute_at(backend):
    w = stencil1d(9)
    s = w.schedule()
    xo, xi = s[w.C].split(w.C.op.axis[0], factor=4)
    s[w.B].compute_at(s[w.C], xo)
    s[w.B].compute_root()
    assert s[w.B].attach_type == "root" and s[w.B].attach_stage is None
    ref = w.schedule()
    ref[w.C].split(w.C.op.axis[0], factor=4)
    assert lowered(s, w.args) == lowered(ref, w.args)
    w.check(s, backend)


def test_root_undoes_inline(backend):
    w = elementwise2d(4, 5)
    s = w.schedule()
    s[w.B].compute_inline()
    s[w.B].compute_root()
    assert lowered(s, w.args) == lowered(w.schedule(), w.args)
    w.check(s, backend)


def test_root_of_reduction_with_root_consumer_numeric(backend):
    m, n, k = sizes_for(backend, (4, 5, 3), (41, 43, 47))
    w = matmul(m, n, k)
    D = te.compute((m, n), lambda i, j: w.C[i, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    s[w.C].compute_at(s[D], D.op.axis[0])
    s[w.C].compute_root()
    s[w.C].parallel(w.C.op.axis[0])
    check(run1(s, [w.A, w.B, D], w.inputs, backend), w.ref * 2, k=k)


def test_root_placeholder_raises():
    w = elementwise2d(3, 4)
    s = w.schedule()
    with pytest.raises(ScheduleError, match="compute_root: stage 'A' is a placeholder"):
        s[w.A].compute_root()
