"""Software pipelining (``Stage.pipeline``, ``Stage.double_buffer``) and asynchronous
global -> shared copies (``cp.async``): the pipelined loop IR on the reference interpreter
(which lands each asynchronous copy at the ``wait_group`` that retires it) against numpy
at odd sizes, refusals, the CUDA source compiled with nvcc for sm_80 and sm_90 (SASS
``LDGSTS``/``LDSM``/``HMMA`` where ``cuobjdump`` exists), and real runs marked ``gpu``."""

from __future__ import annotations

import re

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.te import dtype as dt
from polytile.errors import ScheduleError
from polytile.schedule.interpreter import RaceError, run
from polytile.schedule.loop_ir import Allocate, walk_stmts
from polytile.schedule.passes import async_copy, software_pipeline
from polytile.schedule.pipeline import lower
from polytile.targets.cuda import tensor_core as tc

from helpers import compile_with_nvcc, nvcc_text


def simt_gemm(m, n, k, dtype="float32", *, block=16, per=2, kt=8, vec=None, stages=3,
              double_buffer=False):
    """``C[m, n] = A @ B`` summed in float32 on CUDA cores: shared tiles of A and B copied
    with ``vec``-lane vector loops (16 bytes by default) at loop ``k.outer`` of the
    register tile, pipelined ``stages`` deep."""
    vec = vec or 16 // dt.nbytes(dtype)
    A = te.placeholder((m, k), name="A", dtype=dtype)
    B = te.placeholder((k, n), name="B", dtype=dtype)
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32")
                                               * B[r, j].astype("float32"), axis=r), name="C")
    s = te.create_schedule(C.op)
    AS, BS = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    threads = block // per
    bi, bj, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], block, block)
    ty, iin = s[C].split(ii, factor=per)
    tx, jin = s[C].split(jj, factor=per)
    s[C].reorder(bi, bj, ty, tx, iin, jin)
    for v, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ty, "threadIdx.y"),
                   (tx, "threadIdx.x")):
        s[C].bind(v, te.thread_axis(tag))
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=kt)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    if stages > 1 and not double_buffer:
        s[CL].pipeline(ko, stages=stages)
    for T in (AS, BS):
        s[T].compute_at(s[CL], ko)
        fused = s[T].fuse(*s[T].op.axis)
        rest, v = s[T].split(fused, factor=vec)
        rest, t1 = s[T].split(rest, factor=threads)
        _, t2 = s[T].split(rest, factor=threads)
        s[T].bind(t2, te.thread_axis("threadIdx.y"))
        s[T].bind(t1, te.thread_axis("threadIdx.x"))
        if vec > 1:
            s[T].vectorize(v)
        if double_buffer:
            s[T].double_buffer()
    return s, [A, B, C], (AS, BS, CL, ko)


def _inputs(m, n, k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, n)).astype("float32")
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    return a.astype(dtype), b.astype(dtype)


def _rel(c, ref):
    return np.linalg.norm(c.astype("float64") - ref) / np.linalg.norm(ref)


def _interpret(s, args, m, n, k, dtype):
    f = lower(s, args, target="cuda")
    a, b = _inputs(m, n, k, dtype)
    c = np.full((m, n), np.nan, "float32")
    run(f, a, b, c)
    return f, _rel(c, a.astype("float64") @ b.astype("float64"))


# ------------------------------------------------------------------ interpreter numerics
@pytest.mark.parametrize("m, n, k, dtype, stages", [
    (21, 24, 40, "float32", 3),    # partial row and column tiles
    (19, 8, 44, "float32", 2),     # a partial last k tile (44 = 5 * 8 + 4)
    (17, 8, 16, "float32", 4),     # two k tiles: fewer than the stages
    (19, 16, 48, "float16", 3),
    (13, 16, 56, "float16", 4),    # 56 = 3 * 16 + 8: a partial k tile, 4 stages
    (13, 16, 80, "bfloat16", 3),
])
def test_pipelined_gemm_on_the_interpreter(m, n, k, dtype, stages):
    kt = 8 if dtype == "float32" else 16
    s, args, _ = simt_gemm(m, n, k, dtype, kt=kt, stages=stages)
    f, err = _interpret(s, args, m, n, k, dtype)
    text = str(f)
    assert f"[{stages}, " in text.split("A.shared = alloc(")[1].split("\n")[0]
    assert "# pragma cp.async" in text
    assert f"cp.async.wait_group({stages - 2})" in text
    assert err < 1e-6


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_pipelined_mma_sync_gemm_on_the_interpreter(dtype):
    # the tensor-core GEMM pipelined 3 deep, its ldmatrix/mma.sync calls run through the
    # intrinsics' compute definitions
    M, N, K = 32, 64, 80                   # 5 k tiles of 16
    s, args = tc.wmma_gemm(M, N, K, isa="mma", dtype=dtype, block=(32, 32, 16),
                           warp=(16, 32), stages=3)
    f = lower(s, args, target="cuda", stop_after=None)
    a, b = _inputs(M, N, K, dtype)
    c = np.full((M, N), np.nan, "float32")
    run(f, a, b, c)
    assert "cp.async.wait_group(1)" in str(f)
    # the fragment loads of tile k right after the barrier, before the copies of tile
    # k + 2 (software_pipeline._leading_loads), the MMAs after them
    loop = _k_loop(str(f))
    assert loop.index("sync(") < loop.index("ldmatrix") < loop.index("pragma cp.async") < \
        loop.index("commit_group") < loop.index("mma_sync")
    assert _rel(c, a.astype("float64") @ b.astype("float64")) < 1e-6


@pytest.mark.parametrize("M, N, BN, group", [(48, 64, 32, 2), (64, 64, 32, 2), (32, 64, 32, 1),
                                            (48, 80, 64, 8)])
