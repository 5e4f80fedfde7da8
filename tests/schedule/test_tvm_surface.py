"""TVM v0.19 primitives as TVM users write them: ``fuse()`` of no axes, ``split(...,
disable_predication=)``, ``set_scope``, ``set_store_predicate``, ``create_group`` and
``transform_layout``.

Each gets a success test, a failure test naming the stage and primitive, and a numeric
test against numpy (odd sizes, poisoned outputs). GPU schedules run on the reference
interpreter (which executes kernels block by block, threads interleaved at barriers) and
their CUDA source is compiled with ``nvcc -arch=sm_90`` where nvcc exists.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compile_schedule, compile_with_nvcc, poison, rand, run1

import polytile
from polytile import te
from polytile.errors import PolytileWarning, ScheduleError
from polytile.schedule import interpreter


def _gpu_run(s, args, inputs, shape=None):
    """Interpret the lowered GPU function; compile its CUDA source with nvcc."""
    if _has_nvcc():
        compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())
    f = polytile.lower(s, args)
    out = poison(shape or args[-1].shape, args[-1].dtype)
    interpreter.run(f, *inputs, out)
    return out


def _run_shaped(s, args, inputs, backend, shape):
    """Run with an output (the last argument) of ``shape``, poisoned."""
    out = poison(shape, args[-1].dtype)
    compile_schedule(s, args, backend)(*inputs, out)
    return out


def _has_nvcc() -> bool:
    from polytile.targets.cuda import compile as cc

    return cc.nvcc_path() is not None


# ------------------------------------------------------------------------ fuse()
def test_fuse_of_no_axes_adds_an_outer_loop_of_one_iteration(backend):
    A = te.placeholder((7, 5), name="A")
    k = te.reduce_axis((0, 7), name="k")
    r = te.reduce_axis((0, 5), name="r")
    S = te.compute((), lambda: te.sum(A[k, r], axis=[k, r]), name="S")
    s = te.create_schedule(S.op)
    one = s[S].fuse()
    assert one.var.name == "singleton" and one.dom.extent == 1 and one.iter_type == "data_par"
    assert [v.name for v in s[S].leaf_iter_vars] == ["singleton", "k", "r"]
    assert s[S].fuse().var.name == "singleton.1"
    a = rand((7, 5))
    out = run1(s.copy(), [A, S], [a], backend)
    np.testing.assert_allclose(out, a.astype("float64").sum(), rtol=1e-5, atol=1e-5)


def test_compute_at_the_singleton_loop(backend):
    A = te.placeholder((13, 6), name="A")
    B = te.compute((13, 6), lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((13, 6), lambda i, j: B[i, j] + B[12 - i, j], name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], s[C].fuse())
    a = rand((13, 6))
    np.testing.assert_allclose(run1(s, [A, C], [a], backend), a * 2 + a[::-1] * 2,
                               rtol=1e-5, atol=1e-5)


def test_singleton_bound_to_a_block_for_a_scalar_output():
    A = te.placeholder((37,), name="A")
    k = te.reduce_axis((0, 37), name="k")
    S = te.compute((), lambda: te.max(A[k], axis=k), name="S")
    s = te.create_schedule(S.op)
    s[S].bind(s[S].fuse(), te.thread_axis("blockIdx.x"))
    a = rand((37,))
    assert _gpu_run(s, [A, S], [a]) == a.max()


def test_fuse_of_no_axes_needs_a_compute_stage():
    A = te.placeholder((3,), name="A")
    B = te.compute((3,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="fuse: stage 'A' is a placeholder"):
        s[A].fuse()


# ------------------------------------------------------------------------ split
@pytest.mark.parametrize("factor", [4, 5])     # 20 = 5 * 4, and a partial tile of 5
def test_split_disable_predication_changes_nothing(factor, backend):
    A = te.placeholder((20, 3), name="A")
    B = te.compute((20, 3), lambda i, j: A[i, j] * 3 - 1, name="B")
    texts = []
    for flag in (False, True):
        s = te.create_schedule(B.op)
        s[B].split(B.op.axis[0], factor=factor, disable_predication=flag)
        texts.append(str(polytile.lower(s, [A, B])))
        a = rand((20, 3))
        np.testing.assert_allclose(run1(s, [A, B], [a], backend), a * 3 - 1, rtol=1e-5, atol=1e-5)
    assert texts[0] == texts[1]


def test_split_disable_predication_must_be_a_bool():
    B = te.compute((8,), lambda i: i * 2, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match=r"split: disable_predication='yes' for stage "
                                            r"'B'; expected True or False"):
        s[B].split(B.op.axis[0], factor=2, disable_predication="yes")


# ------------------------------------------------------------------------ set_scope
def _stencil(n=67):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    C = te.compute((n - 2,), lambda i: B[i] + B[i + 1] + B[i + 2], name="C")
    s = te.create_schedule(C.op)
    bo, ti = s[C].split(C.op.axis[0], factor=16)
    s[C].bind(bo, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.x"))
    a = rand((n,))
    want = 2 * (a[:-2] + a[1:-1] + a[2:])
    return A, B, C, s, bo, ti, a, want


def test_set_scope_shared_at_the_block_loop():
    A, B, C, s, bo, ti, a, want = _stencil()
    s[B].compute_at(s[C], bo)
    _, bt = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bt, te.thread_axis("threadIdx.x"))     # a cooperative fetch
    s[B].set_scope("shared")
    assert "B = alloc(float32[18], scope='shared')" in str(polytile.lower(s, [A, C]))
    np.testing.assert_allclose(_gpu_run(s, [A, C], [a]), want, rtol=1e-5, atol=1e-5)
    assert s.copy()[B].scope == "shared"


def test_set_scope_local_inside_the_thread_loop():
    A, B, C, s, bo, ti, a, want = _stencil()
    s[B].compute_at(s[C], ti)
    s[B].set_scope("local")
    assert "B = alloc(float32[3], scope='local')" in str(polytile.lower(s, [A, C]))
    np.testing.assert_allclose(_gpu_run(s, [A, C], [a]), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("prim", ["set_scope", "cache_read"])
def test_global_scope_inside_a_kernel_is_refused(prim):
    A, B, C, s, bo, ti, a, want = _stencil()
    if prim == "cache_read":
        B = s.cache_read(A, "global", [B])
    else:
        s[B].set_scope("global")
    s[B].compute_at(s[C], ti)
    with pytest.raises(ScheduleError, match=rf"{prim}: stage '{B.name}' has storage scope "
                       r"'global' but is computed at 'C'.'i.inner', inside loops bound to GPU "
                       r"indices: 'i.outer' \(blockIdx.x\), 'i.inner' \(threadIdx.x\)"):
        polytile.lower(s, [A, C])


def test_local_scope_with_thread_bound_loops_is_refused():
    A, B, C, s, bo, ti, a, want = _stencil()
    s[B].compute_at(s[C], bo)
    _, bt = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bt, te.thread_axis("threadIdx.x"))
    s[B].set_scope("local")
    with pytest.raises(ScheduleError, match=r"set_scope: stage 'B' has storage scope 'local', "
                       r"one copy per thread, but binds its own loops 'i.inner' "
                       r"\(threadIdx.x\)"):
        polytile.lower(s, [A, C])


def test_default_local_scope_with_thread_bound_loops_is_refused():
    """Was a silent wrong result: each thread filled one element of its private copy. A
    whole axis bound to a thread index is a thread-owned dimension now
    (``attach.check_thread_owned``), refused because its reader runs on no loop bound to
    that index."""
    A, B, C, s, bo, ti, a, want = _stencil()
    s[B].compute_at(s[C], ti)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.y"))
    with pytest.raises(ScheduleError, match=r"bind: axis 'i' of the local stage 'B' "
                       r"\(computed at 'C'.'i.inner'\) is bound to 'threadIdx.y', but its "
                       r"reader 'C' \(compute\) runs in 0 loops bound to 'threadIdx.y'"):
        polytile.lower(s, [A, C])


def test_fuzz_cuda_seed_22_is_refused():
    """Was an InternalError (isl AST check): a 'local' stage whose own loop is bound to
    threadIdx.x, attached inside the thread loop of its consumer."""
    A = te.placeholder((31,), name="A")
    P = te.compute((31,), lambda i: te.max(A[i], A[i]), name="P")
    w = te.reduce_axis((0, 1), name="w")
    C = te.compute((31,), lambda i: te.max(P[i + w].astype("int32"), axis=w), name="C")
    s = te.create_schedule(C.op)
    s[P].compute_at(s[C], C.op.axis[0])
    co, ci = s[C].split(C.op.axis[0], factor=4)
    s[C].bind(co, te.thread_axis("blockIdx.x"))
    s[C].bind(ci, te.thread_axis("threadIdx.x"))
    _, pi = s[P].split(P.op.axis[0], factor=4)
    s[P].bind(pi, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"compute_at: stage 'P' gets the default scope "
                       r"'local'.*binds its own loops 'i.inner' \(threadIdx.x\)"):
        polytile.build(s, [A, C], target="cuda")


def test_set_scope_arguments():
    A, B, C, s, *_ = _stencil()
    with pytest.raises(ScheduleError, match=r"set_scope: unknown scope 'texture' for stage "
                                            r"'B'; expected one of global, shared, local"):
        s[B].set_scope("texture")
    with pytest.raises(ScheduleError, match=r"set_scope: stage 'C' is an output"):
        s[C].set_scope("shared")
    with pytest.raises(ScheduleError, match=r"set_scope: stage 'A' is a placeholder"):
        s[A].set_scope("shared")


def test_set_scope_on_cpu_is_ordinary_memory(backend):
    A = te.placeholder((9,), name="A")
    B = te.compute((9,), lambda i: A[i] + 1, name="B")
    C = te.compute((9,), lambda i: B[i] * B[8 - i], name="C")
    s = te.create_schedule(C.op)
    s[B].set_scope("shared")
    a = rand((9,))
    np.testing.assert_allclose(run1(s, [A, C], [a], backend), (a + 1) * (a[::-1] + 1),
                               rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ set_store_predicate
def test_store_predicate_skips_duplicate_stores_of_a_shared_stage():
    """Every thread of a block computes all of B (its loops are not bound); only thread 0
    stores, and the barrier makes the stores visible to the others."""
    A, B, C, s, bo, ti, a, want = _stencil()
    tx = te.thread_axis("threadIdx.x")
    s[B].compute_at(s[C], bo)
    s[B].set_scope("shared")
    s[B].set_store_predicate(tx.var == 0)
    text = str(polytile.lower(s, [A, C]))
    assert "if (int32(threadIdx.x) == 0):" in text
    np.testing.assert_allclose(_gpu_run(s, [A, C], [a]), want, rtol=1e-5, atol=1e-5)


def test_store_predicate_of_a_cross_thread_reduction():
    A = te.placeholder((37,), name="A")
    k = te.reduce_axis((0, 37), name="k")
    S = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="S")
    s = te.create_schedule(S.op)
    tx = te.thread_axis("threadIdx.x")
    _, ki = s[S].split(k, factor=32)
    s[S].bind(ki, tx)
    s[S].set_store_predicate(tx.var.equal(0))
    assert "if (int32(threadIdx.x) == 0):" in str(polytile.lower(s, [A, S]))
    a = rand((37,))
    np.testing.assert_allclose(_gpu_run(s, [A, S], [a]), [a.astype("float64").sum()],
                               rtol=1e-5, atol=1e-5)


def test_equal_and_tir_helpers_in_a_definition(backend):
    """``x.equal(y)`` is ``x == y`` as a boolean expression; ``tir.const``, ``tir.all``,
    ``tir.if_then_else`` are te's functions under TVM's ``tvm.tir`` names."""
    from polytile import tir

    A = te.placeholder((13, 7), name="A")
    B = te.compute((13, 7), lambda i, j: tir.if_then_else(
        tir.all(i.equal(j), j.equal(tir.const(3, "int32")).astype("bool") | (i < 2)),
        A[i, j] * 2, A[i, j]), name="B")
    assert str(te.var("n").equal(0)) == "(n == 0)"
    assert te.var("n").equal(0).dtype == "bool"
    s = te.create_schedule(B.op)
    a = rand((13, 7))
    want = a.copy()
    for i in range(7):
        if i == 3 or i < 2:
            want[i, i] *= 2
    np.testing.assert_allclose(run1(s, [A, B], [a], backend), want, rtol=1e-6)


def _tutorial_row_sum(n, m, predicate, reducer="sum"):
    """TVM's cross-thread reduction tutorial: rows on threadIdx.y, the reduction split,
    rfactor-ed and bound to threadIdx.x, the partial computed at the bound loop.
    ``predicate``: None, "thread" (on the thread axis, as the tutorial) or "loop" (on
    the bound reduction loop's variable)."""
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    red = te.sum if reducer == "sum" else te.max
    B = te.compute((n,), lambda i: red(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    xo, xi = s[B].split(s[B].op.axis[0], factor=32)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    tx = s[B].op.reduce_axis[0]
    thread = te.thread_axis("threadIdx.x")
    s[B].bind(tx, thread)
    s[BF].compute_at(s[B], tx)
    if predicate:
        s[B].set_store_predicate((thread if predicate == "thread" else tx).var.equal(0))
    return A, B, s


@pytest.mark.parametrize("n, m", [(45, 37), (32, 16), (1, 5), (67, 97)])
@pytest.mark.parametrize("predicate", [None, "thread", "loop"])
def test_cross_thread_reduction_tutorial_with_rows_on_threadIdx_y(n, m, predicate):
    A, B, s = _tutorial_row_sum(n, m, predicate)
    text = str(polytile.lower(s, [A, B]))
    assert "threadIdx.y" in text and "sync('shared')" in text
    a = rand((n, m))
    np.testing.assert_allclose(_gpu_run(s, [A, B], [a]), a.astype("float64").sum(axis=1),
                               rtol=1e-5, atol=1e-5)


def test_cross_thread_max_with_rows_on_threadIdx_y():
    A, B, s = _tutorial_row_sum(45, 37, "thread", reducer="max")
    a = rand((45, 37)) - 2   # all negative: an identity of 0 would show
    np.testing.assert_array_equal(_gpu_run(s, [A, B], [a]), a.max(axis=1))


def test_cross_thread_reduction_rows_on_threads_without_a_block_loop():
    """Every spatial loop bound to a thread index: one block runs all rows."""
    A = te.placeholder((7, 33), name="A")
    k = te.reduce_axis((0, 33), name="k")
    B = te.compute((7,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.y"))
    _, ki = s[B].split(k, factor=8)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    a = rand((7, 33))
    np.testing.assert_allclose(_gpu_run(s, [A, B], [a]), a.astype("float64").sum(axis=1),
                               rtol=1e-5, atol=1e-5)
    assert len(s.stages) == 2   # the user's schedule is unchanged


def test_cross_thread_reduction_rows_on_threads_refusals():
    A = te.placeholder((6, 10, 9), name="A")
    k = te.reduce_axis((0, 9), name="k")
    B = te.compute((6, 10), lambda i, j: te.sum(A[i, j, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    f = s[B].fuse(*B.op.axis)
    s[B].bind(f, te.thread_axis("threadIdx.y"))
    s[B].bind(k, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"stage 'B' binds its spatial loop 'i.j.fused' "
                       r"to 'threadIdx.y' and that loop is neither an axis nor the inner "
                       r"loop of a split of one.*bind its spatial loops to blockIdx only"):
        polytile.lower(s, [A, B])
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"'threadIdx.x' is bound twice in stage 'B'"):
        s[B].bind(k, te.thread_axis("threadIdx.x"))


def test_store_predicate_refusals():
    A, B, C, s, bo, ti, a, want = _stencil()
    tx = te.thread_axis("threadIdx.x")
    i = B.op.axis[0]
    with pytest.raises(ScheduleError, match=r"set_store_predicate: the predicate \(i < 5\) "
                       r"of stage 'B' reads 'i', which is not a thread index"):
        s[B].set_store_predicate(i < 5)
    with pytest.raises(ScheduleError, match="has dtype int32; expected a boolean"):
        s[B].set_store_predicate(tx.var + 1)
    s[C].set_store_predicate(tx.var == 0)   # C binds its spatial loop to threadIdx.x
    with pytest.raises(ScheduleError, match=r"stage 'C' stores only where \(threadIdx.x == 0\)"
                       r", but binds its own loop 'i.inner' to 'threadIdx.x'"):
        polytile.lower(s, [A, C])


def test_store_predicate_no_thread_satisfies():
    A, B, C, s, bo, ti, a, want = _stencil()
    tx = te.thread_axis("threadIdx.x")
    s[B].compute_at(s[C], bo)
    s[B].set_scope("shared")
    s[B].set_store_predicate(tx.var == 40)
    with pytest.raises(ScheduleError, match=r"set_store_predicate: stage 'B' stores only "
                       r"where \(threadIdx.x == 40\), which no thread of its kernel satisfies"):
        polytile.lower(s, [A, C])


def test_store_predicate_needs_a_gpu_and_shared_memory():
    A = te.placeholder((5,), name="A")
    B = te.compute((5,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    s[B].set_store_predicate(te.thread_axis("threadIdx.x").var == 0)
    with pytest.raises(ScheduleError, match="runs on the CPU, which has no thread indices"):
        polytile.lower(s, [A, B])
    A, B, C, s, bo, ti, a, want = _stencil()
    s[B].compute_at(s[C], ti)
    s[B].set_store_predicate(te.thread_axis("threadIdx.y").var == 0)
    with pytest.raises(ScheduleError, match=r"computed at 'C'.'i.inner' in its default "
                       r"memory: a thread that skips its stores"):
        polytile.lower(s, [A, C])


# ------------------------------------------------------------------------ create_group
def _chain(m=13, n=11):
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1, name="C")
    D = te.compute((m - 1, n), lambda i, j: C[i, j] * C[i + 1, j], name="D")
    a = rand((m, n))
    c = a * 2 + 1
    return A, B, C, D, a, c[:-1] * c[1:]


def test_group_compute_at_moves_every_member(backend):
    A, B, C, D, a, want = _chain()
    s = te.create_schedule(D.op)
    g = s.create_group(outputs=C, inputs=A)
    assert [m.name for m in g.members] == ["B", "C"]
    xo, _ = s[D].split(D.op.axis[0], factor=4)
    g.compute_at(s[D], xo)
    assert s[B].attach_stage is s[D] and s[C].attach_ivar is xo
    text = str(polytile.lower(s, [A, D]))
    assert "B = alloc(float32[5, 11]" in text and "C = alloc(float32[5, 11]" in text
    np.testing.assert_allclose(run1(s, [A, D], [a], backend), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run1(s.copy(), [A, D], [a], backend), want, rtol=1e-5, atol=1e-5)


def test_group_member_compute_root_returns_to_the_group_loop(backend):
    A, B, C, D, a, want = _chain()
    s = te.create_schedule(D.op)
    g = s.create_group(C, A)
    s[B].compute_at(s[C], C.op.axis[0])          # stays attached inside the group
    g.compute_at(s[D], D.op.axis[0])
    assert s[B].attach_stage is s[C]
    s[C].compute_root()                           # kGroupRoot: the group's loop
    assert s[C].attach_stage is s[D]
    np.testing.assert_allclose(run1(s, [A, D], [a], backend), want, rtol=1e-5, atol=1e-5)
    g.compute_root()
    assert s[C].attach_type == "root" and s[B].attach_stage is s[C]
    np.testing.assert_allclose(run1(s, [A, D], [a], backend), want, rtol=1e-5, atol=1e-5)


def test_group_include_inputs_and_outside_attach_reset():
    A, B, C, D, a, want = _chain()
    s = te.create_schedule(D.op)
    s[C].compute_at(s[D], D.op.axis[0])
    with pytest.warns(PolytileWarning, match=r"create_group: stage 'C' was computed at "
                      r"'D'.'i', outside the group; it is computed at root again"):
        g = s.create_group([C], [B], include_inputs=True)
    assert [m.name for m in g.members] == ["B", "C"] and s[C].attach_type == "root"
    assert [m.name for m in te.create_schedule(D.op).create_group(C, B).members] == ["C"]


def test_group_refusals():
    A, B, C, D, a, want = _chain()
    s = te.create_schedule(D.op)
    g = s.create_group(C, A)
    with pytest.raises(ScheduleError, match=r"create_group: stage 'B' already belongs to "
                       r"group 'group\(C\)'; nested or overlapping groups are not supported"):
        s.create_group(D, A)
    with pytest.raises(ScheduleError, match=r"compute_at: group 'group\(C\)' cannot be "
                       r"computed inside its member 'C'"):
        g.compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match="compute_at: stage 'D' is an output"):
        s.create_group(D, C).compute_at(s[C], C.op.axis[0])


# ------------------------------------------------------------------------ transform_layout
def _copy2(m=5, n=7):
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + B[m - 1 - i, j], name="C")
    a = rand((m, n))
    return A, B, C, a, 2 * a + 2 * a[::-1]


def test_transform_layout_of_an_intermediate_transposes_its_buffer(backend):
    A, B, C, a, want = _copy2()
    s = te.create_schedule(C.op)
    ax = s[B].transform_layout(lambda i, j: [j, i])
    assert [(v.name, v.dom.extent) for v in ax] == [("ax0", 7), ("ax1", 5)]
    assert s[B].leaf_iter_vars == ax
    text = str(polytile.lower(s, [A, C]))
    assert "B = alloc(float32[7, 5]" in text and "B[ax0, ax1] = (A[ax1, ax0] * 2.0f)" in text
    np.testing.assert_allclose(run1(s, [A, C], [a], backend), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run1(s.copy(), [A, C], [a], backend), want, rtol=1e-5,
                               atol=1e-5)


def test_transform_layout_of_arguments_changes_their_shapes(backend):
    """As in TVM: the input and the output arrays are passed in the new layouts."""
    m, n = 5, 7
    A, B, C, a, want = _copy2(m, n)
    s = te.create_schedule(C.op)
    assert s[A].transform_layout(lambda i, j: [j // 2, i, j % 2]) is None
    (flat,) = s[C].transform_layout(lambda i, j: [i * n + j])
    assert flat.dom.extent == 35
    packed = np.full((4, m, 2), 1e9, "float32")       # 7 columns padded to 4 x 2
    for i in range(m):
        for j in range(n):
            packed[j // 2, i, j % 2] = a[i, j]
    assert str(polytile.lower(s, [A, C])).startswith(
        "def main(A: float32[4, 5, 2], C: float32[35]):")
    out = _run_shaped(s, [A, C], [packed], backend, (m * n,))
    np.testing.assert_allclose(out.reshape(m, n), want, rtol=1e-5, atol=1e-5)


def test_padded_split_layout_writes_only_the_image(backend):
    """10 elements as 3 x 4: the last two slots are never written (they stay poisoned)."""
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    hi, lo = s[B].transform_layout(lambda i: [i // 4, i % 4])
    s[B].vectorize(lo)
    a = rand((10,))
    out = _run_shaped(s, [A, B], [a], backend, (3, 4))
    np.testing.assert_allclose(out.reshape(-1)[:10], a + 1, rtol=1e-6)
    assert np.isnan(out.reshape(-1)[10:]).all()
    text = str(polytile.lower(s, [A, B]))   # full rows vectorized, then the partial one
    assert "for ax1 in vectorized(0, 4):" in text and "B[2, ax1] = (A[(ax1 + 8)]" in text


def test_transformed_loops_schedule_further_and_compose(backend):
    """A reduction stage: the data loops are replaced, the reduction loop stays; a second
    transform composes; split, reorder and parallel apply to the new loops."""
    m, k_, n = 6, 5, 9
    A = te.placeholder((m, k_), name="A")
    Bm = te.placeholder((k_, n), name="B")
    k = te.reduce_axis((0, k_), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * Bm[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].transform_layout(lambda i, j: [j, i])                   # C is 9 x 6
    j, io, ii = s[C].transform_layout(lambda j, i: [j, i // 3, i % 3])
    assert [v.dom.extent for v in (j, io, ii)] == [9, 2, 3]
    assert s[C].leaf_iter_vars == [j, io, ii, k]
    jo, ji = s[C].split(j, factor=4)
    s[C].reorder(io, jo, k, ji, ii)
    s[C].parallel(io)
    g = np.random.default_rng(1)
    a, b = rand((m, k_), gen=g), rand((k_, n), gen=g)
    out = _run_shaped(s, [A, Bm, C], [a, b], backend, (n, 2, 3))
    want = (a.astype("float64") @ b).T.reshape(n, 2, 3)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_transform_layout_on_gpu():
    A, B, C, a, want = _copy2(13, 9)
    s = te.create_schedule(C.op)
    for T in (B, C):
        f = s[T].transform_layout(lambda i, j: [j, i])
        s[T].bind(f[0], te.thread_axis("blockIdx.x"))
        s[T].bind(f[1], te.thread_axis("threadIdx.x"))
    out = _gpu_run(s, [A, C], [a], shape=(9, 13))
    np.testing.assert_allclose(out, want.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn, match", [
    (lambda i, j: [i * j], r"new index 0 \(\(i \* j\)\) of stage 'B' is not a quasi-affine"),
    (lambda i, j: [i // 2, j], r"sends elements \(\d, \d\) and \(\d, \d\) to one place"),
    (lambda i, j: [i - 1, j], r"new index 0 \(\(i - 1\)\) of stage 'B' reaches -1"),
    (lambda i, j: [i, te.AXIS_SEPARATOR, j], "uses te.AXIS_SEPARATOR"),
    (lambda i: [i], r"cannot take its 2 indices"),
    ("ij->ji", r"the mapping of stage 'B' is 'ij->ji'"),
])
def test_transform_layout_refuses_maps_it_cannot_do_exactly(fn, match):
    A, B, C, a, want = _copy2()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=match) as info:
        s[B].transform_layout(fn)
    assert str(info.value).startswith("transform_layout: ")


def test_transform_layout_order_and_attach_refusals():
    A, B, C, a, want = _copy2()
    s = te.create_schedule(C.op)
    s[B].split(B.op.axis[1], factor=2)
    with pytest.raises(ScheduleError, match="transform_layout: axis 'j' of stage 'B' was "
                                            "already split or fused"):
        s[B].transform_layout(lambda i, j: [j, i])
    s = te.create_schedule(C.op)
    s[B].reorder(B.op.axis[1], B.op.axis[0])
    with pytest.raises(ScheduleError, match="the axes of stage 'B' were reordered"):
        s[B].transform_layout(lambda i, j: [j, i])
    s = te.create_schedule(C.op)
    s[B].transform_layout(lambda i, j: [j, i])
    with pytest.raises(ScheduleError, match=r"split: iter_var 'i' of stage 'B' was replaced "
                                            r"by transform_layout with \[ax0, ax1\]"):
        s[B].split(B.op.axis[0], factor=2)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match=r"transform_layout: stage 'B' has a transformed "
                                            r"layout and is computed at 'C'.'i'"):
        polytile.lower(s, [A, C])


def test_compute_at_a_transformed_loop(backend):
    A, B, C, a, want = _copy2()
    s = te.create_schedule(C.op)
    jt, it = s[C].transform_layout(lambda i, j: [j, i])
    s[B].compute_at(s[C], jt)
    np.testing.assert_allclose(_run_shaped(s, [A, C], [a], backend, (7, 5)), want.T,
                               rtol=1e-5, atol=1e-5)
