"""Swizzled shared layouts (``Stage.swizzle``) and overlapped warpgroup MMAs
(``wgmma_mma(..., asynchronous=True)`` with ``s[CF].pipeline(ko, stages, mma_wait=N)``) on
the tensorize path of ``targets/cuda/wgmma_intrin.py``: the layout against the generated
kernel's and the PTX descriptor model of ``targets/cuda/wgmma.py``; the tensorized GEMM on
the reference interpreter (which stores swizzled buffers at their swizzled places and
checks the wgmma group protocol) vs float64; refusals; the CUDA source compiled for
sm_90a. GPU runs are in ``test_wgmma_tensorize.py`` (``GPU_CASES``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.errors import BuildError, ScheduleError
from polytile.schedule import create_schedule
from polytile.schedule import tensor_call_eval as tce
from polytile.schedule.interpreter import RaceError, run, swizzled_place
from polytile.schedule.loop_ir import Buffer
from polytile.schedule.passes import software_pipeline as sp
from polytile.schedule.pipeline import lower
from polytile.targets.cuda import compile as cc
from polytile.targets.cuda import tensor_core as tc
from polytile.targets.cuda import wgmma

TARGET = "cuda -arch=sm_90a"


def _inputs(M, N, K, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a, bt = rng.uniform(-1, 1, (M, K)), rng.uniform(-1, 1, (N, K))
    if dtype == "bfloat16":
        import ml_dtypes

        return a.astype(ml_dtypes.bfloat16), bt.astype(ml_dtypes.bfloat16)
    return a.astype(dtype), bt.astype(dtype)


def _gemm(f, M, N, K, dtype, seed=0):
    a, bt = _inputs(M, N, K, dtype, seed)
    c = np.full((M, N), np.nan, "float32")
    run(f, a, bt, c)
    ref = a.astype("float64") @ bt.astype("float64").T
    return np.linalg.norm(c - ref) / np.linalg.norm(ref)


# ------------------------------------------------------------------ the layout
@pytest.mark.parametrize("rows", [8, 64, 128])
def test_swizzle_128b_is_the_generated_kernels_layout_and_the_descriptors(rows):
    buf = Buffer("AS", (rows, 64), "float16", "shared", "128B")
    arr = np.zeros(rows * 64, "float16")
    logical = np.arange(rows * 64, dtype=np.float64).reshape(rows, 64) % 2039
    for m in range(rows):
        for k in range(64):
            _, (p,) = swizzled_place(buf, arr, (m, k), "store")
            # the generated kernel's K-major 128B tile (targets/cuda/wgmma.py)
            assert p == wgmma.a_offset_128b(m, k, rows, 64)
            arr[p] = logical[m, k]
    # what wgmma reads through a 128B descriptor (start = the logical address of the
    # region, SBO = 8 rows, as wgmma_mma(swizzle="128B") builds it) is the logical tile
    for r0 in range(0, rows, 64 if rows >= 64 else 8):
        for k0 in range(0, 64, 16):
            desc = wgmma.make_descriptor(2 * (r0 * 64 + k0), 16, 1024, "128B")
            got = wgmma.descriptor_read(arr, desc, min(rows, 64), 16, "K")
            assert np.array_equal(got, logical[r0:r0 + min(rows, 64), k0:k0 + 16])


@pytest.mark.parametrize("mode, width", [("128B", 128), ("64B", 64), ("32B", 32)])
def test_swizzle_modes_permute_16_byte_chunks_within_their_period(mode, width):
    n = 4 * 8 * width // 2          # four periods of float16
    p = wgmma.swizzle_elements(np.arange(n), mode, 2)
    assert sorted(p.tolist()) == list(range(n))                   # a permutation
    assert np.array_equal(p // (4 * width), np.arange(n) // (4 * width))   # per period
    assert np.array_equal(p % 8, np.arange(n) % 8)                # 16-byte chunks whole
    # a warp writing one 16-byte chunk of each of 8 consecutive rows meets 8 chunk slots
    rows = np.arange(8) * (width // 2)
    assert len(set((p[rows] // 8 % (width // 16)).tolist())) == width // 16


# ------------------------------------------------------------------ numerics (interpreter)
@pytest.mark.parametrize("size, block, stages, dtype, wait", [
    ((64, 16, 192), (64, 16, 64), 3, "float16", 1),      # 128B, 3 k tiles, 1 group in flight
    ((128, 24, 96), (128, 24, 32), 2, "bfloat16", 0),    # 64B, two warpgroups, n = 24
    ((64, 8, 80), (64, 8, 16), 4, "float16", 1),         # 32B, 5 k tiles, 2 tiles ahead
    ((128, 16, 128), (64, 16, 64), 3, "float16", 1),     # 2 blocks
    ((64, 16, 64), (64, 16, 64), 3, "float16", None)])   # one k tile: synchronous MMAs
def test_swizzled_overlapped_gemm_on_the_interpreter_matches_float64(size, block, stages,
                                                                     dtype, wait):
    M, N, K = size
    s, args = tc.wgmma_gemm_schedule(M, N, K, block=block, stages=stages, dtype=dtype)
    f = lower(s, args, target=TARGET, stop_after=None)
    text = str(lower(s, args, target=TARGET))
    mode = {64: "128B", 32: "64B", 16: "32B"}[block[2]]
    assert text.count(f"swizzle='{mode}'") == 2
    if wait is None:
        assert "wgmma.wait_group" not in text and f"sw{2 * block[2]}.update" in text
    else:
        assert f"intrin:wgmma.wait_group({wait})" in text
        assert f"cp.async.wait_group({stages - 3 - wait + 1})" in text
        assert "_async.update" in text and "intrin:wgmma.fence_proxy_async()" in text
    assert _gemm(f, M, N, K, dtype) < 1e-6


def test_the_interpreter_keeps_swizzled_buffers_at_their_swizzled_places(monkeypatch):
    # a tensor core that read the tile unswizzled would compute garbage: so would the
    # interpreter if it did, which shows the copies stored the elements swizzled
    def unswizzled(flat, buf, off, shape, strides):
        return flat[tce._logical_offsets(off, shape, strides)]

    M, N, K = 64, 16, 128
    s, args = tc.wgmma_gemm_schedule(M, N, K, block=(64, 16, 64), stages=3)
    f = lower(s, args, target=TARGET, stop_after=None)
    assert _gemm(f, M, N, K, "float16") < 1e-6
    monkeypatch.setattr(tce, "_swizzled_region", unswizzled)
    assert _gemm(f, M, N, K, "float16") > 0.1


def test_a_wrong_mma_wait_count_is_a_race(monkeypatch):
    # one group more in flight than the copies leave slots for: the refill of iteration
    # k + 1 overwrites the slot the MMAs of iteration k - 1 still read
    orig = sp.mma_wait_group
    monkeypatch.setattr(sp, "mma_wait_group", lambda g, n: orig(g, n + 1 if n else 0))
    s, args = tc.wgmma_gemm_schedule(64, 16, 256, block=(64, 16, 64), stages=3)
    f = lower(s, args, target=TARGET, stop_after=None)
    with pytest.raises(RaceError, match=r"a write of (A|Bt)\.shared\[.*while the "
                       r"asynchronous wgmma_m64n16k16_float16_sw128_async .*still reads it"):
        _gemm(f, 64, 16, 256, "float16")


def test_reading_the_accumulator_before_the_last_wait_is_a_race(monkeypatch):
    orig = sp.mma_wait_group
    monkeypatch.setattr(sp, "mma_wait_group", lambda g, n: orig(g, n or 1))
    s, args = tc.wgmma_gemm_schedule(64, 8, 128, block=(64, 8, 64), stages=3)
    f = lower(s, args, target=TARGET, stop_after=None)
    with pytest.raises(RaceError, match=r"reads C\.wgmma\.accumulator .*not retired"):
        _gemm(f, 64, 8, 128, "float16")


def test_the_schedule_replays_from_its_trace():
    s, args = tc.wgmma_gemm_schedule(128, 16, 128, block=(64, 16, 64), stages=3)
    assert str(lower(s.copy(), args, target=TARGET)) == str(lower(s, args, target=TARGET))
    s, args = tc.wgmma_gemm_schedule(128, 16, 128, block=(64, 16, 64), stages=3, group=2,
                                     copy_after_wait=True)
    assert str(lower(s.copy(), args, target=TARGET)) == str(lower(s, args, target=TARGET))


# ------------------------------------- copies after the MMA wait, grouped block order
@pytest.mark.parametrize("size, block, stages, opts", [
    ((64, 16, 192), (64, 16, 64), 3, {}),                               # 2 tiles ahead
    pytest.param((128, 16, 320), (128, 16, 64), 3, {},                  # two warpgroups
                 marks=pytest.mark.slow),
    pytest.param((192, 16, 192), (64, 16, 64), 2, {"mma_wait": 0, "group": 3},
                 marks=pytest.mark.slow),
    pytest.param((128, 24, 160), (64, 24, 32), 4, {"mma_wait": 2, "group": 2,
                                                   "epilogue": "16B"},
                 marks=pytest.mark.slow)])
def test_copies_after_the_mma_wait_on_the_interpreter_match_float64(size, block, stages,
                                                                     opts):
    # copy_after_wait: MMAs, wgmma.wait_group N, a second barrier, then the copies of tile
    # k + S - N into the slot the wait retired; the interpreter checks that no copy lands
    # in a slot an MMA group in flight still reads
    M, N, K = size
    s, args = tc.wgmma_gemm_schedule(M, N, K, block=block, stages=stages,
                                     copy_after_wait=True, **opts)
    f = lower(s, args, target=TARGET, stop_after=None)
    wait = opts.get("mma_wait", 1)
    loop = str(f)[str(f).index("for k.outer"):]
    assert f"cp.async.wait_group({stages - 1 - wait})" in loop
    assert loop.index(f"wgmma.wait_group({wait})\n      sync('shared')") < loop.index(
        "pragma cp.async") < loop.index("cp.async.commit_group")
    assert _gemm(f, M, N, K, "float16") < 1e-6


def test_copies_after_the_mma_wait_with_one_group_too_many_in_flight_race(monkeypatch):
    # wait_group 2 where the copies assume 1: the refill overwrites the slot of the
    # group the wait no longer retires
    orig = sp.mma_wait_group
    monkeypatch.setattr(sp, "mma_wait_group", lambda g, n: orig(g, n + 1 if n else 0))
    s, args = tc.wgmma_gemm_schedule(64, 16, 256, block=(64, 16, 64), stages=3,
                                     copy_after_wait=True)
    f = lower(s, args, target=TARGET, stop_after=None)
    with pytest.raises(RaceError, match=r"a write of (A|Bt)\.shared\[.*while the "
                       r"asynchronous wgmma_m64n16k16_float16_sw128_async .*still reads it"):
        _gemm(f, 64, 16, 256, "float16")


def test_refuses_copy_after_wait_without_mma_wait_and_groups_that_do_not_divide():
    s, args = _hand(stages=1, asynchronous=False)
    CF = next(st for st in s.stages if st.name == "C.wgmma.accumulator")
    with pytest.raises(ScheduleError, match=r"copy_after_wait=True .* mma_wait=None"):
        CF.pipeline(CF.leaf_iter_vars[0], stages=3, copy_after_wait=True)
    with pytest.raises(ValueError, match=r"group=3 with 4 tile rows"):
        tc.wgmma_gemm_schedule(256, 16, 128, block=(64, 16, 64), stages=2, group=3)
    with pytest.raises(ValueError, match=r"epilogue '4B'"):
        tc.wgmma_store(16, epilogue="4B")


# ------------------------------------------------------------------ refusals
def _hand(M=64, N=16, K=128, BK=64, mode="128B", stages=3, mma_wait=1, asynchronous=True,
          swizzle_stage=True, scope="shared", align=False):
    """wgmma_gemm_schedule's swizzled schedule, with one thing changed."""
    A = te.placeholder((M, K), name="A", dtype="float16")
    Bt = te.placeholder((N, K), name="Bt", dtype="float16")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(
        A[i, k].astype("float32") * Bt[j, k].astype("float32"), axis=k), name="C")
    s = create_schedule(C.op)
    CF = s.cache_write(C, "wgmma.accumulator")
    AS = s.cache_read(A, scope, [CF])
    BS = s.cache_read(Bt, "shared", [CF])
    i, j = C.op.axis
    bi, ii = s[C].split(i, factor=64)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].tensorize(ii, tc.wgmma_store(N))
    s[CF].compute_at(s[C], bi)
    ci, cj = CF.op.axis
    ko, ki = s[CF].split(CF.op.reduce_axis[0], factor=BK)
    kf, kk = s[CF].split(ki, factor=16)
    s[CF].reorder(ko, kf, ci, cj, kk)
    s[CF].tensorize(ci, tc.wgmma_mma(N, swizzle=mode, asynchronous=asynchronous))
    if stages > 1:
        s[CF].pipeline(ko, stages=stages, mma_wait=mma_wait)
    for S in (AS, BS):
        s[S].compute_at(s[CF], ko)
        if swizzle_stage:
            s[S].swizzle(mode)
        if align:
            s[S].storage_align(S.op.axis[0], 16, 8)
        f = s[S].fuse(*S.op.axis)
        f, v = s[S].split(f, factor=8)
        f, tx = s[S].split(f, factor=128)
        if s[S].scope == "shared":
            s[S].bind(tx, te.thread_axis("threadIdx.x"))
        s[S].vectorize(v)
    return s, [A, Bt, C]


