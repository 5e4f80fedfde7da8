"""rfactor and cross-thread reductions (TVM's all-reduce) of tuple ``te.comm_reducer``s:
a ``(sum, sum of squares)`` pair, a ``(sum, max)`` pair of mixed dtypes, argmax/argmin whose ties go to the smaller (or
larger) index (a lexicographic total order, proven), and refusals of TVM's tutorial
argmax/argmin (ties keep the accumulator), which polytile cannot prove commutative and
associative.

The cross-thread cases run through the CUDA backend's passes (warp-shuffle combine of
every element of the tuple at once: ``schedule/passes/warp_reduce.py``) on the reference
interpreter, over thread extents that shuffle (32, 256 = 8 warps, and 4 rows of 8 threads
on ``threadIdx.y``) and that keep the serial combine (1, 7, 33), rows not a multiple of
the thread count, and one-row inputs; the results are compared with float64 numpy on
random non-zero data, outputs poisoned first. Explicit ``rfactor`` of a tuple runs on the
interpreter and LLVM (``backend`` fixture). With ``-m slow`` the generated CUDA C runs on
the emulated driver (and on a GPU with ``-m "gpu and slow"``)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, compile_with_nvcc, poison, rand, run_schedule

import polytile
from polytile import te
from polytile.errors import ScheduleError
from polytile.schedule.interpreter import run as interpret
from polytile.schedule.loop_ir import WarpShuffle, walk_stmts


def _sum2():
    return te.comm_reducer(lambda x, y: (x[0] + y[0], x[1] + y[1]),
                           lambda t0, t1: (te.const(0, t0), te.const(0, t1)), name="sum2")


def _sum_max():
    return te.comm_reducer(lambda x, y: (x[0] + y[0], te.max(x[1], y[1])),
                           lambda t0, t1: (te.const(0, t0), te.min_value(t1)), name="sum_max")


def _argmax():
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return te.if_then_else(keep, x[0], y[0]), te.if_then_else(keep, x[1], y[1])

    return te.comm_reducer(fcombine, lambda t0, t1: (te.const(-1, t0), te.min_value(t1)),
                           name="argmax")


def _argmin():
    def fcombine(x, y):
        keep = x[1] <= y[1]
        return te.if_then_else(keep, x[0], y[0]), te.if_then_else(keep, x[1], y[1])

    return te.comm_reducer(fcombine, lambda t0, t1: (te.const(-1, t0), te.max_value(t1)),
                           name="argmin")


def _moments(m: int, n: int, threads: int, rows: int = 1, scope: str | None = None):
    """``O[i, j] = (A[i, j] - S1[i]) * S2[i]`` with ``(S1, S2)`` = the row's sum and sum
    of squares as one tuple reduction bound across ``threads`` threads, computed at O's
    row loop (``rows`` rows a block on ``threadIdx.y``)."""
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    S1, S2 = te.compute((m,), lambda i: _sum2()((A[i, k], A[i, k] * A[i, k]), axis=k),
                        name="SS")
    O = te.compute((m, n), lambda i, j: (A[i, j] - S1[i]) * S2[i], name="O")
    s = te.create_schedule(O.op)
    i, j = O.op.axis
    io, ii = s[O].split(i, factor=rows)
    jo, ji = s[O].split(j, factor=threads)
    s[O].reorder(io, ii, jo, ji)
    s[O].bind(io, te.thread_axis("blockIdx.x"))
    s[O].bind(ji, te.thread_axis("threadIdx.x"))
    if rows > 1:
        s[O].bind(ii, te.thread_axis("threadIdx.y"))
        s[S1].bind(s[S1].split(S1.op.axis[0], factor=rows)[1], te.thread_axis("threadIdx.y"))
    _, ki = s[S1].split(k, factor=threads)
    s[S1].bind(ki, te.thread_axis("threadIdx.x"))
    s[S1].compute_at(s[O], io)
    if scope:
        s[S1].set_scope(scope)
    return s, [A, O]


def _cuda(s, args):
    return polytile.lower(s, args, target="cuda", stop_after="backend_passes")


def _shuffles(f) -> int:
    return sum(isinstance(x, WarpShuffle) for x in walk_stmts(f.body))


@pytest.mark.parametrize("m, n, threads, rows, scope, steps", [
    (3, 45, 7, 1, None, 0),           # serial combine: 7 threads
    (2, 70, 32, 1, "local", 5),       # one warp, every thread combines
    (2, 300, 256, 1, None, 5 + 3),    # 8 warps: per-warp partials through shared memory
    (5, 13, 8, 4, None, 3),           # 4 rows of 8 threads, 5 rows: a ragged last block
    (1, 1, 1, 1, None, 0),            # size 1
    (2, 40, 33, 1, "local", 0),       # 33 threads: serial combine
])
def test_sum_and_sumsq_across_threads(m, n, threads, rows, scope, steps):
    s, args = _moments(m, n, threads, rows, scope)
    f = _cuda(s, args)
    assert _shuffles(f) == 2 * steps    # both elements shuffled in the same butterfly
    a = rand((m, n), seed=n)
    out = poison((m, n), "float32")
    interpret(f, a, out)
    x = a.astype("float64")
    check(out, (x - x.sum(1, keepdims=True)) * (x * x).sum(1, keepdims=True), k=n * n)


def test_one_barrier_round_for_a_tuple():
    """Two elements over 8 warps share the shared-memory round of per-warp partials: one
    barrier between the warps' stores and their loads, not one per element."""
    s, args = _moments(2, 300, 256)
    text = str(_cuda(s, args))
    assert text.count("SS.rf.v0.w0.warps.0[") == 2 and text.count("SS.rf.v0.w0.warps.1[") == 2
    serial = str(polytile.lower(s, args, target="cuda"))   # before the backend passes
    assert text.count("sync(") <= serial.count("sync(") + 1


