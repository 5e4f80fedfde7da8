"""GPU schedules: bind, cache_read/cache_write, cooperative fetching, storage_align.

Every schedule here is checked three ways: the loop IR run by the reference interpreter
(threads of a block advance together from barrier to barrier, so a missing barrier shows
up as a wrong result), the generated CUDA C compiled by nvcc for sm_90 (skipped without
nvcc), and on an NVIDIA GPU (``gpu`` marker). Tolerances: float32 relative 1e-5 of the
largest reference value (sums of at most a few hundred products), float16 inputs 1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import ScheduleError, te
from polytile.schedule.interpreter import run

RNG = np.random.default_rng(7)


def _rand(shape, dtype="float32"):
    return RNG.uniform(-1, 1, shape).astype(dtype)


def bx():
    return te.thread_axis("blockIdx.x")


def tx():
    return te.thread_axis("threadIdx.x")


def vector_add(n=1000, factor=64):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], factor=factor)
    s[C].bind(o, bx())
    s[C].bind(i, tx())
    return s, [A, B, C], lambda a, b: a + b


def transpose_shared(m=37, n=29, tile=8):
    """Transpose through a shared tile: reads and writes both coalesced."""
    A = te.placeholder((m, n), name="A")
    T = te.compute((n, m), lambda i, j: A[j, i], name="T")
    s = te.create_schedule(T.op)
    AS = s.cache_read(A, "shared", [T])
    bi, bj, ti, tj = s[T].tile(T.op.axis[0], T.op.axis[1], tile, tile)
    s[T].bind(bi, te.thread_axis("blockIdx.y"))
    s[T].bind(bj, te.thread_axis("blockIdx.x"))
    s[T].bind(ti, te.thread_axis("threadIdx.y"))
    s[T].bind(tj, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[T], bj)
    r, c = s[AS].op.axis
    s[AS].storage_align(r, 32, 1)
    s[AS].bind(r, te.thread_axis("threadIdx.y"))
    s[AS].bind(c, te.thread_axis("threadIdx.x"))
    return s, [A, T], lambda a: a.T


def matmul_tiled(m=37, n=29, k=23, block=16, per=2, kt=4, vec=2):
    """Shared tiles of A and B, register tile C.local, cooperative (vectorized) fetch."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    threads = block // per
    bi, bj, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], block, block)
    ty_, iin = s[C].split(ii, factor=per)
    tx_, jin = s[C].split(jj, factor=per)
    s[C].reorder(bi, bj, ty_, tx_, iin, jin)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ty_, te.thread_axis("threadIdx.y"))
    s[C].bind(tx_, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tx_)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=kt)
    ci, cj = s[CL].op.axis
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ki)
    for T in (AS, BS):
        s[T].compute_at(s[CL], ko)
        fused = s[T].fuse(*s[T].op.axis)
        rest, v = s[T].split(fused, factor=vec)
        rest, t1 = s[T].split(rest, factor=threads)
        _, t2 = s[T].split(rest, factor=threads)
        s[T].bind(t2, te.thread_axis("threadIdx.y"))
        s[T].bind(t1, te.thread_axis("threadIdx.x"))
        s[T].vectorize(v)
    return s, [A, B, C], lambda a, b: a @ b