def _refused(s, args, *words, error=ScheduleError):
    with pytest.raises(error) as exc:
        lower(s, args, target=TARGET, stop_after=None)
    msg = str(exc.value)
    for w in words:
        assert w in msg, msg
    return msg


def test_the_hand_schedule_is_accepted():
    s, args = _hand()
    assert _gemm(lower(s, args, target=TARGET, stop_after=None), 64, 16, 128,
                 "float16") < 1e-6


def test_refuses_rows_not_of_the_swizzle_width():
    s, args = _hand(BK=32, mode="128B")
    _refused(s, args, "swizzle:", ".shared' is [", "rows of 64 bytes", "exactly 128 bytes")


def test_refuses_fewer_than_8_rows():
    A = te.placeholder((12, 64), name="A", dtype="float16")
    B = te.compute((12, 64), lambda i, j: A[i, j] + te.const(1, "float16"), name="B")
    s = create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bi, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(bi, te.thread_axis("blockIdx.x"))
    s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], bi)
    s[AS].swizzle("128B")
    _refused(s, [A, B], "swizzle:", "4 rows", "a multiple of 8")


def test_refuses_a_swizzle_at_root_or_outside_shared_memory():
    s, args = _hand(scope="local")
    _refused(s, args, "swizzle:", "'A.local'", "scope 'local'")
    A = te.placeholder((64, 64), name="A", dtype="float16")
    B = te.compute((64, 64), lambda i, j: A[i, j] * te.const(2, "float16"), name="B")
    C = te.compute((64, 64), lambda i, j: B[i, j] + te.const(1, "float16"), name="C")
    s = create_schedule(C.op)
    s[B].swizzle("128B")
    with pytest.raises(ScheduleError, match="swizzle: stage 'B' is computed at root"):
        lower(s, [A, C])


