"""Programs in the style of TVM v0.19's ``tests/python/te`` (tensor and schedule tests),
written anew for polytile with only the imports changed in spirit: each one that TVM only
constructs is also built here and checked against numpy where it computes something.
What polytile refuses from those files is checked for its message (see
``docs/tvm_compatibility.md``)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import polytile
from polytile import te, tir


def _rand(shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def test_tensor_identity_hash_and_chained_indexing():
    m, n, l = te.size_var("m"), te.size_var("n"), te.size_var("l")
    A = te.placeholder((m, l), name="A")
    B = te.placeholder((n, l), name="B")
    T = te.compute((m, n, l), lambda i, j, k: A[i, k] * B[j, k])
    assert tuple(T.shape) == (m, n, l) and isinstance(A.op, te.PlaceholderOp)
    assert T.op.output(0) == T and hash(T.op.output(0)) == hash(T)
    assert {T.op.output(0): 1}[T] == 1
    assert T[0][0][0].astype("float16").dtype == "float16"
    f = polytile.build(te.create_schedule(T.op), [A, B, T])
    a, b = _rand((3, 5), 1), _rand((4, 5), 2)
    t = np.full((3, 4, 5), np.nan, "float32")
    f(a, b, t)
    np.testing.assert_allclose(t, a[:, None, :].astype(np.float64) * b[None], rtol=1e-6)


def test_rank_zero_placeholder_called_and_reduced():
    m = te.size_var("m")
    A = te.placeholder((m,), name="A")
    scale = te.placeholder((), name="s")
    k = te.reduce_axis((0, m), name="k")
    T = te.compute((), lambda: te.sum(A[k] * scale(), axis=k))
    assert tuple(T.shape) == ()
    f = polytile.build(te.create_schedule(T.op), [A, scale, T])
    for size in (1, 7, 130):
        a, t = _rand(size, size), np.array(np.nan, "float32")
        f(a, np.array(1.5, "float32"), t)
        np.testing.assert_allclose(t, a.astype(np.float64).sum() * 1.5, rtol=1e-5, atol=1e-6)


def test_bare_expression_shapes_conv1d():
    n = te.size_var("n")
    A = te.placeholder((n + 2), name="A")

    def shifted(ii):
        i = ii + 1
        return A[i - 1] + A[i] + A[i + 1]

    B = te.compute(n, shifted, name="B")
    f = polytile.build(te.create_schedule(B.op), [A, B, n])
    for size in (1, 6, 31):
        a, b = _rand(size + 2, size), np.full(size, np.nan, "float32")
        f(a, b, size)
        a64 = a.astype(np.float64)
        np.testing.assert_allclose(b, a64[:-2] + a64[1:-1] + a64[2:], rtol=1e-5, atol=1e-6)


def test_reducers_multi_axis_lists_custom_and_tuple_with_where():
    m, n = te.size_var("m"), te.size_var("n")
    A = te.placeholder((m, n), name="A")
    k1, k2 = te.reduce_axis((0, n), "k"), te.reduce_axis((0, m), "k")
    C = te.compute((1,), lambda _: te.sum(A[k2, k1], axis=[k1, k2]), name="C")
    mysum = te.comm_reducer(lambda x, y: x + y, lambda t: tir.const(0, dtype=t))
    k = te.reduce_axis((0, n), "k")
    D = te.compute((m,), lambda i: mysum(A[i, k], axis=k), name="D")
    assert mysum(m, n).dtype == "int32"   # a reducer applied to two values combines them
    f = polytile.build(te.create_schedule([C.op, D.op]), [A, C, D])
    a = _rand((5, 7), 3)
    c, d = np.full(1, np.nan, "float32"), np.full(5, np.nan, "float32")
    f(a, c, d)
    np.testing.assert_allclose(c, [a.astype(np.float64).sum()], rtol=1e-5)
    np.testing.assert_allclose(d, a.astype(np.float64).sum(1), rtol=1e-5)

    pair = te.comm_reducer(lambda x, y: (x[0] + y[0], x[1] + y[1]),
                           lambda t0, t1: (tir.const(0, t0), tir.const(1, t1)), name="pair")
    mm, nn = te.var("m"), te.var("n")
    idx = te.placeholder((mm, nn), name="idx", dtype="int32")
    val = te.placeholder((mm, nn), name="val", dtype="int32")
    k = te.reduce_axis((0, nn), "k")
    T0, T1 = te.compute((mm,), lambda i: pair((idx[i, k], val[i, k]), axis=k,
                                              where=te.floormod(k, 2) == 0), name="T")
    f = polytile.build(te.create_schedule(T0.op), [idx, val, T0, T1])
    x = np.random.default_rng(4).integers(-9, 9, (3, 7)).astype("int32")
    y = np.random.default_rng(5).integers(-9, 9, (3, 7)).astype("int32")
    o0, o1 = np.full(3, -99, "int32"), np.full(3, -99, "int32")
    f(x, y, o0, o1)
    np.testing.assert_array_equal(o0, x[:, ::2].sum(1))
    np.testing.assert_array_equal(o1, 1 + y[:, ::2].sum(1))


def test_call_syntax_and_reduce_over_a_shifted_read():
    m, n, l = te.size_var("m"), te.size_var("n"), te.size_var("l")
    A = te.placeholder((m, l), name="A")
    B = te.placeholder((n, l), name="B")
    T = te.compute((m, n, l), lambda i, j, k: A[i, k] * B[j, k], name="T")
    rv = te.reduce_axis((0, A.shape[1] - 1), "k")
    C = te.compute((m, n), lambda i, j: te.sum(T(i, j, rv + 1), axis=rv), name="C")
    f = polytile.build(te.create_schedule(C.op), [A, B, C])
    a, b = _rand((3, 6), 6), _rand((2, 6), 7)
    c = np.full((3, 2), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a[:, 1:].astype(np.float64) @ b[:, 1:].T, rtol=1e-5)


def test_tuple_outputs_with_different_dependences():
    m, n = te.size_var("m"), te.size_var("n")
    A0, A1 = te.placeholder((m, n), name="A0"), te.placeholder((m, n), name="A1")
    B0, B1 = te.compute((m, n), lambda i, j: (A0[i, j] * 2, A1[i, j] * 3), name="B")
    C = te.compute((m, n), lambda i, j: B0[i, j] + 4, name="C")
    assert B0.value_index == 0 and B1.value_index == 1
    f = polytile.build(te.create_schedule(C.op), [A0, A1, C])
    a, c = _rand((3, 4), 8), np.full((3, 4), np.nan, "float32")
    f(a, a, c)
    np.testing.assert_allclose(c, a.astype(np.float64) * 2 + 4, rtol=1e-6)
    x = te.placeholder((1,), name="x")
    assert tuple(te.compute(x.shape, lambda i: x[i] + x[i]).op.input_tensors) == (x,)


def test_schedule_relations_attrs_and_pickle():
    m, n = te.size_var("m"), te.size_var("n")
    A = te.placeholder((m, n), name="A")
    T = te.compute((m, n), lambda i, j: A[i, j], name="T")
    s = te.create_schedule(T.op)
    xo, yo, xi, yi = s[T].tile(T.op.axis[0], T.op.axis[1], x_factor=10, y_factor=5)
    fused = s[T].fuse(xi, yi)   # constant extents: affine
    assert any(isinstance(r, te.schedule.Fuse) for r in s[T].relations)
    assert tuple(s[T].leaf_iter_vars) == (xo, yo, fused)
    s[T].parallel(xo)
    s[T].unroll(fused)
    attrs = s[T].iter_var_attrs
    assert attrs[xo].iter_type == te.schedule.IterVar.Parallelized
    assert attrs[fused].iter_type == te.schedule.IterVar.Unrolled
    assert yo not in attrs
    s2 = pickle.loads(pickle.dumps(s))   # TVM pickles schedules too
    assert [v.name for v in s2.stages[-1].leaf_iter_vars] == ["i.outer", "j.outer",
                                                              "i.inner.j.inner.fused"]
    S = te.placeholder((), name="S")
    U = te.compute((), lambda: S() + 1, name="U")
    su = te.create_schedule(U.op)
    one = su[U].fuse()
    assert any(isinstance(r, te.schedule.Singleton) for r in su[U].relations)
    assert tuple(su[U].leaf_iter_vars) == (one,)


@pytest.mark.parametrize("reducer", ["sum", "max", "min"])
def test_schedule_with_a_reduction_pickles(reducer):
    # te.sum/max/min held lambdas: pickling any schedule with a reduction failed
    M, N, K = 5, 7, 9
    A = te.placeholder((M, K), name="A")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: getattr(te, reducer)(A[i, k] * (j + 1), axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=4)
    s[C].parallel(C.op.axis[0])
    s2, (A2, C2) = pickle.loads(pickle.dumps((s, [A, C])))
    a = np.random.default_rng(0).standard_normal((M, K)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    polytile.build(s2, [A2, C2])(a, c)
    ref = getattr(np, reducer)(
        a.astype(np.float64)[:, None, :] * np.arange(1, N + 1)[None, :, None], axis=2)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


def test_pragma_and_bind_attrs():
    A = te.placeholder((100,), name="A")
    T = te.compute((100,), lambda i: A[i], name="T")
    s = te.create_schedule(T.op)
    xo, xi = s[T].split(T.op.axis[0], factor=10)
    s[T].pragma(xi, "vectorize")
    assert s[T].iter_var_attrs[xi].iter_type == te.schedule.IterVar.Vectorized
    assert s[T].iter_var_attrs[xi].pragma_keys[0].value == "vectorize"
    tx = te.thread_axis("threadIdx.x")
    s[T].bind(xo, tx)
    assert s[T].iter_var_attrs[xo].bind_thread is tx
    with pytest.raises(polytile.errors.ScheduleError, match="unknown pragma 'pragma1'"):
        s[T].pragma(xo, "pragma1")


def test_split_factor_expressions_like_tvm():
    # TVM's test_split_disable_predicate uses 4 * vscale(): an expression factor; polytile
    # takes integer expressions of sizes and scalars, and refuses vscale (no SVE)
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: A[i] + 2, name="C")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4 * (n // 8 + 1), disable_predication=True)
    f = polytile.build(s, [A, B])
    for size in (1, 43, 100):
        a, b = _rand(size, size), np.full(size, np.nan, "float32")
        f(a, b)
        np.testing.assert_allclose(b, a + 2, rtol=1e-6)
    with pytest.raises(TypeError, match="tir.vscale: scalable vectors"):
        tir.vscale()


def test_extern_multi_out():
    # TVM's test_extern_multi_out, with the packed function written as C, and a symbolic
    # size (with call_packed: tests/te/test_call_packed.py)
    m = te.size_var("m")
    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i] * 10, name="B")
    res = te.extern([A.shape, A.shape], [A, B], lambda ins, outs: tir.call_extern(
        "int32", "myadd2", ins[0].access_ptr("r"), ins[1].access_ptr("r"),
        outs[0].access_ptr("w"), outs[1].access_ptr("w"), m), name="ext")
    s = te.create_schedule([r.op for r in res])
    packed = res[0].op.input_tensors[0]
    s[packed].pragma(packed.op.axis[0], "import_c", """
        int myadd2(const float* a, const float* b, float* c, float* d, int n) {
          for (int i = 0; i < n; ++i) { c[i] = a[i] + b[i]; d[i] = a[i] - b[i]; }
          return 0;
        }""")
    f = polytile.build(s, [A, *res])
    for n in (1, 20, 33):
        a = _rand((n,), n)
        c, d = np.full(n, np.nan, "float32"), np.full(n, np.nan, "float32")
        f(a, c, d)
        a64 = a.astype("float64")
        np.testing.assert_allclose(c, a64 * 11, rtol=1e-6)
        np.testing.assert_allclose(d, a64 * -9, rtol=1e-6)


def test_refused_tvm_te_features_say_why():
    m = te.size_var("m")
    A = te.placeholder((m,), name="A")
    # call_packed passes buffers (ins[0]), not their data handles: tests/te/test_call_packed.py
    with pytest.raises(TypeError, match=r"tir.call_packed: argument 'A' of 'myadd' is a "
                       r"buffer's data handle \(ins\[k\].data\); expected the buffer itself"):
        te.extern((m,), [A], lambda ins, outs: tir.call_packed("myadd", ins[0].data,
                                                                outs[0].data, m))
    x = te.placeholder((8,), name="x")
    v = te.size_var("v")
    z = te.compute((8,), lambda i: x[i] * v, name="z")
    with pytest.raises(ValueError, match="scalar_params are not supported"):
        te.decl_tensor_intrin(z.op, lambda ins, outs, sp: None, scalar_params=[v])
