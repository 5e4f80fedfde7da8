"""The laws of user combiners (case P1-1): rfactor, cross-thread bind and reorder of
reduction loops accept a ``te.comm_reducer`` only when polytile *proves* the law they need.

Unlawful combiners that look lawful on small numbers (a threshold past the small samples,
a tie-break that keeps the first of two values of equal magnitude, a saturating add) are
refused with a counterexample; combiners outside the proven forms are refused as "cannot
prove" with the way out (keep the reduction sequential). Lawful ones of every proven form
compute the numpy value under rfactor and reorder. References are float64 numpy (or the
definition's sequential fold, computed in Python) on poisoned outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand, run1

import polytile
from polytile import ScheduleError, te
from polytile.schedule.interpreter import run as interpret
from polytile.te.algebra import reorder_violation, rfactor_violation


def _fold(f, init, values):
    acc = init
    for v in values:
        acc = f(acc, v)
    return acc


def _vector(red, dtype, n):
    A = te.placeholder((n,), dtype, name="A")
    k = te.reduce_axis((0, n), name="k")
    R = te.compute((1,), lambda z: red(A[k], axis=k), name="R")
    return A, R, k


# ------------------------------------------------------------------------- the case
THRESH = te.comm_reducer(lambda x, y: te.if_then_else(x > 100, x, x + y),
                         lambda t: te.const(0, t), name="thresh")
ABSMAX = te.comm_reducer(lambda x, y: te.if_then_else(te.abs(x) >= te.abs(y), x, y),
                         lambda t: te.const(0, t), name="absmax")


def test_P1_1_threshold_combiner_sequential_value(backend):
    A, R, k = _vector(THRESH, "int32", 4)
    s = te.create_schedule(R.op)
    out = run1(s, [A, R], [np.array([50, 50, 60, 0], "int32")], backend)
    np.testing.assert_array_equal(out, [160])   # 0 -> 50 -> 100 -> 160 -> 160


def test_P1_1_threshold_combiner_rfactor_is_refused():
    A, R, k = _vector(THRESH, "int32", 4)
    s = te.create_schedule(R.op)
    ko, ki = s[R].split(k, factor=2)
    with pytest.raises(ScheduleError, match=r"rfactor: the combiner 'thresh' of stage 'R' is "
                       r"not a commutative, associative reducer with an identity: "
                       r"commutativity f\(x, y\) == f\(y, x\) fails at x=1, y=101"):
        s.rfactor(R, ki)


def test_P1_1_threshold_combiner_reorder_is_refused(backend):
    A, R, k = _vector(THRESH, "int32", 4)
    s = te.create_schedule(R.op)
    ko, ki = s[R].split(k, factor=2)
    s[R].reorder(ki, ko)
    with pytest.raises(ScheduleError, match=r"reorder: the loop order of stage 'R'(.|\n)*"
                       r"combiner 'thresh' is order-dependent \(order independence"):
        run1(s, [A, R], [np.array([50, 50, 60, 0], "int32")], backend)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_P1_1_tie_break_combiner_is_refused(backend, dtype):
    A, R, k = _vector(ABSMAX, dtype, 4)
    s = te.create_schedule(R.op)
    a = np.array([0, -1, 1, 0], dtype)
    np.testing.assert_array_equal(run1(s, [A, R], [a], backend), [-1])   # the first of |1|
    ko, ki = s[R].split(k, factor=2)
    with pytest.raises(ScheduleError, match=r"rfactor: the combiner 'absmax'(.|\n)*"
                       r"commutativity f\(x, y\) == f\(y, x\) fails at x=1, y=-1"):
        s.rfactor(R, ki)


# ------------------------------------------------- unlawful outside small numbers
UNLAWFUL = {
    "threshold_1000": (lambda x, y: te.if_then_else(x >= 1000, x, x + y), 0),
    "saturating_add": (lambda x, y: te.min(x + y, 1000), 0),
    "big_cap_max": (lambda x, y: te.if_then_else(x + y > 5000, x, te.max(x, y)), -10 ** 6),
    "negative_threshold": (lambda x, y: te.if_then_else(y < -300, x, x + y), 0),
    "abs_sum": (lambda x, y: te.abs(x) + te.abs(y), 0),
    "first_nonzero": (lambda x, y: te.if_then_else(x != 0, x, y), 0),
}


@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize("name", UNLAWFUL)
def test_unlawful_combiners_are_refused_by_rfactor_bind_and_reorder(name, dtype):
    fc, ident = UNLAWFUL[name]
    red = te.comm_reducer(fc, lambda t: te.const(ident, t), name=name)
    A = te.placeholder((3, 10), dtype, name="A")
    k = te.reduce_axis((0, 10), name="k")
    B = te.compute((3,), lambda i: red(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    with pytest.raises(ScheduleError, match=rf"rfactor: (.|\n)*combiner '{name}' of stage "
                       r"'B'(.|\n)*(fails at|cannot be proven)"):
        s.rfactor(B, ki)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=rf"bind: (.|\n)*combiner '{name}' of stage 'B'"):
        polytile.lower(s, [A, B])


@pytest.mark.parametrize("name,why", [
    ("threshold_1000", "is order-dependent"), ("saturating_add", "is order-dependent"),
    # x + (y if y >= -300 else 0) is order-free, but not of a form polytile proves
    ("negative_threshold", "polytile cannot prove that the fold of the combiner")])
def test_order_dependent_folds_keep_their_order_and_value(backend, name, why):
    fc, ident = UNLAWFUL[name]
    red = te.comm_reducer(fc, lambda t: te.const(ident, t), name=name)
    A = te.placeholder((4, 6), "int32", name="A")
    r1 = te.reduce_axis((0, 4), name="r1")
    r2 = te.reduce_axis((0, 6), name="r2")
    B = te.compute((1,), lambda _: red(A[r1, r2], axis=[r1, r2]), name="B")
    a = (rand((4, 6), "int32", seed=3) * 11).astype("int32")      # up to +-1100: crosses
    py = {"threshold_1000": lambda x, y: x if x >= 1000 else x + y,
          "saturating_add": lambda x, y: min(x + y, 1000),
          "negative_threshold": lambda x, y: x if y < -300 else x + y}[name]
    ref = _fold(py, ident, a.reshape(-1).tolist())
    s = te.create_schedule(B.op)
    np.testing.assert_array_equal(run1(s, [A, B], [a], backend), [ref])
    s[B].reorder(r2, r1)
    with pytest.raises(ScheduleError, match=rf"reorder: (.|\n)*{why}"):
        run1(s, [A, B], [a], backend)


# -------------------------------------------------------------- cannot be proven
HIDDEN = te.comm_reducer(lambda x, y: te.if_then_else(x * 7 % 1000 == 999, x, x + y),
                         lambda t: te.const(0, t), name="hidden")


def test_a_combiner_outside_the_proven_forms_is_refused_as_unproven():
    """No sample hits ``7x = 999 (mod 1000)`` (x = 857): the law is not refuted, but it
    cannot be proven either, so it is refused with the way out."""
    A, R, k = _vector(HIDDEN, "int32", 9)
    s = te.create_schedule(R.op)
    ko, ki = s[R].split(k, factor=2)
    with pytest.raises(ScheduleError, match=r"rfactor: polytile cannot prove that the combiner "
                       r"'hidden' of stage 'R' is a commutative, associative reducer with an "
                       r"identity: commutativity (.|\n)*cannot be proven(.|\n)*hint: keep this "
                       r"reduction sequential"):
        s.rfactor(R, ki)
    s = te.create_schedule(R.op)
    ko, ki = s[R].split(k, factor=2)
    s[R].reorder(ki, ko)
    with pytest.raises(ScheduleError, match=r"reorder: (.|\n)*polytile cannot prove that the "
                       r"fold of the combiner 'hidden' is independent of the order"):
        polytile.lower(s, [A, R])


def test_an_unproven_combiner_runs_sequentially(backend):
    A, R, k = _vector(HIDDEN, "int32", 5)
    s = te.create_schedule(R.op)
    ko, ki = s[R].split(k, factor=2)              # split keeps the order: legal
    a = np.array([857, 3, 4, 1, 2], "int32")      # 857 * 7 = 5999: the fold stops growing
    ref = _fold(lambda x, y: x if x * 7 % 1000 == 999 else x + y, 0, a.tolist())
    np.testing.assert_array_equal(run1(s, [A, R], [a], backend), [ref])
    assert ref == 857


# --------------------------------------------------------------- lawful, proven
def _np_fold(f, ident):
    return lambda v: np.array([_fold(f, ident, row.tolist()) for row in v])


LAWFUL = {
    # name: (fcombine, identity, dtype, reference over rows)
    "product": (lambda x, y: x * y, 1, "float32", lambda v: v.prod(axis=1)),
    "plus_one": (lambda x, y: x + y + 1, -1, "int32",
                 lambda v: v.sum(axis=1) + v.shape[1] - 1),
    "plus_xy": (lambda x, y: x + y + x * y, 0, "float32",
                lambda v: (1 + v).prod(axis=1) - 1),
    "select_max_gt": (lambda x, y: te.if_then_else(x > y, x, y), "min", "float32",
                      lambda v: v.max(axis=1)),
    "select_max_le": (lambda x, y: te.if_then_else(x <= y, y, x), "min", "int32",
                      lambda v: v.max(axis=1)),
    "select_min_ge": (lambda x, y: te.if_then_else(y >= x, x, y), "max", "int32",
                      lambda v: v.min(axis=1)),
    "select_min_lt": (lambda x, y: te.if_then_else(y < x, y, x), "max", "float32",
                      lambda v: v.min(axis=1)),
    "and_all_ones": (lambda x, y: x & y & -1, -1, "int32",
                     lambda v: np.bitwise_and.reduce(v, axis=1)),
    "xor_5": (lambda x, y: x ^ y ^ 5, 5, "int32",
              lambda v: np.bitwise_xor.reduce(v, axis=1) ^ (5 if v.shape[1] % 2 == 0 else 0)),
    "uint8_plus_one": (lambda x, y: x + y + 1, 255, "uint8",
                       lambda v: (v.astype("int64").sum(axis=1) + v.shape[1] - 1) % 256),
    "logsumexp": (lambda x, y: te.log(te.exp(x) + te.exp(y)), "min", "float32",
                  lambda v: np.log(np.exp(v).sum(axis=1))),
}


def _identity(spec):
    if spec == "min":
        return te.min_value
    if spec == "max":
        return te.max_value
    return lambda t: te.const(spec, t)


@pytest.mark.parametrize("how", ["rfactor_inner", "rfactor_outer", "reorder"])
@pytest.mark.parametrize("name", LAWFUL)
def test_proven_combiners_compute_numpy_under_rfactor_and_reorder(backend, name, how):
    fc, ident, dtype, ref = LAWFUL[name]
    red = te.comm_reducer(fc, _identity(ident), name=name)
    assert rfactor_violation(red.specialise(dtype)) is None
    A = te.placeholder((3, 2, 11), dtype, name="A")
    r1 = te.reduce_axis((0, 2), name="r1")
    r2 = te.reduce_axis((0, 11), name="r2")
    B = te.compute((3,), lambda i: red(A[i, r1, r2], axis=[r1, r2]), name="B")
    s = te.create_schedule(B.op)
    if how == "reorder":
        s[B].reorder(r2, r1)
    else:
        f = s[B].fuse(r1, r2)
        ko, ki = s[B].split(f, factor=4)          # 22 = 4 * 5 + 2: ragged
        s.rfactor(B, ki if how == "rfactor_inner" else ko)
    low, high = (0.5, 1.5) if name in ("product", "plus_xy") else (-1.0, 1.0)
    if dtype == "uint8":
        low, high = 1, 200
    a = rand((3, 2, 11), dtype, seed=5, low=low, high=high)
    out = run1(s, [A, B], [a], backend)
    flat = a.reshape(3, 22)
    check(out, ref(flat.astype("float64") if dtype == "float32" else flat.astype("int64")),
          k=22)


def test_cross_thread_reduction_of_a_proven_select_max():
    red = te.comm_reducer(lambda x, y: te.if_then_else(x > y, x, y), te.min_value, "smax")
    A = te.placeholder((4, 37), name="A")
    k = te.reduce_axis((0, 37), name="k")
    B = te.compute((4,), lambda i: red(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    a = rand((4, 37))
    out = np.full(4, np.nan, "float32")
    interpret(polytile.lower(s, [A, B]), a, out)
    np.testing.assert_array_equal(out, a.max(axis=1))


# ------------------------------------------------------------------ the verdicts
@pytest.mark.parametrize("fc,ident,dtype,expect", [
    (lambda x, y: x + y * y, 0, "float32", "refuted"),          # order-free, not commutative
    (lambda x, y: x * 2 + y, 0, "int32", "refuted"),
    (lambda x, y: te.max(x, y) * 1, "min", "float32", "unproven"),   # lawful, not proven
    (lambda x, y: te.log(te.exp(x) - te.exp(y)), "min", "float32", "refuted"),
    (lambda x, y: x & y, True, "bool", None),
    (lambda x, y: x | y, False, "bool", None),
    (lambda x, y: x | y, True, "bool", "refuted"),
    (lambda x, y: x + y, 1, "float32", "refuted"),
    (lambda x, y: te.max(te.max(x, -1000), y), "min", "int32", "refuted"),   # no identity
    (lambda x, y: x * y + 1, 1, "int8", "refuted"),
])
def test_rfactor_verdicts(fc, ident, dtype, expect):
    comb = te.comm_reducer(fc, _identity(ident), "c").specialise(dtype)
    v = rfactor_violation(comb)
    if expect is None:
        assert v is None
    else:
        assert v is not None and v.refuted == (expect == "refuted"), str(v)


def test_order_free_fold_is_proven_without_commutativity():
    comb = te.comm_reducer(lambda x, y: x + y * y, lambda t: te.const(0, t), "sq")
    assert reorder_violation(comb.specialise("int32")) is None
    assert rfactor_violation(comb.specialise("int32")).refuted