def test_refuses_storage_align_with_a_swizzle():
    s, args = _hand(align=True)
    _refused(s, args, "swizzle:", "storage_align")


def test_refuses_an_unknown_mode_and_bad_intrinsic_options():
    A = te.placeholder((64, 64), name="A", dtype="float16")
    B = te.compute((64, 64), lambda i, j: A[i, j], name="B")
    s = create_schedule(B.op)
    with pytest.raises(ScheduleError, match="swizzle: mode '16B'"):
        s[B].swizzle("16B")
    with pytest.raises(ValueError, match="asynchronous=True needs a swizzled layout"):
        tc.wgmma_mma(64, asynchronous=True)
    with pytest.raises(ValueError, match="swizzle '256B'"):
        tc.wgmma_mma(64, swizzle="256B")
    with pytest.raises(ValueError, match="the mode whose rows are BK elements"):
        tc.wgmma_gemm_schedule(128, 128, 256, block=(128, 128, 32), swizzle="128B")
    with pytest.raises(ValueError, match="mma_wait=2 with stages=3"):
        tc.wgmma_gemm_schedule(128, 128, 256, block=(128, 128, 64), stages=3, mma_wait=2)


def test_refuses_an_intrinsic_of_another_swizzle_than_its_buffers():
    s, args = _hand(swizzle_stage=False)
    _refused(s, args, "intrinsic 'wgmma_m64n16k16_float16_sw128_async' reads 'A.shared' "
             "(swizzle none", "swizzled 128B", error=BuildError)


