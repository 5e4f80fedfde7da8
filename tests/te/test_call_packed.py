"""``polytile.register_func`` + ``tir.call_packed`` (TVM's packed calls): built CPU code
calls a registered Python function with numpy views of its buffer regions, in a
``te.extern`` and in a tensor intrinsic (strided tiles, a parallel loop); its
exceptions reach the caller; GPU targets and exported libraries refuse it."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te, tir
from polytile.errors import BuildError, DefinitionTypeError


@pytest.fixture
def registered():
    names = []

    def reg(name, fn, **kw):
        names.append(name)
        return polytile.register_func(name, fn, **kw)

    yield reg
    for n in names:
        polytile.registry.remove_global_func(n)


def _extern(n, name="test.scale_add", alpha=2.5):
    A = te.placeholder((n,), name="A", dtype="float64")
    B = te.placeholder((n,), name="B", dtype="float64")
    C = te.extern((n,), [A, B], lambda ins, outs: tir.call_packed(
        name, ins[0], ins[1], outs[0], alpha), name="C", dtype="float64")
    return A, B, C


@pytest.mark.parametrize("n", [1, 17])
def test_extern_calls_a_registered_python_function(registered, n):
    seen = []

    def scale_add(a, b, c, alpha):
        seen.append((type(c).__name__, c.shape, alpha))
        c[...] = a.numpy() * alpha + b

    registered("test.scale_add", scale_add)
    A, B, C = _extern(n)
    f = polytile.build(te.create_schedule(C.op), [A, B, C])
    rng = np.random.default_rng(n)
    a, b, c = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n), np.full(n, np.nan)
    f(a, b, c)
    np.testing.assert_allclose(c, 2.5 * a + b, rtol=1e-15)
    assert seen == [("CPUArray", (n,), 2.5)]


def test_exceptions_and_late_registration_reach_the_caller(registered):
    A, B, C = _extern(5, name="test.late")
    f = polytile.build(te.create_schedule(C.op), [A, B, C])   # looked up when called
    a, b, c = np.ones(5), np.ones(5), np.zeros(5)
    with pytest.raises(ValueError, match="get_global_func: no function is registered as "
                       "'test.late'"):
        f(a, b, c)

    def boom(*args):
        raise KeyError("from python")

    registered("test.late", boom)
    with pytest.raises(KeyError, match="from python"):
        f(a, b, c)
    registered("test.late", lambda a, b, c, alpha: c.copyfrom(a - b), override=True)
    f(a, b, c)          # the failed calls left nothing pending
    np.testing.assert_array_equal(c, np.zeros(5))


def gemv_intrin(m, l):
    """``c[i] = sum_k a[k] * b[i, k]`` by a Python function (b's rows strided)."""
    a = te.placeholder((l,), name="a", dtype="float64")
    b = te.placeholder((m, l), name="b", dtype="float64")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    Bb = tir.decl_buffer(b.shape, b.dtype, name="B", strides=[te.var("s1"), 1])

    def fcompute(ins, outs):
        ib = tir.ir_builder.create()
        ib.emit(tir.call_packed("test.gemv", outs[0], ins[0], ins[1]))
        return ib.get()

    return te.decl_tensor_intrin(c.op, fcompute, binds={b: Bb})


def test_tensor_intrinsic_on_strided_tiles_in_a_parallel_loop(registered):
    calls = []

    def gemv(c, a, b):
        calls.append(b.strides)
        c[...] = b @ a

    registered("test.gemv", gemv)
    N, M, L = 7, 24, 13
    A = te.placeholder((N, L), name="A", dtype="float64")
    B = te.placeholder((M, L), name="B", dtype="float64")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=8)
    s[C].reorder(x, yo, yi, k)
    s[C].tensorize(yi, gemv_intrin(8, L))
    s[C].parallel(x)
    f = polytile.build(s, [A, B, C])
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (N, L)), rng.uniform(-1, 1, (M, L))
    c = np.full((N, M), np.nan)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-13)
    assert len(calls) == N * 3 and set(calls) == {(L * 8, 8)}   # tiles of B's rows


