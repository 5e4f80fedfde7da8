"""Mistakes found by ``polytile.lower``, which sees the whole program: arguments that do not
match the schedule, illegal dependences (with a concrete violating pair of iterations),
out-of-bounds reads and loop structures an annotation cannot have."""

from __future__ import annotations

import pytest

import polytile
from polytile import te
from polytile.errors import ScheduleError

N = 8


def matmul(name: str = "C"):
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name=name)
    return A, B, C, k, te.create_schedule(C.op)


def chain():
    A = te.placeholder((N, N), name="A")
    B = te.compute((N, N), lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((N, N), lambda i, j: B[i, j] + 1, name="C")
    return A, B, C, te.create_schedule(C.op)


def missing_input():
    A, _, C, _, s = matmul()
    polytile.lower(s, [A, C])


def missing_output():
    A, B, _, _, s = matmul()
    polytile.lower(s, [A, B])


def args_missing():
    _, _, _, _, s = matmul()
    polytile.lower(s, None)


def duplicate_argument():
    A, B, C, _, s = matmul()
    polytile.lower(s, [A, B, C, A])


def extra_tensor_of_another_computation():
    A, B, C, _, s = matmul()
    _, _, D, _, _ = matmul("D")
    polytile.lower(s, [A, B, C, D])


def args_not_a_list():
    _, _, C, _, s = matmul()
    polytile.lower(s, C)


def operation_in_args():
    A, B, C, _, s = matmul()
    polytile.lower(s, [A, B, C.op])


def axis_in_args():
    A, B, C, _, s = matmul()
    polytile.lower(s, [A, B, C, C.op.axis[0]])


def string_in_args():
    _, _, _, _, s = matmul()
    polytile.lower(s, ["A", "B", "C"])


def a_stage_for_the_schedule():
    A, B, C, _, s = matmul()
    polytile.lower(s[C], [A, B, C])


def a_tensor_for_the_schedule():
    A, B, C, _, _ = matmul()
    polytile.lower(C, [A, B, C])


def scalar_var_not_in_args():
    n = te.var("n")
    A = te.placeholder((N,), name="A")
    C = te.compute((N,), lambda i: A[i] * n.astype("float32"), name="C")
    polytile.lower(te.create_schedule(C.op), [A, C])


def inlined_tensor_in_args():
    A, B, C, s = chain()
    s[B].compute_inline()
    polytile.lower(s, [A, B, C])


def attached_tensor_in_args():
    # C reads only the first column of B: the argument B would keep garbage elsewhere
    A = te.placeholder((8, 5), name="A")
    B = te.compute((8, 5), lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((8,), lambda i: B[i, 0] + 1, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    polytile.lower(s, [A, B, C])


def read_out_of_bounds():
    A = te.placeholder((N,), name="A")
    C = te.compute((N,), lambda i: A[i + 1], name="C")
    polytile.lower(te.create_schedule(C.op), [A, C])


def vectorize_a_reduction():
    A, B, C, k, s = matmul()
    s[C].vectorize(k)
    polytile.lower(s, [A, B, C])


def parallel_a_reduction():
    A, B, C, k, s = matmul()
    s[C].parallel(k)
    polytile.lower(s, [A, B, C])


def parallel_the_outer_part_of_a_reduction():
    A, B, C, k, s = matmul()
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(ko, *C.op.axis, ki)
    s[C].parallel(ko)
    polytile.lower(s, [A, B, C])


def bind_a_reduction_to_blocks():
    A, B, C, k, s = matmul()
    s[C].reorder(k, *C.op.axis)
    s[C].bind(k, te.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.x"))
    polytile.lower(s, [A, B, C])


def thread_axis_range_differs_from_the_loop():
    A = te.placeholder((64,), name="A")
    C = te.compute((64,), lambda i: A[i] * 2, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis((0, 32), "threadIdx.x"))
    polytile.lower(s, [A, C])


def vectorize_not_innermost():
    A, B, C, _, s = matmul()
    s[C].vectorize(C.op.axis[0])   # outer-loop vectorization needs serial loops inside
    s[C].parallel(C.op.axis[1])
    polytile.lower(s, [A, B, C])


def vectorize_a_reduction_loop_with_loops_inside():
    A, B, C, _, s = matmul()
    s[C].reorder(C.op.reduce_axis[0], *C.op.axis)
    s[C].vectorize(C.op.reduce_axis[0])
    polytile.lower(s, [A, B, C])


def compute_at_with_an_indirect_read():
    A = te.placeholder((N,), name="A")
    Idx = te.placeholder((N,), dtype="int32", name="Idx")
    B = te.compute((N,), lambda i: A[i] * 2, name="B")
    C = te.compute((N,), lambda i: B[Idx[i]], name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    polytile.lower(s, [A, Idx, C])


def attach_to_an_inlined_stage():
    A, B, C, _ = chain()
    D = te.compute((N, N), lambda i, j: C[i, j] * 3, name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[1])
    s[C].compute_inline()
    polytile.lower(s, [A, D])


CASES = [
    pytest.param(missing_input, ScheduleError,
                 r"lower: input 'B' is read by stage 'C' but is not in args; add it to args",
                 id="missing-input"),
    pytest.param(missing_output, ScheduleError,
                 r"lower: output 'C' of the schedule is not in args; add it to args",
                 id="missing-output"),
    pytest.param(args_missing, ScheduleError,
                 r"lower: args is missing; pass the list of input and output tensors",
                 id="args-missing"),
    pytest.param(duplicate_argument, ScheduleError, r"lower: tensor 'A' appears twice in args",
                 id="duplicate-argument"),
    pytest.param(extra_tensor_of_another_computation, ScheduleError,
                 r"lower: tensor 'D' in args is not part of the schedule; pass tensors of this "
                 r"computation", id="extra-tensor-of-another-computation"),
    pytest.param(args_not_a_list, TypeError,
                 r"(?s)lower: args is the Tensor 'C', not a list; expected a list.*hint: wrap "
                 r"it in a list", id="args-not-a-list"),
    pytest.param(operation_in_args, TypeError,
                 r"(?s)lower: args\[2\] is the operation 'C' \(like C\.op\); expected its "
                 r"tensor.*hint: pass C", id="operation-in-args"),
    pytest.param(axis_in_args, TypeError,
                 r"lower: args\[3\] is the iter_var 'i'; expected tensors and scalar te\.var",
                 id="axis-in-args"),
    pytest.param(string_in_args, ScheduleError,
                 r"lower: argument 'A' is neither a tensor nor a te\.var; pass tensors",
                 id="string-in-args"),
    pytest.param(a_stage_for_the_schedule, TypeError,
                 r"(?s)lower: got the stage s\[C\] where the schedule was expected; expected a "
                 r"Schedule.*hint: pass the whole schedule s", id="stage-for-the-schedule"),
    pytest.param(a_tensor_for_the_schedule, TypeError,
                 r"(?s)lower: got the tensor 'C' where the schedule was expected.*hint: create "
                 r"one with s = te\.create_schedule", id="tensor-for-the-schedule"),
    pytest.param(scalar_var_not_in_args, ScheduleError,
                 r"lower: te\.var 'n' is used but not in args; add it to args",
                 id="scalar-var-not-in-args"),
    pytest.param(inlined_tensor_in_args, ScheduleError,
                 r"lower: tensor 'B' in args is inlined \(compute_inline\); an argument needs "
                 r"storage", id="inlined-tensor-in-args"),
    pytest.param(attached_tensor_in_args, ScheduleError,
                 r"compute_at: stage 'B' is in args and computed at 'C'.'i', which reads "
                 r"only part of it: .* would never be written; an argument tensor computed at "
                 r"a loop whose iterations read all of it", id="attached-tensor-in-args"),
    pytest.param(read_out_of_bounds, ScheduleError,
                 r"(?s)lower: stage 'C' reads A\[8\] outside its shape \(8,\) \(at i=7\); every "
                 r"read must stay inside.*hint: guard", id="read-out-of-bounds"),
    pytest.param(vectorize_a_reduction, ScheduleError,
                 r"(?s)vectorize: loop 'k' of stage 'C' carries a dependence; its iterations "
                 r"must be independent.*Violating pair: C\.update\[i=0, j=0, k=0\] -> "
                 r"C\.update\[i=0, j=0, k=\d\].*hint: .*rfactor",
                 id="vectorize-a-reduction-violating-pair"),
    pytest.param(parallel_a_reduction, ScheduleError,
                 r"(?s)parallel: loop 'k' of stage 'C' carries a dependence.*Violating pair: "
                 r"C\.update\[i=0, j=0, k=\d\] -> C\.update\[i=0, j=0, k=\d\].*hint:",
                 id="parallel-a-reduction-violating-pair"),
    pytest.param(parallel_the_outer_part_of_a_reduction, ScheduleError,
                 r"(?s)parallel: loop 'k\.outer' of stage 'C' carries a dependence.*Violating "
                 r"pair: C\.update\[.*k=3\] -> C\.update\[.*k=4\].*hint:",
                 id="parallel-k-outer-violating-pair"),
    pytest.param(bind_a_reduction_to_blocks, ScheduleError,
                 r"(?s)bind: loop 'k' of stage 'C' carries a dependence.*Violating pair:.*hint: "
                 r"a reduction axis can be bound to threadIdx .* but not to blockIdx",
                 id="bind-a-reduction-to-blockIdx"),
    pytest.param(thread_axis_range_differs_from_the_loop, ScheduleError,
                 r"(?s)bind: loop 'i' of stage 'C' has extent 64, but it is bound to a "
                 r"'threadIdx\.x' axis created with extent 32; expected equal extents.*hint: "
                 r"split the loop by 32", id="thread-axis-range-differs-from-the-loop"),
    pytest.param(vectorize_not_innermost, ScheduleError,
                 r"(?s)vectorize: loop 'i' of stage 'C' has the parallel loop 'j' inside it; "
                 r"serial or unrolled loops inside a vectorized loop.*hint: reorder",
                 id="vectorize-not-innermost"),
    pytest.param(vectorize_a_reduction_loop_with_loops_inside, ScheduleError,
                 r"(?s)vectorize: loop 'k' of stage 'C' is a reduction loop with loops inside "
                 r"it: as vector lanes its iterations would update the same elements "
                 r"together; a spatial loop.*Loops inside: i, j.*hint: vectorize a spatial "
                 r"loop, or rfactor 'C' over 'k'", id="vectorize-a-reduction-loop-outside"),
    pytest.param(compute_at_with_an_indirect_read, ScheduleError,
                 r"compute_at: stage 'C' reads 'B' at a non-affine index B\[Idx\[i\]\]; attach "
                 r"only stages read with affine indices", id="compute-at-with-indirect-read"),
    pytest.param(attach_to_an_inlined_stage, ScheduleError,
                 r"compute_at: stage 'B' is attached to 'C', which is inlined; attach to a "
                 r"stage that has loops", id="attach-to-an-inlined-stage"),
]


@pytest.mark.parametrize("mistake, exc, match", CASES)
def test_lowering_mistake_is_refused(mistake, exc, match):
    with pytest.raises(exc, match=match):
        mistake()


def test_build_checks_the_schedule_and_args_the_same_way():
    A, B, C, _, s = matmul()
    with pytest.raises(TypeError, match=r"build: got the stage s\[C\]"):
        polytile.build(s[C], [A, B, C])
    with pytest.raises(TypeError, match=r"build: args is the Tensor 'C', not a list"):
        polytile.build(s, C)