def test_refuses_asynchronous_mmas_no_pipeline_waits_for():
    s, args = _hand(stages=1)
    _refused(s, args, "tensorize:", "only issues its work", "mma_wait")
    s, args = _hand(mma_wait=None)
    _refused(s, args, "pipeline:", "asynchronous calls of intrinsic", "mma_wait=N")
    s, args = _hand(asynchronous=False, mma_wait=1)
    _refused(s, args, "pipeline:", "mma_wait=1 but its compute has no asynchronous")


def test_refuses_an_mma_wait_that_leaves_no_slot_to_load_ahead():
    s, args = _hand(stages=1)
    CF = next(st for st in s.stages if st.name == "C.wgmma.accumulator")
    with pytest.raises(ScheduleError, match=r"mma_wait=2 .* stages=3; an int in 0\.\.1"):
        CF.pipeline(CF.leaf_iter_vars[0], stages=3, mma_wait=2)


# ------------------------------------------------------------------ CUDA source, nvcc
def test_grouped_16b_epilogue_copies_after_wait_compile_for_sm90a():
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    s, args = tc.wgmma_gemm_schedule(512, 512, 512, block=(128, 256, 64), stages=4,
                                     b_major="mn", group=2, epilogue="16B_stream",
                                     copy_after_wait=True)
    src = polytile.build(s, args, target=TARGET, compiler="nvcc").get_source()
    loop = src[src.index("for (int32_t k_outer"):]
    # MMAs, their wait, a second barrier, then the refill three tiles ahead
    assert loop.index("wgmma_wait_group_n(1);\n    __syncthreads();") < loop.index(
        "(k_outer + 3) < 8") < loop.index("cp_async_cg_shared_global(")
    assert "blockIdx_x % 2" in src            # two tile rows per group
    assert "wgmma_store_d16s(" in src and "__shfl_xor_sync" in src and "__stcs(" in src
    log = _ptxas(src)
    assert "serialized" not in log and " 0 bytes spill stores" in log, log