def test_refused_on_gpus_in_exported_libraries_and_for_bad_arguments(registered, tmp_path):
    registered("test.scale_add", lambda *a: None)
    A, B, C = _extern(64)
    s = te.create_schedule(C.op)
    with pytest.raises(BuildError, match="tir.call_packed of 'test.scale_add' .* on the "
                       "'cuda' target; expected call_packed on the 'llvm' target only"):
        polytile.build(s, [A, B, C], target="cuda").get_source()
    f = polytile.build(s, [A, B, C])
    with pytest.raises(BuildError, match=r"export_library: function 'main' calls the Python "
                       r"functions \['test.scale_add'\]"):
        f.export_library(str(tmp_path / "f.so"))
    X = te.placeholder((4,), name="X", dtype="float64")
    with pytest.raises(DefinitionTypeError, match="tir.call_packed: argument 'float32' of "
                       "'test.x'"):
        te.extern((4,), [X], lambda ins, outs: tir.call_packed("test.x", outs[0], "float32"))
    with pytest.raises(DefinitionTypeError, match="tir.call_packed: first argument"):
        te.extern((4,), [X], lambda ins, outs: tir.call_packed(outs[0]))


def test_register_func_names():
    @polytile.register_func
    def test_named_by_itself(x):
        return x

    try:
        assert polytile.get_global_func("test_named_by_itself") is test_named_by_itself
        with pytest.raises(ValueError, match="register_func: a function is already "
                           "registered as 'test_named_by_itself'.*\n  hint: pass override"):
            polytile.register_func("test_named_by_itself", print)
        assert polytile.get_global_func("test.none", allow_missing=True) is None
    finally:
        polytile.registry.remove_global_func("test_named_by_itself")


def test_tvm_extern_multi_out_with_a_symbolic_size(registered):
    # TVM's test_extern_multi_out: a packed function of two outputs over a size_var
    def myadd(a, b, c, d, m):
        assert a.shape == (m,)
        c[...] = a + b
        d[...] = a - b

    registered("myadd", myadd)
    m = te.size_var("m")
    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i] * 10, name="B")
    res = te.extern([A.shape, A.shape], [A, B], lambda ins, outs: tir.call_packed(
        "myadd", ins[0], ins[1], outs[0], outs[1], m), name="ext")
    s = te.create_schedule([r.op for r in res])
    f = polytile.build(s, [A, *res])
    for n in (0, 1, 20, 33):
        a = np.random.default_rng(n).uniform(-1, 1, n).astype("float32")
        c, d = np.full(n, np.nan, "float32"), np.full(n, np.nan, "float32")
        f(a, c, d)
        np.testing.assert_allclose(c, a.astype("float64") * 11, rtol=1e-6)
        np.testing.assert_allclose(d, a.astype("float64") * -9, rtol=1e-6)


def test_tvm_extern_op_tutorial(registered):
    # TVM's "External Tensor Functions" tutorial with its cblas call written in numpy and
    # its my_tvm_addone (tvm.nd.array(x.numpy() + 1).copyto(y)) unchanged; odd sizes
    def cblas_matmul(a, b, c, transa, transb):
        np.matmul(a.T if transa else a, b.T if transb else b, out=c)

    def my_tvm_addone(x, y):
        polytile.nd.array(x.numpy() + 1).copyto(y)

    registered("tvm.contrib.cblas.matmul", cblas_matmul)
    registered("tvm.contrib.my_tvm_addone", my_tvm_addone)
    n, l, m = 19, 7, 11
    bias = te.var("bias", dtype="float32")
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    C = te.extern((n, m), [A, B], lambda ins, outs: tir.call_packed(
        "tvm.contrib.cblas.matmul", ins[0], ins[1], outs[0], False, False), name="C")
    D = te.compute(C.shape, lambda i, j: C[i, j] + bias, name="D")
    f = polytile.build(te.create_schedule(D.op), [A, B, D, bias], "llvm")
    rng = np.random.default_rng(3)
    a, b = rng.uniform(size=(n, l)).astype("float32"), rng.uniform(size=(l, m)).astype("float32")
    d = polytile.nd.array(np.full((n, m), np.nan, "float32"))
    f(a, b, d, 10.0)
    np.testing.assert_allclose(d.numpy(), a.astype("float64") @ b + 10, rtol=1e-5)
    A = te.placeholder((n,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tir.call_packed(
        "tvm.contrib.my_tvm_addone", ins[0], outs[0]), name="C")
    f = polytile.build(te.create_schedule(B.op), [A, B], "llvm")
    a, b = rng.uniform(size=n).astype("float32"), np.full(n, np.nan, "float32")
    f(a, b)
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)


@pytest.mark.parametrize("name", ["register_intrin_rule", "intrin"])
def test_intrin_rule_registration_says_what_to_write_instead(name):
    # TVM's intrin_math tutorial: tvm.target.register_intrin_rule /
    # tvm.target.intrin.register_intrin_lowering were a bare AttributeError
    with pytest.raises(AttributeError, match=rf"(?s)target.{name}: TVM's registration of "
                       r"per-target lowering rules .*hint: .*call_pure_extern"):
        getattr(polytile.target, name)
