"""Computes with several outputs and tuple reducers (TVM v0.19's multi-output
``te.compute`` and tuple ``te.comm_reducer``): one stage computes every output in one loop
nest; argmax/argmin over ``(index, value)`` pairs as in TVM's reduction tutorial.

Tie rule: the combiners below keep the accumulator when the values are equal
(``x[1] >= y[1]``), and polytile folds a tuple reduction in the order of its reduction
axes (the laws of tuple combiners are not proven, so no schedule reorders the fold), so
argmax/argmin return the *first* index of the extreme value, as ``numpy.argmax`` does.

Each test compares with numpy (float64 where values are computed) on odd sizes, with
outputs poisoned before the run; GPU schedules run on the reference interpreter and their
CUDA source is compiled with nvcc where it exists.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, compile_with_nvcc, rand, rng, run_schedule

import polytile
from polytile import te
from polytile.errors import ScheduleError
from polytile.schedule import interpreter
from polytile.schedule.schedule import replay


def _argmax():
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return te.if_then_else(keep, x[0], y[0]), te.if_then_else(keep, x[1], y[1])

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value(t1)

    return te.comm_reducer(fcombine, fidentity, name="argmax")


def _argmin_value_first():
    """argmin over ``(value, index)`` pairs (the issue's order)."""

    def fcombine(x, y):
        keep = x[0] <= y[0]
        return te.if_then_else(keep, x[0], y[0]), te.if_then_else(keep, x[1], y[1])

    return te.comm_reducer(fcombine, lambda t0, t1: (te.max_value(t0), te.const(-1, t1)),
                           name="argmin")


def _ties(m, n, seed):
    """Values with many ties: small integers stored as floats."""
    return rng(seed).integers(-3, 4, size=(m, n)).astype("float32")


def _argmax_stage(m, n):
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    idx, val = te.compute((m,), lambda i: _argmax()((k, A[i, k]), axis=k), name="T")
    return A, idx, val


# ------------------------------------------------------------------------- definitions
def test_multi_output_compute_surface():
    A = te.placeholder((5, 3), name="A")
    outs = te.compute((5, 3), lambda i, j: (A[i, j] + 1, (A[i, j] > 0).astype("int32")),
                      name="E")
    assert isinstance(outs, list) and len(outs) == 2
    op = outs[0].op
    assert op.num_outputs == 2 and op.output(0) is outs[0] and op.output(1) is outs[1]
    assert [t.dtype for t in outs] == ["float32", "int32"]
    s = te.create_schedule(op)
    assert s[outs[0]] is s[outs[1]]
    text = str(polytile.lower(s, [A, *outs]))
    assert "E.v0: float32[5, 3]" in text and "E.v1: int32[5, 3]" in text


def test_tuple_reducer_definition_errors():
    A = te.placeholder((4, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    argmax = _argmax()
    with pytest.raises(TypeError, match="argmax"):
        te.compute((4,), lambda i: argmax(A[i, k], axis=k))
    with pytest.raises(TypeError, match="tuple of 2"):
        te.compute((4,), lambda i: argmax((k, A[i, k]), axis=k, init=(0,)))
    bad = te.comm_reducer(lambda x, y: x[0], lambda t0, t1: (0, 0), name="bad")
    with pytest.raises(TypeError, match="bad.*fcombine returns"):
        te.compute((4,), lambda i: bad((k, A[i, k]), axis=k))
    k2 = te.reduce_axis((0, 6), name="k2")
    with pytest.raises(TypeError, match="one tuple reduction"):
        te.compute((4,), lambda i: (argmax((k, A[i, k]), axis=k)[0],
                                    argmax((k2, A[i, k2]), axis=k2)[1]))


# ------------------------------------------------------------------------- numerics
@pytest.mark.parametrize("m,n", [(1, 1), (7, 13), (5, 31)])
def test_argmax_ties_give_the_first_index(backend, m, n):
    A, idx, val = _argmax_stage(m, n)
    s = te.create_schedule(idx.op)
    a = _ties(m, n, seed=m * n)
    i_out, v_out = run_schedule(s, [A, idx, val], [a], backend)
    np.testing.assert_array_equal(i_out, a.argmax(axis=1))
    np.testing.assert_array_equal(v_out, a.max(axis=1))


def test_argmin_value_index_pair_with_where_and_init(backend):
    m, n = 6, 11
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    argmin = _argmin_value_first()
    val, idx = te.compute((m,), lambda i: argmin((A[i, k], k), axis=k, where=k % 3 != 1),
                          name="M")
    a = _ties(m, n, seed=3)
    s = te.create_schedule(val.op)
    v_out, i_out = run_schedule(s, [A, val, idx], [a], backend)
    cols = [j for j in range(n) if j % 3 != 1]
    np.testing.assert_array_equal(v_out, a[:, cols].min(axis=1))
    np.testing.assert_array_equal(i_out, np.array(cols)[a[:, cols].argmin(axis=1)])
    # init= starts the fold from a given pair: (-2.5, 99) wins where nothing is smaller
    val2, idx2 = te.compute((m,), lambda i: argmin((A[i, k], k), axis=k,
                                                   init=(-2.5, 99)), name="M2")
    s = te.create_schedule(val2.op)
    v_out, i_out = run_schedule(s, [A, val2, idx2], [a], backend)
    lower = a.min(axis=1) < -2.5
    np.testing.assert_array_equal(v_out, np.where(lower, a.min(axis=1), -2.5))
    np.testing.assert_array_equal(i_out, np.where(lower, a.argmin(axis=1), 99))


def test_consumer_of_both_outputs_with_compute_at_and_split_reduction(backend):
    m, n = 11, 17
    A, idx, val = _argmax_stage(m, n)
    D = te.compute((m,), lambda i: val[i] * 100 + idx[i].astype("float32"), name="D")
    s = te.create_schedule(D.op)
    io, _ = s[D].split(D.op.axis[0], 4)
    s[idx].compute_at(s[D], io)
    s[idx].split(idx.op.reduce_axis[0], 5)
    a = _ties(m, n, seed=7)
    (out,) = run_schedule(s, [A, D], [a], backend)
    check(out, a.max(axis=1).astype("float64") * 100 + a.argmax(axis=1))


def _elementwise(m, n):
    A = te.placeholder((m, n), name="A")
    B = te.placeholder((n,), name="B")
    P, Q = te.compute((m, n), lambda i, j: (A[i, j] * B[j], A[i, j] - B[j]), name="PQ")
    R = te.compute((m, n), lambda i, j: P[i, j] + 3 * Q[i, j], name="R")
    return A, B, P, Q, R


def _elementwise_ref(a, b):
    a64, b64 = a.astype("float64"), b.astype("float64")
    return a64 * b64, a64 - b64


@pytest.mark.parametrize("seed", range(6))
def test_random_schedules_of_a_two_output_stage(backend, seed):
    g = rng(100 + seed)
    m, n = int(g.integers(1, 14)), int(g.integers(1, 20))
    A, B, P, Q, R = _elementwise(m, n)
    s = te.create_schedule(R.op)
    choice = int(g.integers(0, 3))
    if choice == 0:      # the two-output stage at root, split and reordered
        xo, xi = s[P].split(P.op.axis[1], int(g.integers(1, n + 2)))
        s[P].reorder(xo, P.op.axis[0], xi)
        if g.integers(0, 2):
            s[P].vectorize(xi)
        s[P].parallel(xo)
    elif choice == 1:    # computed at a loop of its consumer
        ro, ri = s[R].split(R.op.axis[0], int(g.integers(1, m + 2)))
        s[P].compute_at(s[R], ro if g.integers(0, 2) else ri)
        s[P].unroll(P.op.axis[1]) if n < 8 else s[P].split(P.op.axis[1], 3)
    else:                # inlined into its consumer
        s[Q].compute_inline()
    a, b = rand((m, n), seed=seed), rand((n,), seed=seed + 1)
    (out,) = run_schedule(s, [A, B, R], [a, b], backend)
    p, q = _elementwise_ref(a, b)
    check(out, p + 3 * q)
    # the outputs themselves as arguments
    s = te.create_schedule(P.op)
    fo, fi = s[P].split(s[P].fuse(*P.op.axis), int(g.integers(1, 9)))
    s[P].parallel(fo)
    p_out, q_out = run_schedule(s, [A, B, P, Q], [a, b], backend)
    check(p_out, p)
    check(q_out, q)


@pytest.mark.parametrize("seed", range(4))
def test_random_schedules_of_argmax(backend, seed):
    g = rng(200 + seed)
    m, n = int(g.integers(1, 12)), int(g.integers(1, 24))
    A, idx, val = _argmax_stage(m, n)
    s = te.create_schedule(idx.op)
    ko, ki = s[idx].split(idx.op.reduce_axis[0], int(g.integers(1, n + 2)))
    io, ii = s[idx].split(idx.op.axis[0], int(g.integers(1, m + 2)))
    order = [[io, ii, ko, ki], [io, ko, ii, ki], [ko, io, ki, ii]][int(g.integers(0, 3))]
    s[idx].reorder(*order)
    if order[0] is io:
        s[idx].parallel(io)
    a = _ties(m, n, seed=seed)
    i_out, v_out = run_schedule(s, [A, idx, val], [a], backend)
    np.testing.assert_array_equal(i_out, a.argmax(axis=1))
    np.testing.assert_array_equal(v_out, a.max(axis=1))


def test_cache_read_of_the_second_output(backend):
    m, n = 9, 7
    A, B, P, Q, R = _elementwise(m, n)
    s = te.create_schedule(R.op)
    QL = s.cache_read(Q, "local", [R])
    assert QL.op.name == "PQ.v1.local"
    s[QL].compute_at(s[R], R.op.axis[0])
    text = str(polytile.lower(s, [A, B, R]))
    assert "PQ.v1.local" in text and "PQ.v0.local" not in text
    replayed = replay(s.trace, te.create_schedule(R.op))
    a, b = rand((m, n), seed=1), rand((n,), seed=2)
    for sched in (s, replayed):
        (out,) = run_schedule(sched, [A, B, R], [a, b], backend)
        p, q = _elementwise_ref(a, b)
        check(out, p + 3 * q)


# ------------------------------------------------------------------------- refusals
def test_rfactor_of_a_tuple_reducer_is_refused_by_name():
    A, idx, val = _argmax_stage(4, 9)
    s = te.create_schedule(idx.op)
    with pytest.raises(ScheduleError, match="rfactor: .*combiner 'argmax' of stage 'T'.*tuples"):
        s.rfactor(idx, idx.op.reduce_axis[0])


def test_reordering_the_fold_of_a_tuple_reducer_is_refused():
    A, idx, val = _argmax_stage(4, 9)
    s = te.create_schedule(idx.op)
    ko, ki = s[idx].split(idx.op.reduce_axis[0], 4)
    s[idx].reorder(ki, ko)
    with pytest.raises(ScheduleError, match="(?s)reorder: the loop order of stage 'T'.*argmax"):
        polytile.lower(s, [A, idx, val])


def test_cross_thread_tuple_reduction_is_refused():
    A, idx, val = _argmax_stage(4, 32)
    s = te.create_schedule(idx.op)
    s[idx].bind(idx.op.axis[0], te.thread_axis("blockIdx.x"))
    s[idx].bind(idx.op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="bind: .*'argmax'"):
        polytile.lower(s, [A, idx, val])


def test_cache_write_of_some_outputs_of_a_multi_output_stage_is_refused():
    A, B, P, Q, R = _elementwise(3, 4)
    s = te.create_schedule(R.op)
    with pytest.raises(ScheduleError, match="cache_write: stage 'PQ' has 2 outputs; got 1"):
        s.cache_write(P, "local")
    with pytest.raises(ScheduleError, match="cache_write: stage 'PQ' has 2 outputs; got 2"):
        s.cache_write([P, P], "local")


def test_cache_write_of_all_outputs_of_argmax(backend):
    m, n = 9, 23
    A, idx, val = _argmax_stage(m, n)
    s = te.create_schedule(idx.op)
    c_idx, c_val = s.cache_write([idx, val], "local")
    assert c_idx.op is c_val.op and c_idx.op.name == "T.local"
    s[c_idx].split(idx.op.reduce_axis[0], 4)     # TVM re-maps the original reduce axis
    io, ii = s[idx].split(idx.op.axis[0], 4)
    s[c_idx].compute_at(s[idx], io)
    a = _ties(m, n, seed=11)
    for sched in (s, replay(s.trace, te.create_schedule(idx.op))):
        i_out, v_out = run_schedule(sched, [A, idx, val], [a], backend)
        np.testing.assert_array_equal(i_out, a.argmax(axis=1))
        np.testing.assert_array_equal(v_out, a.max(axis=1))


# ------------------------------------------------------------------------- GPU
def _gpu(s, args, inputs):
    compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())
    f = polytile.lower(s, args)
    outs = [np.full(t.shape, -7 if t.dtype.startswith("int") else np.nan, t.dtype)
            for t in args[len(inputs):]]
    interpreter.run(f, *inputs, *outs)
    return outs


def test_argmax_on_the_gpu_one_row_per_thread():
    m, n = 37, 19
    A, idx, val = _argmax_stage(m, n)
    s = te.create_schedule(idx.op)
    bx, tx = s[idx].split(idx.op.axis[0], 8)
    s[idx].bind(bx, te.thread_axis("blockIdx.x"))
    s[idx].bind(tx, te.thread_axis("threadIdx.x"))
    a = _ties(m, n, seed=5)
    i_out, v_out = _gpu(s, [A, idx, val], [a])
    np.testing.assert_array_equal(i_out, a.argmax(axis=1))
    np.testing.assert_array_equal(v_out, a.max(axis=1))


def test_two_outputs_on_the_gpu_computed_in_shared_memory():
    m, n = 5, 45
    A, B, P, Q, R = _elementwise(m, n)
    s = te.create_schedule(R.op)
    ro, ri = s[R].split(R.op.axis[1], 16)
    s[R].bind(R.op.axis[0], te.thread_axis("blockIdx.x"))
    s[R].bind(ri, te.thread_axis("threadIdx.x"))
    s[P].set_scope("shared")
    s[P].compute_at(s[R], ro)
    s[P].bind(P.op.axis[1], te.thread_axis("threadIdx.x"))
    a, b = rand((m, n), seed=8), rand((n,), seed=9)
    (out,) = _gpu(s, [A, B, R], [a, b])
    p, q = _elementwise_ref(a, b)
    check(out, p + 3 * q)


def test_argmax_on_the_gpu_with_a_local_cache():
    m, n = 21, 30
    A, idx, val = _argmax_stage(m, n)
    s = te.create_schedule(idx.op)
    c_idx, _ = s.cache_write([idx, val], "local")
    bx, tx = s[idx].split(idx.op.axis[0], 8)
    s[idx].bind(bx, te.thread_axis("blockIdx.x"))
    s[idx].bind(tx, te.thread_axis("threadIdx.x"))
    s[c_idx].compute_at(s[idx], tx)
    s[c_idx].split(idx.op.reduce_axis[0], 4)
    a = _ties(m, n, seed=12)
    i_out, v_out = _gpu(s, [A, idx, val], [a])
    np.testing.assert_array_equal(i_out, a.argmax(axis=1))
    np.testing.assert_array_equal(v_out, a.max(axis=1))


@pytest.mark.parametrize("seed", range(3))
def test_random_gpu_schedules_of_a_two_output_stage(seed):
    g = rng(400 + seed)
    m, n = int(g.integers(1, 7)), int(g.integers(1, 40))
    A, B, P, Q, R = _elementwise(m, n)
    s = te.create_schedule(R.op)
    f = int(g.integers(1, 33))
    ro, ri = s[R].split(R.op.axis[1], f)
    s[R].bind(R.op.axis[0], te.thread_axis("blockIdx.x"))
    s[R].bind(ri, te.thread_axis("threadIdx.x"))
    if g.integers(0, 2):
        s[P].compute_at(s[R], ri)          # per thread, in registers
        s[P].set_scope("local")
    else:
        s[P].compute_at(s[R], ro)          # per block, in shared memory
        s[P].set_scope("shared")
        po, pi = s[P].split(P.op.axis[1], f)
        s[P].bind(pi, te.thread_axis("threadIdx.x"))
    a, b = rand((m, n), seed=seed), rand((n,), seed=seed + 5)
    (out,) = _gpu(s, [A, B, R], [a, b])
    p, q = _elementwise_ref(a, b)
    check(out, p + 3 * q)


@pytest.mark.parametrize("m,n,f", [(19, 23, 8), (7, 5, 4), (33, 9, 16)])
def test_argmax_vectorized_over_rows_with_the_reduction_outside(backend, m, n, f):
    A, idx, val = _argmax_stage(m, n)
    s = te.create_schedule(idx.op)
    io, ii = s[idx].split(idx.op.axis[0], f)
    s[idx].reorder(io, idx.op.reduce_axis[0], ii)
    s[idx].vectorize(ii)
    s[idx].parallel(io)
    a = _ties(m, n, seed=m)
    i_out, v_out = run_schedule(s, [A, idx, val], [a], backend)
    np.testing.assert_array_equal(i_out, a.argmax(axis=1))
    np.testing.assert_array_equal(v_out, a.max(axis=1))


def _sum_and_max():
    """A tuple reducer of independent elements: its laws are those of + and max."""
    return te.comm_reducer(lambda x, y: (x[0] + y[0], te.max(x[1], y[1])),
                           lambda t0, t1: (te.const(0, t0), te.min_value(t1)),
                           name="sum_max")


def test_independent_tuple_elements_are_proven_and_reorder(backend):
    m, n = 7, 19
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    tot, big = te.compute((m,), lambda i: _sum_and_max()((A[i, k], A[i, k] * 2), axis=k),
                          name="SM")
    s = te.create_schedule(tot.op)
    ko, ki = s[tot].split(k, 4)
    s[tot].reorder(ki, tot.op.axis[0], ko)    # legal: the fold is order-free
    a = rand((m, n), seed=13)
    t_out, b_out = run_schedule(s, [A, tot, big], [a], backend)
    check(t_out, a.astype("float64").sum(axis=1), k=n)
    check(b_out, 2 * a.astype("float64").max(axis=1))
    # rfactor and a cross-thread bind of it: tests/schedule/test_tuple_allreduce.py
    bf = te.create_schedule(tot.op).rfactor(tot, k)
    assert isinstance(bf, list) and [t.op.name for t in bf] == ["SM.rf", "SM.rf"]
