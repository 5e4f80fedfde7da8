"""``polytile.lower`` argument checks and bounds checks, scalar parameters, several
outputs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, elementwise2d, lowered, rand, run_schedule

from polytile import ScheduleError, te


def test_missing_args_raises():
    w = elementwise2d(3, 4)
    with pytest.raises(ScheduleError, match=r"lower: args is missing; pass the list of input and "
                       r"output tensors"):
        lowered(w.schedule(), None)


def test_input_not_in_args_raises():
    w = elementwise2d(3, 4)
    with pytest.raises(ScheduleError, match="lower: input 'A' is read by stage 'B' but is not "
                       "in args; add it to args"):
        lowered(w.schedule(), [w.C])


def test_output_not_in_args_raises():
    w = elementwise2d(3, 4)
    with pytest.raises(ScheduleError, match="lower: output 'C' of the schedule is not in args"):
        lowered(w.schedule(), [w.A])


def test_tensor_twice_in_args_raises():
    w = elementwise2d(3, 4)
    with pytest.raises(ScheduleError, match="lower: tensor 'A' appears twice in args"):
        lowered(w.schedule(), [w.A, w.A, w.C])


def test_unused_placeholder_in_args_is_a_parameter():
    """As in TVM: an input the computation does not read is still a parameter."""
    w = elementwise2d(3, 4)
    other = te.placeholder((3,), name="other")
    assert "other: float32[3]" in lowered(w.schedule(), [w.A, w.C, other])


def test_foreign_compute_in_args_raises():
    w = elementwise2d(3, 4)
    other = te.compute((3,), lambda i: w.A[i, 0] * 2.0, name="other")
    with pytest.raises(ScheduleError, match="lower: tensor 'other' in args is not part of the "
                       "schedule"):
        lowered(w.schedule(), [w.A, w.C, other])


def test_non_tensor_in_args_raises():
    w = elementwise2d(3, 4)
    with pytest.raises(ScheduleError, match="lower: argument 3 is neither a tensor nor a te.var"):
        lowered(w.schedule(), [w.A, w.C, 3])


def test_indexing_schedule_with_foreign_tensor_raises():
    w = elementwise2d(3, 4)
    other = te.placeholder((3,), name="other")
    with pytest.raises(ScheduleError, match="schedule: 'other' is not part of this schedule"):
        w.schedule()[other]


def test_create_schedule_refuses_non_operations():
    with pytest.raises(TypeError, match="expected operations"):
        te.create_schedule(["C"])
    with pytest.raises(TypeError, match="no operations given"):
        te.create_schedule([])


def test_intermediate_in_args_is_written(backend):
    w = elementwise2d(3, 4)
    outs = run_schedule(w.schedule(), [w.A, w.B, w.C], w.inputs, backend)
    check(outs[0], w.inputs[0].astype("float64") * 2 + 1)
    check(outs[1], w.ref)


# ---------------------------------------------------------------------- bounds at lower
def test_out_of_bounds_read_detected_at_lower():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i + 1], name="B")
    with pytest.raises(ScheduleError, match=r"lower: stage 'B' reads A\[10\] outside its shape "
                       r"\(10,\) \(at i=9\)(.|\n)*Read: A\[\(i \+ 1\)\](.|\n)*hint: guard padded "
                       r"reads with te.if_then_else"):
        lowered(te.create_schedule(B.op), [A, B])


def test_negative_read_detected_at_lower():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[8 - i], name="B")
    with pytest.raises(ScheduleError, match=r"reads A\[-1\] outside its shape \(10,\) \(at i=9\)"):
        lowered(te.create_schedule(B.op), [A, B])


def test_out_of_bounds_in_reduction_detected_at_lower():
    A = te.placeholder((10,), name="A")
    k = te.reduce_axis((0, 11), "k")
    B = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="B")
    with pytest.raises(ScheduleError, match=r"reads A\[10\] .*\(at i=0, k=10\)"):
        lowered(te.create_schedule(B.op), [A, B])


def test_out_of_bounds_of_intermediate_detected_at_lower():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((10,), lambda i: B[i] + B[i + 1], name="C")
    with pytest.raises(ScheduleError, match=r"stage 'C' reads B\[10\]"):
        lowered(te.create_schedule(C.op), [A, C])


def test_out_of_bounds_through_inlined_stage_detected():
    A = te.placeholder((10,), name="A")
    B = te.compute((11,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((10,), lambda i: B[i + 1], name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    with pytest.raises(ScheduleError, match=r"reads A\[10\] outside its shape"):
        lowered(s, [A, C])


def test_guarded_reads_are_in_bounds(backend):
    A = te.placeholder((10,), name="A")
    k = te.reduce_axis((0, 12), "k")
    B = te.compute((10,), lambda i: te.if_then_else(te.all(i >= 1, i < 9), A[i + 1] - A[i - 1],
                                                     0.0), name="B")
    C = te.compute((1,), lambda i: te.sum(A[k - 1], axis=k, where=te.all(k >= 1, k <= 10)),
                   name="C")
    a = rand((10,))
    s = te.create_schedule([B.op, C.op])
    outs = run_schedule(s, [A, B, C], [a], backend)
    ref_b = np.zeros(10)
    ref_b[1:9] = a[2:].astype("float64") - a[:-2]
    check(outs[0], ref_b)
    check(outs[1], np.array([a.astype("float64").sum()]), k=10)


# ---------------------------------------------------------------------- scalar params
def test_te_var_parameter(backend):
    n = te.var("n")
    A = te.placeholder((7,), name="A")
    B = te.compute((7,), lambda i: A[i] * n.astype("float32") + i.astype("float32"), name="B")
    s = te.create_schedule(B.op)
    assert "def main(A: float32[7], B: float32[7], n: int32):" in lowered(s, [A, B, n])
    a = rand((7,))
    out = run_schedule(s, [A, B, n], [a, -3], backend)[0]
    check(out, a.astype("float64") * -3 + np.arange(7))


def test_te_var_missing_from_args_raises():
    n = te.var("n")
    A = te.placeholder((7,), name="A")
    B = te.compute((7,), lambda i: A[i] * n.astype("float32"), name="B")
    with pytest.raises(ScheduleError, match="lower: te.var 'n' is used but not in args"):
        lowered(te.create_schedule(B.op), [A, B])


# ---------------------------------------------------------------------- several outputs
def test_two_outputs_sharing_a_producer(backend):
    A = te.placeholder((5, 6), name="A")
    B = te.compute((5, 6), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((5, 6), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((6, 5), lambda i, j: B[j, i] - 1.0, name="D")
    s = te.create_schedule([C.op, D.op])
    s[B].compute_inline()
    s[C].split(C.op.axis[1], factor=4)
    a = rand((5, 6))
    c, d = run_schedule(s, [A, C, D], [a], backend)
    check(c, a.astype("float64") * 2 + 1)
    check(d, (a.astype("float64") * 2 - 1).T)


def test_output_also_read_by_another_output(backend):
    A = te.placeholder((5,), name="A")
    B = te.compute((5,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((5,), lambda i: B[i] + B[4 - i], name="C")
    s = te.create_schedule([B.op, C.op])
    a = rand((5,))
    b, c = run_schedule(s, [A, B, C], [a], backend)
    check(b, a.astype("float64") * 2)
    check(c, a.astype("float64") * 2 + a[::-1].astype("float64") * 2)
