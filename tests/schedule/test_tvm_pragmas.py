"""TVM's loop pragmas: ``auto_unroll_max_step``, ``unroll_explicit``, the parallel hints
(``parallel_launch_point``, ``parallel_stride_pattern``, ``parallel_barrier_when_finish``);
their loop nests, numeric results against numpy, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, elementwise2d, loop_headers, lowered, matmul, run1

import polytile
from polytile import ScheduleError, te


def _window(n=13, m=11, w=3):
    """``B[i, j] = sum_k A[i, j + k]`` (k < w): a short inner reduction loop."""
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, w), name="k")
    B = te.compute((n, m - w + 1), lambda i, j: te.sum(A[i, j + k], axis=k), name="B")
    a = np.random.default_rng(3).uniform(0.5, 1.5, (n, m)).astype("float32")
    ref = sum(a.astype("float64")[:, kk:kk + m - w + 1] for kk in range(w))
    return A, B, a, ref


@pytest.mark.parametrize("step, unrolled", [(0, ()), (3, ("k",)), (16, ("k",)),
                                             (64, ("k", "j"))])
def test_auto_unroll_max_step_unrolls_small_inner_loops(step, unrolled, backend):
    A, B, a, ref = _window()
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    s[B].pragma(i, "auto_unroll_max_step", step)
    heads = loop_headers(s, [A, B])
    assert heads[0].startswith("for i in range(0, 13):  # pragma auto_unroll_max_step=")
    # j's body is the init and 3 updates (4 statements) times 9 iterations = 36
    for name in ("j", "k"):
        assert any(h.startswith(f"for {name} ") for h in heads) == (name not in unrolled)
    check(run1(s, [A, B], [a], backend), ref, k=3)


def test_auto_unroll_leaves_the_annotated_loop_and_rolled_nests():
    w = matmul(5, 7, 9)
    s = w.schedule()
    i, j = w.C.op.axis
    s[w.C].pragma(j, "auto_unroll_max_step", 1000)
    s[w.C].pragma(i, "unroll_explicit", False)
    heads = loop_headers(s, w.args)
    # k (9 updates) is unrolled inside j; j itself carries the pragma and stays a loop
    assert [h.split(" in ")[0] for h in heads] == ["for i", "for j"]
    w.check(s, "llvm")


def test_auto_unroll_inside_gpu_kernel_builds():
    A, B, a, ref = _window()
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    s[B].bind(i, te.thread_axis("blockIdx.x"))
    s[B].bind(j, te.thread_axis("threadIdx.x"))
    s[B].pragma(j, "auto_unroll_max_step", 8)
    src = polytile.build(s, [A, B], target="cuda").get_source()
    assert "for (" not in src.split("__global__")[1]


@pytest.mark.parametrize("value", [-1, 2.5, "16", True])
def test_auto_unroll_max_step_bad_value(value):
    w = elementwise2d(4, 6)
    s = w.schedule()
    with pytest.raises(ScheduleError, match=r"pragma: 'auto_unroll_max_step' on iter_var 'i' "
                       r"of stage 'C' has value .*; an int >= 0"):
        s[w.C].pragma(w.C.op.axis[0], "auto_unroll_max_step", value)


def test_unroll_explicit_bad_value():
    w = elementwise2d(4, 6)
    s = w.schedule()
    with pytest.raises(ScheduleError, match=r"pragma: 'unroll_explicit' on iter_var 'i' of "
                       r"stage 'C' has value 'yes'; a bool, an int or None"):
        s[w.C].pragma(w.C.op.axis[0], "unroll_explicit", "yes")


@pytest.mark.parametrize("order", ["parallel_first", "pragma_first"])
def test_parallel_hints_tvm_pipeline(order):
    # TVM's test_llvm_add_pipeline: launch point outside the parallel loop, stride and
    # barrier hints on it
    n = 1031
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    xo1, xo2 = s[C].split(xo, factor=13)
    if order == "parallel_first":
        s[C].parallel(xo2)
    s[C].pragma(xo1, "parallel_launch_point")
    if order == "pragma_first":
        s[C].parallel(xo2)
    s[C].pragma(xo2, "parallel_stride_pattern")
    s[C].pragma(xo2, "parallel_barrier_when_finish")
    s[C].vectorize(xi)
    heads = loop_headers(s, [A, B, C])
    assert heads[0].startswith("for i.outer.outer in range(")
    assert heads[1].startswith("for i.outer.inner in parallel(")
    a, b = (np.random.default_rng(k).random(n).astype("float32") for k in (1, 2))
    c = np.full(n, np.nan, "float32")
    polytile.build(s, [A, B, C])(a, b, c)
    check(c, a.astype("float64") + b)


def test_parallel_launch_point_outside_a_carried_loop():
    # the launch point may sit on a loop that carries a dependence (TVM starts the threads
    # there, each runs the loop): only the inner parallel loop must be independent
    w = matmul(6, 37, 11)
    s = w.schedule()
    i, j = w.C.op.axis
    k = w.C.op.reduce_axis[0]
    s[w.C].reorder(k, i, j)
    s[w.C].parallel(j)
    s[w.C].pragma(k, "parallel_launch_point")
    assert "for k in range(0, 11):  # pragma parallel_launch_point" in lowered(s, w.args)
    w.check(s, "llvm")


def test_unknown_pragma_lists_the_known_ones():
    w = elementwise2d(4, 6)
    s = w.schedule()
    with pytest.raises(ScheduleError, match=r"pragma: unknown pragma 'unroll_max' on iter_var "
                       r"'i' of stage 'C'; expected one of \[.*'auto_unroll_max_step', "
                       r"'min_blocks', 'parallel_barrier_when_finish', 'parallel_stride_pattern', "
                       r"'unroll_explicit'\]"):
        s[w.C].pragma(w.C.op.axis[0], "unroll_max", 4)


def test_auto_unroll_on_kernel_scope_of_one_iteration():
    # TVM's CUDA schedules: kernel_scope = split(axis, nparts=1), pragma on it
    A, B, a, ref = _window()
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    scope, i = s[B].split(i, nparts=1)
    s[B].bind(i, te.thread_axis("blockIdx.x"))
    s[B].bind(j, te.thread_axis("threadIdx.x"))
    s[B].pragma(scope, "auto_unroll_max_step", 8)
    src = polytile.build(s, [A, B], target="cuda").get_source()
    assert "k < 3" not in src, src
    s2 = te.create_schedule(B.op)
    scope, i = s2[B].split(B.op.axis[0], nparts=1)
    s2[B].pragma(scope, "auto_unroll_max_step", 8)
    assert not any(h.startswith("for k") for h in loop_headers(s2, [A, B]))
    check(run1(s2, [A, B], [a], "llvm"), ref, k=3)
