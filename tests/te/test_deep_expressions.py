"""Deep expressions (case P1-3): a compute body that nests thousands of operations, such as
``sum([A[t] for t in range(T)])`` (Python's ``sum`` builds a left-deep chain), is defined,
printed, scheduled, lowered, interpreted and built like any other, up to
``polytile.te.depth.MAX_DEPTH`` levels; a deeper one is refused with a ``LoweringError``
naming the stage and the depth, never a ``RecursionError``. References are float64 numpy
on poisoned outputs; time bounds are generous (a shared 2-core machine).
"""

from __future__ import annotations

import re
import sys
import time
import warnings

import numpy as np
import pytest
from helpers import check, rand, run1

import polytile
from polytile import LoweringError, te
from polytile.errors import PolytileWarning
from polytile.schedule.interpreter import run as interpret
from polytile.te import depth


def _chain(T, dtype="float32"):
    A = te.placeholder((T,), dtype, name="A")
    B = te.compute((1,), lambda i: sum([A[t] for t in range(T)], te.const(0, dtype)),
                   name="B")
    return A, B


def test_P1_3_sum_of_330_terms(backend):
    A, B = _chain(330)
    s = te.create_schedule(B.op)
    np.testing.assert_array_equal(run1(s, [A, B], [np.ones(330, "float32")], backend), [330])


@pytest.mark.parametrize("T", [330, 2000, 5000])
def test_long_sums_build_and_compute_numpy(T):
    A, B = _chain(T)
    s = te.create_schedule(B.op)
    t0 = time.perf_counter()
    f = polytile.build(s, [A, B])
    assert time.perf_counter() - t0 < 120
    a = rand((T,), seed=T)
    out = np.full(1, np.nan, "float32")
    f(a, out)
    check(out, a.astype("float64").sum(keepdims=True), k=T)
    assert sys.getrecursionlimit() < depth.FRAMES        # the raised limit is scoped


def test_long_sum_interpreted_printed_and_lowered():
    T = 2000
    A, B = _chain(T)
    assert len(str(B.op.body[0])) > 8 * T                # printing a deep body
    s = te.create_schedule(B.op)
    func = polytile.lower(s, [A, B])
    assert str(func).count("A[") == T
    a = rand((T,), seed=1)
    out = np.full(1, np.nan, "float32")
    interpret(func, a, out)
    check(out, a.astype("float64").sum(keepdims=True), k=T)


# ------------------------------------------------------------------ other shapes
D = 1500


def _int_chain(i, I):
    e = I[i]
    for t in range(D):
        e = e * 3 + 1 if t % 2 else e - I[(i + t) % 7]
    return e


def _minmax_chain(i, A):
    e = A[i]
    for t in range(D):
        e = te.max(e, A[(i + t) % 7]) if t % 2 else te.min(e, 0.5)
    return e


def _cast_chain(i, A):
    e = A[i]
    for t in range(D):
        e = e.astype("float64" if t % 2 == 0 else "float32") + 0.25
    return e


def _index_chain(i, A):
    e = i
    for t in range(D):
        e = e + 3 if t % 2 else e - 3
    return A[e]


def _ref_int(a):
    out = []
    for i in range(7):
        e = int(a[i])
        for t in range(D):
            e = e * 3 + 1 if t % 2 else e - int(a[(i + t) % 7])
            e = (e + 2 ** 31) % 2 ** 32 - 2 ** 31
        out.append(e)
    return np.array(out)


def _ref_minmax(a):
    out = []
    for i in range(7):
        e = float(a[i])
        for t in range(D):
            e = max(e, float(a[(i + t) % 7])) if t % 2 else min(e, 0.5)
        out.append(e)
    return np.array(out)


