"""Out-of-bounds reads are judged on the compute definitions, whatever the schedule (case B1
of shared/cases/bounds-and-limits.md): no primitive can hide a read outside its tensor."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, lowered, rand, run_schedule

from polytile import te
from polytile.errors import ScheduleError

B1_MESSAGE = (r"lower: stage 'S' reads K\[3\] outside its shape \(3,\) \(at k=3\)(.|\n)*"
              r"Read: K\[k\] for k in \[0, 63\], but K has extent 3")


def _b1():
    K = te.compute((3,), lambda t: te.const(-34.0282, "float32"), name="K")
    k = te.reduce_axis((0, 64), name="k")
    S = te.compute((), lambda: te.sum(K[k], axis=k), name="S")
    return K, k, S


def test_b1_inlined_producer_does_not_hide_the_read():
    K, _, S = _b1()
    s = te.create_schedule(S.op)
    s[K].compute_inline()
    with pytest.raises(ScheduleError, match=B1_MESSAGE):
        lowered(s, [S])


def _inline(s, K, S, k):
    s[K].compute_inline()


def _compute_at(s, K, S, k):
    ko, _ = s[S].split(k, factor=8)
    s[K].compute_at(s[S], ko)


def _cache_read(s, K, S, k):
    KL = s.cache_read(K, "local", [S])
    s[KL].compute_at(s[S], k)


def _rfactor(s, K, S, k):
    _, ki = s[S].split(k, factor=4)
    s.rfactor(S, ki)


def _split_unroll(s, K, S, k):
    _, ki = s[S].split(k, factor=5)
    s[S].unroll(ki)


@pytest.mark.parametrize("schedule", (_inline, _compute_at, _cache_read, _rfactor,
                                      _split_unroll))
def test_b1_refused_whatever_the_schedule(schedule):
    K, k, S = _b1()
    s = te.create_schedule(S.op)
    schedule(s, K, S, k)
    with pytest.raises(ScheduleError, match=r"reads K(\.local)?\[\d+\] outside its shape \(3,\)"):
        lowered(s, [S])


def test_inlined_chain_is_checked_on_each_definition():
    A = te.placeholder((8, 6), name="A")
    B = te.compute((8, 6), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 6), lambda i, j: B[i, j + 1] + 1.0, name="C")   # j + 1 = 6 is outside
    D = te.compute((8, 5), lambda i, j: C[i, j], name="D")             # D never reads C[:, 5]
    s = te.create_schedule(D.op)
    s[B].compute_inline()
    s[C].compute_inline()
    with pytest.raises(ScheduleError, match=r"stage 'C' reads B\[0, 6\] outside its shape "
                       r"\(8, 6\) \(at i=0, j=5\)(.|\n)*Read: B\[i, \(j \+ 1\)\] for \(j \+ 1\) in "
                       r"\[1, 6\] \(dimension 1\), but B has extent 6 there"):
        lowered(s, [A, D])


def test_negative_index_range_is_reported():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i - 2], name="B")
    C = te.compute((10,), lambda i: B[i], name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    with pytest.raises(ScheduleError, match=r"reads A\[-2\] (.|\n)*for \(i - 2\) in \[-2, 7\], "
                       r"but A has extent 10"):
        lowered(s, [A, C])


def test_guarded_reads_of_inlined_stages_are_accepted(backend):
    """Padding through if_then_else and a reduction's where= stay legal once inlined."""
    A = te.placeholder((9,), name="A")
    P = te.compute((11,), lambda i: te.if_then_else(te.all(i >= 1, i <= 9), A[i - 1], 0.0),
                   name="P")
    k = te.reduce_axis((0, 3), name="k")
    C = te.compute((9,), lambda i: te.sum(P[i + k], axis=k), name="C")
    r = te.reduce_axis((0, 12), name="r")
    Q = te.compute((12,), lambda i: te.if_then_else(i >= 2, A[i - 2 - (i // 11) * 9], 0.0),
                   name="Q")
    T = te.compute((1,), lambda _: te.sum(Q[r], axis=r, where=te.all(r >= 2, r < 11)),
                   name="T")
    s = te.create_schedule([C.op, T.op])
    s[P].compute_inline()
    s[Q].compute_inline()
    a = rand((9,), seed=3)
    c, t = run_schedule(s, [A, C, T], [a], backend)
    pad = np.concatenate([[0.0], a.astype("float64"), [0.0]])
    check(c, pad[0:9] + pad[1:10] + pad[2:11], k=3)
    check(t, np.array([a.astype("float64").sum()]), k=9)
