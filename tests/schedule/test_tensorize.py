"""tensorize: matching with isl (accepted and refused nests), the interpreter running the
intrinsic's compute, and the llvm target calling extern C and LLVM intrinsics."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te, tir
from polytile.errors import ScheduleError
from polytile.schedule.interpreter import run
from polytile.schedule.loop_ir import TensorCall, walk_stmts

GEMV_C = r"""
extern "C" int gemv_update(float *cc, const float *aa, const float *bb, int m, int l,
                           int stride) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < l; ++j) cc[i] += aa[j] * bb[i * stride + j];
  return 0;
}
extern "C" int gemv_reset(float *cc, int m) {
  for (int i = 0; i < m; ++i) cc[i] = 0.0f;
  return 0;
}
"""


def gemv_intrin(m, l, *, reset=False, dtype="float32", strides=True, name="gemv"):
    a = te.placeholder((l,), name="a", dtype=dtype)
    b = te.placeholder((m, l), name="b", dtype=dtype)
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    binds = {b: tir.decl_buffer(b.shape, dtype, name="B", strides=[te.var("s1"), 1])} \
        if strides else {}

    def fcompute(ins, outs):
        aa, bb = ins
        cc = outs[0]
        upd = tir.call_extern("int32", "gemv_update", cc.access_ptr("w"), aa.access_ptr("r"),
                              bb.access_ptr("r"), m, l, bb.strides[0])
        if not reset:
            return upd
        rst = tir.call_extern("int32", "gemv_reset", cc.access_ptr("w"), m)
        return upd, rst, upd

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=name)


def matmul_bt(n, m, l, dtype="float32"):
    A = te.placeholder((n, l), name="A", dtype=dtype)
    B = te.placeholder((m, l), name="B", dtype=dtype)
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    return A, B, C


def data(*shapes, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, size=s).astype(dtype) for s in shapes]


def gemv_tiles(C):
    """A schedule of ``C = A @ B^T`` (``matmul_bt``): rows, then tiles of 16 columns and of
    16 k, each tile one call of ``gemv_intrin(16, 16, reset=True)``:
    reset and update parts, the reduce loop outside the tensorized one."""
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=16)
    zo, zi = s[C].split(z, factor=16)
    s[C].reorder(x, yo, zo, yi, zi)
    s[C].tensorize(yi, gemv_intrin(16, 16, reset=True))
    return s


def check_interp(s, args, ref, rtol=1e-5):
    f = polytile.lower(s, args)
    assert any(isinstance(x, TensorCall) for x in walk_stmts(f.body))
    arrays = data(*[a.shape for a in args[:-1]]) + [np.full(args[-1].shape, np.nan,
                                                            args[-1].dtype)]
    run(f, *arrays)
    np.testing.assert_allclose(arrays[-1], ref(*arrays[:-1]), rtol=rtol)
    return f, arrays


# ------------------------------------------------------------------------------ accepted
def test_gemv_body_matches_and_runs_in_the_interpreter():
    A, B, C = matmul_bt(7, 48, 13)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=16)
    s[C].reorder(x, yo, yi, C.op.reduce_axis[0])
    s[C].tensorize(yi, gemv_intrin(16, 13))
    f, _ = check_interp(s, [A, B, C], lambda a, b: a @ b.T)
    assert "tensorize gemv.body(A[i, 0]{13}, B[(16 * j.outer), 0]{16x13}, " \
           "C[i, (16 * j.outer)]{16})" in str(f)


def test_loops_under_the_axis_may_be_permuted():
    # k outside j.inner under the tensorized loop: the same intrinsic (loop renaming)
    A, B, C = matmul_bt(5, 32, 11)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=16)
    s[C].reorder(x, yo, z, yi)
    s[C].tensorize(z, gemv_intrin(16, 11))
    check_interp(s, [A, B, C], lambda a, b: a @ b.T)


def test_reset_update_with_outer_reduce_loop():
    A, B, C = matmul_bt(3, 32, 64)
    s = gemv_tiles(C)
    f, _ = check_interp(s, [A, B, C], lambda a, b: a @ b.T)
    text = str(f)
    assert "tensorize gemv.reset(" in text and "tensorize gemv.update(" in text


def test_conv1d_offsets_in_indices():
    # O[x, co] = sum_{r, ci} I[x + r, ci] * W[r, co, ci]: r outside (reset/update), the
    # input region starts at x + r
    X, R, CI, CO = 9, 3, 8, 16
    I = te.placeholder((X + R - 1, CI), name="I")
    W = te.placeholder((R, CO, CI), name="W")
    r = te.reduce_axis((0, R), name="r")
    ci = te.reduce_axis((0, CI), name="ci")
    O = te.compute((X, CO), lambda x, co: te.sum(I[x + r, ci] * W[r, co, ci], axis=[r, ci]),
                   name="O")
    s = te.create_schedule(O.op)
    x, co = O.op.axis
    s[O].reorder(x, r, co, ci)
    s[O].tensorize(co, gemv_intrin(CO, CI, reset=True))

    def ref(i, w):
        return sum(i[k:k + X] @ w[k].T for k in range(R))
    check_interp(s, [I, W, O], ref)


def test_tensorize_of_attached_stage_is_refused_inside_region():
    A, B, C = matmul_bt(4, 16, 8)
    D = te.compute(C.shape, lambda i, j: C[i, j] * 2, name="D")
    s = te.create_schedule(D.op)
    x, y = C.op.axis
    s[C].tensorize(y, gemv_intrin(16, 8))
    s[C].compute_at(s[D], D.op.axis[0])
    f, _ = check_interp(s, [A, B, D], lambda a, b: 2 * (a @ b.T))


# ------------------------------------------------------------------------------ refused
def _gemv_schedule(factor=16, n=4, m=48, l=8):
    A, B, C = matmul_bt(n, m, l)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=factor)
    return A, B, C, s, (x, yo, yi, C.op.reduce_axis[0])


def test_refuse_wrong_extent():
    A, B, C, s, (x, yo, yi, z) = _gemv_schedule(factor=8)
    s[C].tensorize(yi, gemv_intrin(16, 8))
    with pytest.raises(ScheduleError, match=r"tensorize: stage 'C' at loop 'j.inner': "
                       r"extent differs: .* axis 'j' .* over 8 values .* extent 16"):
        polytile.lower(s, [A, B, C])


def test_refuse_partial_tile():
    A, B, C, s, (x, yo, yi, z) = _gemv_schedule(factor=16, m=40)
    s[C].tensorize(yi, gemv_intrin(16, 8))
    with pytest.raises(ScheduleError, match=r"the tile at i=\d+, j.outer=2 is not the "
                       r"intrinsic's full box"):
        polytile.lower(s, [A, B, C])


def test_refuse_transposed_access():
    n, m, l = 4, 16, 8
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[1], gemv_intrin(16, 8))
    with pytest.raises(ScheduleError, match=r"access differs: the stage's B\[k, j\] does not "
                       r"follow the intrinsic's b\[i, k\]"):
        polytile.lower(s, [A, B, C])


def test_refuse_wrong_dtype():
    A, B, C = matmul_bt(4, 16, 8, dtype="float64")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[1], gemv_intrin(16, 8))
    with pytest.raises(ScheduleError, match=r"dtype float64 .* differs from the intrinsic's "
                       r"float32"):
        polytile.lower(s, [A, B, C])


def test_refuse_reduce_axis_outside_without_reset():
    A, B, C, s, (x, yo, yi, z) = _gemv_schedule(l=32)
    zo, zi = s[C].split(z, factor=8)
    s[C].reorder(x, yo, zo, yi, zi)
    s[C].tensorize(yi, gemv_intrin(16, 8))
    with pytest.raises(ScheduleError, match=r"reduce loop\(s\) \['k.outer'\] are outside the "
                       r"tensorized region, so intrinsic 'gemv' needs a 'reset' part"):
        polytile.lower(s, [A, B, C])


def test_refuse_missing_reduce_axis_after_reorder():
    # the reduce loop moved outside the tensorized one by reorder: checked after reorders
    A, B, C, s, (x, yo, yi, z) = _gemv_schedule()
    s[C].reorder(x, yo, z, yi)
    s[C].tensorize(yi, gemv_intrin(16, 8, reset=True))
    with pytest.raises(ScheduleError, match=r"missing reduce axis: intrinsic 'gemv' reduces "
                       r"over 'k' \(extent 8\), the loops under it \('j.inner'\) reduce over "
                       r"none"):
        polytile.lower(s, [A, B, C])


def test_refuse_too_many_axes_after_reorder():
    A, B, C, s, (x, yo, yi, z) = _gemv_schedule()
    s[C].reorder(yo, x, yi, z)
    s[C].tensorize(x, gemv_intrin(16, 8))
    with pytest.raises(ScheduleError, match=r"run 2 axes of the stage \('i', 'j'\), but "
                       r"intrinsic 'gemv' has 1 axes"):
        polytile.lower(s, [A, B, C])


def test_refuse_compact_operand_with_strided_region():
    A, B, C, s, (x, yo, yi, z) = _gemv_schedule(l=8)
    zo, zi = s[C].split(z, factor=4)
    s[C].reorder(x, yo, zo, yi, zi)
    s[C].tensorize(yi, gemv_intrin(16, 4, reset=True, strides=False))
    with pytest.raises(ScheduleError, match=r"operand 'b' of intrinsic 'gemv' is declared "
                       r"compact \(strides \[4, 1\]\), but its region of 'B' has strides "
                       r"\[8, 1\]"):
        polytile.lower(s, [A, B, C])


def test_refuse_annotation_and_bad_arguments():
    A, B, C, s, (x, yo, yi, z) = _gemv_schedule()
    s[C].unroll(z)
    s[C].tensorize(yi, gemv_intrin(16, 8))
    with pytest.raises(ScheduleError, match=r"loop 'k' under the tensorized loop of stage "
                       r"'C' at loop 'j.inner' is annotated"):
        polytile.lower(s, [A, B, C])
    with pytest.raises(ScheduleError, match="is not a declared tensor intrinsic"):
        s[C].tensorize(yo, "no_such_intrinsic")
    with pytest.raises(ScheduleError, match="already tensorized"):
        s[C].tensorize(yo, gemv_intrin(16, 8))


def test_refuse_stage_computed_inside_region():
    A, B, C = matmul_bt(4, 16, 8)
    Bp = te.compute(B.shape, lambda i, j: B[i, j] + 1, name="Bp")
    k = C.op.reduce_axis[0]
    C2 = te.compute(C.shape, lambda i, j: te.sum(A[i, k] * Bp[j, k], axis=k), name="C2")
    s = te.create_schedule(C2.op)
    s[C2].tensorize(C2.op.axis[1], gemv_intrin(16, 8))
    s[Bp].compute_at(s[C2], C2.op.reduce_axis[0])
    with pytest.raises(ScheduleError, match=r"stage 'Bp' is computed at 'k', inside the "
                       r"tensorized region"):
        polytile.lower(s, [A, B, C2])


def test_decl_tensor_intrin_refusals():
    a = te.placeholder((4,), name="a")
    c = te.compute((4,), lambda i: a[i] * 2, name="c")
    d = te.compute((4,), lambda i: c[i] + 1, name="d")
    with pytest.raises(TypeError, match="which is computed"):
        te.decl_tensor_intrin(d.op, lambda ins, outs: None)
    with pytest.raises(TypeError, match="fcompute is int"):
        te.decl_tensor_intrin(c.op, 3)
    with pytest.raises(TypeError, match="returned 2 statements"):
        te.decl_tensor_intrin(c.op, lambda ins, outs: (None, None))


# ---------------------------------------------------------------------- llvm: real code
def test_llvm_extern_c_gemv_reset_update():
    A, B, C = matmul_bt(5, 32, 48)
    s = gemv_tiles(C)
    s[C].pragma(C.op.axis[0], "import_c", GEMV_C)
    f = polytile.build(s, [A, B, C])
    a, b = data((5, 48), (32, 48))
    c = np.full((5, 32), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5)
    assert 'call i32 @"gemv_update"' in f.get_source("ll", optimized=False)


def test_llvm_ir_builder_loops_and_llvm_intrinsic():
    # a 4x4 outer-product micro-kernel written with for_range and vload/vstore in a
    # 16 x 12 outer product, then an LLVM intrinsic (llvm.fma.f32) in an fma of 40
    m = n = 4
    a = te.placeholder((m,), name="a")
    b = te.placeholder((n,), name="b")
    c = te.compute((m, n), lambda i, j: a[i] * b[j], name="c")

    def outer(ins, outs):
        aa, bb = ins
        cc = outs[0]
        ib = tir.ir_builder.create()
        with ib.for_range(0, m, name="i") as i:
            with ib.for_range(0, n, name="j") as j:
                ib.emit(cc.vstore((i, j), aa.vload((i,)) * bb.vload((j,))))
        return ib.get()

    intrin = te.decl_tensor_intrin(c.op, outer, name="outer4",
                                   binds={c: tir.decl_buffer(c.shape, "float32", "C",
                                                             strides=[te.var("s"), 1])})
    M, N = 16, 12
    X = te.placeholder((M,), name="X")
    Y = te.placeholder((N,), name="Y")
    Z = te.compute((M, N), lambda i, j: X[i] * Y[j], name="Z")
    s = te.create_schedule(Z.op)
    io, jo, ii, ji = s[Z].tile(Z.op.axis[0], Z.op.axis[1], 4, 4)
    s[Z].tensorize(ii, intrin)
    f = polytile.build(s, [X, Y, Z])
    x, y = data((M,), (N,))
    z = np.full((M, N), np.nan, "float32")
    f(x, y, z)
    np.testing.assert_allclose(z, np.outer(x, y), rtol=1e-6)

    # the same accumulation through an LLVM intrinsic: c[i] = fma(a[i], b[i], c0[i])
    k = 8
    a = te.placeholder((k,), name="a")
    b = te.placeholder((k,), name="b")
    d = te.placeholder((k,), name="d")
    e = te.compute((k,), lambda i: a[i] * b[i] + d[i], name="e")

    def fma(ins, outs):
        aa, bb, dd = ins
        ee = outs[0]
        ib = tir.ir_builder.create()
        with ib.for_range(0, k, name="i") as i:
            ib.emit(ee.vstore((i,), tir.call_llvm_intrin(
                "float32", "llvm.fma.f32", aa.vload((i,)), bb.vload((i,)), dd.vload((i,)))))
        return ib.get()

    fi = te.decl_tensor_intrin(e.op, fma, name="fma8")
    L = 40
    P, Q, R = (te.placeholder((L,), name=nm) for nm in "PQR")
    S = te.compute((L,), lambda i: P[i] * Q[i] + R[i], name="S")
    s = te.create_schedule(S.op)
    io, ii = s[S].split(S.op.axis[0], factor=k)
    s[S].tensorize(ii, fi)
    f = polytile.build(s, [P, Q, R, S])
    p, q, r = data((L,), (L,), (L,))
    out = np.full(L, np.nan, "float32")
    f(p, q, r, out)
    np.testing.assert_allclose(out, p * q + r, rtol=1e-6)
    assert "llvm.fma.f32" in f.get_source("ll", optimized=False)


def test_import_llvm_text_is_linked():
    ir_text = """
