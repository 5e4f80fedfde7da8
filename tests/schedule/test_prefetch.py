"""``Stage.prefetch`` (TVM's ``s[C].prefetch(tensor, var, offset)``): the prefetches of
the next iteration's footprint are inserted at the start of the loop on the ``llvm``
target (``prefetchw`` for the accumulator, ``prefetcht0`` for a read), results are
unchanged at ragged, prime and size-1 extents, the interpreter ignores the hint, CUDA
drops it, traces replay it, and misuse is refused with errors naming the stage, loop and
tensor."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import check, rand, run1

import polytile
from polytile import te
from polytile.errors import LoweringError, ScheduleError
from polytile.schedule.passes.prefetch import MAX_LINES


def _gemm(m, n, k, rows=4, lanes=16):
    """A register-tiled GEMM: ``i`` in tiles of ``rows`` (unrolled, ragged when ``rows``
    does not divide ``m``), ``j`` in vectors of ``lanes``, the k loop between them."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=rows)
    jo, ji = s[C].split(j, factor=lanes)
    s[C].reorder(jo, io, r, ii, ji)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    return s, [A, B, C], (jo, io, r)


def _final(s, args) -> str:
    return str(polytile.lower(s, args, stop_after=None))


@pytest.mark.parametrize("m, n, k", [(37, 29, 13), (1, 1, 1), (4, 16, 2), (31, 48, 7)])
@pytest.mark.parametrize("where", ["C@io", "A@r", "B@jo", "C@jo+2"])
@pytest.mark.parametrize("backend", ["llvm", "interp"])
def test_prefetch_keeps_results(m, n, k, where, backend):
    s, args, (jo, io, r) = _gemm(m, n, k)
    A, B, C = args
    name, at = where.split("@")
    loop, off = {"io": (io, 1), "r": (r, 1), "jo": (jo, 1), "jo+2": (jo, 2)}[at]
    s[C].prefetch({"A": A, "B": B, "C": C}[name], loop, off)
    a, b = rand((m, k), seed=1), rand((k, n), seed=2)
    out = run1(s, args, [a, b], backend)
    check(out, a.astype("float64") @ b.astype("float64"), k=k)


def test_prefetch_of_the_accumulator_tile_one_iteration_ahead():
    s, args, (jo, io, r) = _gemm(40, 32, 9)
    C = args[2]
    s[C].prefetch(C, io, 1)
    text = _final(s, args)
    pf = [ln.strip() for ln in text.splitlines() if "llvm.prefetch" in ln]
    # 4 rows of 16 floats (one 64-byte line, and the last element of the run) of the next
    # row tile, for writing (rw = 1), deduplicated between the init, load and store of C
    assert pf, text
    assert all(p.endswith(", 1, 3, 1)") for p in pf), pf
    offs = sorted({int(re.search(r"\+ (\d+)\)\]", p).group(1)) for p in pf})
    assert offs == [128 + 32 * r + e for r in range(4) for e in (0, 15)], offs
    f = polytile.build(s, args, target="llvm")
    assert "prefetchw" in f.get_source("asm")


def test_prefetch_of_a_read_operand_is_a_read_prefetch():
    s, args, (jo, io, r) = _gemm(16, 32, 40)
    A = args[0]
    s[args[2]].prefetch(A, r, 8)
    text = _final(s, args)
    pf = [ln.strip() for ln in text.splitlines() if "llvm.prefetch" in ln]
    # the 4 rows of A at r + 8 (scalars: one element each), for reading
    assert len(pf) == 4 and all(p.endswith(", 0, 3, 1)") for p in pf), pf
    f = polytile.build(s, args, target="llvm")
    assert re.search(r"prefetcht0", f.get_source("asm"))


def test_prefetch_replays_from_the_trace():
    from polytile.schedule.schedule import replay

    s, args, (jo, io, r) = _gemm(21, 32, 5)
    s[args[2]].prefetch(args[2], io, 1)
    A, B, C = args
    s2 = replay(s.trace, te.create_schedule(C.op))
    assert _final(s2, args) == _final(s, args)


def test_prefetch_refusals():
    s, args, (jo, io, r) = _gemm(8, 16, 4)
    A, B, C = args
    other = te.placeholder((3,), name="X")
    with pytest.raises(ScheduleError, match=r"prefetch: stage 'C' does not access tensor "
                                            r"'X'.*one of \['A', 'B', 'C'\]"):
        s[C].prefetch(other, io, 1)
    with pytest.raises(ScheduleError, match=r"prefetch: offset=0 for loop 'i.outer' of "
                                            r"stage 'C'.*non-zero int"):
        s[C].prefetch(C, io, 0)
    with pytest.raises(ScheduleError, match=r"prefetch: offset=1.5 for loop 'i.outer' of "
                                            r"stage 'C'.*non-zero int"):
        s[C].prefetch(C, io, 1.5)
    with pytest.raises(ScheduleError, match="prefetch"):
        s[C].prefetch(C, C.op.axis[0], 1)  # split already: not a current loop