def test_mma_sync_fragments_per_tile_and_grouped_blocks_on_the_interpreter(M, N, BN, group):
    # frags="tile": the ldmatrix loads of both 16-wide k steps of a 32-deep tile issued
    # before its MMAs (distinct registers); group: blocks walk `group` tile rows of a tile
    # column (3 tile rows, groups of 2: the last group is ragged). (48, 80, 64, 8): groups
    # larger than the tile rows and a partial tile column, whose guard of the whole k-loop
    # body the pipeline hoists (it was refused)
    K = 96                                 # 3 k tiles of 32, 4 stages
    s, args = tc.wmma_gemm(M, N, K, isa="mma", block=(16, BN, 32), warp=(16, 16),
                           stages=4, frags="tile", group=group)
    f = lower(s, args, target="cuda", stop_after=None)
    a, b = _inputs(M, N, K, "float16")
    c = np.full((M, N), np.nan, "float32")
    run(f, a, b, c)
    assert _rel(c, a.astype("float64") @ b.astype("float64")) < 1e-6
    _assert_both_operands_pipelined(s, args, 4)


# (M, N, K, block, warp, stages, group): 3 and 2 k tiles of 48 (three 16-wide steps); 5 k
# tiles of 32 with 4 stages (more tiles than stages); 1 k tile (the prefetch of tile 1 is
# guarded off); grouped blocks with a ragged group
_PREFETCH_CASES = [(32, 64, 144, (32, 32, 48), (16, 32), 3, 1),
                   (48, 32, 96, (16, 32, 48), (16, 16), 2, 1),
                   (32, 48, 160, (16, 16, 32), (16, 16), 4, 2),
                   (16, 16, 32, (16, 16, 32), (16, 16), 3, 1),
                   (48, 80, 96, (16, 64, 32), (16, 16), 3, 8),
                   # 5 k tiles of 64 (four steps) in 4 stages; 7 k tiles of 32 in 5 stages
                   # (gpu_gemm.py MMA_VARIANTS [20], [22])
                   (32, 48, 320, (16, 16, 64), (16, 16), 4, 1),
                   (48, 32, 224, (16, 32, 32), (16, 16), 5, 2)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M, N, K, block, warp, stages, group", _PREFETCH_CASES)
def test_fragment_prefetch_on_the_interpreter(M, N, K, block, warp, stages, group, dtype):
    # frags="prefetch": the first k step's fragments of tile k + 1 loaded into the ".next"
    # fragments after the barrier, before the last step's MMAs of tile k
    s, args = tc.wmma_gemm(M, N, K, isa="mma", dtype=dtype, block=block, warp=warp,
                           stages=stages, frags="prefetch", group=group)
    f = lower(s, args, target="cuda", stop_after=None)
    text = str(f)
    if K > block[2]:   # (one k tile: no k loop left to pipeline)
        assert "A.shared.wmma.matrix_a.next = alloc(" in text
        loop = _k_loop(text)
        # in the loop: MMAs from .next first, then the barrier, then the loads into .next
        mma, barrier = loop.index("update(A.shared.wmma.matrix_a.next"), loop.index("sync(")
        load = loop.index(", A.shared.wmma.matrix_a.next[0]{16x16}):", barrier)
        assert mma < barrier < load
        # fragment_prefetch.ALTERNATE_SETS (an even number of k steps): the second step's
        # loads come before the first step's MMAs, and the third step (of four) loads into
        # .next before the barrier
        steps = block[2] // 16
        if steps % 2 == 0:
            assert loop.index(", A.shared.wmma.matrix_a[0]{16x16}):") < mma
            assert (loop.find(", A.shared.wmma.matrix_a.next[0]{16x16}):") < barrier) == \
                (steps >= 4)
        # the loads into .next before the copies of tile k + S (LOADS_BEFORE_COPIES: ptxas
        # does not move an ldmatrix above a cp.async), the last step's MMAs after both
        loop = loop.split("cp.async.wait_group(0)")[0]
        if "pragma cp.async" in loop:
            assert load < loop.index("pragma cp.async") < loop.index("commit_group") < \
                loop.rindex("update(A.shared.wmma.matrix_a[")
    a, b = _inputs(M, N, K, dtype)
    c = np.full((M, N), np.nan, "float32")
    run(f, a, b, c)
    assert _rel(c, a.astype("float64") @ b.astype("float64")) < 1e-6


def test_fragment_prefetch_with_a_wrong_wait_is_caught(monkeypatch):
    # the interpreter lands copies at their wait_group: waiting one group too few makes the
    # prefetched fragments read a tile still in flight
    from polytile.schedule.passes import software_pipeline as sp

    real = sp.wait_group
    monkeypatch.setattr(sp, "wait_group", lambda n: real(n + 1 if n > 0 else n))
    s, args = tc.wmma_gemm(32, 32, 160, isa="mma", block=(16, 16, 32), warp=(16, 16),
                           stages=3, frags="prefetch")
    f = lower(s, args, target="cuda", stop_after=None)
    a, b = _inputs(32, 32, 160, "float16")
    c = np.full((32, 32), np.nan, "float32")
    try:
        run(f, a, b, c)
    except Exception:      # a race or an uninitialised read, reported by the interpreter
        return
    assert not _rel(c, a.astype("float64") @ b.astype("float64")) < 1e-6


@pytest.mark.parametrize("frags, stages", [("prefetch", 3), ("step", 2)])
def test_unrolled_slots_on_the_interpreter(monkeypatch, frags, stages):
    # UNROLL_SLOTS: the steady state unrolled by the stages, every slot a constant, then
    # the iterations left over (5 k tiles: one round of 3 and two more; two rounds of 2
    # and one more)
    from polytile.schedule.passes import software_pipeline as sp

    monkeypatch.setattr(sp, "UNROLL_SLOTS", True)
    s, args = tc.wmma_gemm(32, 32, 160, isa="mma", block=(16, 16, 32), warp=(16, 16),
                           stages=stages, frags=frags)
    f = lower(s, args, target="cuda", stop_after=None)
    text = str(f)
    assert "for k.outer.slots in range(0, " in text and "truncmod(int64(k" not in text
    a, b = _inputs(32, 32, 160, "float16")
    c = np.full((32, 32), np.nan, "float32")
    run(f, a, b, c)
    assert _rel(c, a.astype("float64") @ b.astype("float64")) < 1e-6


def test_fragment_prefetch_refusals():
    # one k step per tile (16-deep tiles), fragments per k tile, no pipeline, mma_wait
    with pytest.raises(ValueError, match="two k steps"):
        tc.wmma_gemm(32, 32, 64, isa="mma", block=(16, 16, 16), warp=(16, 16), stages=3,
                     frags="prefetch")
    with pytest.raises(ValueError, match="needs a pipeline"):
        tc.wmma_gemm(32, 32, 64, isa="mma", block=(16, 16, 32), warp=(16, 16), stages=1,
                     frags="prefetch")
    s, args = tc.wmma_gemm(32, 32, 64, isa="mma", block=(16, 16, 32), warp=(16, 16),
                           stages=3, frags="tile")
    CF = next(st for st in s.stages if st.name == "C.wmma.accumulator")
    ko = CF.leaf_iter_vars[0] if CF.leaf_iter_vars[0].name == "k.outer" else next(
        v for v in CF.leaf_iter_vars if v.name == "k.outer")
    with pytest.raises(ScheduleError, match="fragment_prefetch"):
        CF.pipeline(ko, stages=3, mma_wait=0, fragment_prefetch=True)
    with pytest.raises(ScheduleError, match="already pipelined"):
        CF.pipeline(ko, stages=3, fragment_prefetch=True)
    s, args = tc.wmma_gemm(32, 32, 64, isa="mma", block=(16, 16, 32), warp=(16, 16),
                           stages=3, frags="tile")
    CF = next(st for st in s.stages if st.name == "C.wmma.accumulator")
    ko = next(v for v in CF.leaf_iter_vars if v.name == "k.outer")
    prag = CF.pragmas[ko]
    CF.pragmas[ko] = ()
    CF.pipeline(ko, stages=3, fragment_prefetch=True)
    assert len(CF.pragmas[ko]) == 1 and prag
    with pytest.raises(ScheduleError, match=r"fragment_prefetch: its compute is not loads .* "
                       r"two k steps"):
        lower(s, args, target="cuda")


def test_fragment_prefetch_compiles_and_double_buffers_in_sass():
    s, args = tc.wmma_gemm(512, 512, 512, isa="mma", block=(128, 128, 32), warp=(64, 64),
                           stages=4, frags="prefetch", group=8)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert "pt_mma_a A_shared_wmma_matrix_a_next[4];" in src
    for arch in ("sm_80", "sm_90"):
        compile_with_nvcc(src, arch)
    counts = _sass_counts(src, "sm_90")
    if counts is None:
        pytest.skip("cuobjdump not found")
    # 2 k steps x (4 A + 4 B) ldmatrix.x4 and 2 x 32 mma per tile, in the loop and prologue
    assert counts["HMMA"] >= 64 and counts["LDSM"] >= 16 and counts["LDGSTS"] > 0, counts
    got = _ptxas_registers(src)
    assert got is not None and got[1] == 0, got   # the second fragment set does not spill


@pytest.mark.parametrize("block, stages", [((128, 256, 32), 3), ((128, 256, 32), 4),
                                           ((128, 256, 64), 4)])
def test_eight_warp_128x256_prefetch_gemm_fits_one_block_per_sm(block, stages):
    # MMA_VARIANTS[14] and its deeper pipelines [18] (the --isa best mma.sync variant,
    # tensor_core.MMA_BEST), [20]: 256 threads within 64K registers (at most 255 each), no spills, the shared
    # tiles (3 or 4 stages of 128 x (BK + 8) + BK x 264 float16) within sm_90's 227 KiB,
    # 16-byte epilogue stores (STG.E.128) and 2 x 32 mma per 16-deep step pair
    s, args = tc.wmma_gemm(512, 512, 512, isa="mma", block=block, warp=(64, 64),
                           stages=stages, frags="prefetch", group=8)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert "__launch_bounds__(256)" in src and "dynamic shared memory" in src
    got = _ptxas_registers(src)
    if got is None:
        pytest.skip("nvcc not found")
    # (nvcc 13: 232, 236, 244 registers with a branch in the epilogue stores, 246 each
    # without: the limit is what matters)
    assert got[0] <= 255 and got[1] == 0, got
    counts = _sass_counts(src, "sm_90")
    if counts is not None:
        assert counts["HMMA"] >= 32 * block[2] // 16 and counts["STG.128"] > 0, counts
    shared = stages * (block[0] * (block[2] + 8) + block[2] * (block[1] + 8)) * 2
    assert shared <= 227 * 1024


# benchmarks/gpu_gemm.py MMA_VARIANTS [25..33]: 64x32 and 32x64 warp tiles, 16 warps per SM
# (8-warp 128x128 blocks, two per SM; 16-warp 128x256 and 256x128 blocks, one per SM), and
# 32x32 warp tiles, 32 warps per SM (16-warp 128x128 blocks, two per SM)
_SLOW = pytest.mark.slow   # the other shapes of a kind: `pytest -m slow` (CI time)
_MORE_WARPS = [((128, 128, 32), (64, 32), 4, "step", "float16")] + [
    pytest.param(*c, marks=_SLOW) for c in [
        ((128, 128, 32), (32, 64), 4, "prefetch", "bfloat16"),
        ((128, 256, 32), (64, 32), 3, "prefetch", "float16"),
        ((128, 256, 32), (32, 64), 4, "step", "float16"),
        ((256, 128, 32), (64, 32), 3, "step", "float16"),
        ((128, 128, 32), (32, 32), 4, "step", "float16")]]


@pytest.mark.parametrize("block, warp, stages, frags, dtype", _MORE_WARPS)
def test_more_warps_per_block_on_the_interpreter(block, warp, stages, frags, dtype):
    # one block of the real tile shapes (2 x 4, 4 x 2, 2 x 8, 4 x 4, 4 x 4 and 4 x 4 warps), 5 k
    # tiles (more than the stages), grouped block order, against numpy
    M, N, K = block[0], block[1], 5 * block[2]
    s, args = tc.wmma_gemm(M, N, K, isa="mma", dtype=dtype, block=block, warp=warp,
                           stages=stages, frags=frags, group=8)
    f = lower(s, args, target="cuda", stop_after=None)
    threads = 32 * (block[0] // warp[0]) * (block[1] // warp[1])
    assert threads in (256, 512)
    a, b = _inputs(M, N, K, dtype)
    c = np.full((M, N), np.nan, "float32")
    run(f, a, b, c)
    assert _rel(c, a.astype("float64") @ b.astype("float64")) < 1e-6


@pytest.mark.parametrize("block, warp, stages, min_blocks, bounds, most", [
    ((128, 128, 32), (64, 32), 4, 2, "(256, 2)", 128)] + [pytest.param(*c, marks=_SLOW) for c in [
        ((128, 128, 32), (32, 64), 4, 2, "(256, 2)", 128),
        ((128, 256, 32), (64, 32), 3, 0, "(512)", 128),
        ((256, 128, 32), (64, 32), 3, 0, "(512)", 128),
        ((128, 128, 32), (32, 32), 4, 2, "(512, 2)", 64)]])
def test_sixteen_and_32_warps_per_sm_fit_the_registers(block, warp, stages, min_blocks, bounds, most):
    # MMA_VARIANTS [25..29], [33]: 16 (32) warps per SM need at most 128 (64) registers
    # per thread (64K / 512 or 1024), without spills, and shared tiles within sm_90's 228
    # KiB per SM for the blocks per SM asked for (227 KiB per block)
    # at the benchmark's size: at 512^3 (4 tile rows in a group of 8) ptxas spills the 32x32
    # warp tiles of [33] (168 bytes at 64 registers)
    s, args = tc.wmma_gemm(4096, 4096, 4096, isa="mma", block=block, warp=warp,
                           stages=stages, frags="step", group=8)
    target = "cuda" + (f" -min-blocks={min_blocks}" if min_blocks else "")
    src = polytile.build(s, args, target=target).get_source("cu")
    assert f"__launch_bounds__{bounds}" in src
    shared = stages * (block[0] * (block[2] + 8) + block[2] * (block[1] + 8)) * 2
    assert shared * max(min_blocks, 1) <= 228 * 1024 and shared <= 227 * 1024
    got = _ptxas_registers(src)
    if got is None:
        pytest.skip("nvcc not found")
    # (nvcc 13: 232, 236, 244 registers with a branch in the epilogue stores, 246 each
    # without: the limit is what matters)
    assert got[0] <= 255 and got[1] == 0, got
    counts = _sass_counts(src, "sm_90")
    if counts is not None:
        assert counts["HMMA"] >= 16 and counts["LDSM"] > 0 and counts["LDGSTS"] > 0, counts


def _k_loop(text: str) -> str:
    """The lowered text from the pipelined k loop on (``k.outer``, or ``k.outer.slots``
    with ``software_pipeline.UNROLL_SLOTS``)."""
    return re.split(r"for k\.outer(?:\.slots)? in range", text, maxsplit=1)[1]


def _assert_both_operands_pipelined(s, args, stages):
    # the copies of A and of B both rotate through `stages` slots, and the k loop has one
    # barrier: the fragments of A attached at the k loop (frags="tile") sit between the two
    # copies, which the pipeline gathers before them
    text = str(lower(s, args, target="cuda"))
    for name in ("A.shared", "B.shared"):
        assert f"{name} = alloc(float16[{stages}, " in text, name
    # one barrier per k tile, as many as copy groups (UNROLL_SLOTS: the loop body is
    # `stages` k tiles, the tiles left over after it)
    loop = _k_loop(text).split("cp.async.wait_group(0)")[0]
    assert loop.count("sync('shared')") == loop.count("commit_group") >= 1, loop


@pytest.mark.parametrize("size", [(384, 640, 320),
                                  pytest.param((4096, 4096, 4096), marks=_SLOW)])
@pytest.mark.parametrize("block, warp, stages, frags, group", [
    ((128, 128, 32), (32, 64), 4, "tile", 8), ((128, 256, 32), (64, 64), 4, "tile", 8),
    ((128, 128, 32), (64, 64), 4, "step", 8), ((128, 128, 64), (64, 64), 3, "tile", 8),
    ((128, 256, 64), (64, 64), 4, "prefetch", 8), ((256, 128, 32), (64, 64), 4, "prefetch", 8),
    ((128, 256, 32), (64, 64), 5, "prefetch", 8)])
def test_gpu_mma_sync_variants_lower_with_both_operands_pipelined(size, block, warp, stages,
                                                                  frags, group):
    # the configurations of the GPU tests and of benchmarks/gpu_gemm.py, lowered here
    # (no GPU needed): a refusal at build time shows here, not first on the GPU machine
    s, args = tc.wmma_gemm(*size, isa="mma", block=block, warp=warp, stages=stages,
                           frags=frags, group=group)
    _assert_both_operands_pipelined(s, args, stages)


def test_fragments_placement_is_checked():
    with pytest.raises(ValueError, match="frags 'warp'; expected 'step', 'tile' or 'prefetch'"):
        tc.wmma_gemm(64, 64, 64, isa="mma", frags="warp")


def test_double_buffer_is_a_two_stage_pipeline():
    s, args, _ = simt_gemm(21, 24, 40, double_buffer=True)
    f, err = _interpret(s, args, 21, 24, 40, "float32")
    assert "alloc(float32[2, " in str(f) and "cp.async.wait_group(0)" in str(f)
    assert err < 1e-6


@pytest.mark.parametrize("m, n, k, vec", [
    (21, 24, 40, 1),     # scalar copies (TVM's double_buffer needs no vectors)
    (37, 24, 30, 4),     # rows of 30 floats: vector copies not 16-byte aligned
    (19, 16, 44, 2),     # 8-byte vectors; a partial last k tile
])
def test_double_buffer_keeps_copies_that_cannot_be_cp_async(m, n, k, vec):
    # s[AS].double_buffer() on copies that are no 16-byte cp.async was refused with a
    # 'pipeline' error the user never asked for; they now stay ordinary copies into two
    # slots (the same barriers), checked for races by the interpreter
    s, args, _ = simt_gemm(m, n, k, vec=vec, double_buffer=True)
    f, err = _interpret(s, args, m, n, k, "float32")
    text = str(f)
    assert "alloc(float32[2, " in text and err < 1e-6
    assert ("# pragma cp.async" in text) == (vec == 4)   # B rows of 24 floats: aligned
    compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())


def test_a_wrong_wait_count_is_caught_by_the_interpreter(monkeypatch):
    # the interpreter lands a cp.async at the wait that retires it: waiting for one group
    # fewer than the pipeline needs lands this iteration's tile after the barrier, while
    # other threads read it
    monkeypatch.setattr(software_pipeline, "wait_group",
                        lambda n: async_copy.wait_group(n + 1))
    s, args, _ = simt_gemm(21, 24, 40, stages=3)
    f = lower(s, args, target="cuda")
    a, b = _inputs(21, 24, 40, "float32")
    with pytest.raises(RaceError, match=r"a write and a read of [AB]\.shared\["):
        run(f, a, b, np.full((21, 24), np.nan, "float32"))


def test_unpipelined_copies_are_async_and_waited_for_before_the_barrier():
    s, args, _ = simt_gemm(21, 24, 40, stages=1)
    f, err = _interpret(s, args, 21, 24, 40, "float32")
    body = str(f)
    assert body.count("# pragma cp.async") == 2
    # the two copies are in flight together, then one wait before the barrier
    assert re.search(r"commit_group\(\)\n\s*extern:cp\.async\.wait_group\(0\)\n\s*sync",
                     body)
    assert err < 1e-6


def test_misaligned_copies_stay_synchronous_outside_a_pipeline():
    s, args, _ = simt_gemm(21, 24, 30, stages=1)      # rows of A: 30 floats; of B: 24
    f, err = _interpret(s, args, 21, 24, 30, "float32")
    lines = str(f).splitlines()
    marked = [lines[i + 1] + lines[i + 2] for i, x in enumerate(lines) if "pragma cp.async" in x]
    assert len(marked) == 1 and "B.shared[" in marked[0] and err < 1e-6


# -------------------------------------------------------------------------- refusals
def test_pipeline_arguments_are_checked():
    s, args, (AS, BS, CL, ko) = simt_gemm(32, 32, 32, stages=1)
    with pytest.raises(ScheduleError, match=r"pipeline: stages=1 for loop 'k.outer' of stage "
                       r"'C.local'; an int >= 2"):
        s[CL].pipeline(ko, stages=1)
    with pytest.raises(ScheduleError, match="pipeline: .* is not an axis of stage 'C.local'"):
        s[CL].pipeline(s[AS].leaf_iter_vars[0], stages=2)
    s[CL].pipeline(ko, stages=3)
    with pytest.raises(ScheduleError, match="already pipelined with stages=3"):
        s[CL].pipeline(ko, stages=2)
    C = args[2]
    with pytest.raises(ScheduleError, match="pipeline: loop 'i.outer' of stage 'C' is bound "
                       "to 'blockIdx.y'; a serial loop"):
        s[C].pipeline(s[C].leaf_iter_vars[0])


def test_double_buffer_needs_an_attached_stage():
    A = te.placeholder((16, 16), name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] * 2, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    with pytest.raises(ScheduleError, match="double_buffer: stage 'A.shared' is not computed "
                       "at a loop of another stage"):
        s[AS].double_buffer()


def _double_buffered(variant: str):
    A = te.placeholder((9, 7), name="A")
    P = te.compute((9, 7), lambda i, j: A[i, j] * 2.0, name="P")
    C = te.compute((9, 7), lambda i, j: P[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    if variant == "vectorized":
        s[C].vectorize(C.op.axis[1])
        s[P].compute_at(s[C], C.op.axis[1])
    else:
        s[P].compute_at(s[C], C.op.axis[0])
    s[P].double_buffer()
    if variant == "split":
        s[C].split(C.op.axis[0], 2)
    return s, [A, C]


@pytest.mark.parametrize("variant,msg", [
    ("cpu", r"its body is not <copies into shared memory>, barrier, <compute> \(it has no "
            r"barrier"),
    ("split", r"the loop was split or fused after double_buffer\(\)"),
])
def test_double_buffer_refusals_name_double_buffer_and_the_stage(variant, msg):
    """Refusals of the pipeline that ``double_buffer()`` asks for name ``double_buffer``
    and its stage (they named ``pipeline``, which the user never called: 1.5 % of the
    fuzzer's llvm cases), when lowering, also after the schedule is copied (the trace
    records ``double_buffer``)."""
    s, args = _double_buffered(variant)
    head = (r"double_buffer: stage 'P', computed at loop 'i' of stage 'C' \(double "
            r"buffering pipelines that loop\): ")
    for sch in (s, s.copy()):
        with pytest.raises(ScheduleError, match=head + msg):
            polytile.build(sch, args)


def test_double_buffer_at_an_annotated_loop_names_double_buffer():
    with pytest.raises(ScheduleError, match=r"double_buffer: stage 'P', computed at loop 'j' "
                       r"of stage 'C' \(double buffering pipelines that loop\): loop 'j' of "
                       r"stage 'C' is annotated 'vectorized'; a serial loop"):
        _double_buffered("vectorized")


def test_misaligned_copy_in_a_pipeline_is_refused():
    s, args, _ = simt_gemm(37, 24, 30, stages=3)      # rows of 30 floats: 120 bytes
    with pytest.raises(ScheduleError, match=r"pipeline: loop 'k.outer' of stage 'C.local': "
                       r"the copy into 'A.shared' \(stage 'A.shared', loop "
                       r"'ax0.ax1.fused.inner'\) cannot be a 16-byte cp.async: its global "
                       r"address .* is not provably 16-byte aligned"):
        lower(s, args, target="cuda")


def test_narrow_vector_copy_in_a_pipeline_is_refused():
    s, args, _ = simt_gemm(32, 32, 32, vec=2, stages=2)   # 8-byte vectors
    with pytest.raises(ScheduleError, match=r"cannot be a 16-byte cp.async: it copies 2 lanes "
                       r"of 4 bytes \(8 bytes\), not 16"):
        lower(s, args, target="cuda")


def test_scalar_copy_in_a_pipeline_is_refused():
    s, args, _ = simt_gemm(32, 32, 32, vec=1, stages=2)
    with pytest.raises(ScheduleError, match=r"the copy into 'A.shared' \(stage 'A.shared'\) "
                       r"is not a vectorized loop"):
        lower(s, args, target="cuda")


def test_pipeline_of_a_loop_without_shared_copies_is_refused():
    s, args, (AS, BS, CL, ko) = simt_gemm(32, 32, 32, stages=1)
    ki = s[CL].leaf_iter_vars[1]
    s[CL].pipeline(ki, stages=2)
    with pytest.raises(ScheduleError, match=r"pipeline: loop 'k.inner' of stage 'C.local': "
                       r"its body is not <copies into shared memory>, barrier, <compute>"):
        lower(s, args, target="cuda")


def test_pipeline_on_the_cpu_is_refused():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    o, _ = s[B].split(B.op.axis[0], factor=8)
    s[B].pipeline(o, stages=2)
    with pytest.raises(ScheduleError, match=r"pipeline: loop 'i.outer' of stage 'B': its body "
                       r"is not <copies into shared memory>, barrier, <compute> \(it has no "
                       r"barrier: no stage is copied into shared memory there\)(.|\n)*on a "
                       r"CPU target leave them out"):
        polytile.lower(s, [A, B])


def test_pipelined_shared_memory_uses_the_opt_in_limit():
    # 3 stages of 128x72 + 64x136 float16 tiles: 105 KiB, above the 48 KiB a kernel
    # declares statically, within the 227 KiB of sm_90's opt-in
    s, args = tc.wmma_gemm(256, 256, 256, isa="mma", stages=3)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert "dynamic shared memory" in src
    s, args = tc.wmma_gemm(512, 512, 512, block=(256, 256, 64), warp=(64, 64), stages=4)
    with pytest.raises(ScheduleError, match=r"needs .* bytes of shared memory .*x 4 stages"):
        lower(s, args, target="cuda")


# ------------------------------------------------------------------ CUDA source and SASS
def _sass_counts(src: str, arch: str) -> dict | None:
    sass = nvcc_text(src, "sass", arch)
    if sass is None:
        return None
    counts = {op: len(re.findall(rf"\b{op}\b", sass)) for op in ("LDGSTS", "LDSM", "HMMA")}
    counts["STG.128"] = len(re.findall(r"\bSTG\.E\.128\b", sass))
    return counts


@pytest.mark.parametrize("isa, dtype", [("wmma", "float16"), ("mma", "float16"),
                                        ("mma", "bfloat16")])
def test_pipelined_tensor_core_gemm_compiles_with_cp_async(isa, dtype):
    s, args = tc.wmma_gemm(256, 256, 256, isa=isa, dtype=dtype, stages=3)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    for helper in ("void cp_async_cg_shared_global(", "void cp_async_commit_group(",
                   "void cp_async_wait_group("):
        assert helper in src
    assert "cp_async_wait_group(1);\n    __syncthreads();" in src
    for arch in ("sm_80", "sm_90"):
        compile_with_nvcc(src, arch)
        counts = _sass_counts(src, arch)
        if counts is not None:
            assert counts["LDGSTS"] > 0 and counts["HMMA"] > 0, counts
            if isa == "mma":   # ldmatrix, and the 16-byte epilogue stores of mma_store
                assert counts["LDSM"] > 0 and counts["STG.128"] > 0, counts


def _ptxas_registers(source: str, arch: str = "sm_90",
                     options: tuple = ()) -> tuple[int, int] | None:
    """(registers, spill bytes) ptxas -v reports for the kernel of ``source`` (compiled
    with the extra nvcc ``options``); None without nvcc."""
    import os
    import subprocess
    import tempfile

    from polytile.targets.cuda import compile as cc

    if cc.nvcc_path() is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cu")
        with open(path, "w") as fh:
            fh.write(source)
        log = subprocess.run([cc.nvcc_path(), f"-arch={arch}", "-cubin", "-std=c++17",
                              "-Xptxas", "-v", *options, "-o", path + ".cubin", path],
                             check=True,
                             capture_output=True, text=True).stderr
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    spills = sum(int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))
    return regs, spills


def test_eight_warp_mma_sync_gemm_fits_two_blocks_per_sm():
    # 128x128x32 blocks of 8 warps (32x64 warp tiles), fragments per k tile, 4 stages,
    # grouped blocks: at most 128 registers (two 256-thread blocks per SM), no spills
    s, args = tc.wmma_gemm(512, 512, 512, isa="mma", block=(128, 128, 32), warp=(32, 64),
                           stages=4, frags="tile", group=8)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert "__launch_bounds__(256)" in src
    assert "blockIdx_x % 8" in src            # the grouped block order
    compile_with_nvcc(src, "sm_80")
    got = _ptxas_registers(src)
    if got is None:
        pytest.skip("nvcc not found")
    regs, spills = got
    assert regs <= 128 and spills == 0, got


def test_min_blocks_target_option_bounds_the_registers():
    # "cuda -min-blocks=3": the default mma.sync variant (206 registers, 2 blocks of 4 warps
    # per SM) gets __launch_bounds__(128, 3) and fits 168 registers without spills
    from polytile.errors import TargetError

    s, args = tc.wmma_gemm(512, 512, 512, isa="mma", block=(128, 128, 32), warp=(64, 64),
                           stages=4, group=8)
    assert polytile.target.Target("cuda -min-blocks=3").attr("min_blocks") == 3
    for bad in ("cuda -min-blocks=0", "cuda -min-blocks=33", "cuda -min-blocks=x",
                "cuda -min-blocks"):
        with pytest.raises(TargetError):
            polytile.target.Target(bad)
    src = polytile.build(s, args, target="cuda -min-blocks=3").get_source("cu")
    assert "__launch_bounds__(128, 3)" in src
    # under the register bound the copies stay before the first step's ldmatrix
    # (software_pipeline_bounded: in the other order ptxas spills 88 bytes here)
    loop = src.split("for (int32_t k_outer")[1]
    assert loop.index("cp_async_cg_shared_global") < loop.index("ldmatrix_x4")
    compile_with_nvcc(src, "sm_80")
    got = _ptxas_registers(src)
    assert got is not None and got[0] <= 168 and got[1] == 0, got


def test_pipelined_simt_gemm_compiles():
    s, args, _ = simt_gemm(37, 24, 40, "float16", kt=16, stages=3)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert "cp_async_cg_shared_global(&A_shared[" in src
    compile_with_nvcc(src, "sm_80")
    counts = _sass_counts(src, "sm_90")
    if counts is not None:
        assert counts["LDGSTS"] > 0


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("stages", [2, 3])
def test_pipelined_simt_gemm_on_the_gpu(dtype, stages):
    m, n, k = 37, 24, 44 if dtype == "float32" else 56
    s, args, _ = simt_gemm(m, n, k, dtype, kt=8 if dtype == "float32" else 16, stages=stages)
    f = polytile.build(s, args, target="cuda")
    a, b = _inputs(m, n, k, dtype, seed=2)
    c = polytile.nd.array(np.full((m, n), np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), c)
    assert _rel(c.numpy(), a.astype("float64") @ b.astype("float64")) < 1e-6


_GPU_CASES = [(size, stages) for size in [(384, 640, 320)] for stages in (2, 3, 4)] + [
    ((4096, 4096, 4096), 3)]


@pytest.mark.gpu
@pytest.mark.parametrize("isa, dtype", [("wmma", "float16"), ("wmma", "bfloat16"),
                                        ("mma", "float16"), ("mma", "bfloat16")])
@pytest.mark.parametrize("size, stages", _GPU_CASES)
def test_pipelined_tensor_core_gemm_on_the_gpu(size, stages, isa, dtype):
    M, N, K = size
    s, args = tc.wmma_gemm(M, N, K, isa=isa, dtype=dtype, stages=stages)
    assert _gpu_error(s, args, M, N, K, dtype) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("size", [(384, 640, 320), (4096, 4096, 4096)])
@pytest.mark.parametrize("block, warp, stages, frags, group", [
    ((128, 128, 32), (32, 64), 4, "tile", 8), ((128, 256, 32), (64, 64), 4, "tile", 8),
    ((128, 128, 32), (64, 64), 4, "step", 8)])
def test_eight_warp_mma_sync_gemm_on_the_gpu(size, dtype, block, warp, stages, frags, group):
    # the variants of benchmarks/gpu_gemm.py MMA_VARIANTS (3 tile rows in groups of 8 at 384)
    M, N, K = size
    s, args = tc.wmma_gemm(M, N, K, isa="mma", dtype=dtype, block=block, warp=warp,
                           stages=stages, frags=frags, group=group)
    assert _gpu_error(s, args, M, N, K, dtype) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("size, dtype, block, warp, stages", [
    ((384, 640, 320), "float16", (128, 128, 32), (64, 64), 4),
    ((384, 640, 320), "bfloat16", (128, 128, 32), (64, 64), 4),
    ((384, 640, 320), "float16", (128, 256, 32), (64, 64), 3),
    ((384, 640, 320), "float16", (128, 128, 64), (64, 64), 3),
    ((4096, 4096, 4096), "float16", (128, 128, 32), (64, 64), 4),
    # MMA_VARIANTS [18..22]: deeper pipelines of the 8-warp 128x256 / 256x128 blocks
    ((384, 640, 320), "float16", (128, 256, 32), (64, 64), 4),
    ((384, 640, 320), "bfloat16", (256, 128, 32), (64, 64), 4),
    ((384, 640, 320), "float16", (128, 256, 64), (64, 64), 4),
    ((384, 640, 320), "float16", (128, 256, 32), (64, 64), 5),
    ((4096, 4096, 4096), "float16", (128, 256, 32), (64, 64), 4)])
def test_fragment_prefetch_gemm_on_the_gpu(size, dtype, block, warp, stages):
    # the frags="prefetch" variants of benchmarks/gpu_gemm.py MMA_VARIANTS [12..24]
    M, N, K = size
    s, args = tc.wmma_gemm(M, N, K, isa="mma", dtype=dtype, block=block, warp=warp,
                           stages=stages, frags="prefetch", group=8)
    assert _gpu_error(s, args, M, N, K, dtype) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("size", [(384, 640, 320), (4096, 4096, 4096)])
@pytest.mark.parametrize("block, warp, stages, frags, min_blocks", [
    ((128, 128, 32), (64, 32), 4, "step", 2), ((128, 256, 32), (64, 32), 3, "step", 0),
    ((256, 128, 32), (64, 32), 3, "prefetch", 0), ((128, 128, 32), (32, 32), 4, "step", 2)])
def test_sixteen_warps_per_sm_gemm_on_the_gpu(size, block, warp, stages, frags, min_blocks):
    # MMA_VARIANTS [25..33] (2 blocks of 8 warps, 1 of 16, or 2 of 16 per SM)
    M, N, K = size
    s, args = tc.wmma_gemm(M, N, K, isa="mma", block=block, warp=warp, stages=stages,
                           frags=frags, group=8)
    target = "cuda" + (f" -min-blocks={min_blocks}" if min_blocks else "")
    assert _gpu_error(s, args, M, N, K, "float16", target) < 1e-5


def _gpu_error(s, args, M, N, K, dtype, target="cuda") -> float:
    """The relative error (Frobenius norm) of the GEMM ``s`` built for ``target`` and run on
    the GPU (inputs of seed 1, output poisoned) against :func:`_reference`."""
    f = polytile.build(s, args, target=target)
    a, b = _inputs(M, N, K, dtype, seed=1)
    c = polytile.nd.array(np.full((M, N), np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), c)
    return _rel(c.numpy(), _reference(M, N, K, dtype))


def _reference(M, N, K, dtype, cache={}):
    # float64 products of the rounded inputs (seed 1), computed once per shape and dtype
    key = (M, N, K, dtype)
    if key not in cache:
        a, b = _inputs(M, N, K, dtype, seed=1)
        cache[key] = a.astype("float64") @ b.astype("float64")
    return cache[key]


# ------------------------------------------------------- devices without asynchronous copies
def test_pipeline_without_async_copies_copies_synchronously():
    import dataclasses

    from polytile.backend import Target

    t = Target.parse("cuda")
    t = dataclasses.replace(t, limits=dataclasses.replace(t.limits, async_copy_bytes=0))
    s, args, _ = simt_gemm(21, 24, 40, stages=3)
    f = lower(s, args, target=t)
    text = str(f)
    assert "cp.async" not in text and "alloc(float32[3, " in text
    a, b = _inputs(21, 24, 40, "float32")
    c = np.full((21, 24), np.nan, "float32")
    run(f, a, b, c)
    assert _rel(c, a.astype("float64") @ b.astype("float64")) < 1e-6


def test_splitting_a_pipelined_loop_afterwards_is_refused():
    s, args, (AS, BS, CL, ko) = simt_gemm(32, 32, 64, stages=1)
    s[CL].pipeline(ko, stages=2)
    s[CL].split(ko, factor=2)
    with pytest.raises(ScheduleError, match=r"pipeline: loop 'k.outer' of stage 'C.local' was "
                       r"split or fused after s\[...\].pipeline\(\)"):
        lower(s, args, target="cuda")


def test_mma_sync_dtype_and_accumulation_are_checked():
    with pytest.raises(ValueError, match="isa 'mma' takes float16 .* not 'bfloat16' with "
                       "'float16'"):
        tc.wmma_gemm(64, 64, 64, isa="mma", dtype="bfloat16", acc="float16")


def test_padded_shared_rows_are_bank_conflict_free_for_ldmatrix():
    # the default tiles of wmma_gemm: A rows of 64 + 8 float16, B rows of 128 + 8
    for width in (64, 128):
        assert tc.ldmatrix_bank_ways(2 * width) == 8          # unpadded: 8-way conflicts
        assert tc.ldmatrix_bank_ways(2 * (width + 8)) == 1    # padded: conflict-free
    s, args = tc.wmma_gemm(256, 256, 256, isa="mma", stages=3)
    f = lower(s, args, target="cuda")
    shapes = {x.buffer.name: x.buffer.shape for x in walk_stmts(f.body)
              if isinstance(x, Allocate) and x.buffer.scope == "shared"}
    assert shapes == {"A.shared": (3, 128, 72), "B.shared": (3, 64, 136)}
    for shape in shapes.values():
        assert tc.ldmatrix_bank_ways(2 * shape[-1]) == 1
    # the 8-warp variant's 32-deep tiles: A rows of 32 + 8 (80 bytes; 4-way unpadded)
    assert tc.ldmatrix_bank_ways(2 * 32) == 4
    assert tc.ldmatrix_bank_ways(2 * 40) == 1


def test_pipeline_replays_from_the_trace():
    from polytile.schedule.schedule import replay

    s, args, _ = simt_gemm(32, 32, 64, stages=3)
    C = args[2]
    fresh = replay(s.trace, te.create_schedule(C.op))
    steps = [st for st in fresh.trace if st.primitive == "pipeline"]
    assert len(steps) == 1 and dict(steps[0].kwargs) == {"stages": 3}
    assert str(lower(fresh, args, target="cuda")) == str(lower(s, args, target="cuda"))


def test_fragment_prefetch_replays_from_the_trace():
    from polytile.schedule.schedule import replay

    s, (A, B, C) = tc.wmma_gemm(32, 32, 64, isa="mma", block=(16, 16, 32), warp=(16, 16),
                                stages=3, frags="prefetch")
    fresh = replay(s.trace, te.create_schedule(C.op))
    steps = [st for st in fresh.trace if st.primitive == "pipeline"]
    assert len(steps) == 1 and dict(steps[0].kwargs) == {"stages": 3,
                                                         "fragment_prefetch": True}
    assert str(lower(fresh, [A, B, C], target="cuda")) == \
        str(lower(s, [A, B, C], target="cuda"))