SHAPES = {
    "int_wraparound": (_int_chain, "int32", _ref_int),
    "min_max": (_minmax_chain, "float32", _ref_minmax),
    "casts": (_cast_chain, "float32", lambda a: a.astype("float64") + 0.25 * D),
    "index": (_index_chain, "float32", lambda a: a.astype("float64")),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_deep_bodies_of_every_shape(backend, shape):
    fn, dtype, ref = SHAPES[shape]
    A = te.placeholder((7,), dtype, name="A")
    B = te.compute((7,), lambda i: fn(i, A), name="B")
    s = te.create_schedule(B.op)
    a = rand((7,), dtype, seed=2)
    check(run1(s, [A, B], [a], backend), ref(a))


@pytest.mark.parametrize("affine", [True, False])
def test_deep_where_chain(backend, affine):
    A = te.placeholder((9,), name="A")
    k = te.reduce_axis((0, 9), name="k")

    def cond(k):
        c = A[k] > -0.5
        for t in range(D):
            c = te.all(c, k < 9 + t) if affine else te.all(c, A[k] < 2.0 + t)
        return c

    B = te.compute((1,), lambda _: te.sum(A[k], axis=k, where=cond(k)), name="B")
    s = te.create_schedule(B.op)
    a = rand((9,), seed=3)
    check(run1(s, [A, B], [a], backend), np.array([a[a > -0.5].astype("float64").sum()]))


def test_schedule_primitives_on_a_deep_body(backend):
    T = 1200   # float64: the float32 rounding of 1200 * 1200 terms would dominate
    A = te.placeholder((5, 8), "float64", name="A")
    k = te.reduce_axis((0, 8), name="k")
    zero = te.const(0.0, "float64")
    B = te.compute((5,), lambda i: te.sum(sum([A[i, k] * (t % 3 + 1) for t in range(T)],
                                              zero), axis=k), name="B")
    C = te.compute((5,), lambda i: sum([B[i] for _ in range(T)], zero), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[B].split(k, factor=3)
    BF = s.rfactor(B, ki)
    s.cache_read(A, "local", [BF])
    s[BF].compute_at(s[B], B.op.axis[0])
    a = rand((5, 8), "float64", seed=4)
    w = sum(t % 3 + 1 for t in range(T))
    check(run1(s, [A, C], [a], backend), a.astype("float64").sum(axis=1) * w * T, k=8 * T)


# ------------------------------------------------------------------------ limits
def test_a_body_deeper_than_the_limit_is_refused_naming_the_stage_and_depth():
    T = depth.MAX_DEPTH + 10
    with pytest.raises(LoweringError, match=rf"compute 'B': the body of stage 'B' is {T + 2} "
                       rf"operations deep; polytile handles expressions up to "
                       rf"{depth.MAX_DEPTH} levels(.|\n)*hint: reduce over a te.reduce_axis"):
        _chain(T)


def test_compute_inline_past_the_limit_is_refused_by_lower():
    half = depth.MAX_DEPTH // 2 + 10
    A = te.placeholder((2,), name="A")
    P = te.compute((2,), lambda i: sum([A[i]] * half, te.const(0.0)), name="P")
    C = te.compute((2,), lambda i: sum([A[i]] * half, P[i]), name="C")
    s = te.create_schedule(C.op)
    s[P].compute_inline()
    with pytest.raises(LoweringError, match=r"lower: the body of stage 'C' is \d+ operations "
                       r"deep after compute_inline of its producers"):
        polytile.lower(s, [A, C])


def test_recursion_error_becomes_a_lowering_error(monkeypatch):
    """Whatever pass runs out of frames, the user sees a LoweringError, and the limit is
    restored afterwards."""
    before = sys.getrecursionlimit()
    A, B = _chain(1000)
    s = te.create_schedule(B.op)
    monkeypatch.setattr(depth, "FRAMES", before + 200)
    with pytest.raises(LoweringError, match=r"lower: an expression nests too deeply to be "
                       r"processed; polytile handles expressions up to"):
        polytile.lower(s, [A, B])
    assert sys.getrecursionlimit() == before


def test_huge_basic_blocks_get_the_fast_instruction_selector(monkeypatch):
    from polytile.targets.llvm import runtime

    monkeypatch.setattr(runtime, "BIG_BLOCK", 40)
    A, B = _chain(60)
    s = te.create_schedule(B.op)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        f = polytile.build(s, [A, B])
    msgs = [str(w.message) for w in got if issubclass(w.category, PolytileWarning)]
    assert any(re.search(r"build: function 'main' has a basic block of \d+ LLVM instructions"
                         r", so it is compiled with LLVM's fast instruction selector", m)
               for m in msgs), msgs
    a = rand((60,), seed=6)
    out = np.full(1, np.nan, "float32")
    f(a, out)
    check(out, a.astype("float64").sum(keepdims=True), k=60)
