"""Illegal schedules refused by the primitive itself: each raises ``ScheduleError`` (a
``ValueError``) in the house format, naming the primitive, the stage and the axis, and saying
what was expected or hinting at the fix."""

from __future__ import annotations

import numpy as np
import pytest

from polytile import te
from polytile.errors import ScheduleError

N = 8


def matmul():
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k, te.create_schedule(C.op)


def chain():
    """A -> B -> C, elementwise."""
    A = te.placeholder((N, N), name="A")
    B = te.compute((N, N), lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((N, N), lambda i, j: B[i, j] + 1, name="C")
    return A, B, C, te.create_schedule(C.op)


def diamond():
    """B and D both read A; E reads B and D."""
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: A[i] + 1, name="B")
    D = te.compute((N,), lambda i: A[i] * 2, name="D")
    E = te.compute((N,), lambda i: B[i] + D[i], name="E")
    return A, B, D, E, te.create_schedule(E.op)


def split_an_already_split_axis():
    _, _, C, _, s = matmul()
    i = C.op.axis[0]
    s[C].split(i, factor=4)
    s[C].split(i, factor=2)


def split_with_factor_and_nparts():
    _, _, C, _, s = matmul()
    s[C].split(C.op.axis[0], factor=4, nparts=2)


def split_with_neither():
    _, _, C, _, s = matmul()
    s[C].split(C.op.axis[0])


def split_by_zero():
    _, _, C, _, s = matmul()
    s[C].split(C.op.axis[0], factor=0)


def split_by_a_float():
    _, _, C, _, s = matmul()
    s[C].split(C.op.axis[0], factor=4.0)


def split_an_axis_of_another_stage():
    _, B, C, s = chain()
    s[C].split(B.op.axis[0], factor=2)


def split_a_placeholder():
    A, _, C, _, s = matmul()
    s[A].split(C.op.axis[0], factor=2)


def tile_by_zero():
    _, _, C, _, s = matmul()
    s[C].tile(C.op.axis[0], C.op.axis[1], 0, 4)


def split_the_whole_axis_tuple():
    _, _, C, _, s = matmul()
    s[C].split(C.op.axis, factor=4)


def reorder_a_list():
    _, _, C, _, s = matmul()
    s[C].reorder([C.op.axis[1], C.op.axis[0]])


def schedule_indexed_by_name():
    _, _, _, _, s = matmul()
    s["C"]


def reorder_with_a_duplicate():
    _, _, C, _, s = matmul()
    i, j = C.op.axis
    s[C].reorder(i, j, i)


def reorder_a_foreign_axis():
    _, B, C, s = chain()
    s[C].reorder(B.op.axis[1], C.op.axis[0])


def fuse_non_adjacent():
    _, _, C, k, s = matmul()
    s[C].fuse(C.op.axis[0], k)


def fuse_inner_first():
    _, _, C, _, s = matmul()
    i, j = C.op.axis
    s[C].fuse(j, i)


def fuse_spatial_with_reduce():
    _, _, C, k, s = matmul()
    s[C].fuse(C.op.axis[1], k)


def compute_at_a_stage_that_does_not_read_it():
    _, B, D, _, s = diamond()
    s[B].compute_at(s[D], D.op.axis[0])


def compute_at_cycle():
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: A[i] + 1, name="B")
    D = te.compute((N,), lambda i: B[i] * 2, name="D")
    E = te.compute((N,), lambda i: D[i] + 1, name="E")
    s = te.create_schedule(E.op)
    s[B].compute_at(s[D], D.op.axis[0])
    s[D].compute_at(s[B], B.op.axis[0])


def compute_at_an_axis_of_the_producer():
    _, B, C, s = chain()
    s[B].compute_at(s[C], B.op.axis[0])


def compute_at_of_an_output():
    _, B, C, s = chain()
    s[C].compute_at(s[B], B.op.axis[0])


def compute_inline_of_an_output():
    _, _, C, s = chain()
    s[C].compute_inline()


def compute_inline_of_a_reduction():
    _, _, C, _, _ = matmul()
    D = te.compute((N, N), lambda i, j: C[i, j] + 1, name="D")
    s = te.create_schedule(D.op)
    s[C].compute_inline()


