"""placeholder/compute/reduce_axis: malformed definitions raise; well-formed ones carry the
expected axes, shapes and dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from polytile import te

n = 10


@pytest.fixture
def A():
    return te.placeholder((n, n), name="A")


def test_compute_axes_and_shape(A):
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, 4), lambda i, j: te.sum(A[i, k] * A[k, j], axis=k), name="C")
    assert C.shape == (n, 4) and C.dtype == "float32" and C.name == "C"
    assert [iv.var.name for iv in C.op.axis] == ["i", "j"]
    assert [(iv.dom.min, iv.dom.extent) for iv in C.op.axis] == [(0, n), (0, 4)]
    assert C.op.reduce_axis == (k,)
    assert C.op.input_tensors == [A]


def test_varargs_lambda_gets_generated_axis_names(A):
    C = te.compute((n, n), lambda *idx: A[idx], name="C")
    assert [iv.var.name for iv in C.op.axis] == ["i0", "i1"]


def test_numpy_int_shape_is_accepted(A):
    C = te.compute((np.int64(4),), lambda i: A[i, i])
    assert C.shape == (4,)


def test_int_shape_is_a_1d_shape():
    assert te.placeholder(5).shape == (5,)


# ------------------------------------------------------------------ malformed computes
def test_nested_reduction_raises(A):
    k = te.reduce_axis((0, n), "k")
    k2 = te.reduce_axis((0, n), "k2")
    with pytest.raises(TypeError, match="must be the whole body of the compute"):
        te.compute((n,), lambda i: te.sum(te.sum(A[i, k2], axis=k2) * A[i, k], axis=k))


def test_reduction_inside_expression_raises(A):
    k = te.reduce_axis((0, n), "k")
    with pytest.raises(TypeError, match="split it into two computes"):
        te.compute((n,), lambda i: te.sum(A[i, k], axis=k) + 1.0)


def test_reduce_axis_used_outside_its_reduction_raises(A):
    k = te.reduce_axis((0, n), "k")
    with pytest.raises(TypeError, match="the body uses axis 'k'"):
        te.compute((n,), lambda i: A[i, k])


def test_reduce_axis_not_listed_in_axis_raises(A):
    k = te.reduce_axis((0, n), "k")
    k2 = te.reduce_axis((0, n), "k2")
    with pytest.raises(TypeError, match="the body uses axis 'k2'"):
        te.compute((n,), lambda i: te.sum(A[k2, k], axis=k))


def test_spatial_axis_of_another_compute_raises(A):
    C = te.compute((n,), lambda i: A[i, 0], name="C")
    with pytest.raises(TypeError, match="the body uses axis 'i', which is neither an axis of "
                       "this compute"):
        te.compute((n,), lambda j: C[C.op.axis[0]])


def test_axis_of_another_compute_as_reduce_axis_raises(A):
    C = te.compute((n,), lambda i: A[i, 0], name="C")
    with pytest.raises(TypeError):
        te.compute((n,), lambda i: te.sum(A[i, C.op.axis[0]], axis=C.op.axis[0]))


@pytest.mark.parametrize("shape, fn, nargs", [
    ((n,), lambda i, j: 0.0, 2), ((n, n), lambda i: 0.0, 1), ((n,), lambda: 0.0, 0)])
def test_wrong_lambda_arity_raises(shape, fn, nargs):
    with pytest.raises(TypeError, match=f"fcompute takes {nargs} index arguments but the "
                       f"shape has {len(shape)} dimensions"):
        te.compute(shape, fn)


@pytest.mark.parametrize("bad", [2.5, "a", None, True])
def test_non_int_shape_raises(bad):
    with pytest.raises(TypeError, match=r"compute: dimension 0 is .*expected a non-negative int"):
        te.compute((bad,), lambda i: 0.0)
    with pytest.raises(TypeError, match=r"placeholder: dimension 1"):
        te.placeholder((3, bad))


def test_symbolic_shape_must_be_affine():
    m = te.var("m")
    assert te.placeholder((m, m + 1)).shape[0] is m   # symbolic sizes (tests/symbolic)
    sq = te.placeholder((m * m,)).shape[0]    # not affine: a size of its own, checked
    assert te.symbolic.derived_of(sq) is not None   # equal to m * m at each call
    with pytest.raises(TypeError, match="integer expression of te.var parameters"):
        te.placeholder((te.if_then_else(m > 1, m, 1),))


def test_negative_shape_raises_and_zero_size_is_legal():
    with pytest.raises(ValueError, match="dimension 0 is -1; expected a non-negative int"):
        te.compute((-1,), lambda i: 0.0)
    assert te.compute((0, 3), lambda i, j: 0.0).shape == (0, 3)


@pytest.mark.parametrize("index", ["i * 1.5", "i.astype('float32')", "1.0"])
def test_float_index_raises(A, index):
    with pytest.raises(TypeError, match=r"A\[\.\.\.\]: index 0 .* has dtype float32; expected an "
                       r"integer"):
        te.compute((n,), eval(f"lambda i: A[{index}, 0]", {"A": A}))


@pytest.mark.parametrize("nidx", [1, 3])
def test_wrong_number_of_indices_raises(A, nidx):
    with pytest.raises(IndexError, match=f"tensor has 2 dimensions .*got {nidx} indices"):
        te.compute((n,), lambda i: A[(i,) * nidx])


def test_slice_index_raises(A):
    with pytest.raises(TypeError, match="slices are not supported"):
        te.compute((n,), lambda i: A[i, 1:3])


def test_tensor_used_as_scalar_raises(A):
    with pytest.raises(TypeError, match="used as a scalar; index it"):
        te.compute((n,), lambda i: A)


def test_several_outputs_give_a_list_of_tensors(A):
    outs = te.compute((n,), lambda i: (A[i, 0], A[i, 1]))
    assert isinstance(outs, list) and len(outs) == 2
    assert outs[0].op is outs[1].op and outs[0].op.num_outputs == 2
    assert outs[1].op.output(1) is outs[1] and outs[1].value_index == 1


def test_several_outputs_mixing_a_reduction_refused(A):
    k = te.reduce_axis((0, 3), name="k")
    with pytest.raises(TypeError, match="not the elements of one tuple reduction"):
        te.compute((n,), lambda i: (A[i, 0], te.sum(A[i, k], axis=k)))


def test_body_of_wrong_type_raises():
    with pytest.raises(TypeError, match="cannot convert str"):
        te.compute((n,), lambda i: "x")


# --------------------------------------------------------------------- reduce_axis, sum
def test_reversed_reduce_axis_raises_and_empty_is_legal():
    with pytest.raises(ValueError, match="range of 'r' is reversed"):
        te.reduce_axis((7, 0), name="r")
    assert te.reduce_axis((3, 3), name="e").dom.extent == 0


def test_reduce_axis_needs_pair():
    with pytest.raises(TypeError, match=r"dom must be a \(lo, hi\) pair"):
        te.reduce_axis(5)


def test_sum_without_axis_raises(A):
    with pytest.raises(TypeError, match="missing axis="):
        te.compute((n,), lambda i: te.sum(A[i, 0]))


def test_sum_over_spatial_axis_raises(A):
    # a spatial IterVar is not a reduce_axis; te.sum(e, iv) must not silently add them
    C = te.compute((n,), lambda i: A[i, 0], name="C")
    with pytest.raises(TypeError):
        te.compute((n,), lambda i: te.sum(A[i, 0], axis=[C.op.axis[0]]))


def test_reduce_axis_twice_raises(A):
    k = te.reduce_axis((0, n), "k")
    with pytest.raises(ValueError, match="appears twice"):
        te.compute((n,), lambda i: te.sum(A[i, k], axis=[k, k]))


def test_where_must_be_bool(A):
    k = te.reduce_axis((0, n), "k")
    with pytest.raises(TypeError, match="where= has dtype int32; expected bool"):
        te.compute((n,), lambda i: te.sum(A[i, k], axis=k, where=i))


def test_init_must_not_use_reduce_axis(A):
    k = te.reduce_axis((0, n), "k")
    with pytest.raises(TypeError, match="the init of the reduction uses reduce_axis 'k'"):
        te.compute((n,), lambda i: te.sum(A[i, k], axis=k, init=A[i, k]))


def test_same_reduce_axis_may_serve_two_computes(A):
    k = te.reduce_axis((0, n), "k")
    C = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="C")
    D = te.compute((n,), lambda i: te.max(A[k, i], axis=k), name="D")
    assert C.op.reduce_axis == D.op.reduce_axis == (k,)


def test_reduction_dtype_follows_source(A):
    k = te.reduce_axis((0, n), "k")
    I8 = te.placeholder((n, n), dtype="int8", name="I8")
    assert te.compute((n,), lambda i: te.sum(I8[i, k], axis=k)).dtype == "int8"
    assert te.compute((n,), lambda i: te.sum(I8[i, k].astype("int32"), axis=k)).dtype == "int32"


def test_chained_indexing_reads_like_tvm(A):
    """``A[i][j]`` is ``A[i, j]`` (TVM's TensorSlice); a 3-d tensor chains in any split."""
    B = te.compute((n, n), lambda i, j: A[i][j] * 2, name="B")
    C = te.compute((n, n), lambda i, j: A[i, j] * 2, name="C")
    assert str(B.op.body) == str(C.op.body) == "((A[i, j] * 2.0f),)"
    T = te.placeholder((3, 4, 5), name="T")
    s = T[1]
    assert isinstance(s, te.TensorSlice) and s.dtype == "float32"
    assert isinstance(s[2], te.TensorSlice)
    assert isinstance(T[1][2][3], te.TensorRead) and isinstance(T[1, 2][3], te.TensorRead)
    assert isinstance(T[1][2, 3], te.TensorRead)


def test_chained_indexing_numbers_match_numpy():
    import polytile

    T = te.placeholder((3, 4, 5), name="T")
    C = te.compute((3, 4, 5), lambda i, j, k: T[i][j][k] + T[2 - i][j, 4 - k], name="C")
    f = polytile.build(te.create_schedule(C.op), [T, C], target="llvm")
    t = np.random.default_rng(0).uniform(-1, 1, (3, 4, 5)).astype("float32")
    c = np.full((3, 4, 5), np.nan, "float32")
    f(t, c)
    np.testing.assert_allclose(c, t + t[::-1, :, ::-1], rtol=1e-6)


def test_incomplete_chained_index_raises(A):
    with pytest.raises(IndexError, match=r"A\[i\]: tensor has 2 dimensions \(10, 10\), got 1 "
                       r"indices; expected one index per dimension \(index further"):
        te.compute((n,), lambda i: A[i] + 1.0)
    with pytest.raises(IndexError, match=r"A\[i\]\[\.\.\.\]: tensor has 2 dimensions .*got 3"):
        te.compute((n,), lambda i: A[i][i, 0])
    with pytest.raises(TypeError, match="slices are not supported"):
        te.compute((n,), lambda i: A[i][1:3])
    with pytest.raises(IndexError, match="got 1 indices"):
        te.compute((n,), lambda i: A(i))       # a call takes every index at once


def test_a_one_tuple_body_gives_one_tensor(A):
    t = te.compute((n,), lambda i: (A[i, 0] + 1,), name="one")
    assert isinstance(t, te.Tensor) and t.op.num_outputs == 1
