"""Wide accumulators (float16/bfloat16 sums kept in float32) under ``vthread`` loops.

Virtual threads run interleaved inside the loops around them, so the partial sums of all
virtual threads of a thread are live at the same time: each needs its own accumulator
element. Fuzz seed cuda 70121 (a float16 GEMM with ``j.outer`` bound to ``vthread``)
summed both virtual threads into one register. Checked here with the reference
interpreter on the loop IR, against a float64 reference, for a vthread loop of the stage
itself (before or after the reduction loop, from an ``nparts`` or ``factor`` split, one or
two of them), one of a consumer around an attached reduction (TVM's local GEMM tile), and
an rfactor partial stage; and a cross-thread reduction under a vthread loop (a crash of
the legality check).
"""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.schedule.interpreter import run


def _gemm(m, n, kk, dtype):
    A = te.placeholder((m, kk), dtype, name="A")
    B = te.placeholder((n, kk), dtype, name="B")
    k = te.reduce_axis((0, kk), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    return A, B, C, k


def _check(s, args, m, n, kk, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, kk))
    b = rng.uniform(-1, 1, (n, kk))
    if dtype == "bfloat16":
        from polytile.te import dtype as dt

        ins = [dt.bfloat16_bits(a), dt.bfloat16_bits(b)]
        a, b = dt.bfloat16_values(ins[0]), dt.bfloat16_values(ins[1])
        out = np.full((m, n), 0x7FC0, np.uint16)
    else:
        ins = [a.astype(dtype), b.astype(dtype)]
        a, b = ins[0].astype(np.float64), ins[1].astype(np.float64)
        out = np.full((m, n), np.nan, dtype)
    run(polytile.lower(s, args), *ins, out)
    if dtype == "bfloat16":
        out = dt.bfloat16_values(out)
    ref = a @ b.T
    # products rounded to the input dtype, a float32 sum, one rounding to the output dtype
    u = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11
    tol = u * (np.abs(ref) + np.abs(a) @ np.abs(b).T) + 1e-6 * kk
    assert not np.isnan(out).any()
    err = np.abs(out.astype(np.float64) - ref)
    assert (err <= tol).all(), (err.max(), np.argwhere(err > tol)[:4].tolist())


def _bind(s, st, loop, tag):
    s[st].bind(loop, te.thread_axis(tag))