def compute_inline_of_a_placeholder():
    A, _, _, s = chain()
    s[A].compute_inline()


def bind_twice():
    _, _, C, _, s = matmul()
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.x"))
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.y"))


def unroll_then_parallel_the_same_loop():
    _, _, C, _, s = matmul()
    s[C].unroll(C.op.axis[0])
    s[C].parallel(C.op.axis[0])


def parallel_after_split_of_the_same_axis():
    _, _, C, _, s = matmul()
    i = C.op.axis[0]
    s[C].split(i, factor=4)
    s[C].parallel(i)


def split_after_annotating():
    _, _, C, _, s = matmul()
    i = C.op.axis[0]
    s[C].vectorize(i)
    s[C].split(i, factor=4)


def bind_to_an_unknown_thread_tag():
    _, _, C, _, s = matmul()
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.w"))


def bind_to_a_string():
    _, _, C, _, s = matmul()
    s[C].bind(C.op.axis[0], "threadIdx.x")


def bind_one_thread_axis_twice():
    _, _, C, _, s = matmul()
    tx = te.thread_axis("threadIdx.x")
    s[C].bind(C.op.axis[0], tx)
    s[C].bind(C.op.axis[1], tx)


def cache_read_for_a_stage_that_does_not_read():
    A, _, C, s = chain()
    s.cache_read(A, "shared", [C])


def cache_read_with_a_misspelt_scope():
    A, B, _, s = chain()
    s.cache_read(A, "sharde", [B])


def cache_write_of_a_placeholder():
    A, _, _, s = chain()
    s.cache_write(A, "local")


def rfactor_of_a_spatial_axis():
    _, _, C, _, s = matmul()
    s.rfactor(C, C.op.axis[0])


def rfactor_of_an_elementwise_stage():
    _, _, C, s = chain()
    s.rfactor(C, C.op.axis[0])


def rfactor_of_an_annotated_axis():
    _, _, C, k, s = matmul()
    s[C].unroll(k)
    s.rfactor(C, k)


def unknown_pragma():
    _, _, C, s = chain()
    s[C].pragma(C.op.axis[0], "unrol")


def storage_align_by_zero():
    _, B, _, s = chain()
    s[B].storage_align(B.op.axis[0], 0, 1)


def schedule_of_a_foreign_tensor():
    _, _, _, _, s = matmul()
    s[te.placeholder((3,), name="X")]


def axis_of_another_schedule():
    _, _, C, _, s1 = matmul()
    s2 = te.create_schedule(C.op)
    xo, _ = s1[C].split(C.op.axis[0], factor=2)
    s2[C].split(xo, factor=2)