def test_prefetch_of_a_footprint_too_large_is_refused():
    n = 16 * (MAX_LINES + 1)
    s, args, (jo, io, r) = _gemm(8, n, 2, lanes=16)
    A, B, C = args
    s[C].reorder(io, jo, r)
    s[C].prefetch(C, io, 1)  # 4 rows of n floats: 4 * (MAX_LINES + 2) lines
    with pytest.raises(LoweringError, match=r"prefetch: stage 'C' would prefetch \d+ cache "
                                            r"lines of 'C' per iteration of loop 'i.outer'"):
        polytile.build(s, args, target="llvm")


def test_prefetch_of_a_ragged_tile_skips_rolled_loops_and_keeps_results():
    # m = 4 * 3 + 2: the last row tile is a rolled loop of extent min(4, ...), whose
    # accesses are not prefetched; the full tiles' are
    s, args, (jo, io, r) = _gemm(14, 16, 3)
    C = args[2]
    s[C].prefetch(C, io, 1)
    a, b = rand((14, 3), seed=3), rand((3, 16), seed=4)
    out = run1(s, args, [a, b], "llvm")
    check(out, a.astype("float64") @ b.astype("float64"), k=3)
    assert np.isfinite(out).all()


def test_prefetch_of_an_indirect_access_is_left_out():
    # C[i] = A[P[i]]: the address of iteration i + 1 needs P[i + 1], past the end of P at
    # the last iteration; such accesses are not prefetched (the direct ones are)
    n = 9
    A = te.placeholder((n,), name="A")
    P = te.placeholder((n,), name="P", dtype="int32")
    C = te.compute((n,), lambda i: A[P[i]] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[C].prefetch(A, C.op.axis[0], 1)
    s[C].prefetch(P, C.op.axis[0], 1)
    text = _final(s, [A, P, C])
    pf = [ln.strip() for ln in text.splitlines() if "llvm.prefetch" in ln]
    assert pf and all("&P[" in p for p in pf), text
    a = rand((n,), seed=3)
    p = np.random.default_rng(0).permutation(n).astype("int32")
    out = run1(s, [A, P, C], [a, p], "llvm")
    check(out, a.astype("float64")[p] + 1)


def _matmul(n=37, m=29, K=53):
    A = te.placeholder((n, K), name="A")
    B = te.placeholder((K, m), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    g = np.random.default_rng(5)
    a, b = g.uniform(-1, 1, (n, K)).astype("float32"), g.uniform(-1, 1, (K, m)).astype("float32")
    return A, B, C, a, b, a.astype("float64") @ b


@pytest.mark.parametrize("K", [53, 56])
@pytest.mark.parametrize("offsets", [(1, 2), (-1, 3), (9, 100)])
def test_prefetch_parallel_matmul_numeric(offsets, K):
    # offsets past either end of the arrays: prefetches never fault nor change a value;
    # K = 53 leaves a ragged k.inner (not prefetched: its extent is not constant)
    A, B, C, a, b, ref = _matmul(K=K)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    s[C].reorder(i, ko, j, ki)
    s[C].prefetch(A, ko, offsets[0])
    s[C].prefetch(B, ko, offsets[1])
    s[C].parallel(i)
    f = polytile.build(s, [A, B, C])
    if K == 56:
        assert f.get_source("ll").count("@llvm.prefetch.p0(") >= 2
    c = np.full(ref.shape, np.nan, "float32")
    f(a, b, c)
    check(c, ref, k=K)


@pytest.mark.parametrize("target", ["cuda", "hip"])
def test_prefetch_is_a_no_op_on_gpu_targets(target):
    A, B, C, a, b, ref = _matmul(17, 32, 19)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[C].bind(i, te.thread_axis("blockIdx.x"))
    s[C].bind(j, te.thread_axis("threadIdx.x"))
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].prefetch(A, ko, 1)
    src = polytile.build(s, [A, B, C], target=target).get_source()
    assert "prefetch" not in src and "A[" in src


@pytest.mark.parametrize("how, what", [("vectorize", "is annotated 'vectorize'"),
                                       ("unroll", "is annotated 'unroll'"),
                                       ("split", "was split or fused after")])
def test_prefetch_loop_must_stay_serial(how, what):
    A, B, C, *_ = _matmul(7, 5, 11)
    s = te.create_schedule(C.op)
    j = C.op.axis[1]
    s[C].reorder(C.op.axis[0], C.op.reduce_axis[0], j)
    s[C].prefetch(B, j, 1)
    if how == "split":
        s[C].split(j, factor=2)
    else:
        getattr(s[C], how)(j)
    with pytest.raises(ScheduleError, match=rf"prefetch: loop 'j' of stage 'C' {what}"):
        polytile.lower(s, [A, B, C])


def test_prefetch_of_an_inlined_tensor_is_refused():
    A = te.placeholder((9, 13), name="A")
    T = te.compute((9, 13), lambda i, j: A[i, j] * 2, name="T")
    C = te.compute((9, 13), lambda i, j: T[i, j] + 1, name="C")
    s = te.create_schedule(C.op)
    s[T].compute_inline()
    s[C].prefetch(T, C.op.axis[0], 1)
    with pytest.raises(LoweringError, match=r"prefetch: loop 'i' of stage 'C' accesses no "
                       r"element of 'T' in memory"):
        polytile.build(s, [A, C])
