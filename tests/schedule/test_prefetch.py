"""``Stage.prefetch`` (TVM): llvm.prefetch of the element a loop reads ``offset``
iterations ahead; a no-op on CUDA; numeric results against numpy and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check

import polytile
from polytile import LoweringError, ScheduleError, te
from polytile.schedule.schedule import replay


def _matmul(n=37, m=29, K=53):
    A = te.placeholder((n, K), name="A")
    B = te.placeholder((K, m), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    g = np.random.default_rng(5)
    a, b = g.uniform(-1, 1, (n, K)).astype("float32"), g.uniform(-1, 1, (K, m)).astype("float32")
    return A, B, C, a, b, a.astype("float64") @ b


def _schedule(C, A, B, offsets=(1, 2)):
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    s[C].reorder(i, ko, j, ki)
    s[C].prefetch(A, ko, offsets[0])
    s[C].prefetch(B, ko, offsets[1])
    return s, i, ko


def _flat(s, args):
    return str(polytile.lower(s, args, stop_after="storage_flattening"))


@pytest.mark.parametrize("offsets", [(1, 2), (0, -1), (9, 100)])
def test_prefetch_matmul_numeric_and_addresses(offsets):
    A, B, C, a, b, ref = _matmul()
    s, i, ko = _schedule(C, A, B, offsets)
    s[C].parallel(i)
    text = _flat(s, [A, B, C])
    assert "# pragma prefetch(A, offset=" in text
    # iteration k.outer + d reads A[i, 8 * (k.outer + d)] and B[8 * (k.outer + d), 0]
    a_at = {0: "((53 * i) + (8 * k.outer))", 9: "(((53 * i) + (8 * k.outer)) + 72)",
            1: "(((53 * i) + (8 * k.outer)) + 8)"}[offsets[0]]
    b_at = {2: "((232 * k.outer) + 464)", -1: "((232 * k.outer) - 232)",
            100: "((232 * k.outer) + 23200)"}[offsets[1]]
    assert f"intrin:prefetch(&A[{a_at}])" in text
    assert f"intrin:prefetch(&B[{b_at}])" in text
    f = polytile.build(s, [A, B, C])
    assert f.get_source("ll").count("@llvm.prefetch.p0(") >= 2
    c = np.full(ref.shape, np.nan, "float32")
    f(a, b, c)
    check(c, ref, k=53)


def test_prefetch_is_a_no_op_on_cuda():
    A, B, C, a, b, ref = _matmul(17, 32, 19)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[C].bind(i, te.thread_axis("blockIdx.x"))
    s[C].bind(j, te.thread_axis("threadIdx.x"))
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].prefetch(A, ko, 1)
    src = polytile.build(s, [A, B, C], target="cuda").get_source()
    assert "prefetch" not in src


def test_prefetch_replays_from_the_trace():
    A, B, C, a, b, ref = _matmul(7, 5, 11)
    s, _, _ = _schedule(C, A, B)
    s2 = replay(s.trace, te.create_schedule(C.op))
    assert _flat(s2, [A, B, C]) == _flat(s, [A, B, C])


def test_prefetch_of_a_tensor_the_stage_does_not_read():
    A, B, C, *_ = _matmul(7, 5, 11)
    D = te.compute((7, 5), lambda i, j: C[i, j] + 1, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"prefetch: 'A' is not read by stage 'D'; one of "
                       r"the stage's input tensors \('C'\)"):
        s[D].prefetch(A, D.op.axis[0], 1)


def test_prefetch_offset_must_be_an_int():
    A, B, C, *_ = _matmul(7, 5, 11)
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=r"prefetch: offset 1.5 of stage 'C' \(loop 'i'\) "
                       r"is not an int"):
        s[C].prefetch(A, C.op.axis[0], 1.5)


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
    with pytest.raises(LoweringError, match=r"prefetch: loop 'i' of stage 'C' reads no "
                       r"element of 'T' in memory"):
        polytile.build(s, [A, C])