define i32 @scale16(float* %c, float* %a) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%n, %loop]
  %pa = getelementptr float, float* %a, i64 %i
  %pc = getelementptr float, float* %c, i64 %i
  %v = load float, float* %pa
  %w = fmul float %v, 3.0
  store float %w, float* %pc
  %n = add i64 %i, 1
  %done = icmp eq i64 %n, 16
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}
"""
    a = te.placeholder((16,), name="a")
    c = te.compute((16,), lambda i: a[i] * te.const(3.0, "float32"), name="c")
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: tir.call_extern(
        "int32", "scale16", outs[0].access_ptr("w"), ins[0].access_ptr("r")), name="scale16")
    A = te.placeholder((5, 16), name="A")
    C = te.compute((5, 16), lambda i, j: A[i, j] * te.const(3.0, "float32"), name="C")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[1], intrin)
    s[C].pragma(C.op.axis[0], "import_llvm", ir_text)
    f = polytile.build(s, [A, C])
    x, = data((5, 16))
    out = np.full((5, 16), np.nan, "float32")
    f(x, out)
    np.testing.assert_allclose(out, 3 * x, rtol=1e-6)


# ---------------------------------------------------------------------------- te.extern
DOUBLE_C = """
int my_double(const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = 2 * x[i];
  return 0;
}
"""


def _extern_double(X, name="E"):
    n = int(np.prod(X.shape))
    return te.extern(X.shape, [X], lambda ins, outs: tir.call_extern(
        "int32", "my_double", ins[0].access_ptr("r"), outs[0].access_ptr("w"), n), name=name)


def test_te_extern_between_computes_on_llvm():
    A = te.placeholder((5, 7), name="A")
    B = te.compute((5, 7), lambda i, j: A[i, j] + 1, name="B")
    C = _extern_double(B, "C")
    D = te.compute((5, 7), lambda i, j: C[i, j] * 3, name="D")
    s = te.create_schedule(D.op)
    s[D].pragma(D.op.axis[0], "import_c", DOUBLE_C)
    assert "tensorize C.body(B[0, 0]{5x7}, C[0, 0]{5x7})" in str(polytile.lower(s, [A, D]))
    f = polytile.build(s, [A, D])
    a, = data((5, 7))
    d = np.full((5, 7), np.nan, "float32")
    f(a, d)
    np.testing.assert_allclose(d, 6 * (a + 1), rtol=1e-6)


def test_te_extern_refusals():
    A = te.placeholder((6,), name="A")
    E = _extern_double(A)
    s = te.create_schedule(E.op)
    s[E].split(E.op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match=r"stage 'E' is a te.extern \(external code\): it "
                       r"has no loops to split"):
        polytile.lower(s, [A, E])
    s = te.create_schedule(E.op)
    with pytest.raises(ScheduleError, match="'E' is a te.extern"):
        s.cache_write(E, "local")
    with pytest.raises(polytile.LoweringError, match="te.extern, whose external code the "
                       "reference interpreter cannot run"):
        run(polytile.lower(s, [A, E]), np.ones(6, "float32"), np.ones(6, "float32"))
    with pytest.raises(TypeError, match="fcompute is int"):
        te.extern((6,), [A], 3)
    with pytest.raises(ValueError, match=r"2 outputs and 3 dtypes"):
        te.extern([(6,), (5,)], [A], lambda ins, outs: None, dtype=["float32", "int8", "int8"])


def test_tensorize_trace_replays():
    A, B, C = matmul_bt(3, 32, 8)
    s = te.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[1], factor=16)
    s[C].tensorize(yi, gemv_intrin(16, 8, name="gemv_replay"))
    s2 = s.copy()
    assert str(polytile.lower(s2, [A, B, C])) == str(polytile.lower(s, [A, B, C]))


def test_llvm_tensorized_calls_inside_a_parallel_loop():
    A, B, C = matmul_bt(13, 48, 16)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=16)
    s[C].reorder(x, yo, yi, z)
    s[C].parallel(x)
    s[C].tensorize(yi, gemv_intrin(16, 16, reset=False, name="gemv_par"))
    s[C].pragma(yo, "import_c", GEMV_C)
    f = polytile.build(s, [A, B, C])
    a, b = data((13, 16), (48, 16))
    c = np.zeros((13, 48), "float32")     # gemv_update accumulates (TVM's tutorial kernel)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5)


def test_export_library_links_the_extern_code(tmp_path):
    A, B, C = matmul_bt(3, 16, 16)
    s = te.create_schedule(C.op)
    zo, zi = s[C].split(C.op.reduce_axis[0], factor=8)
    s[C].reorder(C.op.axis[0], zo, C.op.axis[1], zi)
    s[C].tensorize(C.op.axis[1], gemv_intrin(16, 8, reset=True, name="gemv_export"))
    s[C].pragma(C.op.axis[0], "import_c", GEMV_C)
    f = polytile.build(s, [A, B, C])
    path = str(tmp_path / "gemv.so")
    f.export_library(path)
    g = polytile.runtime.load_module(path)
    a, b = data((3, 16), (16, 16))
    c = np.full((3, 16), np.nan, "float32")
    g(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5)


def test_refuse_multi_output_stage():
    A = te.placeholder((4, 16), name="A")
    P, Q = te.compute((4, 16), lambda i, j: (A[i, j] * 2, A[i, j] + 1), name="PQ")
    s = te.create_schedule(P.op)
    a = te.placeholder((16,), name="a")
    c = te.compute((16,), lambda i: a[i] * 2, name="c")
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: tir.call_extern(
        "int32", "f", outs[0].access_ptr("w"), ins[0].access_ptr("r")), name="dbl16")
    s[P].tensorize(P.op.axis[1], intrin)
    with pytest.raises(ScheduleError, match=r"the stage has 2 outputs"):
        polytile.lower(s, [A, P, Q])


def _symbolic_matmul_bt(rows, cols, l=48):
    A = te.placeholder((rows, l), name="A")
    B = te.placeholder((cols, l), name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((rows, cols), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = gemv_tiles(C)
    s[C].pragma(C.op.axis[0], "import_c", GEMV_C)
    return A, B, C, s


def test_tensorize_over_symbolic_shapes_on_llvm():
    # rows n symbolic, columns 16*q: every tile is the intrinsic's full box for all n, q
    n, q = te.size_var("n"), te.size_var("q")
    A, B, C, s = _symbolic_matmul_bt(n, 16 * q)
    f = polytile.build(s, [A, B, C, q])
    assert "tensorize gemv.update" in str(polytile.lower(s, [A, B, C, q]))
    for nn, qq in ((5, 2), (1, 1), (13, 3), (0, 2)):
        a, b = data((nn, 48), (16 * qq, 48), seed=nn)
        c = np.full((nn, 16 * qq), np.nan, "float32")
        f(a, b, c, qq)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.T.astype(np.float64),
                                   rtol=1e-5)


def test_tensorize_refuses_a_symbolic_extent_with_partial_tiles():
    n, m = te.size_var("n"), te.size_var("m")
    A, B, C, s = _symbolic_matmul_bt(n, m)
    with pytest.raises(ScheduleError, match=r"tensorize: stage 'C' at loop 'j.inner'.*"
                       r"not the intrinsic's full box"):
        polytile.lower(s, [A, B, C])


# ----------------------------------------- which part runs a complete / split reduction
def _gemv_forms(m, l, form, name):
    """gemv intrinsics written with ir_builder (no extern code), by ``form``:
    ``body`` (a body that overwrites), ``acc_body`` (a body that accumulates, TVM's
    tutorial kernel), ``triple`` (body, reset, update), ``same`` (body is the update's own
    code), ``reset_update`` (None, reset, update), ``update_only`` (None, None, update)."""
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    binds = {b: tir.decl_buffer(b.shape, "float32", name="B", strides=[te.var("s1"), 1])}

    def fcompute(ins, outs):
        aa, bb = ins
        cc = outs[0]

        def code(zero, acc):
            ib = tir.ir_builder.create()
            with ib.for_range(0, m, name="i") as i:
                if zero:
                    ib.emit(cc.vstore((i,), tir.const(0.0, "float32")))
                if acc:
                    with ib.for_range(0, l, name="j") as j:
                        ib.emit(cc.vstore((i,), cc.vload((i,)) +
                                          aa.vload((j,)) * bb.vload((i, j))))
            return ib.get()

        return {"body": lambda: code(True, True), "acc_body": lambda: code(False, True),
                "triple": lambda: (code(True, True), code(True, False), code(False, True)),
                "same": lambda: (code(False, True), code(True, False), code(False, True)),
                "reset_update": lambda: (None, code(True, False), code(False, True)),
                "update_only": lambda: (None, None, code(False, True))}[form]()

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=name)


def _forms_schedule(form, split, n=5, m=48, kf=4):
    l = 12 if split else 13     # a prime reduction extent when the tile holds it whole
    A, B, C = matmul_bt(n, m, l)
    s = te.create_schedule(C.op)
    x, y = C.op.axis
    (z,) = C.op.reduce_axis
    yo, yi = s[C].split(y, factor=16)
    if split:
        zo, zi = s[C].split(z, factor=kf)
        s[C].reorder(x, yo, zo, yi, zi)
    else:
        s[C].reorder(x, yo, yi, z)
    s[C].tensorize(yi, _gemv_forms(16, kf if split else l, form, f"gemv_{form}_{split}"))
    return s, [A, B, C]


def _run_both(s, args):
    a, b = (np.random.default_rng(3).uniform(-1.5, 1.5, size=t.shape).astype("float32")
            for t in args[:2])
    ref = a.astype("float64") @ b.astype("float64").T
    f = polytile.build(s, args)
    c = np.full(args[2].shape, np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)
    c = np.full(args[2].shape, np.nan, "float32")
    run(polytile.lower(s, args), a, b, c)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)
    return str(polytile.lower(s, args))


@pytest.mark.parametrize("form,split,parts", [
    ("body", False, ("body",)), ("acc_body", False, ("body",)),
    ("triple", False, ("body",)), ("triple", True, ("reset", "update")),
    ("same", False, ("reset", "update")), ("same", True, ("reset", "update")),
    ("reset_update", False, ("reset", "update")), ("reset_update", True, ("reset", "update")),
])
def test_complete_and_split_reductions_compute_the_definition(form, split, parts):
    # outputs poisoned with NaN: a skipped initialisation shows; n=5, k of 12 split by 4
    # across the tile boundary, or k of 13 whole in the tile
    s, args = _forms_schedule(form, split)
    text = _run_both(s, args)
    for part in ("body", "reset", "update"):
        assert (f"gemv_{form}_{split}.{part}(" in text) == (part in parts), text


@pytest.mark.parametrize("form,split,match", [
    ("body", True, r"stage 'C' at loop 'j.inner': reduce loop\(s\) \['k.outer'\] are outside "
                   r"the tensorized region, so intrinsic 'gemv_body_True' needs a 'reset'"),
    ("acc_body", True, r"needs a 'reset' part"),
    ("update_only", True, r"intrinsic 'gemv_update_only_True' needs a 'reset' part"),
    ("update_only", False, r"stage 'C' at loop 'j.inner': the whole reduction \(reduce axes "
                           r"'k'\) is inside the tensorized region, so intrinsic "
                           r"'gemv_update_only_False' needs a 'body' part \(or 'reset' and "
                           r"'update'\); fcompute gives no 'body', 'reset'"),
])
def test_missing_part_is_refused(form, split, match):
    s, args = _forms_schedule(form, split)
    with pytest.raises(ScheduleError, match=match):
        polytile.lower(s, args)


def test_tutorial_update_kernel_as_body_needs_no_zeroed_output():
    # TVM's tutorial declares gemv_update (c += a . b) as the body: the output used to be
    # read uninitialised when the whole reduction was in the tile
    A, B, C = matmul_bt(7, 32, 13)
    for reset in (False, True):
        s = te.create_schedule(C.op)
        x, y = C.op.axis
        yo, yi = s[C].split(y, factor=16)
        s[C].reorder(x, yo, yi, C.op.reduce_axis[0])
        s[C].tensorize(yi, gemv_intrin(16, 13, reset=reset, name=f"gemv_tut{reset}"))
        s[C].pragma(x, "import_c", GEMV_C)
        f = polytile.build(s, [A, B, C])
        a, b = data((7, 13), (32, 13))
        c = np.full((7, 32), np.nan, "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a.astype("float64") @ b.astype("float64").T, rtol=1e-5)