@pytest.mark.parametrize("how", ["nparts", "factor", "after_k", "both"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_vthread_loop_of_the_reduction_stage(how, dtype):
    m, n, kk = 9, 7, 5
    A, B, C, k = _gemm(m, n, kk, dtype)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    _bind(s, C, io, "blockIdx.x")
    _bind(s, C, ii, "threadIdx.x")
    if how == "factor":
        jo, ji = s[C].split(j, factor=3)
        _bind(s, C, jo, "vthread")
    else:
        jo, ji = s[C].split(j, nparts=2)
        _bind(s, C, jo, "vthread")
    if how == "after_k":
        s[C].reorder(k, jo, ji)
    if how == "both":
        jio, jii = s[C].split(ji, nparts=2)
        _bind(s, C, jio, "vthread")
    _check(s, [A, B, C], m, n, kk, dtype)


@pytest.mark.parametrize("dtype", ["float16", pytest.param("bfloat16", marks=pytest.mark.slow)])
def test_vthreads_around_an_attached_local_accumulation(dtype):
    """TVM's GEMM tile: ``C.local`` computed at the thread loop, two virtual threads per
    axis around it, each with its own partial sums."""
    m, n, kk = 12, 10, 6
    A, B, C, k = _gemm(m, n, kk, dtype)
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    by, yi = s[C].split(i, factor=6)
    bx, xi = s[C].split(j, factor=5)
    s[C].reorder(by, bx, yi, xi)
    vy, yi = s[C].split(yi, nparts=2)
    vx, xi = s[C].split(xi, nparts=2)
    ty, yi = s[C].split(yi, nparts=3)
    for loop, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (vy, "vthread"),
                      (vx, "vthread"), (ty, "threadIdx.y")):
        _bind(s, C, loop, tag)
    s[C].reorder(by, bx, vy, vx, ty, yi, xi)
    s[CL].compute_at(s[C], ty)
    _check(s, [A, B, C], m, n, kk, dtype)


def test_vthread_over_an_rfactor_partial_stage():
    m, n, kk = 29, 3, 3
    A, B, C, k = _gemm(m, n, kk, "float16")
    s = te.create_schedule(C.op)
    CF = s.rfactor(C, k, factor_axis=0)
    s[CF].compute_at(s[C], C.op.axis[0])
    io, ii = s[C].split(C.op.axis[0], factor=32)
    _bind(s, C, io, "blockIdx.x")
    _bind(s, C, ii, "threadIdx.x")
    jo, _ = s[C].split(C.op.axis[1], nparts=2)
    _bind(s, C, jo, "vthread")
    _check(s, [A, B, C], m, n, kk, "float16")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cross_thread_reduction_under_a_vthread_loop(dtype):
    """A reduction loop bound to ``threadIdx.x`` (its partials in shared memory, common to
    the virtual threads) with a spatial loop bound to ``vthread``: the legality check
    looked the partials' instances up in the vthread loop, which does not run them
    (KeyError)."""
    n, kk = 10, 37
    A = te.placeholder((n, kk), dtype, name="A")
    k = te.reduce_axis((0, kk), name="k")
    R = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    _, ki = s[R].split(k, factor=8)
    _bind(s, R, ki, "threadIdx.x")
    io, ii = s[R].split(R.op.axis[0], nparts=2)
    _bind(s, R, io, "blockIdx.x")
    iv, _ = s[R].split(ii, nparts=2)
    _bind(s, R, iv, "vthread")
    a = np.random.default_rng(1).uniform(-1, 1, (n, kk)).astype(dtype)
    out = np.full((n,), np.nan, dtype)
    run(polytile.lower(s, [A, R]), a, out)
    ref = a.astype(np.float64).sum(1)
    u = 2.0 ** -11 if dtype == "float16" else 2.0 ** -24
    tol = u * (np.abs(ref) + kk * np.abs(a).astype(np.float64).sum(1)) + 1e-7
    assert (np.abs(out - ref) <= tol).all(), (out, ref)


@pytest.mark.parametrize("threads,vt_outer", [(48, False), (32, True)])
def test_rfactor_idiom_cross_thread_reduction_under_a_vthread_loop(threads, vt_outer):
    """TVM's idiom (``rfactor`` of the split reduce axis, the rfactor'd axis bound to
    ``threadIdx.x``, the partial stage computed at it) with the rows bound to ``vthread``
    inside or around the block loop: the local partial sits inside the shared partials of
    the cross-thread reduction, which run once for all virtual threads, and was refused
    ("stage 'R.rf' reads 'R.rf' from a shared buffer that does not vary with the loops",
    fuzz seed cuda 80008). 48 threads: not a whole number of warps (serial combine)."""
    n, kk = 7, 101
    A = te.placeholder((n, kk), "float32", name="A")
    k = te.reduce_axis((0, kk), name="k")
    R = te.compute((n,), lambda i: te.sum(A[i, k] * 0.5, axis=k), name="R")
    s = te.create_schedule(R.op)
    _, ki = s[R].split(k, factor=threads)
    RF = s.rfactor(R, ki)
    tx = s[R].op.reduce_axis[0]
    _bind(s, R, tx, "threadIdx.x")
    s[RF].compute_at(s[R], tx)
    io, ii = s[R].split(R.op.axis[0], nparts=2)
    _bind(s, R, ii if vt_outer else io, "blockIdx.x")
    _bind(s, R, io if vt_outer else ii, "vthread")
    a = np.random.default_rng(3).uniform(-1, 1, (n, kk)).astype("float32")
    out = np.full((n,), np.nan, "float32")
    run(polytile.lower(s, [A, R]), a, out)
    ref = a.astype(np.float64).sum(1) * 0.5
    tol = 2.0 ** -24 * kk * np.abs(a).astype(np.float64).sum(1) + 1e-7
    assert (np.abs(out - ref) <= tol).all(), (out, ref)


@pytest.mark.parametrize("rfactor,threads,split", [(True, 48, "factor"), (False, 32, "nparts")])
def test_cross_thread_rows_on_thread_y_with_their_outer_loop_on_vthread(rfactor, threads,
                                                                          split):
    """Rows of a cross-thread reduction on ``threadIdx.y`` (the inner loop of a split of
    ``j``) whose outer loop is split again into blocks and ``vthread``: refused ("neither
    an axis nor the inner loop of a split of one") although the shared partials only need
    the rows' split factor; 7 rows (not a multiple of 2), with and without rfactor."""
    n, m, kk = 2, 7, 53
    A = te.placeholder((n, m, kk), "float32", name="A")
    k = te.reduce_axis((0, kk), name="k")
    R = te.compute((n, m), lambda i, j: te.sum(A[i, j, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    _, ki = s[R].split(k, factor=threads)
    if rfactor:
        RF = s.rfactor(R, ki)
        ki = s[R].op.reduce_axis[0]
        s[RF].compute_at(s[R], ki)
    _bind(s, R, ki, "threadIdx.x")
    i, j = R.op.axis
    _bind(s, R, i, "blockIdx.y")
    jo, ji = s[R].split(j, factor=2)
    _bind(s, R, ji, "threadIdx.y")
    blocks, vt = s[R].split(jo, **{split: 2})
    _bind(s, R, blocks, "blockIdx.x")
    _bind(s, R, vt, "vthread")
    a = np.random.default_rng(4).uniform(-1, 1, (n, m, kk)).astype("float32")
    out = np.full((n, m), np.nan, "float32")
    run(polytile.lower(s, [A, R]), a, out)
    ref = a.astype(np.float64).sum(2)
    tol = 2.0 ** -24 * kk * np.abs(a).astype(np.float64).sum(2) + 1e-7
    assert (np.abs(out - ref) <= tol).all(), (out, ref)


@pytest.mark.parametrize("cached,vt_outer", [("B", True), ("A", True), ("A", False)])
def test_local_cache_under_a_vthread_read_by_cross_thread_partials(cached, vt_outer):
    """TVM's cross-thread idiom under a ``vthread`` loop, with a ``local`` cache_read
    for the partial stage computed at a loop inside the vthread loop: the partials run
    once for all virtual threads (outside that loop), so the cache must too, holding the
    region of every virtual thread (the rows of ``A``: their union over the vthread loop).
    Refused ("stage 'R.rf' reads 'B.local' from a local buffer that does not vary with
    the loops", fuzz seed cuda 80140)."""
    n, kk, threads = 7, 45, 16
    A = te.placeholder((n, kk), "float32", name="A")
    B = te.placeholder((kk,), "float32", name="B")
    k = te.reduce_axis((0, kk), name="k")
    R = te.compute((n,), lambda i: te.sum(A[i, k] * B[k], axis=k), name="R")
    s = te.create_schedule(R.op)
    _, ki = s[R].split(k, factor=threads)
    RF = s.rfactor(R, ki)
    tx = s[R].op.reduce_axis[0]
    _bind(s, R, tx, "threadIdx.x")
    s[RF].compute_at(s[R], tx)
    io, ii = s[R].split(R.op.axis[0], factor=2)
    _bind(s, R, ii if vt_outer else io, "blockIdx.x")
    _bind(s, R, io if vt_outer else ii, "vthread")
    CL = s.cache_read(A if cached == "A" else B, "local", [RF])
    s[CL].compute_at(s[R], ii if vt_outer else io)
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (n, kk)).astype("float32")
    b = rng.uniform(-1, 1, (kk,)).astype("float32")
    out = np.full((n,), np.nan, "float32")
    run(polytile.lower(s, [A, B, R]), a, b, out)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    tol = 2.0 ** -23 * kk * (np.abs(a) @ np.abs(b)).astype(np.float64) + 1e-7
    assert (np.abs(out - ref) <= tol).all(), (out, ref)
