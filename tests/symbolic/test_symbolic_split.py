"""Split factors given as expressions (TVM allows any integer expression): ``factor=n // 4``,
``factor=`` a ``te.var`` passed as a scalar argument, ``nparts=`` of a symbolic extent and
``nparts=`` a ``te.var``. isl sees one loop; it is strip-mined after code generation.
Numeric tests against numpy at odd sizes, poisoned outputs; refusals with their messages."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.errors import ScheduleError
from polytile.schedule import interpreter


def _poison(shape):
    return np.full(shape, np.nan, "float32")


def _rand(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def _rowsumsq():
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="B")
    return m, n, A, k, B


def test_factor_expression_of_the_size():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=n // 4)
    assert str(xi.dom.extent) == "(n // 4)"
    s[B].parallel(xo)
    text = str(polytile.lower(s, [A, B]))
    assert "for i.outer in parallel(" in text and "for i.inner in range(0, min(" in text
    assert "the factor of the split of 'i' in stage 'B'" in text
    f = polytile.build(s, [A, B])
    for N in (4, 5, 7, 17, 101):
        a, b = _rand(N, N), _poison(N)
        f(a, b)
        np.testing.assert_allclose(b, a.astype(np.float64) * 2 + 1, rtol=1e-6)
    # the message used to say "..., minus 1 (it must be at least 1) is ((n // 4) - 1) = -1"
    with pytest.raises(ValueError, match=r"the factor of the split of 'i' in stage 'B' is "
                       r"\(n // 4\) = 0 for n=3; expected at least 1"):
        f(np.zeros(3, "float32"), np.zeros(3, "float32"))


@pytest.mark.parametrize("how", ["factor", "nparts"])
def test_reduction_split_by_a_scalar_argument(how):
    m, n, A, k, B = _rowsumsq()
    nt = te.var("nt")
    s = te.create_schedule(B.op)
    s[B].split(k, **{how: nt})
    io, ii = s[B].split(B.op.axis[0], nparts=3)   # constant nparts of a symbolic extent
    s[B].parallel(io)
    f = polytile.build(s, [A, B, nt])
    func = polytile.lower(s, [A, B, nt])
    for M, N, t in ((5, 7, 2), (1, 1, 1), (9, 30, 4), (3, 0, 2), (8, 5, 9), (2, 13, 13)):
        a, b = _rand((M, N), M * N + t), _poison(M)
        f(a, b, t)
        ref = (a.astype(np.float64) ** 2).sum(1)
        np.testing.assert_allclose(b, ref, rtol=1e-5, atol=1e-6)
        b2 = _poison(M)
        interpreter.run(func, a, b2, t)   # the loop IR itself, independent of LLVM
        np.testing.assert_allclose(b2, ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=rf"the {how} of the split of 'k' in stage 'B' is nt "
                       r"= 0 for nt=0.*; expected at least 1"):
        f(np.zeros((2, 2), "float32"), np.zeros(2, "float32"), 0)


def test_symbolic_split_inside_other_loops_and_a_consumer():
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] * B[i, n - 1 - j], name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=(n + 2) // 3)
    io, ii = s[C].split(C.op.axis[0], factor=2)
    s[C].reorder(io, ii, jo, ji)
    s[B].split(B.op.axis[0], nparts=m + 1)
    f = polytile.build(s, [A, C])
    for M, N in ((1, 1), (5, 7), (4, 12), (0, 3)):
        a, c = _rand((M, N), M + N), _poison((M, N))
        f(a, c)
        b = a.astype(np.float64) + 1
        np.testing.assert_allclose(c, b * b[:, ::-1], rtol=1e-5)


def test_copy_and_trace_of_a_symbolic_split():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] - 3.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=n // 2 + 1)
    s2 = s.copy()
    assert str(polytile.lower(s2, [A, B])) == str(polytile.lower(s, [A, B]))


def test_refusals():
    m, n, A, k, B = _rowsumsq()
    nt = te.var("nt")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=nt)
    s[B].parallel(ko)
    with pytest.raises(ScheduleError, match=r"parallel: loop 'k' of stage 'B' carries a "
                       r"dependence"):
        polytile.lower(s, [A, B, nt])
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=nt)
    s[B].reorder(ko, B.op.axis[0], ki)
    with pytest.raises(ScheduleError, match=r"reorder: stage 'B': the loops 'k.outer' and "
                       r"'k.inner' of a split by the symbolic factor nt are not adjacent"):
        polytile.lower(s, [A, B, nt])
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=nt)
    with pytest.raises(ScheduleError, match=r"split: iter_var 'k.inner' of stage 'B' comes "
                       r"from a split by the symbolic factor nt"):
        s[B].split(ki, factor=2)
    with pytest.raises(ScheduleError, match=r"fuse: iter_var 'k.outer'"):
        s[B].fuse(ko, ki)
    s[B].vectorize(ki)
    with pytest.raises(ScheduleError, match=r"vectorize: loop 'k.inner' of stage 'B' has the "
                       r"symbolic extent nt"):
        polytile.lower(s, [A, B, nt])
    s = te.create_schedule(B.op)
    s[B].split(k, factor=nt)
    with pytest.raises(ScheduleError, match=r"the symbolic size 'nt' is not a dimension of any "
                       r"argument"):
        polytile.lower(s, [A, B])


def test_compute_at_a_symbolic_split_is_refused():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=n // 3)
    s[B].compute_at(s[C], xo)
    with pytest.raises(ScheduleError, match=r"compute_at: stage 'B' is computed at 'i.outer' "
                       r"of 'C', a loop of a split by the symbolic factor"):
        polytile.lower(s, [A, C])
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], xo)
    s[B].split(B.op.axis[0], factor=n // 3)
    with pytest.raises(ScheduleError, match=r"split: stage 'B' splits 'i' by the symbolic "
                       r"factor .* and is computed at 'C'"):
        polytile.lower(s, [A, C])


# ------------------------------------------------------------------ CUDA
import os  # noqa: E402
import sys  # noqa: E402

from helpers import compile_with_nvcc  # noqa: E402


def _thread_count_var():
    # TVM's elementwise schedule with the thread count a run-time value: one kernel for
    # every n and every block size
    m, n, nt = te.var("m"), te.var("n"), te.var("nt")
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0 - A[i, n - 1 - j], name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[1], factor=nt)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.y"))
    return s, [A, B, nt]


def test_symbolic_block_size_lowering_and_nvcc():
    s, args = _thread_count_var()
    text = str(polytile.lower(s, args, target="cuda"))
    assert "grid=[((n + (nt - 1)) // nt), m, 1], block=[nt, 1, 1]" in text
    src = polytile.build(s, args, target="cuda").get_source()
    assert "__launch_bounds__" not in src   # the block size is only known at launch
    compile_with_nvcc(src)
    func = polytile.lower(s, args, target="cuda")
    for M, N, T in ((1, 1, 1), (3, 10, 3), (2, 64, 32), (2, 65, 32), (0, 5, 2)):
        a, b = _rand((M, N), M + N + T), _poison((M, N))
        interpreter.run(func, a, b, T)
        np.testing.assert_allclose(b, 2.0 * a - a[:, ::-1], rtol=1e-6)


def test_symbolic_block_size_runs(cuda_build):
    s, args = _thread_count_var()
    f = cuda_build(s, args)
    for M, N, T in ((1, 1, 1), (3, 10, 3), (2, 100, 32), (4, 33, 7)):
        a = _rand((M, N), M * N + T)
        da = polytile.nd.array(a, device="cuda")
        db = polytile.nd.array(_poison((M, N)), device="cuda")
        f(da, db, T)
        np.testing.assert_allclose(db.numpy(), 2.0 * a - a[:, ::-1], rtol=1e-6)
    a = np.zeros((1, 4), "float32")
    with pytest.raises(ValueError, match=r"needs blocks of \[2048, 1, 1\] threads"):
        f(polytile.nd.array(a, device="cuda"), polytile.nd.array(a, device="cuda"), 2048)


def test_reduction_per_thread_with_a_symbolic_block(cuda_build):
    m, n, A, k, B = _rowsumsq()
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=m // 3 + 1)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    compile_with_nvcc(polytile.build(s, [A, B], target="cuda").get_source())
    f = cuda_build(s, [A, B])
    for M, N in ((1, 1), (7, 5), (40, 3), (2, 0)):
        a = _rand((M, N), M + 10 * N)
        db = polytile.nd.array(_poison(M), device="cuda")
        f(polytile.nd.array(a, device="cuda"), db)
        np.testing.assert_allclose(db.numpy(), (a.astype(np.float64) ** 2).sum(1),
                                   rtol=1e-5, atol=1e-6)


def test_gpu_refusals_of_symbolic_splits():
    n, nt = te.var("n"), te.var("nt")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=nt)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.y"))
    with pytest.raises(ScheduleError, match=r"bind: the loops 'i.outer' and 'i.inner' of stage "
                       r"'C' .* are bound to \['blockIdx.x', 'threadIdx.y'\]"):
        polytile.lower(s, [A, C, nt], target="cuda")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=nt)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    ko, ki = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(ko, te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    f = polytile.lower(s, [A, C, nt], target="cuda")   # two kernels: B's fixed, C's not
    assert "block=[nt, 1, 1]" in str(f) and "block=[32, 1, 1]" in str(f)
    s2 = te.create_schedule(C.op)
    bx, tx = s2[C].split(C.op.axis[0], factor=nt)
    s2[C].bind(bx, te.thread_axis("blockIdx.x"))
    s2[C].bind(tx, te.thread_axis("threadIdx.x"))
    s2[B].compute_inline()
    f = polytile.lower(s2, [A, C, nt], target="cuda")
    assert "block=[nt, 1, 1]" in str(f)


# ------------------------------------------------- cross-thread reductions, symbolic extents
def _rowsum_sym():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "m")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    return A, B


@pytest.mark.parametrize("nthd", [16, 32])
def test_tvm_crossthread_reduction_nparts_over_a_symbolic_extent(nthd, cuda_build):
    # TVM's test_crossthread_reduction1: nparts=nthd of a symbolic reduction, bound to
    # threadIdx.x. polytile splits a reduction by nparts of a symbolic extent cyclically
    # (k = k.inner * nthd + k.outer: affine; the same terms summed in another order)
    A, B = _rowsum_sym()
    s = te.create_schedule(B.op)
    ko, _ = s[B].split(B.op.reduce_axis[0], nparts=nthd)
    s[B].bind(ko, te.thread_axis("threadIdx.x"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    compile_with_nvcc(polytile.build(s, [A, B], target="cuda").get_source())
    func = polytile.lower(s, [A, B], target="cuda")
    f = cuda_build(s, [A, B])
    for kk in (nthd - 1, nthd, nthd + 1, 1, 3 * nthd + 5):
        a, b = _rand((3, kk), kk), _poison(3)
        interpreter.run(func, a, b)
        np.testing.assert_allclose(b, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-6)
        db = polytile.nd.array(_poison(3), device="cuda")
        f(polytile.nd.array(a, device="cuda"), db)
        np.testing.assert_allclose(db.numpy(), a.astype(np.float64).sum(1), rtol=1e-5,
                                   atol=1e-6)


def test_tvm_crossthread_reduction_two_axes_and_the_factor_idiom():
    # TVM's test_crossthread_reduction2 (two symbolic reduction axes, nparts on each, bound
    # to threadIdx.x/y: refused), and the factor= idiom (inner loop of 16 on threadIdx.x)
    n, k0, k1 = te.var("n"), te.var("k0"), te.var("k1")
    A = te.placeholder((n, k0, k1), name="A")
    r0, r1 = te.reduce_axis((0, k0), "k0"), te.reduce_axis((0, k1), "k1")
    B = te.compute((n,), lambda i: te.sum(A[i, r0, r1], axis=(r0, r1)), name="B")
    s = te.create_schedule(B.op)
    k0o, _ = s[B].split(B.op.reduce_axis[0], nparts=8)
    k1o, _ = s[B].split(B.op.reduce_axis[1], nparts=4)
    s[B].bind(k0o, te.thread_axis("threadIdx.x"))
    s[B].bind(k1o, te.thread_axis("threadIdx.y"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    # two reduction loops on two thread indices: fused into one on threadIdx.x (8 * 4)
    func = polytile.lower(s, [A, B], target="cuda")
    assert "block=[32, 1, 1]" in str(func)
    for shp in [(3, 13, 7), (2, 1, 17), (1, 40, 3)]:
        a, b = _rand(shp, sum(shp)), _poison(shp[0])
        interpreter.run(func, a, b)
        np.testing.assert_allclose(b, a.astype(np.float64).sum((1, 2)), rtol=1e-5, atol=1e-6)
    A2, B2 = _rowsum_sym()
    s = te.create_schedule(B2.op)
    ko, ki = s[B2].split(B2.op.reduce_axis[0], factor=16)
    s[B2].bind(ki, te.thread_axis("threadIdx.x"))
    s[B2].bind(B2.op.axis[0], te.thread_axis("blockIdx.x"))
    func = polytile.lower(s, [A2, B2], target="cuda")
    for kk in (1, 15, 16, 17, 50):
        a, b = _rand((3, kk), kk + 1), _poison(3)
        interpreter.run(func, a, b)
        np.testing.assert_allclose(b, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-6)


def test_nparts_of_a_symbolic_reduction_on_llvm_and_argmax_keeps_block_order():
    A, B = _rowsum_sym()
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], nparts=4)
    assert "A[i, (m.outer + (4 * m.inner))]" in str(polytile.lower(s, [A, B]))
    f = polytile.build(s, [A, B])
    for kk in (0, 1, 5, 17):
        a, b = _rand((3, kk), kk), _poison(3)
        f(a, b)
        np.testing.assert_allclose(b, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-6)
    # a tuple reducer (argmax) keeps the block split: ties must give the first index
    n, m = te.var("n"), te.var("m")
    X = te.placeholder((n, m), name="X")
    argmax = te.comm_reducer(
        lambda x, y: (te.if_then_else(x[1] >= y[1], x[0], y[0]),
                      te.if_then_else(x[1] >= y[1], x[1], y[1])),
        lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
    k = te.reduce_axis((0, m), "k")
    I, V = te.compute((n,), lambda i: argmax((k, X[i, k]), axis=k), name="T")
    s = te.create_schedule(I.op)
    s[I].split(k, nparts=3)
    f = polytile.build(s, [X, I, V])
    x = np.random.default_rng(0).integers(0, 3, (4, 11)).astype("float32")   # many ties
    i_out, v_out = np.full(4, -7, "int32"), _poison(4)
    f(x, i_out, v_out)
    np.testing.assert_array_equal(i_out, x.argmax(1))
    np.testing.assert_array_equal(v_out, x.max(1))


def test_tensorize_under_a_parallel_symbolic_split():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "schedule"))
    from test_tensorize import GEMV_C, gemv_intrin

    n, nt = te.var("n"), te.var("nt")
    A = te.placeholder((n, 48), name="A")
    B = te.placeholder((32, 48), name="B")
    k = te.reduce_axis((0, 48), name="k")
    C = te.compute((n, 32), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=nt)
    yo, yi = s[C].split(C.op.axis[1], factor=16)
    zo, zi = s[C].split(k, factor=16)
    s[C].reorder(io, ii, yo, zo, yi, zi)
    s[C].tensorize(yi, gemv_intrin(16, 16, reset=True))
    s[C].pragma(io, "import_c", GEMV_C)
    s[C].parallel(io)
    f = polytile.build(s, [A, B, C, nt])
    for N, t in ((5, 2), (7, 3), (1, 1), (9, 20)):
        a, b = _rand((N, 48), N) + 1.5, _rand((32, 48), t) + 1.5
        c = _poison((N, 32))
        f(a, b, c, t)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.T.astype(np.float64),
                                   rtol=1e-5)


# ------------------------------------------------------- fuse of loops of symbolic extent
def test_fuse_of_symbolic_extents_parallel_on_llvm():
    # TVM's CPU injective schedule: fuse the outer axes, parallelize the fused loop
    m, n, l = te.var("m"), te.var("n"), te.var("l")
    A = te.placeholder((m, n, l), name="A")
    B = te.compute((m, n, l), lambda i, j, k: A[i, j, k] * 2.0 - 1.0, name="B")
    s = te.create_schedule(B.op)
    f = s[B].fuse(*B.op.axis)
    s[B].parallel(f)
    text = str(polytile.lower(s, [A, B]))
    assert "for i.j.fused.k.fused in parallel(0, ((int64(m) * int64(n)) * int64(l)))" in text
    fn = polytile.build(s, [A, B])
    func = polytile.lower(s, [A, B])
    for M, N, L in ((1, 1, 1), (3, 7, 2), (4, 5, 6), (0, 3, 2), (2, 0, 5)):
        a, b = _rand((M, N, L), M + N + L), _poison((M, N, L))
        fn(a, b)
        np.testing.assert_allclose(b, a.astype(np.float64) * 2 - 1, rtol=1e-6)
        b2 = _poison((M, N, L))
        interpreter.run(func, a, b2)
        np.testing.assert_allclose(b2, a.astype(np.float64) * 2 - 1, rtol=1e-6)


def test_fuse_of_symbolic_reduction_axes_and_inner_splits():
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n, 7), name="A")
    r0, r1 = te.reduce_axis((0, n), "r0"), te.reduce_axis((0, 7), "r1")
    B = te.compute((m,), lambda i: te.sum(A[i, r0, r1], axis=[r0, r1]), name="B")
    s = te.create_schedule(B.op)
    s[B].fuse(r0, r1)                       # serial: the reduction in the same order
    io, ii = s[B].split(B.op.axis[0], factor=3)
    s[B].parallel(io)
    fn = polytile.build(s, [A, B])
    for M, N in ((1, 1), (5, 4), (7, 0)):
        a, b = _rand((M, N, 7), M * N), _poison(M)
        fn(a, b)
        np.testing.assert_allclose(b, a.astype(np.float64).sum((1, 2)), rtol=1e-5,
                                   atol=1e-6)


def test_fuse_of_symbolic_extents_refusals():
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    fo, fi = s[C].split(f, factor=64)   # kept for TVM's GPU injective schedule (below)
    s[C].parallel(fo)                   # any other use is refused when lowering
    with pytest.raises(ScheduleError, match=r"split: iter_var 'i.j.fused' of stage 'C' fuses "
                       r"a loop of symbolic extent n and is split by 64, but 'i.j.fused.outer' "
                       r"is not bound to blockIdx.x"):
        polytile.lower(s, [A, C])
    s = te.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    with pytest.raises(ScheduleError, match=r"split: iter_var 'i.j.fused' of stage 'C' fuses "):
        s[C].split(f, nparts=4)
    s = te.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    s[C].vectorize(f)
    with pytest.raises(ScheduleError, match=r"vectorize: loop 'i.j.fused' of stage 'C' fuses "
                       r"a loop of symbolic extent n"):
        polytile.lower(s, [A, C])
    s = te.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    s[B].compute_at(s[C], f)
    with pytest.raises(ScheduleError, match=r"compute_at: stage 'B' is computed at "
                       r"'i.j.fused' of 'C', a fuse of a loop of symbolic extent"):
        polytile.lower(s, [A, C])
    s = te.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    s[C].bind(f, te.thread_axis("blockIdx.x"))
    with pytest.raises(ScheduleError, match=r"bind: loop 'i.j.fused' of stage 'C' fuses"):
        polytile.lower(s, [A, C], target="cuda")