def conv2d_nchw(n=1, c=3, h=9, w=11, f=4, kh=3, kw=3, pad=1):
    """Direct convolution with zero padding through te.if_then_else; one thread per
    output pixel, filters in a block."""
    X = te.placeholder((n, c, h, w), name="X")
    W = te.placeholder((f, c, kh, kw), name="W")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def body(b, k, y, x):
        yy, xx = y + ry - pad, x + rx - pad
        inside = te.all(yy >= 0, yy < h, xx >= 0, xx < w)
        return te.sum(te.if_then_else(inside, X[b, rc, yy, xx], 0.0) * W[k, rc, ry, rx],
                      axis=[rc, ry, rx])

    Y = te.compute((n, f, h, w), body, name="Y")
    s = te.create_schedule(Y.op)
    b, k, y, x = Y.op.axis
    fused = s[Y].fuse(b, k)
    s[Y].bind(fused, te.thread_axis("blockIdx.y"))
    s[Y].bind(y, te.thread_axis("blockIdx.x"))
    s[Y].bind(x, tx())

    def ref(xv, wv):
        out = np.zeros((n, f, h, w))
        xp = np.pad(xv, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        for i in range(kh):
            for j in range(kw):
                out += np.einsum("bchw,fc->bfhw", xp[:, :, i:i + h, j:j + w], wv[:, :, i, j])
        return out

    return s, [X, W, Y], ref


def softmax_rows(m=7, n=33):
    """Three stages (max, exp-sum, divide), each one block per row, threads along the row;
    the reductions loop inside each thread."""
    X = te.placeholder((m, n), name="X")
    k1 = te.reduce_axis((0, n), name="k1")
    mx = te.compute((m,), lambda i: te.max(X[i, k1], axis=k1), name="mx")
    k2 = te.reduce_axis((0, n), name="k2")
    sm = te.compute((m,), lambda i: te.sum(te.exp(X[i, k2] - mx[i]), axis=k2), name="sm")
    Y = te.compute((m, n), lambda i, j: te.exp(X[i, j] - mx[i]) / sm[i], name="Y")
    s = te.create_schedule(Y.op)
    for T in (mx, sm):
        s[T].bind(T.op.axis[0], bx())
    s[Y].bind(Y.op.axis[0], bx())
    jo, ji = s[Y].split(Y.op.axis[1], factor=16)
    s[Y].bind(ji, tx())

    def ref(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return s, [X, Y], ref


def elementwise_broadcast(m=13, n=35):
    """A chain with broadcasting, the first stage inlined, float16 inputs."""
    A = te.placeholder((m, n), name="A", dtype="float16")
    b = te.placeholder((n,), name="b", dtype="float16")
    T = te.compute((m, n), lambda i, j: A[i, j].astype("float32") * 2.0, name="T")
    Y = te.compute((m, n), lambda i, j: te.tanh(T[i, j] + b[j].astype("float32")), name="Y")
    s = te.create_schedule(Y.op)
    s[T].compute_inline()
    fused = s[Y].fuse(*Y.op.axis)
    o, i = s[Y].split(fused, factor=128)
    s[Y].bind(o, bx())
    s[Y].bind(i, tx())
    return s, [A, b, Y], lambda a, bb: np.tanh(a * 2.0 + bb)


def row_sum_cross_thread(m=5, n=77, threads=16):
    """A row reduction with its reduce loop bound to threadIdx.x (TVM's all-reduce): each
    thread sums a strided slice, then thread 0 combines the partial sums."""
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=threads)
    s[B].bind(B.op.axis[0], bx())
    s[B].bind(ki, tx())
    return s, [A, B], lambda a: (a * a).sum(axis=1)


CASES = {
    "row_sum_cross_thread": row_sum_cross_thread,
    "vector_add": vector_add,
    "transpose_shared": transpose_shared,
    "matmul_tiled": matmul_tiled,
    "conv2d_nchw": conv2d_nchw,
    "softmax_rows": softmax_rows,
    "elementwise_broadcast": elementwise_broadcast,
}


def _inputs(args):
    return [_rand(a.shape, a.dtype) for a in args if isinstance(a.op, te.PlaceholderOp)]


def _check(out, expected, dtype):
    tol = 1e-2 if dtype == "float16" else 1e-5
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(out, expected, rtol=0, atol=tol * scale)


@pytest.mark.parametrize("name", CASES)
def test_gpu_schedule_interpreted(name):
    s, args, ref = CASES[name]()
    ins = _inputs(args)
    out_t = args[-1]
    out = np.full(out_t.shape, np.nan, dtype=out_t.dtype)
    run(polytile.lower(s, args), *ins, out)
    _check(out, ref(*[x.astype("float64") for x in ins]), args[0].dtype)


@pytest.mark.parametrize("name", CASES)
def test_gpu_schedule_compiles_with_nvcc(name):
    from helpers import compile_with_nvcc

    s, args, _ = CASES[name]()
    compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
def test_gpu_schedule_on_device(name):
    s, args, ref = CASES[name]()
    f = polytile.build(s, args, target="cuda")
    ins = _inputs(args)
    out_t = args[-1]
    dev = [polytile.nd.array(x, device="cuda") for x in ins]
    out = polytile.nd.array(np.full(out_t.shape, np.nan, dtype=out_t.dtype), device="cuda")
    f(*dev, out)
    _check(out.numpy(), ref(*[x.astype("float64") for x in ins]), args[0].dtype)


def test_missing_barrier_is_caught_by_the_interpreter():
    """The oracle must be able to fail: drop the barriers of a shared-memory schedule, and
    the interpreter reports the race (a thread reads what another writes, no barrier)."""
    from polytile.schedule.interpreter import RaceError
    from polytile.schedule.loop_ir import StmtMutator, Sync, seq

    class _NoSync(StmtMutator):
        def visit_Sync(self, s: Sync):
            return seq()

    s, args, ref = matmul_tiled()
    f = polytile.lower(s, args)
    f = type(f)(f.name, f.params, _NoSync().visit(f.body))
    ins = _inputs(args)
    out = np.full(args[-1].shape, np.nan, dtype="float32")
    with pytest.raises(RaceError, match=r"A\.shared\[.*no barrier between them"):
        run(f, *ins, out)


# ------------------------------------------------------------------- structure of the IR
def test_launch_shape_and_scopes():
    s, args, _ = matmul_tiled(m=64, n=64, k=32, block=16, per=2)
    text = str(polytile.lower(s, args))
    assert "launch main_kernel0(grid=[4, 4, 1], block=[8, 8, 1]):" in text
    assert "C.local = alloc(float32[2, 2], scope='local')" in text
    assert "A.shared = alloc(float32[16, 4], scope='shared')" in text
    assert text.count("sync('shared')") == 2  # before and after the two copies


def test_storage_align_pads_the_shared_rows():
    s, args, _ = transpose_shared(m=64, n=64, tile=8)
    # the stride of rows becomes 33 = 1 * 32 + 1: consecutive rows start in different banks
    assert "A.shared = alloc(float32[8, 33], scope='shared')" in str(polytile.lower(s, args))


def test_divisible_sizes_need_no_guards():
    s, args, _ = vector_add(n=1024, factor=64)
    assert " if " not in str(polytile.lower(s, args))


# ------------------------------------------------------------------------------ failures
def test_stage_without_binding_is_refused():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((10,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], tx())
    with pytest.raises(ScheduleError, match="stage 'B' has no loop bound to a GPU index"):
        polytile.lower(s, [A, C])


def test_mismatched_thread_extents_are_refused():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    o, i = s[B].split(B.op.axis[0], factor=8)
    s[B].bind(o, bx())
    s[B].bind(i, tx())
    s[AS].compute_at(s[B], o)
    _, c = s[AS].split(s[AS].op.axis[0], factor=4)
    s[AS].bind(c, tx())
    with pytest.raises(ScheduleError, match="'threadIdx.x' is bound to loops of different "
                       "extents: 4 \\(stage 'A.shared'\\), 8 \\(stage 'B'\\)"):
        polytile.lower(s, [A, B])


def test_bind_same_axis_twice_in_a_stage_is_refused():
    s, args, _ = vector_add()
    C = args[-1]
    o, i = s[C].leaf_iter_vars
    with pytest.raises(ScheduleError, match="thread axis 'threadIdx.x' is bound twice"):
        s[C].bind(o, tx())


def test_too_many_threads_per_block_are_refused():
    s, args, _ = vector_add(n=4096, factor=2048)
    with pytest.raises(ScheduleError, match="threadIdx.x .* has extent 2048; at most 1024"):
        polytile.lower(s, args)


def test_block_index_inside_an_attached_stage_is_refused():
    s, args, _ = matmul_tiled(m=32, n=32, k=16)
    st = next(x for x in s.stages if x.name == "A.shared")
    leaf = st.leaf_iter_vars[0]
    st.bind(leaf, te.thread_axis("blockIdx.z"))
    with pytest.raises(ScheduleError, match="bound to 'blockIdx.z', but the stage is computed "
                       "inside another stage"):
        polytile.lower(s, args)


def test_shared_memory_limit_is_checked():
    s, args, _ = matmul_tiled(m=512, n=512, k=512, block=128, per=8, kt=64)
    with pytest.raises(ScheduleError, match="bytes of shared memory"):
        polytile.lower(s, args)


def test_cross_thread_reduction_with_spatial_thread_loop_outside_is_refused():
    """Rows on threadIdx.y are accepted (tests/schedule/test_tvm_surface.py) when they are
    the innermost spatial loops; a thread row around an unbound spatial loop is not."""
    A = te.placeholder((8, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(io, te.thread_axis("threadIdx.y"))
    s[B].bind(k, tx())
    with pytest.raises(ScheduleError, match="stage 'B' binds its spatial loop 'i.outer' to "
                       "'threadIdx.y' around a spatial loop that is not bound to a thread "
                       r"index, with its reduction loop 'k' on 'threadIdx.x'.*blockIdx"):
        polytile.lower(s, [A, B])


def test_cross_thread_reduction_leaves_the_user_schedule_unchanged():
    s, args, _ = row_sum_cross_thread()
    before = [str(st) for st in s.trace]
    polytile.lower(s, args)
    assert [str(st) for st in s.trace] == before
    assert not any(st.name.endswith(".rf") for st in s.stages)


def test_unknown_thread_tag_is_refused():
    with pytest.raises(ScheduleError, match="unknown thread tag 'threadIdx.w'"):
        te.thread_axis("threadIdx.w")


def test_reduction_axis_bound_to_blocks_is_refused():
    A = te.placeholder((8, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(k, bx())
    s[B].bind(B.op.axis[0], tx())
    with pytest.raises(ScheduleError, match="bind: loop 'k' of stage 'B' carries a dependence"):
        polytile.lower(s, [A, B])


def test_vectorized_copies_become_128_bit_accesses():
    # 16-byte copies from global into shared memory are cp.async (sm_80+; an ordinary
    # float4 copy below), waited for before the barrier that follows them
    s, args, _ = matmul_tiled(m=64, n=64, k=32, block=16, per=2, vec=4)
    src = polytile.build(s, args, target="cuda").get_source()
    assert "cp_async_cg_shared_global(&A_shared[" in src
    assert "cp_async_commit_group();\n    cp_async_wait_group(0);\n    __syncthreads();" in src


def test_misaligned_vectorized_copy_stays_a_loop():
    # rows of 30 floats: a row start is not a multiple of 4 elements, so no float4
    s, args, _ = matmul_tiled(m=30, n=30, k=30, block=16, per=2, vec=4)
    src = polytile.build(s, args, target="cuda").get_source()
    assert "float4" not in src and "#pragma unroll" in src


def test_directly_nested_bound_loops_make_one_band(monkeypatch):
    """The bands of a block's two bound loops, one inside the other, are one band of two
    members in isl's schedule tree (isl analyses every statement once per band level:
    tree.py); the transpose through shared memory still computes the transpose."""
    import islpy as isl

    from polytile.schedule import astgen

    trees = []

    def recording(*a, **kw):
        trees.append(real(*a, **kw))
        return trees[-1]

    real = astgen.build_schedule
    monkeypatch.setattr(astgen, "build_schedule", recording)
    s, args, ref = transpose_shared()
    out = np.full(args[-1].shape, np.nan, dtype="float32")
    ins = _inputs(args)
    run(polytile.lower(s, args), *ins, out)
    _check(out, ref(*[x.astype("float64") for x in ins]), "float32")
    # the block's band (blockIdx.y, blockIdx.x) is dropped (the next test); each
    # statement keeps one band of its thread indices (threadIdx.y, threadIdx.x)
    top = trees[-1].get_root().child(0)
    assert top.get_type() == isl.schedule_node_type.sequence
    for k in range(top.n_children()):
        band = top.child(k).child(0)
        while band.get_type() == isl.schedule_node_type.mark:
            band = band.child(0)
        assert band.get_type() == isl.schedule_node_type.band
        assert band.band_n_member() == 2
        assert band.child(0).get_type() == isl.schedule_node_type.leaf


def test_bands_of_bound_loops_with_loops_below_are_dropped(monkeypatch):
    """A band of loops bound to hardware indices whose values are the indices themselves
    (after the filters) orders nothing; it is dropped where every statement below keeps a
    band of its own (tree.py: isl's AST generation analyses every statement once per band
    member; the transpose above keeps its one band). The register-tiled GEMM at odd sizes
    still computes the product."""
    import islpy as isl

    from polytile.schedule import astgen

    trees = []

    def recording(*a, **kw):
        trees.append(real(*a, **kw))
        return trees[-1]

    def unmarked_bands(node) -> int:
        own = (node.get_type() == isl.schedule_node_type.band
               and node.parent().get_type() != isl.schedule_node_type.mark)
        return own + sum(unmarked_bands(node.child(k)) for k in range(node.n_children()))

    real = astgen.build_schedule
    monkeypatch.setattr(astgen, "build_schedule", recording)
    s, args, ref = matmul_tiled(m=11, n=9, k=5, block=8, per=2, kt=2, vec=1)
    out = np.full(args[-1].shape, np.nan, dtype="float32")
    ins = _inputs(args)
    run(polytile.lower(s, args), *ins, out)
    _check(out, ref(*[x.astype("float64") for x in ins]), "float32")
    assert unmarked_bands(trees[-1].get_root()) == 0