def test_a_small_swizzled_buffer_is_a_static_aligned_array():
    A = te.placeholder((32, 64), name="A", dtype="float16")
    B = te.compute((32, 64), lambda i, j: A[i, j] * te.const(2, "float16"), name="B")
    s = create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bi, ii = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bi, te.thread_axis("blockIdx.x"))
    s[B].bind(ii, te.thread_axis("threadIdx.y"))
    s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], bi)
    s[AS].bind(AS.op.axis[0], te.thread_axis("threadIdx.y"))
    s[AS].bind(AS.op.axis[1], te.thread_axis("threadIdx.x"))
    s[AS].swizzle("128B")
    a = np.random.default_rng(1).uniform(-2, 2, (32, 64)).astype("float16")
    b = np.full((32, 64), np.nan, "float16")
    run(lower(s, [A, B], target=TARGET, stop_after=None), a, b)
    assert np.array_equal(b, a * np.float16(2))
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    src = polytile.build(s, [A, B], target=TARGET, compiler="nvcc").get_source()
    assert "__shared__ __align__(1024) half A_shared[1024];" in src
    assert ">> 6) & 7) << 3)]" in src


def _ptxas(src: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cu")
        with open(path, "w") as fh:
            fh.write(src)
        r = subprocess.run([cc.nvcc_path(), "-arch=sm_90a", "-cubin", "-std=c++17",
                            "-Xptxas", "-v", "-o", os.path.join(tmp, "k.cubin"), path],
                           capture_output=True, text=True, check=True)
        return r.stderr + r.stdout


@pytest.mark.parametrize("block, stages, dtype, width, wait", [
    ((128, 128, 64), 4, "float16", 128, 1), ((128, 256, 64), 3, "bfloat16", 128, 1),
    ((64, 128, 32), 2, "float16", 64, 0)])
def test_swizzled_overlapped_source_compiles_for_sm90a(block, stages, dtype, width, wait):
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    s, args = tc.wgmma_gemm_schedule(512, 512, 512, block=block, stages=stages, dtype=dtype)
    m = polytile.build(s, args, target=TARGET, compiler="nvcc")
    src = m.get_source()
    sw = wgmma.SWIZZLE[{128: "128B", 64: "64B"}[width]]
    for text in (f"wgmma_descriptor(a, 16u, {8 * width}u, {sw}u)",
                 f"wgmma_descriptor(b, 16u, {8 * width}u, {sw}u)",
                 f"wgmma_wait_group_n({wait});", "wgmma_commit_group();", "wgmma_fence();",
                 "fence_proxy_async_shared_cta();\n    __syncthreads();",
                 "p, 1, 1, 0, 0;", "cp_async_cg_shared_global("):
        assert text in src, text
    # 128 KiB of tiles: dynamic shared memory, realigned to the 1024-byte pattern; 24 KiB:
    # static arrays aligned by their declaration
    assert ("unsigned char* pt_smem = pt_dynamic_shared + ((1024u" in src) == (width == 128)
    assert (f"__shared__ __align__({8 * width}) half" in src) == (width == 64)
    log = _ptxas(src)
    assert "serialized" not in log, log       # ptxas C7515: MMAs waited for one by one
    if shutil.which("cuobjdump") is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.cubin")
            with open(path, "wb") as fh:
                fh.write(m.cubin)
            sass = subprocess.run(["cuobjdump", "-sass", path], capture_output=True,
                                  text=True, check=True).stdout
        assert "HGMMA" in sass and "LDGSTS" in sass
