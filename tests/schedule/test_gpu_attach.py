"""GPU lowering of attached stages, empty reductions and virtual threads.

* F6's kind: in a kernel every statement iterates over the padded boxes of its loops, so a
  consumer "reads" outside its producer's tensor in guarded-off iterations; the region of
  an attached stage is clipped to the producer's domain, as on the CPU.
* F2's kind: a statement whose domain is empty (a ``where`` that never holds) leaves loops
  without a body; no ``None`` may reach a printer (the loop IR constructors refuse it).
* ``vthread`` (TVM's virtual threads): the loop runs interleaved inside the thread; stages
  computed inside it get one private copy per virtual thread, shared ones are common.

Numbers come from the reference interpreter (threads of a block interleaved at barriers);
the CUDA C is compiled by nvcc for sm_90 where nvcc exists, and run on the host by the
emulated driver in ``tests/targets/test_cuda_attach.py``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from attach_cases import f2_program, f6_program, vthread_gemm
from helpers import check, compile_with_nvcc, poison

import polytile
from polytile import te
from polytile.errors import InternalError
from polytile.schedule.interpreter import run
from polytile.schedule.loop_ir import For, IfThenElse, Seq, Store, StmtMutator, seq
from polytile.te.expr import Const, Var


def _run(s, args, inputs):
    out = poison(args[-1].shape, args[-1].dtype)
    run(polytile.lower(s, args), *inputs, out)
    return out


def _allocs(text: str) -> dict:
    return {m[0]: tuple(int(x) for x in m[1].split(", "))
            for m in re.findall(r"(\S+) = alloc\(\w+\[([\d, ]+)\]", text)}


# ------------------------------------------------------------------------------- F6 kind


def test_f6_region_is_clipped_to_the_producer():
    """F6: each thread allocated float32[3809] for a 31-element tensor."""
    s, args = f6_program()
    assert _allocs(str(polytile.lower(s, args)))["P"] == (31,)
    a = np.random.default_rng(0).uniform(-1, 1, 31).astype("float32")
    check(_run(s, args, [a]), a[::-1] * 2.0 + a * 2.0)


@pytest.mark.parametrize("n,factor,threads", [(31, 30, 64), (17, 4, 8), (5, 1, 32), (40, 7, 3)])
def test_gpu_footprints_never_exceed_the_tensor(n, factor, threads):
    s, args = f6_program(n, factor, threads, unroll=False)
    assert _allocs(str(polytile.lower(s, args)))["P"][0] <= n
    a = np.random.default_rng(n).uniform(-1, 1, n).astype("float32")
    check(_run(s, args, [a]), a[::-1] * 2.0 + a * 2.0)


def test_gpu_stencil_halo_is_clipped_at_both_ends():
    """A 3-point stencil with a reversed read, one producer tile per thread: padded
    threads past the end (and reads before the start) add nothing to the region."""
    n = 23
    A = te.placeholder((n,), name="A")
    P = te.compute((n,), lambda i: A[i] + 1.0, name="P")
    C = te.compute((n - 2,), lambda i: P[i] + P[i + 1] + P[i + 2] + P[n - 1 - i], name="C")
    s = te.create_schedule(C.op)
    bo, ti = s[C].split(C.op.axis[0], factor=8)
    s[C].bind(bo, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.x"))
    s[P].compute_at(s[C], ti)
    assert _allocs(str(polytile.lower(s, [A, C])))["P"][0] <= n
    a = np.random.default_rng(1).uniform(-1, 1, n).astype("float32")
    p = a.astype("float64") + 1
    ref = p[:-2] + p[1:-1] + p[2:] + p[::-1][:n - 2]
    check(_run(s, [A, C], [a]), ref)


def test_f6_cuda_source_compiles_with_nvcc():
    s, args = f6_program()
    compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())


# ------------------------------------------------------------------------------- F2 kind


def test_f2_reduction_that_never_runs_lowers_prints_and_stores_the_identity():
    """F2: ``codegen_cuda: unknown statement NoneType``; printing lower raised."""
    s, args = f2_program()
    text = str(polytile.lower(s, args))
    assert "R[0] = int16(32767)" in text and "for " not in text
    a = np.arange(1, 5, dtype="int16").reshape(2, 2)
    np.testing.assert_array_equal(_run(s, args, [a]), [32767])
    src = polytile.build(s, args, target="cuda").get_source()
    assert "32767" in src
    compile_with_nvcc(src)


@pytest.mark.parametrize("reducer,dtype,identity", [
    (te.sum, "float32", 0.0), (te.max, "int32", np.iinfo("int32").min),
    (te.min, "float32", np.inf)])
@pytest.mark.parametrize("where", [lambda k, q: k % 2 == 0, lambda k, q: k + q > 5])
def test_empty_reductions_in_kernels(reducer, dtype, identity, where):
    s, args = f2_program(where, reducer, dtype)
    a = np.arange(1, 5).astype(dtype).reshape(2, 2)
    np.testing.assert_array_equal(_run(s, args, [a]), np.array([identity], dtype))
    compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())


def test_empty_reduction_with_threads_and_a_real_one_beside_it():
    """Rows whose reduction is empty (k < i never holds for i = 0) next to full ones, one
    thread per row."""
    A = te.placeholder((6, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    R = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, where=k < i - 1), name="R")
    s = te.create_schedule(R.op)
    s[R].bind(R.op.axis[0], te.thread_axis("threadIdx.x"))
    a = np.random.default_rng(2).uniform(-1, 1, (6, 5)).astype("float32")
    ref = [a[i, :max(i - 1, 0)].astype("float64").sum() for i in range(6)]
    check(_run(s, [A, R], [a]), np.array(ref), k=5)


def test_loop_ir_refuses_a_missing_statement():
    i = Var("int64", "i")
    with pytest.raises(InternalError, match=r"For\.body must be a statement, got NoneType"):
        For(i, Const("int64", 0), Const("int64", 4), "serial", None)
    with pytest.raises(InternalError, match=r"IfThenElse\.then_case"):
        IfThenElse(Const("bool", True), None)
    with pytest.raises(InternalError, match=r"Seq\.stmts"):
        Seq((seq(), None))


def test_a_pass_that_drops_a_body_leaves_an_empty_statement():
    """A mutator returning None removes a statement: from a sequence it disappears, as a
    loop body it becomes ``seq()``, and simplify then drops the loop."""
    from polytile.schedule.loop_ir import Buffer, is_empty
    from polytile.schedule.passes.simplify import simplify

    class _DropStores(StmtMutator):
        def visit_Store(self, s):
            return None

    b = Buffer("B", (4,), "float32")
    i = Var("int64", "i")
    keep = Store(b, (Const("int64", 0),), Const("float32", 1.0))
    loop = For(i, Const("int64", 0), Const("int64", 4), "serial",
               Store(b, (i,), Const("float32", 0.0)))
    out = _DropStores().visit(seq(loop, keep))
    assert isinstance(out, For) and is_empty(out.body)
    assert is_empty(simplify(out))


# ------------------------------------------------------------------------------ vthread


@pytest.mark.parametrize("n,m,kk,threads,per,vt", [
    (16, 16, 16, 2, 2, 2), (19, 13, 11, 2, 2, 2), (20, 45, 9, 2, 2, 3)])
def test_vthread_cooperative_fetch_matmul_computes_the_product(n, m, kk, threads, per, vt):
    s, args = vthread_gemm(n, m, kk, threads, per, vt)
    g = np.random.default_rng(n)
    a = g.uniform(-1, 1, (n, kk)).astype("float32")
    b = g.uniform(-1, 1, (kk, m)).astype("float32")
    check(_run(s, args, [a, b]), a.astype("float64") @ b, k=kk)


def test_vthread_gives_private_copies_and_shares_the_shared_tiles():
    s, args = vthread_gemm(32)
    text = str(polytile.lower(s, args))
    allocs = _allocs(text)
    # one accumulator tile and one pair of local copies per (vy, vx); shared tiles once
    assert allocs["C.local"] == (2, 2, 2, 2)
    assert allocs["A.shared.local"] == (2, 2, 2, 1)
    assert allocs["A.shared"] == (16, 8) and allocs["B.shared"] == (8, 16)
    # the cooperative fetch is not repeated per virtual thread: one store into each tile
    assert text.count("A.shared[") - text.count("= A.shared[") == 1
    # the virtual threads are interleaved innermost, unrolled
    assert "C.local[1, 1, i.c, j.c] = (C.local[1, 1, i.c, j.c] +" in text
    assert "vthread" not in text and "vy" not in text
    assert text.count("sync('shared')") == 2


def test_vthread_gemm_cuda_source_compiles_with_nvcc():
    s, args = vthread_gemm(37, 29, 23)
    compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())


def test_vthread_on_an_elementwise_kernel():
    """Virtual threads without attached stages: a strided tile per thread."""
    A = te.placeholder((50,), name="A")
    B = te.compute((50,), lambda i: A[i] * 3.0, name="B")
    s = te.create_schedule(B.op)
    bo, rest = s[B].split(B.op.axis[0], factor=16)
    v, t = s[B].split(rest, nparts=2)
    s[B].bind(bo, te.thread_axis("blockIdx.x"))
    s[B].bind(v, te.thread_axis("vthread"))
    s[B].bind(t, te.thread_axis("threadIdx.x"))
    a = np.random.default_rng(3).uniform(-1, 1, 50).astype("float32")
    check(_run(s, [A, B], [a]), a * 3.0)


def _vthread_gemm_vectorized_fetch(m, n, kk):
    """TVM's conv2d-tutorial schedule on a matmul: two vthreads per axis, a local
    accumulator, shared tiles fetched cooperatively by (threadIdx.y, threadIdx.x) with a
    vectorized inner part (issue 9: a KeyError in the schedule tree)."""
    A = te.placeholder((m, kk), name="A")
    B = te.placeholder((kk, n), name="B")
    k = te.reduce_axis((0, kk), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    by, yi = s[C].split(C.op.axis[0], factor=16)
    bx, xi = s[C].split(C.op.axis[1], factor=16)
    vy, yi = s[C].split(yi, nparts=2)
    ty, yi = s[C].split(yi, nparts=4)
    vx, xi = s[C].split(xi, nparts=2)
    tx, xi = s[C].split(xi, nparts=4)
    s[C].reorder(by, bx, vy, vx, ty, tx, yi, xi)
    for loop, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (vy, "vthread"),
                      (vx, "vthread"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[C].bind(loop, te.thread_axis(tag))
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=4)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    for X in (AA, BB):
        s[X].compute_at(s[CL], ko)
        fused, v = s[X].split(s[X].fuse(*s[X].op.axis), factor=2)
        s[X].vectorize(v)
        t1, fused = s[X].split(fused, nparts=4)
        t2, fused = s[X].split(fused, nparts=4)
        s[X].bind(t1, te.thread_axis("threadIdx.y"))
        s[X].bind(t2, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


@pytest.mark.parametrize("m,n,kk", [(32, 32, 16), (37, 19, 13)])
def test_vthread_with_a_vectorized_cooperative_fetch(m, n, kk):
    s, args = _vthread_gemm_vectorized_fetch(m, n, kk)
    g = np.random.default_rng(m)
    a = g.uniform(-1, 1, (m, kk)).astype("float32")
    b = g.uniform(-1, 1, (kk, n)).astype("float32")
    check(_run(s, args, [a, b]), a.astype("float64") @ b, k=kk)
    compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())


def test_cross_thread_reduction_by_explicit_rfactor():
    """TVM's idiom: split the reduce axis, rfactor the inner part, bind the remaining
    reduce axis to threadIdx.x and compute the rfactor stage there."""
    A = te.placeholder((13, 70), name="A")
    k = te.reduce_axis((0, 70), name="k")
    B = te.compute((13,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    tx = s[B].op.reduce_axis[0]
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[BF].compute_at(s[B], tx)
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    a = np.random.default_rng(5).uniform(-1, 1, (13, 70)).astype("float32")
    check(_run(s, [A, B], [a]), a.astype("float64").sum(1), k=70)
    compile_with_nvcc(polytile.build(s, [A, B], target="cuda").get_source())


@pytest.mark.parametrize("n", [32, 13])
def test_vthread_goes_around_a_vectorized_loop(n):
    """The virtual threads of a register tile's write-back go around its vectorized
    loop, not inside it: each virtual thread's 4 lanes are stored lane by lane, unrolled
    (a register array's vector copy: a float4 store would pin the accumulators to aligned
    register quads, see c_printer), not a loop over 2 scalar stores. At an odd size the
    partial tile is guarded and still computes the definition."""
    A = te.placeholder((n, n), name="A")
    r = te.reduce_axis((0, 3), name="r")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, j] * (r + 1.0), axis=r), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    bi, bj, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 32)
    vx, jj = s[C].split(jj, nparts=2)
    tx, jj = s[C].split(jj, nparts=4)
    s[C].reorder(bi, bj, vx, ii, tx, jj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(vx, te.thread_axis((0, 2), "vthread", name="vx"))
    s[C].bind(ii, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].vectorize(jj)
    s[CL].compute_at(s[C], tx)
    if n % 32:   # the interpreter where tiles are partial (slow, so only there)
        a = np.random.default_rng(n).uniform(-1, 1, (n, n)).astype("float32")
        check(_run(s, [A, C], [a]), a.astype("float64") * 6.0, k=3)
    else:
        src = polytile.build(s, [A, C], target="cuda").get_source()
        assert "float4" not in src and "for (" not in src.split("C_local[")[-1]
        assert len(re.findall(r"\bC\[[^\n]*\] = C_local", src)) == 8
        compile_with_nvcc(src)
