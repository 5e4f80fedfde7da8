"""rfactor: factoring a reduction into partial reductions over one of its loops.

Every numeric test compares with a float64 numpy reference on poisoned outputs (see
``helpers``). The matrix covers reduce ranges that do not start at 0 (prime extents, size
1), non-divisible splits (ragged tails, also a split of a ragged inner loop), fuse of two
reduce axes, reorder with spatial axes, every ``factor_axis`` including negative ones,
sum/max/min over int32/float32/float16, the rf stage under compute_at/compute_root/
parallel/vectorize, stencil windows, user combiners, and TVM's cross-thread idiom.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import check, compile_with_nvcc, rand, require_backend, run1, run_schedule

import polytile
from polytile import ScheduleError, te
from polytile.schedule.interpreter import run as interpret


def _row_sum(m=5, n=37):
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="B")
    return A, B, k


def _reducer(name):
    return {"sum": te.sum, "max": te.max, "min": te.min}[name]


def _np_reduce(name, x, axis):
    return {"sum": np.sum, "max": np.max, "min": np.min}[name](x, axis=axis)


# ----------------------------------------------------------------------- structure
def test_rfactor_structure():
    A, B, k = _row_sum()
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    BF = s.rfactor(B, ki)
    assert BF.shape == (8, 5)
    assert [iv.name for iv in BF.op.axis] == ["k.inner", "i"]
    assert [iv.name for iv in BF.op.reduce_axis] == ["k.outer"]
    assert [iv.name for iv in s[B].leaf_iter_vars] == ["i", "k.inner.v"]
    assert s[B].op.reduce_axis[0].dom.extent == 8


# --------------------------------------------------------------------- the cases
def test_R1_reduce_axis_starting_at_2(backend):
    A = te.placeholder((5,), name="A")
    k = te.reduce_axis((2, 5), name="k")
    R = te.compute((1,), lambda z: te.sum(A[k], axis=k), name="R")
    s = te.create_schedule(R.op)
    RF = s.rfactor(R, k)
    assert RF.shape == (3, 1)
    out = run1(s, [A, R], [np.arange(5, dtype="float32")], backend)
    np.testing.assert_array_equal(out, [9.0])  # A[2:5], not A[0:3]


def test_R2_negative_factor_axis_after_split_and_cache_read():
    require_backend("llvm")
    X = te.placeholder((4, 64, 32, 16), "float16", name="X")
    r1 = te.reduce_axis((0, 64), name="r1")
    r3 = te.reduce_axis((0, 16), name="r3")
    Y = te.compute((4, 1, 32, 1), lambda a, _, c, __: te.sum(X[a, r1, c, r3], axis=[r1, r3]),
                   name="Y")
    s = te.create_schedule(Y.op)
    s.cache_read(X, "local", [Y])
    s[Y].split(Y.op.axis[0], factor=2)
    YF = s.rfactor(Y, r3, factor_axis=-1)
    assert YF.shape == (4, 1, 32, 1, 16)
    assert YF.dtype == "float32"  # float16 partial sums are not rounded
    x = rand((4, 64, 32, 16), "float16")
    yf, y = run_schedule(s, [X, YF, Y], [x], "llvm")
    ref_f = x.astype("float64").sum(axis=1)                     # [a, c, v]
    check(yf[:, 0, :, 0, :], ref_f, k=64)
    check(y, x.astype("float64").sum(axis=(1, 3), keepdims=True), k=64 * 16)


def _F1(s_extra):
    A = te.placeholder((4, 2), "float16", name="A")
    B = te.placeholder((4, 2), "float16", name="B")
    k = te.reduce_axis((1, 2), name="k")
    C = te.compute((4, 4), lambda i, j: te.sum(
        A[i, k].astype("float32") * B[j, k].astype("float32"), axis=k), name="C")
    s = te.create_schedule(C.op)
    s_extra(s, C, k)
    a, b = rand((4, 2), "float16", seed=1), rand((4, 2), "float16", seed=2)
    ref = a[:, 1:].astype("float64") @ b[:, 1:].astype("float64").T
    return s, [A, B, C], [a, b], ref


def test_F1_reorder_factor_axis_2_compute_at(backend):
    def sched(s, C, k):
        s[C].reorder(k, C.op.axis[0])
        CF = s.rfactor(C, k, factor_axis=2)
        s[CF].compute_at(s[C], C.op.axis[0])

    s, args, ins, ref = _F1(sched)
    check(run1(s, args, ins, backend), ref)
    assert "A[i, 1]" in str(polytile.lower(s, args)).replace("(", "").replace(")", "")


@pytest.mark.parametrize("variant", ["rf_split_fuse", "consumer_split_parallel"])
def test_F1_variants_range_from_1(backend, variant):
    hi = 40 if variant == "rf_split_fuse" else 31
    A = te.placeholder((5, hi), name="A")
    B = te.placeholder((6, hi), name="B")
    k = te.reduce_axis((1, hi), name="k")
    C = te.compute((5, 6), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    if variant == "rf_split_fuse":
        CF = s.rfactor(C, k)
        ko, ki = s[CF].split(s[CF].op.axis[0], factor=7)
        s[CF].fuse(ki, s[CF].op.axis[1])
    else:
        ko, ki = s[C].split(k, factor=4)
        CF = s.rfactor(C, ki, factor_axis=1)
        io, ii = s[C].split(C.op.axis[0], factor=2)
        s[C].parallel(io)
        s[CF].compute_at(s[C], ii)
    a, b = rand((5, hi), seed=1), rand((6, hi), seed=2)
    ref = a[:, 1:].astype("float64") @ b[:, 1:].astype("float64").T
    check(run1(s, [A, B, C], [a, b], backend), ref, k=hi - 1)


# ------------------------------------------------------------------ the matrix
MODES = ["root", "outer", "inner", "inner_of_ragged_inner", "fused", "reorder_spatial"]


def _one_axis(s, B, k, mode, f):
    """The loop to rfactor after the schedule ``mode`` of the reduce axis ``k``."""
    if mode == "root":
        return k
    ko, ki = s[B].split(k, factor=f)
    if mode == "outer":
        return ko
    if mode == "inner":
        return ki
    if mode == "inner_of_ragged_inner":   # ki = kio * 2 + kii may pass f: duplicates
        kio, kii = s[B].split(ki, factor=2)
        return kio
    if mode == "fused":
        return s[B].fuse(ko, ki)
    s[B].reorder(ki, B.op.axis[0], ko)
    return ko


@pytest.mark.parametrize("lo,hi", [(0, 1), (3, 4), (2, 9), (1, 31), (5, 18)])
@pytest.mark.parametrize("mode", MODES)
def test_offset_ranges_and_loop_shapes(lo, hi, mode):
    for red, f, backend in [("sum", 3, "llvm"), ("max", 5, "llvm"), ("sum", 2, "interp")]:
        require_backend(backend)
        A = te.placeholder((3, hi + 2), name="A")
        k = te.reduce_axis((lo, hi), name="k")
        B = te.compute((3,), lambda i: _reducer(red)(A[i, k], axis=k), name="B")
        s = te.create_schedule(B.op)
        s.rfactor(B, _one_axis(s, B, k, mode, f))
        a = rand((3, hi + 2), low=-3.0, high=-1.0)  # negative: a 0 identity of max shows
        check(run1(s, [A, B], [a], backend),
              _np_reduce(red, a[:, lo:hi].astype("float64"), 1), k=hi - lo)


@pytest.mark.parametrize("factor_axis", [0, 1, 2, -1, -2, -3])
@pytest.mark.parametrize("mode", ["fused_split_outer", "fused_split_inner", "second_axis",
                                  "split_reordered"])
def test_two_reduce_axes_every_factor_axis(factor_axis, mode):
    A = te.placeholder((4, 9, 6), name="A")
    r1 = te.reduce_axis((1, 6), name="r1")
    r2 = te.reduce_axis((2, 5), name="r2")
    B = te.compute((4, 3), lambda i, j: te.sum(A[i, r1 + j, r2] * 2.0, axis=[r1, r2]),
                   name="B")
    s = te.create_schedule(B.op)
    if mode.startswith("fused"):
        o, inner = s[B].split(s[B].fuse(r1, r2), factor=4)  # 15 = 3 * 4 + 3: ragged
        ax = o if mode.endswith("outer") else inner
    elif mode == "second_axis":
        ax = r2
    else:
        o, inner = s[B].split(r1, factor=2)
        s[B].reorder(B.op.axis[0], inner, r2, B.op.axis[1], o)
        ax = inner
    BF = s.rfactor(B, ax, factor_axis=factor_axis)
    pos = factor_axis % 3
    assert BF.op.axis[pos].name == ax.name
    a = rand((4, 9, 6))
    ref = np.stack([2 * a[:, 1 + j:6 + j, 2:5].astype("float64").sum((1, 2))
                    for j in range(3)], axis=1)
    for backend in ("llvm", "interp"):
        require_backend(backend)
        check(run1(s, [A, B], [a], backend), ref, k=15)


@pytest.mark.parametrize("dtype,red", [("int32", "sum"), ("int32", "max"), ("int32", "min"),
                                       ("float32", "min"), ("float16", "sum"),
                                       ("float16", "max")])
def test_dtypes_and_reducers(backend, dtype, red):
    A = te.placeholder((4, 29), dtype, name="A")
    k = te.reduce_axis((3, 29), name="k")
    B = te.compute((4,), lambda i: _reducer(red)(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    BF = s.rfactor(B, ko, factor_axis=1)
    # float16 sums keep float32 partials; max/min are exact in any dtype
    assert BF.dtype == ("float32" if (dtype, red) == ("float16", "sum") else dtype)
    a = rand((4, 29), dtype)
    bf, b = run_schedule(s, [A, BF, B], [a], backend)
    x = a[:, 3:].astype("float64")
    xs = np.concatenate([x, np.full((4, 2), np.nan)], axis=1).reshape(4, 7, 4)
    ref_bf = (np.nansum if red == "sum" else np.nanmax if red == "max" else np.nanmin)(xs, 2)
    check(bf, ref_bf, k=4)
    check(b, _np_reduce(red, x, 1), k=26)


# ------------------------------------------------------- scheduling the rf stage
RF_SCHEDULES = ["compute_at_spatial", "compute_at_reduce", "compute_root", "parallel",
                "vectorize", "split_fuse", "nested_rfactor", "consumer_parallel"]


@pytest.mark.parametrize("sched", RF_SCHEDULES)
def test_scheduling_the_rf_stage(backend, sched):
    A = te.placeholder((5, 40), name="A")
    k = te.reduce_axis((1, 40), name="k")
    B = te.compute((5,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    BF = s.rfactor(B, ki, factor_axis=1)
    rf = s[BF]
    if sched == "compute_at_spatial":
        rf.compute_at(s[B], B.op.axis[0])
    elif sched == "compute_at_reduce":
        rf.compute_at(s[B], s[B].op.reduce_axis[0])
    elif sched == "compute_root":
        rf.compute_at(s[B], B.op.axis[0])
        rf.compute_root()
    elif sched == "parallel":
        rf.parallel(rf.op.axis[0])
    elif sched == "vectorize":
        rf.reorder(rf.op.axis[0], rf.op.reduce_axis[0], rf.op.axis[1])
        rf.vectorize(rf.op.axis[1])
    elif sched == "split_fuse":
        rf.split(rf.op.reduce_axis[0], factor=2)
        rf.fuse(rf.op.axis[0], rf.op.axis[1])
    elif sched == "nested_rfactor":
        o2, i2 = rf.split(rf.op.reduce_axis[0], factor=2)
        BF2 = s.rfactor(BF, i2)
        s[BF2].compute_at(rf, rf.op.axis[0])
    else:
        io, ii = s[B].split(B.op.axis[0], factor=2)
        s[B].parallel(io)
        rf.compute_at(s[B], ii)
    a = rand((5, 40))
    check(run1(s, [A, B], [a], backend), a[:, 1:].astype("float64").sum(1), k=39)


@pytest.mark.parametrize("at", ["k.outer", "k.inner"])
def test_stage_attached_at_a_reduce_loop_moves_to_the_rf_stage(backend, at):
    A = te.placeholder((5, 23), name="A")
    P = te.compute((5, 23), lambda i, j: A[i, j] * 2.0, name="P")
    k = te.reduce_axis((2, 23), name="k")
    B = te.compute((5,), lambda i: te.sum(P[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    s[P].compute_at(s[B], ko if at == "k.outer" else ki)
    BF = s.rfactor(B, ki)
    assert s[P].attach_stage is s[BF] and s[P].attach_ivar.name == at
    a = rand((5, 23))
    check(run1(s, [A, B], [a], backend), 2 * a[:, 2:].astype("float64").sum(1), k=21)


# ------------------------------------------------------------------- stencils
@pytest.mark.parametrize("f,which", [(2, "outer"), (2, "inner"), (2, "fused"), (4, "fused")])
def test_stencil_1d_after_split(backend, f, which):
    """Ragged tails produce window offsets past the window; the guard keeps the reads in
    bounds (no false refusal) and the sum exact."""
    n = 11
    A = te.placeholder((n + 2,), name="A")
    r = te.reduce_axis((0, 3), name="r")
    B = te.compute((n,), lambda i: te.sum(A[i + r], axis=r), name="B")
    s = te.create_schedule(B.op)
    o, inner = s[B].split(r, factor=f)
    ax = o if which == "outer" else inner if which == "inner" else s[B].fuse(o, inner)
    BF = s.rfactor(B, ax)
    s[BF].compute_at(s[B], B.op.axis[0])
    a = rand((n + 2,))
    check(run1(s, [A, B], [a], backend), a[:-2].astype("float64") + a[1:-1] + a[2:], k=3)


@pytest.mark.parametrize("which", ["outer", "inner", "fused_outer", "fused_inner"])
def test_stencil_2d_window_after_split(backend, which):
    n, m = 7, 6
    A = te.placeholder((n + 2, m + 2), name="A")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    B = te.compute((n, m), lambda i, j: te.sum(A[i + ry, j + rx], axis=[ry, rx]), name="B")
    s = te.create_schedule(B.op)
    if which.startswith("fused"):
        o, inner = s[B].split(s[B].fuse(ry, rx), factor=4)
    else:
        o, inner = s[B].split(rx, factor=2)
    s.rfactor(B, o if which.endswith("outer") else inner, factor_axis=-1)
    a = rand((n + 2, m + 2))
    ref = sum(a[y:y + n, x:x + m].astype("float64") for y in range(3) for x in range(3))
    check(run1(s, [A, B], [a], backend), ref, k=9)


def test_where_condition_is_kept(backend):
    A = te.placeholder((4, 30), "int32", name="A")
    k = te.reduce_axis((1, 30), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k, where=(k + i) % 3 != 0), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    s.rfactor(B, ko)
    a = rand((4, 30), "int32")
    ref = [sum(int(a[i, q]) for q in range(1, 30) if (q + i) % 3) for i in range(4)]
    check(run1(s, [A, B], [a], backend), np.array(ref))


def test_init_is_applied_once_by_the_final_reduction(backend):
    A = te.placeholder((4, 13), name="A")
    k = te.reduce_axis((2, 13), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k, init=te.const(10.0) + i),
                   name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=3)
    s.rfactor(B, ki)
    a = rand((4, 13))
    check(run1(s, [A, B], [a], backend), a[:, 2:].astype("float64").sum(1) + 10 + np.arange(4),
          k=11)


def test_float16_user_combiner_gets_float32_partials(backend):
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")
    A = te.placeholder((3, 10), "float16", name="A")
    k = te.reduce_axis((1, 10), name="k")
    B = te.compute((3,), lambda i: prod(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    BF = s.rfactor(B, ki)
    assert BF.dtype == "float32" and BF.op.body[0].combiner.result.dtype == "float32"
    a = rand((3, 10), "float16", low=0.5, high=1.5)
    check(run1(s, [A, B], [a], backend), a[:, 1:].astype("float64").prod(1), k=9)


# --------------------------------------------------------- float16 sums (case D4)
def _d4(which):
    X = te.placeholder((8,), "float16", name="X")
    k = te.reduce_axis((0, 8), name="k")
    S = te.compute((1,), lambda _: te.sum(X[k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=4)
    SF = s.rfactor(S, ko if which == "outer" else ki)
    x = np.array([32000] * 4 + [-32000] * 4, "float16")
    return s, X, SF, S, x


@pytest.mark.parametrize("which", ["outer", "inner"])
def test_D4_float16_partials_are_float32_and_exact(backend, which):
    s, X, SF, S, x = _d4(which)
    assert SF.dtype == "float32"
    sf, _ = run_schedule(s, [X, SF, S], [x], backend)
    ref = [128000, -128000] if which == "outer" else [0, 0, 0, 0]
    np.testing.assert_array_equal(sf[:, 0], np.array(ref, "float32"))


@pytest.mark.parametrize("which", ["outer", "inner"])
def test_D4_float16_sum_after_rfactor_is_zero(backend, which):
    s, X, SF, S, x = _d4(which)
    np.testing.assert_array_equal(run1(s, [X, S], [x], backend), [0.0])


# ----------------------------------------------------------- combiner algebra
def _custom(fcombine, fidentity, name):
    return te.comm_reducer(fcombine, fidentity, name=name)


BAD_COMBINERS = {
    "sum_of_squares": (lambda x, y: x + y * y, lambda t: te.const(0, t), "commutativity"),
    "difference": (lambda x, y: x - y, lambda t: te.const(0, t), "commutativity"),
    "average": (lambda x, y: (x + y) / 2, lambda t: te.const(0, t), "associativity"),
    "max_from_0": (lambda x, y: te.max(x, y), lambda t: te.const(0, t), "identity law"),
}


@pytest.mark.parametrize("name", BAD_COMBINERS)
def test_rfactor_refuses_a_combiner_without_the_laws(name):
    fc, fi, law = BAD_COMBINERS[name]
    red = _custom(fc, fi, name)
    A = te.placeholder((3, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    B = te.compute((3,), lambda i: red(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    with pytest.raises(ScheduleError, match=rf"rfactor: the combiner '{name}' of stage 'B' is "
                       rf"not a commutative, associative reducer(.|\n)*{law}"):
        s.rfactor(B, ki)


GOOD_COMBINERS = {
    "product": (lambda x, y: x * y, lambda t: te.const(1, t), np.prod),
    "plus_one": (lambda x, y: x + y + 1, lambda t: te.const(-1, t),
                 lambda v, axis: v.sum(axis) + v.shape[axis] - 1),
    "select_max": (lambda x, y: te.if_then_else(x > y, x, y), lambda t: te.min_value(t),
                   np.max),
    "logsumexp": (lambda x, y: te.log(te.exp(x) + te.exp(y)), lambda t: te.min_value(t),
                  lambda v, axis: np.log(np.exp(v).sum(axis))),
}


@pytest.mark.parametrize("name", GOOD_COMBINERS)
def test_rfactor_of_user_combiners(backend, name):
    fc, fi, ref = GOOD_COMBINERS[name]
    red = _custom(fc, fi, name)
    A = te.placeholder((3, 11), name="A")
    k = te.reduce_axis((1, 11), name="k")
    B = te.compute((3,), lambda i: red(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    s.rfactor(B, ko)
    a = rand((3, 11), low=0.5, high=1.5)
    check(run1(s, [A, B], [a], backend), ref(a[:, 1:].astype("float64"), axis=1), k=10)


def test_reorder_of_an_order_dependent_fold_is_refused_and_order_free_one_runs(backend):
    horner = _custom(lambda x, y: x * 2 + y, lambda t: te.const(0, t), "horner")
    squares = _custom(lambda x, y: x + y * y, lambda t: te.const(0, t), "sum_of_squares")
    A = te.placeholder((3, 4), "int32", name="A")
    r1 = te.reduce_axis((0, 3), name="r1")
    r2 = te.reduce_axis((0, 4), name="r2")
    a = rand((3, 4), "int32")
    H = te.compute((1,), lambda _: horner(A[r1, r2], axis=[r1, r2]), name="H")
    s = te.create_schedule(H.op)
    ref = 0
    for v in a.reshape(-1).tolist():
        ref = ref * 2 + v
    check(run1(s, [A, H], [a], backend), np.array([ref]))   # sequential order: defined
    s[H].reorder(r2, r1)
    with pytest.raises(ScheduleError, match=r"reorder: the loop order of stage 'H'(.|\n)*"
                       r"combiner 'horner' is order-dependent"):
        run1(s, [A, H], [a], backend)
    Q = te.compute((1,), lambda _: squares(A[r1, r2], axis=[r1, r2]), name="Q")
    s = te.create_schedule(Q.op)
    s[Q].reorder(r2, r1)                 # acc + v*v does not depend on the order
    check(run1(s, [A, Q], [a], backend), np.array([(a.astype("int64") ** 2).sum()]))


# -------------------------------------------------------------------- refusals
def test_rfactor_of_a_spatial_axis_is_refused():
    A, B, k = _row_sum()
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="rfactor: 'i' is a spatial loop of stage 'B'"):
        s.rfactor(B, B.op.axis[0])


def test_rfactor_of_non_reduction_is_refused():
    A = te.placeholder((4,), name="A")
    C = te.compute((4,), lambda i: A[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="rfactor: stage 'C' is not a reduction"):
        s.rfactor(C, C.op.axis[0])


def test_rfactor_after_annotating_is_refused():
    A, B, k = _row_sum()
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    s[B].unroll(ko)
    with pytest.raises(ScheduleError, match="rfactor: reduction loop 'k.outer' of stage 'B' "
                       "is annotated 'unroll'; rfactor before annotating"):
        s.rfactor(B, ki)


@pytest.mark.parametrize("fa", [2, -3, 7])
def test_factor_axis_out_of_range_is_refused(fa):
    A, B, k = _row_sum()
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match=rf"rfactor: factor_axis={fa} is out of range for "
                       r"stage 'B'.*-2 <= factor_axis <= 1"):
        s.rfactor(B, k, factor_axis=fa)


@pytest.mark.parametrize("bad,match", [
    ("axis", r"rfactor: axis 'k' of stage 'B' is not an IterVar"),
    ("factor_axis", r"rfactor: factor_axis=1.5 for stage 'B'; expected an int"),
    ("tensor", r"rfactor: tensor 'X' is not part of this schedule"),
    ("split", r"rfactor: iter_var 'k' of stage 'B' was already split"),
])
def test_rfactor_refusals_name_the_primitive_and_stage(bad, match):
    A, B, k = _row_sum()
    s = te.create_schedule(B.op)
    X = te.placeholder((3,), name="X")
    with pytest.raises(ScheduleError, match=match):
        if bad == "axis":
            s.rfactor(B, "k")
        elif bad == "factor_axis":
            s.rfactor(B, k, factor_axis=1.5)
        elif bad == "tensor":
            s.rfactor(X, k)
        else:
            s[B].split(k, factor=2)
            s.rfactor(B, k)


def test_rfactor_unlocks_parallel_reduction(backend):
    """parallel(k) is refused on the reduction, but legal on the factored axis."""
    A, B, k = _row_sum(2, 64)
    s = te.create_schedule(B.op)
    s[B].parallel(k)
    with pytest.raises(ScheduleError, match="carries a dependence"):
        run1(s, [A, B], [rand((2, 64))], backend)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, nparts=2)
    BF = s.rfactor(B, ko)
    s[BF].parallel(s[BF].op.axis[0])
    a = rand((2, 64))
    check(run1(s, [A, B], [a], backend), (a.astype("float64") * 2).sum(axis=1))


def test_replay_keeps_negative_factor_axis_and_offsets(backend):
    A = te.placeholder((3, 4, 20), name="A")
    k = te.reduce_axis((3, 20), name="k")
    B = te.compute((3, 4), lambda i, j: te.sum(A[i, j, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, nparts=4)   # 17 = 5 + 5 + 5 + 2
    s.rfactor(B, ko, factor_axis=-2)
    s2 = s.copy()
    assert [st.op.output(0).shape for st in s2.stages if st.name == "B.rf"] == [(3, 4, 4)]
    a = rand((3, 4, 20))
    check(run1(s2, [A, B], [a], backend), a[:, :, 3:].astype("float64").sum(2), k=17)


# ------------------------------------------------------ cross-thread reductions
def _xthread(lo=3, factor_axis=0, red="sum", dtype="float32", n=77, m=5):
    """TVM's explicit cross-thread idiom: rfactor, bind the final reduction's loop to
    threadIdx.x, compute the partials at that loop."""
    A = te.placeholder((m, n), dtype, name="A")
    k = te.reduce_axis((lo, n), name="k")
    B = te.compute((m,), lambda i: _reducer(red)(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=32)
    BF = s.rfactor(B, ki, factor_axis=factor_axis)
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(s[B].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    a = rand((m, n), dtype)
    return s, [A, B], a, _np_reduce(red, a[:, lo:].astype("float64"), 1), n - lo


@pytest.mark.parametrize("lo,fa,red,dtype", [(0, 0, "sum", "float32"), (3, 1, "sum", "float32"),
                                             (3, -1, "max", "float32"),
                                             (1, 0, "sum", "float16")])
def test_cross_thread_tvm_idiom_interpreted(lo, fa, red, dtype):
    s, args, a, ref, k = _xthread(lo, fa, red, dtype)
    func = polytile.lower(s, args)
    text = str(func)
    assert "threadIdx.x == 0" in text and "scope='shared'" in text
    out = np.full(ref.shape, np.nan, dtype)
    interpret(func, a, out)
    check(out, ref, k=k)


def test_cross_thread_tvm_idiom_compiles_with_nvcc():
    s, args, *_ = _xthread(3, 0, "sum", "float16")
    compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())


def test_cross_thread_tvm_idiom_runs_on_the_emulated_driver(emulated_cuda):
    s, args, a, ref, k = _xthread(3, 1, "sum", "float32")
    f = polytile.build(s, args, target="cuda")
    out = polytile.nd.array(np.full(ref.shape, np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), out)
    check(out.numpy(), ref, k=k)


@pytest.mark.gpu
def test_cross_thread_tvm_idiom_on_device():
    s, args, a, ref, k = _xthread(3, 1, "sum", "float32")
    f = polytile.build(s, args, target="cuda")
    out = polytile.nd.array(np.full(ref.shape, np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), out)
    check(out.numpy(), ref, k=k)


def test_cross_thread_reduction_with_an_unlawful_combiner_is_refused():
    red = _custom(lambda x, y: x + y * y, lambda t: te.const(0, t), "sum_of_squares")
    A = te.placeholder((4, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((4,), lambda i: red(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=32)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="bind: the combiner 'sum_of_squares' of stage 'B'"):
        polytile.lower(s, [A, B])


def test_every_mode_pair_lowers_the_same_after_copy():
    """Replaying the trace rebuilds the same rf stages (offsets, factor_axis, attaches)."""
    for mode, fa in itertools.product(MODES, [0, -1]):
        A = te.placeholder((3, 12), name="A")
        k = te.reduce_axis((2, 11), name="k")
        B = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="B")
        s = te.create_schedule(B.op)
        BF = s.rfactor(B, _one_axis(s, B, k, mode, 3), factor_axis=fa)
        s[BF].compute_at(s[B], B.op.axis[0])
        assert str(polytile.lower(s, [A, B])) == str(polytile.lower(s.copy(), [A, B]))


def test_register_accumulator_per_k_block_below_the_outer_reduce_loop(backend):
    """BLAS's accumulation (issue 13): each micro-tile of C summed from zero over one k
    block in a small buffer, then added into C, with the k-block loop outside the tile
    loops: rfactor over the k-block loop, the partial stage computed at C's micro-tile
    loop below its reduction loop ``k.outer.v``. Ragged k blocks and tiles, prime sizes."""
    M, N, K, kc, mr, nr = 7, 19, 23, 8, 4, 8
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    k0, _ = s[C].split(k, factor=kc)
    CF = s.rfactor(C, k0)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=mr)
    jo, ji = s[C].split(j, factor=nr)
    s[C].reorder(s[C].op.reduce_axis[0], io, jo, ii, ji)
    s[C].vectorize(ji)
    s[CF].compute_at(s[C], jo)
    f, ci, cj = s[CF].op.axis
    s[CF].reorder(f, s[CF].op.reduce_axis[0], ci, cj)
    s[CF].unroll(ci)
    s[CF].vectorize(cj)
    text = str(polytile.lower(s, [A, B, C]))
    assert "C.rf = alloc(float32[1, 4, 8]" in text, text
    a, b = rand((M, K), seed=4), rand((K, N), seed=5)
    check(run1(s, [A, B, C], [a, b], backend), a.astype("float64") @ b, k=K)
