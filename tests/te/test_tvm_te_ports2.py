"""More TE programs in the style of TVM v0.19's ``tests/python/te`` (``test_te_schedule``,
``test_te_build_lower``, ``test_te_tensor``), written anew as a user porting them would,
with ``tvm`` replaced by ``polytile``; each checked against numpy (float64, odd sizes,
poisoned outputs), and the schedules TVM refuses refused here with a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand

import polytile
from polytile import ScheduleError, te
from polytile.schedule import interpreter


def _nan(*shape):
    return np.full(shape, np.nan, "float32")


def test_lower_rfactor_cross_thread_with_size_vars():
    # test_lower_rfactor: the rfactor'd reduction bound to threadIdx.x, its partial
    # computed at the reduce axis; symbolic sizes, run on the interpreter (CUDA lowering)
    n, m = te.size_var("n"), te.size_var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    xo, xi = s[B].split(s[B].op.axis[0], factor=4)
    s[B.op].bind(xo, te.thread_axis("blockIdx.x"))
    s[B.op].bind(xi, te.thread_axis("threadIdx.y"))
    s[B].bind(s[B].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    f = polytile.lower(s, [A, B], target="cuda", stop_after=None)
    a, b = rand((7, 37), seed=1), _nan(7)
    interpreter.run(f, a, b)
    check(b, a.astype("float64").sum(1), k=37)


def test_dependent_output_shape():
    # test_dependent_output_shape: a dimension n // x (not affine in the sizes) is a size
    # of its own, read off the array and checked equal to n // x at each call
    n, m, x = te.size_var("n"), te.size_var("m"), te.size_var("x")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n // x, m), lambda i, j: A[i * x, j] * 2.0, name="B")
    C = te.compute((n // x, m), lambda i, j: B[i, j] + 1.0, name="C")
    assert C.shape[0] is B.shape[0]          # one size for one expression
    s = te.create_schedule(C.op)
    f = polytile.build(s, [A, C, x])
    a = rand((17, 5), seed=2)
    for xx in (1, 3, 4):
        c = _nan(17 // xx, 5)
        f(a, c, xx)
        check(c, a[::xx][:17 // xx].astype("float64") * 2 + 1)
    with pytest.raises(ValueError, match=r"\(\(n // x\) - n_div_x\) = -1 for x=3"):
        f(a, _nan(6, 5), 3)
    with pytest.raises(ValueError, match=r"the divisor x in the size 'n_div_x'.* is x = 0 "
                       r"for x=0.*expected at least 1"):
        f(a, _nan(5, 5), 0)
    # a flat placeholder of n * m elements read as a matrix
    F = te.placeholder((n * m,), name="F")
    G = te.compute((n, m), lambda i, j: F[i * m + j] * 3.0, name="G")
    g = _nan(3, 4)
    fa = rand((12,), seed=3)
    polytile.build(te.create_schedule(G.op), [F, G])(fa, g)
    check(g, fa.reshape(3, 4).astype("float64") * 3)
    i = te.reduce_axis((0, 4), "i")
    with pytest.raises(TypeError, match=r"compute: dimension 0 is the expression .*; expected "
                       r"a non-negative int or an integer expression of te.var parameters"):
        te.compute((i.var * 2,), lambda j: F[j])


def test_split_uneven_and_tuple_reducer_with_condition():
    # test_split_uneven_unique_likely (16 split by 5: a ragged last tile) and
    # test_tensor_reduce_multiout_with_cond (a tuple reducer with where= and an identity
    # that is not zero), run
    a = te.placeholder((16, 16), name="a")
    b = te.placeholder((16, 16), name="b")
    c = te.compute((16, 16), lambda x, y: a[x, y] + b[x, y], name="c")
    s = te.create_schedule(c.op)
    xo, xi = s[c].split(c.op.axis[0], 5)
    assert "min(5, (16 - (5 * x.outer)))" in str(polytile.lower(s, [a, b, c]))
    av, bv, cv = rand((16, 16), seed=4), rand((16, 16), seed=5), _nan(16, 16)
    polytile.build(s, [a, b, c])(av, bv, cv)
    check(cv, av.astype("float64") + bv)

    mysum = te.comm_reducer(lambda x, y: (x[0] + y[0], x[1] * y[1]),
                            lambda t0, t1: (te.const(0, t0), te.const(1, t1)), name="mysum")
    m, n = te.var("m"), te.var("n")
    idx = te.placeholder((m, n), name="idx", dtype="int32")
    val = te.placeholder((m, n), name="val", dtype="int32")
    k = te.reduce_axis((0, n), "k")
    T0, T1 = te.compute((m,), lambda i: mysum((idx[i, k], val[i, k]), axis=k,
                                              where=te.floormod(k, 2) == 0), name="T")
    f = polytile.build(te.create_schedule(T0.op), [idx, val, T0, T1])
    g = np.random.default_rng(6)
    iv, vv = g.integers(-5, 5, (7, 9), dtype="int32"), g.integers(1, 3, (7, 9), dtype="int32")
    t0, t1 = np.full(7, -99, "int32"), np.full(7, -99, "int32")
    f(iv, vv, t0, t1)
    np.testing.assert_array_equal(t0, iv[:, ::2].sum(1))
    np.testing.assert_array_equal(t1, vv[:, ::2].prod(1))


def test_schedule_create_attach_at_a_split_of_a_split():
    # test_schedule_create: AA in 'shared' scope attached at the middle loop of two
    # splits, then the two inner loops reordered; size vars
    m, n, l = te.size_var("m"), te.size_var("n"), te.size_var("l")
    A = te.placeholder((m, l), name="A")
    B = te.placeholder((n, l), name="B")
    AA = te.compute((m, l), lambda i, j: A[i, j] * 2.0, name="AA")
    T = te.compute((m, n, l), lambda i, j, k: AA(i, k) * B(j, k), name="T")
    s = te.create_schedule(T.op)
    s[AA].set_scope("shared")
    xo, xi = s[T].split(T.op.axis[0], factor=10)
    xi1, xi2 = s[T].split(xi, factor=2)
    s[AA].compute_at(s[T], xi1)
    s[AA].split(AA.op.axis[0], factor=10)
    s[T].reorder(xi2, xi1)
    assert T.op.axis[1] in s[T].leaf_iter_vars
    a, b, t = rand((23, 4), seed=7), rand((3, 4), seed=8), _nan(23, 3, 4)
    polytile.build(s, [A, B, T])(a, b, t)
    check(t, (2 * a.astype("float64"))[:, None, :] * b[None])


def test_reorder_and_fuse_legal_and_refused():
    # test_reorder / test_fuse_with_out_of_order_axis(_with_reorder), with reads in bounds
    m = te.size_var("m")
    A = te.placeholder((m + 1,), name="A")
    T = te.compute(m, lambda i: A[i + 1], name="T")
    s = te.create_schedule(T.op)
    xo, xi = s[T].split(T.op.axis[0], factor=10)
    xi1, xi2 = s[T].split(xi, factor=2)
    s[T].reorder(xi2, xi1, xo)
    assert tuple(s[T].leaf_iter_vars) == (xi2, xi1, xo)
    with pytest.raises(ScheduleError, match="reorder: iter_var 'i.inner.inner' appears twice"):
        s[T].reorder(xi2, xi1, xi2)
    a, t = rand((24,), seed=9), _nan(23)
    polytile.build(s, [A, T])(a, t)
    check(t, a[1:])

    m, n = te.size_var("m"), te.size_var("n")
    A = te.placeholder((m, n), name="A")
    T = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="T")
    s = te.create_schedule(T.op)
    y = T.op.axis[1]
    xo, xi = s[T].split(T.op.axis[0], factor=10)
    with pytest.raises(ScheduleError, match=r"fuse: iter_vars 'i.outer' and 'j' of stage 'T' "
                       r"are not adjacent"):
        s[T].fuse(xo, y)
    s[T].reorder(y, xo, xi)
    with pytest.raises(ScheduleError, match=r"'j' and 'i.inner' of stage 'T' are not adjacent"):
        s[T].fuse(y, xi)
    s[T].fuse(y, xo)
    a, t = rand((13, 7), seed=10), _nan(13, 7)
    polytile.build(s, [A, T])(a, t)
    check(t, a.astype("float64") + 1)


@pytest.mark.parametrize("case", ["split", "fuse"])
def test_legalize_attach_target_split_or_fused_later(case):
    # test_legalize_invalid_attach: the loop a stage is computed at is split (or fused)
    # after compute_at; the stage follows the loop
    A = te.compute((10, 10), lambda i, j: (i * 10 + j).astype("float32"), name="A")
    B = te.compute((10, 10), lambda i, j: A[i][j] * 2.0, name="B")
    s = te.create_schedule([B.op])
    s[A].compute_at(s[B], B.op.axis[1])
    if case == "split":
        s[B].split(B.op.axis[1], 2)
    else:
        s[B].fuse(B.op.axis[0], B.op.axis[1])
    b = _nan(10, 10)
    polytile.build(s, [B])(b)
    check(b, 2 * np.arange(100.0).reshape(10, 10))


def test_invalid_compute_at_and_vectorized_reduction_are_refused():
    # test_compute_at (self, and a cycle) and test_vectorize_commreduce
    def add():
        A = te.compute((16, 16), lambda *i: 1.0, name="A")
        B = te.compute((16, 16), lambda *i: 2.0, name="B")
        C = te.compute((16, 16), lambda *i: A(*i) + B(*i), name="C")
        return A, B, C

    A, B, C = add()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="compute_at: stage 'C' cannot be computed inside "
                       "itself"):
        s[C].compute_at(s[C], C.op.axis[0])
        polytile.lower(s, [A, B])
    A, B, C = add()
    s = te.create_schedule(C.op)
    s[A].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match="compute_at: stage 'C' is an output"):
        s[C].compute_at(s[A], A.op.axis[0])
        polytile.lower(s, [C])
    V = te.placeholder((128,), name="V")
    ax = te.reduce_axis((0, 128), name="ax")
    O = te.compute((1,), lambda _: te.sum(V[ax], axis=[ax]), name="O")
    s = te.create_schedule(O.op)
    with pytest.raises(ScheduleError, match=r"vectorize: loop 'ax' of stage 'O' carries a "
                       r"dependence[\s\S]*hint: reduction axes cannot run in parallel"):
        s[O].vectorize(ax)
        polytile.lower(s, [V, O])


@pytest.mark.parametrize("factor_axis", [0, 1])
def test_rfactor_of_two_reduce_axes_with_factor_axis(factor_axis):
    # test_rfactor with split axes and factor_axis, size var n
    n = te.size_var("n")
    k1, k2 = te.reduce_axis((0, n), name="k1"), te.reduce_axis((0, n), name="k2")
    A = te.placeholder((n, n, n), name="A")
    B = te.compute((n,), lambda i: te.sum(A[i, k1, k2], axis=[k1, k2]), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k1, factor=4)
    s[B].split(B.op.axis[0], factor=8)
    BF = s.rfactor(B, ki, factor_axis)
    assert [str(d) for d in BF.shape] == (["4", "n"] if factor_axis == 0 else ["n", "4"])
    a, b = rand((9, 9, 9), seed=11), _nan(9)
    polytile.build(s, [A, B])(a, b)
    check(b, a.astype("float64").sum((1, 2)), k=81)


def test_argmax_of_inlined_computes():
    # test_inline_multi_reduce: a tuple argmax over a chain of inlined elementwise stages
    argmax = te.comm_reducer(
        lambda x, y: (te.if_then_else(x[1] >= y[1], x[0], y[0]),
                      te.if_then_else(x[1] >= y[1], x[1], y[1])),
        lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    m, n = te.var("m"), te.var("n")
    val = te.placeholder((m, n), name="val")
    val1 = te.compute((m, n), lambda i, j: val[i, j] + 1, name="val1")
    val2 = te.compute((m, n), lambda i, j: te.exp(val1[i, j]), name="val2")
    k = te.reduce_axis((0, n), "k")
    T_idx, T_val = te.compute((m,), lambda i: argmax((k.var, val2[i, k]), axis=k), name="T")
    s = te.create_schedule(T_idx.op)
    s[val1].compute_inline()
    s[val2].compute_inline()
    v = rand((6, 11), seed=12)
    ti, tv = np.full(6, -7, "int32"), _nan(6)
    polytile.build(s, [val, T_idx, T_val])(v, ti, tv)
    np.testing.assert_array_equal(ti, v.argmax(1))
    check(tv, np.exp(v.astype("float64") + 1).max(1))


@te.tag_scope(tag="conv")
def _conv(data, weight):
    n, ic, h, w = data.shape
    oc, _, kh, kw = weight.shape
    rc = te.reduce_axis((0, ic), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute((n, oc, h - kh + 1, w - kw + 1), lambda i, o, y, x: te.sum(
        data[i, rc, y + ry, x + rx] * weight[o, rc, ry, rx], axis=[rc, ry, rx]), name="conv")


def test_tag_scope_with_decorator_and_nesting():
    # test_te_tag: a tag for every compute of a with-block or a decorated builder; scopes
    # do not nest; the tagged conv runs
    n, l = te.size_var("n"), te.size_var("l")
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((n, l), name="B")
    with te.tag_scope(tag="gemm"):
        k = te.reduce_axis((0, l), name="k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k),
                       attrs={"hello": 1, "arr": [10, 12]})
    assert C.op.tag == "gemm" and C.op.attrs["hello"] == 1 and "xx" not in C.op.attrs
    D = te.placeholder((2, 3, 9, 8), name="D")
    W = te.placeholder((4, 3, 3, 2), name="W")
    O = _conv(D, W)
    assert O.op.tag == "conv" and te.compute((2,), lambda i: D[i, 0, 0, 0]).op.tag == ""
    with pytest.raises(ValueError, match=r"tag_scope\('conv'\) entered inside "
                       r"tag_scope\('outer'\)"):
        with te.tag_scope(tag="outer"):
            _conv(D, W)
    with pytest.raises(ValueError, match=r"compute 'E': tag 'x' given inside "
                       r"tag_scope\('gemm'\)"):
        with te.tag_scope(tag="gemm"):
            te.compute((2,), lambda i: D[i, 0, 0, 0], name="E", tag="x")
    d, w, o = rand((2, 3, 9, 8), seed=13), rand((4, 3, 3, 2), seed=14), _nan(2, 4, 7, 7)
    polytile.build(te.create_schedule(O.op), [D, W, O])(d, w, o)
    ref = np.zeros((2, 4, 7, 7))
    for y in range(3):
        for x in range(2):
            ref += np.einsum("ncyx,oc->noyx", d[:, :, y:y + 7, x:x + 7].astype("float64"),
                             w[:, :, y, x])
    check(o, ref, k=18)


def test_te_names_of_other_parts_of_tvm_say_so():
    with pytest.raises(AttributeError, match=r"te.create_prim_func: TVM's conversion of TE "
                       r"to TensorIR \(tvm.tir.Schedule\), which polytile does not have"):
        te.create_prim_func
    with pytest.raises(AttributeError, match="te.hybrid: TVM's hybrid script"):
        te.hybrid
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        te.no_such_name


def test_verify_compute_reduction_placement():
    # test_te_verify_compute: a reduction is the whole body, or the tuple of one tuple
    # reduction; anything else is refused at definition
    n, m = te.size_var("n"), te.size_var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    k_ = te.reduce_axis((0, m - 1), "k_")
    te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    te.compute((n,), lambda i: A[i, 0] + 1, name="B")
    whole = r"a reduction \(te.sum/max/min\) must be the whole body of the compute"
    for f in (lambda i: te.sum(A[i, k], axis=k) + 1,
              lambda i: A[i, 0] * (te.sum(A[i, k], axis=k) + 1)):
        with pytest.raises(TypeError, match=whole):
            te.compute((n,), f, name="B")
    for f, r in ((lambda i: (te.sum(A[i, k], axis=k), A[i, 0] + 1), 1),
                 (lambda i: (te.sum(A[i, k], axis=k), te.sum(A[i, k_], axis=k_)), 2)):
        with pytest.raises(TypeError, match=f"fcompute returned 2 values of which {r} are "
                           "reductions, not the elements of one tuple reduction"):
            te.compute((n,), f, name="B")