CASES = [
    pytest.param(split_an_already_split_axis,
                 r"split: iter_var 'i' of stage 'C' was already split into 'i\.outer' and "
                 r"'i\.inner'; use one of those", id="split-of-an-already-split-axis"),
    pytest.param(split_with_factor_and_nparts,
                 r"(?s)split: iter_var 'i' of stage 'C' got both factor= and nparts=; give "
                 r"exactly one.*hint:", id="split-with-factor-and-nparts"),
    pytest.param(split_with_neither,
                 r"split: iter_var 'i' of stage 'C' got neither factor= nor nparts=; give",
                 id="split-with-neither-factor-nor-nparts"),
    pytest.param(split_by_zero,
                 r"split: factor=0 for iter_var 'i' of stage 'C'; expected a positive int",
                 id="split-factor-0"),
    pytest.param(split_by_a_float,
                 r"split: factor=4\.0 for iter_var 'i' of stage 'C'; expected a positive int",
                 id="split-factor-float"),
    pytest.param(split_an_axis_of_another_stage,
                 r"split: iter_var 'i' is not an axis of stage 'C' \(it belongs to stage "
                 r"'B'\); expected one of \['i', 'j'\]", id="split-an-axis-of-another-stage"),
    pytest.param(split_a_placeholder,
                 r"split: stage 'A' is a placeholder \(an input\) and has no loops; schedule",
                 id="split-a-placeholder"),
    pytest.param(tile_by_zero,
                 r"split: factor=0 for iter_var 'i' of stage 'C'; expected a positive int",
                 id="tile-factor-0"),
    pytest.param(split_the_whole_axis_tuple,
                 r"(?s)split: the axis argument of stage 'C' is a tuple of 2 axes \['i', 'j'\]; "
                 r"expected one IterVar per argument.*hint: pick one",
                 id="split-the-axis-tuple"),
    pytest.param(reorder_a_list,
                 r"(?s)reorder: an argument of stage 'C' is a list of 2 axes \['j', 'i'\]; "
                 r"expected one IterVar per argument.*hint: s\[C\]\.reorder\(\*axes\)",
                 id="reorder-a-list"),
    pytest.param(reorder_with_a_duplicate,
                 r"reorder: iter_var 'i' appears twice; list each axis of stage 'C' once",
                 id="reorder-with-a-duplicate"),
    pytest.param(reorder_a_foreign_axis,
                 r"reorder: iter_var 'j' is not an axis of stage 'C' \(it belongs to stage "
                 r"'B'\); expected one of", id="reorder-a-foreign-axis"),
    pytest.param(fuse_non_adjacent,
                 r"fuse: iter_vars 'i' and 'k' of stage 'C' are not adjacent in the loop "
                 r"order \['i', 'j', 'k'\]; fuse consecutive loops", id="fuse-non-adjacent"),
    pytest.param(fuse_inner_first,
                 r"(?s)fuse: iter_vars 'j' and 'i' of stage 'C' are given inner first.*; pass "
                 r"adjacent loops outermost first.*hint: fuse\(i, j\)", id="fuse-inner-first"),
    pytest.param(fuse_spatial_with_reduce,
                 r"fuse: stage 'C': 'j' is a data_par axis and 'k' a reduce axis; fuse axes "
                 r"of one kind", id="fuse-spatial-with-reduce"),
    pytest.param(compute_at_a_stage_that_does_not_read_it,
                 r"compute_at: stage 'D' does not read 'B'; attach 'B' to one of its consumers",
                 id="compute-at-a-non-consumer"),
    pytest.param(compute_at_cycle,
                 r"compute_at: attaching 'D' to 'B' forms a cycle of attaches; attach a "
                 r"producer to its consumer", id="compute-at-cycle"),
    pytest.param(compute_at_an_axis_of_the_producer,
                 r"compute_at: iter_var 'i' is not an axis of stage 'C' \(it belongs to stage "
                 r"'B'\); expected one of", id="compute-at-an-axis-of-the-producer"),
    pytest.param(compute_at_of_an_output,
                 r"compute_at: stage 'C' is an output of the schedule; attach intermediate",
                 id="compute-at-of-an-output"),
    pytest.param(compute_inline_of_an_output,
                 r"compute_inline: stage 'C' is an output of the schedule; inline "
                 r"intermediate stages only", id="compute-inline-of-an-output"),
    pytest.param(compute_inline_of_a_reduction,
                 r"(?s)compute_inline: stage 'C' is a reduction; only elementwise.*hint: use "
                 r"compute_at", id="compute-inline-of-a-reduction"),
    pytest.param(compute_inline_of_a_placeholder,
                 r"compute_inline: stage 'A' is a placeholder \(an input\) and has no loops",
                 id="compute-inline-of-a-placeholder"),
    pytest.param(unroll_then_parallel_the_same_loop,
                 r"parallel: iter_var 'i' of stage 'C' is already annotated 'unroll'; expected "
                 r"one annotation per loop \(vectorize, unroll, parallel or one bind\)",
                 id="two-annotations-on-one-loop"),
    pytest.param(bind_twice,
                 r"bind: iter_var 'i' of stage 'C' is already annotated 'bind:threadIdx.x'; "
                 r"expected one annotation per loop \(vectorize, unroll, parallel or one bind\)",
                 id="two-binds-on-one-loop"),
    pytest.param(parallel_after_split_of_the_same_axis,
                 r"parallel: iter_var 'i' of stage 'C' was already split into 'i\.outer' and "
                 r"'i\.inner'; use one of those", id="annotation-after-split-of-the-axis"),
    pytest.param(split_after_annotating,
                 r"split: iter_var 'i' of stage 'C' is annotated 'vectorize'; split loops "
                 r"before annotating them", id="split-after-annotating"),
    pytest.param(bind_to_an_unknown_thread_tag,
                 r"thread_axis: unknown thread tag 'threadIdx\.w'; one of \('blockIdx\.x'",
                 id="bind-a-non-thread-tag"),
    pytest.param(bind_to_a_string,
                 r"bind: 'threadIdx\.x' is not a thread axis; create one with "
                 r"te\.thread_axis", id="bind-to-a-string"),
    pytest.param(bind_one_thread_axis_twice,
                 r"bind: thread axis 'threadIdx\.x' is bound twice in stage 'C' \(to 'i' and "
                 r"'j'\); bind each thread axis once per stage", id="bind-a-thread-axis-twice"),
    pytest.param(cache_read_for_a_stage_that_does_not_read,
                 r"cache_read: stage 'C' does not read 'A'; list stages that read the tensor",
                 id="cache-read-with-a-reader-that-does-not-read"),
    pytest.param(cache_read_with_a_misspelt_scope,
                 r"cache_read: unknown scope 'sharde'; one of \('global', 'shared', 'local', "
                 r"'wmma.matrix_a', 'wmma.matrix_b', 'wmma.accumulator', "
                 r"'mfma.accumulator_32x32', 'mfma.accumulator_16x16', "
                 r"'wgmma.accumulator'\)",
                 id="cache-read-misspelt-scope"),
    pytest.param(cache_write_of_a_placeholder,
                 r"cache_write: 'A' is a placeholder; cache the output of a compute",
                 id="cache-write-of-a-placeholder"),
    pytest.param(rfactor_of_a_spatial_axis,
                 r"rfactor: 'i' is a spatial loop of stage 'C'; pass one of its reduction",
                 id="rfactor-of-a-spatial-axis"),
    pytest.param(rfactor_of_an_elementwise_stage,
                 r"rfactor: stage 'C' is not a reduction; rfactor a te\.sum/max/min stage",
                 id="rfactor-of-a-non-reduction"),
    pytest.param(rfactor_of_an_annotated_axis,
                 r"rfactor: reduction loop 'k' of stage 'C' is annotated.*; rfactor before "
                 r"annotating", id="rfactor-of-an-annotated-axis"),
    pytest.param(unknown_pragma,
                 r"pragma: unknown pragma 'unrol' on iter_var 'i' of stage 'C'; expected one "
                 r"of \[.*'unroll'", id="unknown-pragma"),
    pytest.param(storage_align_by_zero,
                 r"storage_align: factor=0, offset=1; expected ints with factor >= 1",
                 id="storage-align-factor-0"),
    pytest.param(schedule_of_a_foreign_tensor,
                 r"schedule: 'X' is not part of this schedule; index the schedule with a "
                 r"tensor reachable from its outputs", id="schedule-of-a-foreign-tensor"),
    pytest.param(axis_of_another_schedule,
                 r"split: iter_var 'i\.outer' is not an axis of stage 'C' \(it belongs to no "
                 r"stage of this schedule: an axis of another compute, or of a schedule "
                 r"created before\); expected one of \['i', 'j', 'k'\]",
                 id="axis-of-another-schedule"),
]


@pytest.mark.parametrize("mistake, match", CASES)
def test_schedule_mistake_is_refused(mistake, match):
    with pytest.raises(ScheduleError, match=match) as info:
        mistake()
    assert isinstance(info.value, ValueError)


def test_schedule_indexed_by_a_name():
    with pytest.raises(TypeError, match=r"(?s)schedule: s\[\.\.\.\] got the str 'C'; expected "
                       r"a tensor or an operation.*hint: index with the tensor itself"):
        schedule_indexed_by_name()


def test_numpy_integer_factors_are_ints():
    """Not a mistake: a factor computed with numpy is an int."""
    _, _, C, _, s = matmul()
    xo, xi = s[C].split(C.op.axis[0], factor=np.int64(3))
    assert (xo.dom.extent, xi.dom.extent) == (3, 3)
    assert s.trace[-1].kwargs == (("factor", 3),) and type(s.trace[-1].kwargs[0][1]) is int