def test_mixed_dtype_tuple_across_threads():
    """``(sum of int32, max of float32)``: each element in its own dtype."""
    m, n, t = 3, 77, 64
    A = te.placeholder((m, n), name="A", dtype="int32")
    B = te.placeholder((m, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    S, X = te.compute((m,), lambda i: _sum_max()((A[i, k], B[i, k]), axis=k), name="SX")
    s = te.create_schedule(S.op)
    s[S].bind(S.op.axis[0], te.thread_axis("blockIdx.x"))
    s[S].bind(s[S].split(k, factor=t)[1], te.thread_axis("threadIdx.x"))
    f = _cuda(s, [A, B, S, X])
    assert _shuffles(f) == 2 * 6
    a, b = rand((m, n), "int32", seed=3), rand((m, n), seed=4)
    so, xo = poison((m,), "int32"), poison((m,), "float32")
    interpret(f, a, b, so, xo)
    np.testing.assert_array_equal(so, a.sum(axis=1))
    np.testing.assert_array_equal(xo, b.max(axis=1))
    compile_with_nvcc(polytile.build(s, [A, B, S, X], target="cuda").get_source())


def test_explicit_rfactor_of_a_tuple(backend):
    """TVM's form: ``BF = s.rfactor(S1, ki)`` returns the partials of every element; the
    final reduction reads them. A ragged split (19 = 4 * 5 - 1) and ``factor_axis=1``."""
    m, n = 5, 19
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    S1, S2 = te.compute((m,), lambda i: _sum2()((A[i, k], A[i, k] * A[i, k]), axis=k),
                        name="SS")
    s = te.create_schedule(S1.op)
    ko, ki = s[S1].split(k, factor=4)
    bf = s.rfactor(S1, ki, factor_axis=1)
    assert len(bf) == 2 and bf[0].shape == (m, 4) and bf[1].op is bf[0].op
    assert s[S1].op.num_outputs == 2
    a = rand((m, n), seed=7)
    o1, o2 = run_schedule(s, [A, S1, S2], [a], backend)
    x = a.astype("float64")
    check(o1, x.sum(axis=1), k=n)
    check(o2, (x * x).sum(axis=1), k=n)


def test_rfactor_of_a_tuple_replays():
    m, n = 3, 10
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    S1, S2 = te.compute((m,), lambda i: _sum2()((A[i, k], A[i, k] * A[i, k]), axis=k),
                        name="SS")
    s = te.create_schedule(S1.op)
    s.rfactor(S1, s[S1].split(k, factor=3)[1])
    r = polytile.schedule.schedule.replay(s.trace, te.create_schedule(S1.op))
    assert str(polytile.lower(r, [A, S1, S2])) == str(polytile.lower(s, [A, S1, S2]))


@pytest.mark.parametrize("reducer", [_argmax, _argmin])
def test_argmax_argmin_across_threads_are_refused_by_name(reducer):
    """Their index follows the values (and keeps the first on ties): polytile cannot
    prove the combiner commutative and associative, so the fold stays sequential."""
    m, n = 3, 40
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    idx, val = te.compute((m,), lambda i: reducer()((k, A[i, k]), axis=k), name="T")
    s = te.create_schedule(idx.op)
    s[idx].bind(idx.op.axis[0], te.thread_axis("blockIdx.x"))
    s[idx].bind(s[idx].split(k, factor=32)[1], te.thread_axis("threadIdx.x"))
    name = reducer().name
    with pytest.raises(ScheduleError, match=f"bind: .*combiner '{name}' of stage 'T'"):
        polytile.lower(s, [A, idx, val], target="cuda")
    s = te.create_schedule(idx.op)
    with pytest.raises(ScheduleError, match=f"(?s)rfactor: .*combiner '{name}' of stage 'T'"
                       ".*keep this reduction sequential"):
        s.rfactor(idx, s[idx].split(k, factor=4)[1])


def _lex_argmax(best: str, tie: str, index_dtype: str = "int32"):
    """argmax (``best="max"``) or argmin with ties going to the smaller (``tie="min"``)
    or larger index: ``x`` wins when its value is better, or equal with a better index (a
    lexicographic total order, unlike TVM's tutorial form, which keeps the accumulator
    on ties); the identity is the worst pair."""
    better = (lambda a, b: a > b) if best == "max" else (lambda a, b: a < b)
    first = (lambda a, b: a < b) if tie == "min" else (lambda a, b: b < a)

    def fcombine(x, y):
        win = te.any(better(x[1], y[1]), te.all(x[1] == y[1], first(x[0], y[0])))
        return te.if_then_else(win, x[0], y[0]), te.if_then_else(win, x[1], y[1])

    def fidentity(t0, t1):
        worst_index = te.max_value(t0) if tie == "min" else te.min_value(t0)
        return worst_index, te.min_value(t1) if best == "max" else te.max_value(t1)

    return te.comm_reducer(fcombine, fidentity, name=f"arg{best}_{tie}")


@pytest.mark.parametrize("best, tie, threads, rf", [
    ("max", "min", 32, False),    # (the combine stays serial: no shuffle of selections)
    ("min", "min", 48, False),
    ("max", "max", 64, True),     # TVM's idiom: rfactor, bound, the partial at it
    ("min", "max", 7, True),
])
def test_lexicographic_argmax_argmin_across_threads(best, tie, threads, rf):
    """argmax/argmin whose ties go to the smaller (or larger) index select the largest
    pair of a total order: commutative and associative, so bound across threads and
    rfactor'd; many ties (small integers), rows not a multiple of the threads (53), as
    numpy's argmax (first) or the last index among equal values. Refused before as
    "argmax/argmin keep the first of equal values" (fuzz tuple reductions, seeds from
    90000)."""
    m, n = 3, 53
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    idx, val = te.compute((m,), lambda i: _lex_argmax(best, tie)((k, A[i, k]), axis=k),
                          name="T")
    s = te.create_schedule(idx.op)
    s[idx].bind(idx.op.axis[0], te.thread_axis("blockIdx.x"))
    _, ki = s[idx].split(k, factor=threads)
    if rf:
        RF = s.rfactor(idx, ki)
        ki = s[idx].op.reduce_axis[0]
        s[RF[0]].compute_at(s[idx], ki)
    s[idx].bind(ki, te.thread_axis("threadIdx.x"))
    f = _cuda(s, [A, idx, val])
    a = np.random.default_rng(threads).integers(-3, 4, (m, n)).astype("float32")
    io, vo = poison((m,), "int32"), poison((m,), "float32")
    interpret(f, a, io, vo)
    pick = a.argmax(1) if best == "max" else a.argmin(1)
    if tie == "max":
        flip = a[:, ::-1]
        pick = n - 1 - (flip.argmax(1) if best == "max" else flip.argmin(1))
    np.testing.assert_array_equal(io, pick)
    np.testing.assert_array_equal(vo, a.max(1) if best == "max" else a.min(1))


def test_lexicographic_argmax_with_a_wrong_identity_is_refused():
    """The same combiner with index identity 0 where the smaller index wins ties: 0 is
    not the worst index, so the identity law fails (refuted with an example)."""
    def fcombine(x, y):
        win = te.any(x[1] > y[1], te.all(x[1] == y[1], x[0] < y[0]))
        return te.if_then_else(win, x[0], y[0]), te.if_then_else(win, x[1], y[1])

    red = te.comm_reducer(fcombine, lambda t0, t1: (te.const(0, t0), te.min_value(t1)),
                          name="argmax0")
    A = te.placeholder((3, 40), name="A")
    k = te.reduce_axis((0, 40), name="k")
    idx, val = te.compute((3,), lambda i: red((k, A[i, k]), axis=k), name="T")
    s = te.create_schedule(idx.op)
    with pytest.raises(ScheduleError, match="(?s)rfactor: .*'argmax0'.*identity is not the "
                       "least pair.*fails at"):
        s.rfactor(idx, s[idx].split(k, factor=4)[1])


@pytest.mark.slow
@pytest.mark.parametrize("threads, rows", [(64, 2), (7, 1)])
def test_tuple_allreduce_built_and_run(cuda_build, threads, rows):
    """The generated CUDA C on the emulated driver (g++, the block's threads as OS threads
    meeting at barriers, shuffles emulated; ``-m slow``: ~4 s a build) or on a GPU: two
    warps a row and two rows a block (the shared round of per-warp partials of both
    elements), and 7 threads (serial combine)."""
    m, n = 5, 150
    s, args = _moments(m, n, threads, rows)
    a = rand((m, n), seed=threads)
    dev = [polytile.nd.array(a, device="cuda"),
           polytile.nd.array(poison((m, n), "float32"), device="cuda")]
    cuda_build(s, args)(*dev)
    x = a.astype("float64")
    check(dev[1].numpy(), (x - x.sum(1, keepdims=True)) * (x * x).sum(1, keepdims=True),
          k=n * n)
