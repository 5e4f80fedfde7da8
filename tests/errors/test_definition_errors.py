"""Mistakes in a compute definition (``te.placeholder``, ``te.compute``, ``te.reduce_axis``,
``te.sum``): each raises at once, with a message that names the object and says what was
expected. The kind of mistake a TVM user makes when porting code."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te

N = 8


def _A(dtype: str = "float32"):
    return te.placeholder((N, N), name="A", dtype=dtype)


def _vec(name: str, dtype: str):
    return te.placeholder((N,), name=name, dtype=dtype)


def _k(name: str = "k"):
    return te.reduce_axis((0, N), name=name)


def lambda_too_few_args():
    A = _A()
    te.compute((N, N), lambda i: A[i, 0], name="C")


def lambda_too_many_args():
    A = _A()
    te.compute((N, N), lambda i, j, k: A[i, j], name="C")


def python_if_on_expr():
    A = _A()
    te.compute((N, N), lambda i, j: A[i, j] if i < 4 else 0.0, name="C")


def python_and_on_expr():
    A = _A()
    te.compute((N, N), lambda i, j: te.if_then_else((i < 4) and (j < 4), A[i, j], 0.0),
               name="C")


def def_without_return():
    A = _A()

    def body(i, j):
        A[i, j] * 2

    te.compute((N, N), body, name="C")


def body_is_a_tensor():
    A = _A()
    te.compute((N, N), lambda i, j: A, name="C")


def uint64_plus_signed():
    A, B = _vec("A", "uint64"), _vec("B", "int32")
    te.compute((N,), lambda i: A[i] + B[i], name="C")


def true_division_of_ints():
    A = _vec("A", "int32")
    te.compute((N,), lambda i: A[i] / A[i], name="C")


def bitwise_and_on_floats():
    A = _A()
    te.compute((N,), lambda i: A[i, 0] & A[i, 1], name="C")


def exp_of_an_int():
    A = _vec("A", "int32")
    te.compute((N,), lambda i: te.exp(A[i]), name="C")


def sum_without_axis():
    A = _A()
    te.compute((N,), lambda i: te.sum(A[i, 0]), name="C")


def sum_over_a_spatial_axis():
    A = _A()
    te.compute((N,), lambda i: te.sum(A[i, 0], axis=i), name="C")


def reduce_inside_an_expression():
    A, k = _A(), _k()
    te.compute((N,), lambda i: te.sum(A[i, k], axis=k) * 2, name="C")


def reduce_axis_outside_its_sum():
    A, k = _A(), _k()
    te.compute((N,), lambda i: A[i, k], name="C")


def axis_of_another_compute():
    A = _A()
    B = te.compute((N,), lambda i: A[i, 0], name="B")
    te.compute((N,), lambda i: A[i, B.op.axis[0]], name="C")


def reduce_axis_listed_twice():
    A, k = _A(), _k()
    te.compute((N,), lambda i: te.sum(A[i, k], axis=[k, k]), name="C")


def where_is_not_bool():
    A, k = _A(), _k()
    te.compute((N,), lambda i: te.sum(A[i, k], axis=k, where=k + 1), name="C")


def if_then_else_on_a_float():
    A = _A()
    te.compute((N,), lambda i: te.if_then_else(A[i, 0], 1.0, 0.0), name="C")


def reduce_axis_with_one_bound():
    te.reduce_axis(N, name="k")


def placeholder_float_shape():
    te.placeholder((8.0, 4), name="A")


def placeholder_negative_extent():
    te.placeholder((-3, 4), name="A")


def placeholder_shape_none():
    te.placeholder(None, name="A")


def placeholder_symbolic_shape():
    n = te.var("n")
    te.placeholder((te.if_then_else(n > 2, n, 2), 4), name="A")   # (n * m: a derived size)


def compute_float_shape():
    A = _A()
    te.compute((N, N / 2), lambda i, j: A[i, j], name="C")


def unknown_dtype():
    te.placeholder((N,), name="A", dtype="float31")


def too_few_indices():
    A = _A()
    te.compute((N,), lambda i: A[i], name="C")


def float_index():
    A, F = _A(), _vec("F", "float32")
    te.compute((N,), lambda i: A[F[i], i], name="C")


def slice_index():
    A = _A()
    te.compute((N,), lambda i: A[i, :], name="C")


def constant_division_by_zero():
    A = _vec("A", "int32")
    te.compute((N,), lambda i: A[i] // 0, name="C")


def broadcast_mismatch():
    A = te.placeholder((3, 4), name="A")
    B = te.placeholder((5,), name="B")
    A + B


def two_outputs_mixing_a_reduction():
    A = _A()
    k = te.reduce_axis((0, 2), name="k")
    te.compute((N,), lambda i: (A[i, 0], te.sum(A[i, k], axis=k)), name="C")


def create_schedule_of_a_list_of_lists():
    A = _A()
    C = te.compute((N,), lambda i: A[i, 0], name="C")
    te.create_schedule([[C.op]])


def extern_fcompute_returning_none():
    A = _A()
    te.extern((N, N), [A], lambda ins, outs: None, name="E")


def extern_fcompute_returning_an_int():
    A = _A()
    te.extern((N, N), [A], lambda ins, outs: 42, name="E")


CASES = [
    pytest.param(lambda_too_few_args, TypeError,
                 r"(?s)compute 'C': fcompute takes 1 index arguments but the shape has 2 "
                 r"dimensions; expected .*hint: write lambda i, j:", id="lambda-too-few-args"),
    pytest.param(lambda_too_many_args, TypeError,
                 r"(?s)compute 'C': fcompute takes 3 index arguments.*hint: write lambda i, j:",
                 id="lambda-too-many-args"),
    pytest.param(python_if_on_expr, TypeError,
                 r"expression `\(i < 4\)` has no truth value.*use te\.if_then_else",
                 id="python-if-on-expr"),
    pytest.param(python_and_on_expr, TypeError,
                 r"expression `\(i < 4\)` has no truth value.*te\.all",
                 id="python-and-on-expr"),
    pytest.param(def_without_return, TypeError,
                 r"(?s)compute 'C': fcompute returned None; expected an expression.*hint: .*"
                 r"return", id="def-without-return"),
    pytest.param(body_is_a_tensor, TypeError,
                 r"compute 'C': tensor 'A' of shape \(8, 8\) used as a scalar; index it",
                 id="body-is-an-unindexed-tensor"),
    pytest.param(uint64_plus_signed, TypeError,
                 r"no integer type holds both uint64 and int32; cast one explicitly",
                 id="mixed-dtypes-uint64-int32-without-cast"),
    pytest.param(true_division_of_ints, TypeError,
                 r"/: both operands are int32; true division needs floats.*//",
                 id="true-division-of-ints-without-cast"),
    pytest.param(bitwise_and_on_floats, TypeError,
                 r"bitand: operands have dtype float32; expected integers",
                 id="bitwise-and-on-floats"),
    pytest.param(exp_of_an_int, TypeError,
                 r"te\.exp: argument A\[i\] has dtype int32; expected a float.*astype",
                 id="exp-of-an-int"),
    pytest.param(sum_without_axis, TypeError, r"te\.sum: missing axis=; pass the reduce_axis",
                 id="sum-without-axis"),
    pytest.param(sum_over_a_spatial_axis, TypeError,
                 r"te\.sum: axis i is a spatial axis of the compute; reduce over a "
                 r"te\.reduce_axis", id="sum-over-a-spatial-axis"),
    pytest.param(reduce_inside_an_expression, TypeError,
                 r"compute 'C': a reduction .* must be the whole body.*; split it into two "
                 r"computes", id="reduce-not-at-the-top-of-the-body"),
    pytest.param(reduce_axis_outside_its_sum, TypeError,
                 r"compute 'C': the body uses axis 'k'.*; expected .*reduce axes only inside "
                 r"the te\.sum", id="reduce-axis-used-outside-a-sum"),
    pytest.param(axis_of_another_compute, TypeError,
                 r"compute 'C': the body uses axis 'i'.*an axis of another compute",
                 id="axis-of-another-compute"),
    pytest.param(reduce_axis_listed_twice, ValueError,
                 r"te\.sum: reduce_axis 'k' appears twice in axis=; expected each",
                 id="reduce-axis-listed-twice"),
    pytest.param(where_is_not_bool, TypeError, r"te\.sum: where= has dtype int32; expected bool",
                 id="where-is-not-bool"),
    pytest.param(if_then_else_on_a_float, TypeError,
                 r"te\.if_then_else: condition A\[i, 0\] has dtype float32; expected bool",
                 id="if-then-else-on-a-float"),
    pytest.param(reduce_axis_with_one_bound, TypeError,
                 r"reduce_axis 'k': dom must be a \(lo, hi\) pair, got 8; expected .*\(0, 8\)",
                 id="reduce-axis-with-one-bound"),
    pytest.param(placeholder_float_shape, TypeError,
                 r"placeholder: dimension 0 is 8\.0; expected a non-negative int",
                 id="placeholder-float-shape"),
    pytest.param(placeholder_negative_extent, ValueError,
                 r"placeholder: dimension 0 is -3; expected a non-negative int",
                 id="placeholder-negative-extent"),
    pytest.param(placeholder_shape_none, TypeError,
                 r"placeholder: shape is None; expected an int or a tuple",
                 id="placeholder-shape-none"),
    pytest.param(placeholder_symbolic_shape, TypeError,
                 r"placeholder: dimension 0 is the expression .*; expected a "
                 r"non-negative int or an integer expression of te.var parameters",
                 id="placeholder-symbolic-shape"),
    pytest.param(compute_float_shape, TypeError,
                 r"compute: dimension 1 is 4\.0; expected a non-negative int",
                 id="compute-shape-from-true-division"),
    pytest.param(unknown_dtype, TypeError,
                 r"dtype: unsupported dtype 'float31'; expected one of .*float32",
                 id="unknown-dtype"),
    pytest.param(too_few_indices, IndexError,
                 r"A\[i\]: tensor has 2 dimensions \(8, 8\), got 1 indices; expected one "
                 r"index per dimension \(index further: A\[i\]\[\.\.\.\]",
                 id="too-few-indices"),
    pytest.param(float_index, TypeError,
                 r"A\[\.\.\.\]: index 0 \(F\[i\]\) has dtype float32; expected an integer",
                 id="float-index"),
    pytest.param(slice_index, TypeError,
                 r"A\[\.\.\.\]: slices are not supported in a compute definition; index every",
                 id="slice-index"),
    pytest.param(constant_division_by_zero, ZeroDivisionError,
                 r"floordiv: integer division by the constant 0", id="division-by-constant-0"),
    pytest.param(broadcast_mismatch, ValueError,
                 r"add: shapes \(3, 4\) and \(5,\) do not broadcast \(dimension 1\); expected",
                 id="broadcast-mismatch"),
    pytest.param(two_outputs_mixing_a_reduction, TypeError,
                 r"compute 'C': fcompute returned 2 values of which 1 are reductions, not the "
                 r"elements of one tuple reduction", id="two-outputs-mixing-a-reduction"),
    pytest.param(create_schedule_of_a_list_of_lists, TypeError,
                 r"create_schedule: got list \[ComputeOp.*; expected operations or tensors",
                 id="create-schedule-of-nested-lists"),
    # a forgotten return used to pass here and fail at build with a tensorize error about
    # reduce axes 'A_0', 'A_1' that the user never declared
    pytest.param(extern_fcompute_returning_none, TypeError,
                 r"extern: fcompute of stage 'E' returned nothing \(None\); fcompute\(ins, "
                 r"outs\) returning one statement", id="extern-fcompute-returns-none"),
    pytest.param(extern_fcompute_returning_an_int, TypeError,
                 r"extern: stage 'E': fcompute of 'E' returned int for its body",
                 id="extern-fcompute-returns-int"),
]


@pytest.mark.parametrize("mistake, exc, match", CASES)
def test_definition_mistake_is_refused(mistake, exc, match):
    with pytest.raises(exc, match=match):
        mistake()


def test_reduce_axis_shared_by_two_computes_is_legal():
    """Not a mistake in polytile (TVM allows it too): one reduce_axis object in two
    computes gives two independent loops, whatever the schedule."""
    A, k = _A(), _k()
    C = te.compute((N,), lambda i: te.sum(A[i, k], axis=k), name="C")
    D = te.compute((N,), lambda i: te.sum(A[k, i] * C[k], axis=k), name="D")
    s = te.create_schedule(D.op)
    s[C].compute_at(s[D], k)
    f = polytile.build(s, [A, D])
    a = np.random.default_rng(0).uniform(-1, 1, (N, N)).astype("float32")
    d = np.full(N, np.nan, "float32")
    f(a, d)
    want = a.astype("float64").T @ a.astype("float64").sum(axis=1)
    np.testing.assert_allclose(d, want, rtol=2e-5, atol=2e-5 * N)
