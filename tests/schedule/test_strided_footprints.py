"""Strided regions of attached stages are compacted (case B2): a stage computed inside a
consumer that reads it with a stride computes and stores only the points read, in a buffer
of one element per lattice point."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import check, lowered, rand, run1

import polytile
from polytile import te


def _allocs(text: str) -> dict:
    return {m.group(1): [int(x) for x in m.group(2).split(",")]
            for m in re.finditer(r"([\w.]+) = alloc\(\w+\[([\d, ]+)\]", text)}


def _b2():
    A = te.placeholder((15,), name="A")
    B = te.compute((15,), lambda t: A[t] + 1, name="B")
    C = te.compute((5, 3), lambda i, j: 2 * B[i + 5 * j], name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    return s, A, C


def test_b2_strided_reads_get_a_compact_buffer():
    s, A, C = _b2()
    text = lowered(s, [A, C])
    assert _allocs(text) == {"B": [3]}                 # was 11: the hull i .. i+10
    assert "for t in range(0, 3):" in text
    assert "B[t] = (A[(i + (5 * t))] + 1.0f)" in text
    assert "C[i, j] = (2.0f * B[j])" in text


def test_b2_numbers(backend):
    s, A, C = _b2()
    a = rand((15,), seed=1)
    out = run1(s, [A, C], [a], backend)
    b = a.astype("float64") + 1
    check(out, 2 * b[np.arange(5)[:, None] + 5 * np.arange(3)[None, :]])


def test_two_strided_dimensions_with_offsets(backend):
    A = te.placeholder((13, 23), name="A")
    P = te.compute((13, 23), lambda x, y: A[x, y] * 3.0, name="P")
    C = te.compute((4, 3, 5), lambda i, j, k: P[2 * j + 1 + i, 4 * k + 2] - 1.0, name="C")
    s = te.create_schedule(C.op)
    s[P].compute_at(s[C], C.op.axis[0])
    text = lowered(s, [A, C])
    assert _allocs(text) == {"P": [3, 5]}              # hull 5 x 17
    a = rand((13, 23), seed=2)
    out = run1(s, [A, C], [a], backend)
    i, j, k = np.meshgrid(np.arange(4), np.arange(3), np.arange(5), indexing="ij")
    check(out, a.astype("float64")[2 * j + 1 + i, 4 * k + 2] * 3 - 1)


def test_strided_region_under_a_split_producer(backend):
    A = te.placeholder((64,), name="A")
    P = te.compute((64,), lambda t: A[t] * A[t], name="P")
    C = te.compute((4, 7), lambda i, j: P[i + 9 * j], name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=2)
    s[P].compute_at(s[C], ii)
    po, pi = s[P].split(P.op.axis[0], factor=3)     # 7 points: a partial last tile
    s[P].unroll(pi)
    assert _allocs(lowered(s, [A, C])) == {"P": [7]}
    a = rand((64,), seed=3)
    out = run1(s, [A, C], [a], backend)
    i, j = np.meshgrid(np.arange(4), np.arange(7), indexing="ij")
    check(out, a.astype("float64")[i + 9 * j] ** 2)


def test_strided_cache_read(backend):
    A = te.placeholder((6, 40), name="A")
    C = te.compute((6, 8), lambda i, j: A[i, 5 * j + 3] * 0.5, name="C")
    s = te.create_schedule(C.op)
    AL = s.cache_read(A, "local", [C])
    s[AL].compute_at(s[C], C.op.axis[0])
    assert _allocs(lowered(s, [A, C])) == {"A.local": [1, 8]}
    a = rand((6, 40), seed=4)
    out = run1(s, [A, C], [a], backend)
    check(out, a.astype("float64")[:, 3::5] * 0.5)


@pytest.mark.parametrize("offsets, extent", (((0, 5, 7), 8), ((0, 4, 8), 3), ((2, 6), 2)))
def test_only_a_true_lattice_is_compacted(offsets, extent, backend):
    """Reads at i, i+5, i+7 are not on one lattice: the hull stays (8 elements)."""
    A = te.placeholder((20,), name="A")
    P = te.compute((20,), lambda t: A[t] + 2.0, name="P")

    def body(i):
        acc = P[i + offsets[0]]
        for o in offsets[1:]:
            acc = acc + P[i + o]
        return acc

    C = te.compute((10,), body, name="C")
    s = te.create_schedule(C.op)
    s[P].compute_at(s[C], C.op.axis[0])
    assert _allocs(lowered(s, [A, C])) == {"P": [extent]}
    a = rand((20,), seed=5)
    out = run1(s, [A, C], [a], backend)
    p = a.astype("float64") + 2
    check(out, sum(p[np.arange(10) + o] for o in offsets))


def test_storage_align_on_a_compacted_buffer(backend):
    A = te.placeholder((8, 30), name="A")
    P = te.compute((8, 30), lambda x, y: A[x, y] + 1.0, name="P")
    C = te.compute((4, 10), lambda i, j: P[2 * i, 3 * j], name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=2)
    s[P].compute_at(s[C], io)
    s[P].storage_align(P.op.axis[0], 16, 0)
    assert _allocs(lowered(s, [A, C])) == {"P": [2, 16]}   # 2 x 10, rows padded to 16
    a = rand((8, 30), seed=6)
    out = run1(s, [A, C], [a], backend)
    check(out, a.astype("float64")[0:8:2, 0:30:3] + 1)


def test_storage_align_at_root_pads_the_buffer(backend):
    # an intermediate at root is padded as TVM pads it (it was silently left compact)
    A = te.placeholder((17, 13), name="A")
    B = te.compute((17, 13), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((17, 13), lambda i, j: B[i, j] * 3.0, name="C")
    s = te.create_schedule(C.op)
    s[B].storage_align(B.op.axis[0], 16, 3)
    assert _allocs(lowered(s, [A, C])) == {"B": [17, 19]}   # row stride 19 = 16 + 3
    a = rand((17, 13), seed=7)
    check(run1(s, [A, C], [a], backend), (a.astype("float64") + 1) * 3)


@pytest.mark.parametrize("attached", [False, True])
def test_storage_align_of_an_argument_is_refused(attached):
    # the caller's array is compact: padding it cannot be done (it was silently ignored)
    A = te.placeholder((17, 13), name="A")
    B = te.compute((17, 13), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((17, 13), lambda i, j: B[i, j] * 3.0, name="C")
    s = te.create_schedule(C.op)
    if attached:   # B an argument computed at a loop of C
        s[B].compute_at(s[C], C.op.axis[0])
        s[B].storage_align(B.op.axis[0], 16, 3)
    else:
        s[C].storage_align(C.op.axis[0], 16, 3)
    with pytest.raises(polytile.ScheduleError, match=r"storage_align: stage '[BC]' is an "
                       r"argument of the function, whose array the caller passes compact"):
        polytile.lower(s, [A, B, C])


@pytest.mark.parametrize("scope", ("shared", "local"))
def test_strided_region_on_the_gpu(scope):
    """The padded (GPU) regions compact the same way; run by the reference interpreter,
    which executes the kernels block by block with bounds-checked accesses."""
    from polytile.schedule.interpreter import run

    A = te.placeholder((6, 40), name="A")
    C = te.compute((6, 8), lambda i, j: A[i, 5 * j + 3] * 0.5 + A[i, 5 * j + 3], name="C")
    s = te.create_schedule(C.op)
    AL = s.cache_read(A, scope, [C])
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    if scope == "shared":
        s[AL].compute_at(s[C], C.op.axis[0])
        s[C].bind(C.op.axis[1], te.thread_axis("threadIdx.x"))
        s[AL].bind(AL.op.axis[1], te.thread_axis("threadIdx.x"))
    else:
        s[AL].compute_at(s[C], C.op.axis[1])
    func = polytile.lower(s, [A, C])
    assert _allocs(str(func)) == {"A." + scope: [1, 8 if scope == "shared" else 1]}
    a = rand((6, 40), seed=7)
    c = np.full((6, 8), np.nan, "float32")
    run(func, a, c)
    check(c, a.astype("float64")[:, 3::5] * 1.5)


def test_strided_shared_region_with_a_ragged_thread_split():
    from polytile.schedule.interpreter import run

    A = te.placeholder((6, 40), name="A")
    C = te.compute((6, 7), lambda i, j: A[i, 5 * j + 3] * 0.5, name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    _, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].bind(ji, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[C], C.op.axis[0])
    _, ai = s[AS].split(AS.op.axis[1], factor=4)
    s[AS].bind(ai, te.thread_axis("threadIdx.x"))
    func = polytile.lower(s, [A, C])
    assert _allocs(str(func)) == {"A.shared": [1, 8]}    # 7 points padded to 2 x 4 threads
    a = rand((6, 40), seed=8)
    c = np.full((6, 7), np.nan, "float32")
    run(func, a, c)
    check(c, a.astype("float64")[:, 3::5][:, :7] * 0.5)


def test_storage_align_of_a_multi_output_stage_with_an_argument_output_is_refused():
    # fuzz seed llvm 92534: P's first output an intermediate, P.v1 an argument; the padding
    # of P replaced both buffers, so the argument P.v1 was never written (NaN everywhere)
    A = te.placeholder((11, 33), name="A")
    P, P1 = te.compute((11, 33), lambda i, j: (A[i, j] + 1, A[i, j] * 2), name="P")
    R = te.compute((11,), lambda i: P[i, 0] + P[i, 32], name="R")
    s = te.create_schedule([P1.op, R.op])
    s[P].storage_align(P.op.axis[0], 2, 1)
    with pytest.raises(polytile.ScheduleError,
                       match=r"stage 'P' \(its output 'P.v1'\) is an argument of the function"):
        polytile.lower(s, [A, P1, R])
