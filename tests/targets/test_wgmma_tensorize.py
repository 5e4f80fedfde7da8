"""The warpgroup MMA through the schedule language (targets/cuda/wgmma_intrin.py):
``s[CF].tensorize(axis, wgmma_mma(n))`` accepted where isl shows the region matches and
refused (ScheduleError naming stage and axis) where not; the tensorized GEMM on the
reference interpreter vs float64 numpy; its CUDA source compiled for sm_90a (HGMMA in
the SASS where ``cuobjdump`` exists); runs on an sm_90 GPU (marked ``gpu``)::

    pytest -m gpu tests/targets/test_wgmma_tensorize.py
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.errors import BuildError, ScheduleError
from polytile.schedule import create_schedule
from polytile.schedule.interpreter import run
from polytile.schedule.pipeline import lower
from polytile.targets.cuda import compile as cc
from polytile.targets.cuda import tensor_core as tc
from tests.helpers import cubin_sass


def _inputs(M, N, K, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (M, K))
    bt = rng.uniform(-1, 1, (N, K))
    if dtype == "bfloat16":
        import ml_dtypes

        return a.astype(ml_dtypes.bfloat16), bt.astype(ml_dtypes.bfloat16)
    return a.astype(dtype), bt.astype(dtype)


@pytest.mark.parametrize("size, block, stages, dtype", [
    ((64, 8, 16), (64, 8, 16), 1, "float16"),          # one wgmma, the smallest n
    ((128, 64, 64), (128, 64, 32), 1, "float16"),      # two warpgroups, two k tiles
    ((192, 128, 96), (64, 128, 32), 3, "float16"),     # 3 blocks, pipelined, 3 k tiles
    ((128, 48, 80), (64, 24, 16), 2, "bfloat16"),      # 2 x 2 blocks, 5 k tiles, n = 24
    ((64, 256, 32), (64, 256, 32), 1, "float16")])     # the largest n
def test_tensorized_gemm_on_the_interpreter_matches_float64(size, block, stages, dtype):
    # the no-swizzle core-matrix path (wgmma_gemm_compute, synchronous MMAs)
    M, N, K = size
    s, args = tc.wgmma_gemm_schedule(M, N, K, block=block, stages=stages, dtype=dtype,
                                     swizzle="none")
    f = lower(s, args, target="cuda -arch=sm_90a", stop_after=None)
    text = str(f)
    assert f"tensorize wgmma_m64n{block[1]}k16_{dtype}.update" in text
    assert f"tensorize wgmma_store_{block[1]}.body" in text
    a, bt = _inputs(M, N, K, dtype)
    c = np.full((M, N), np.nan, "float32")
    run(f, a, bt, c)
    ref = a.astype("float64") @ bt.astype("float64").T
    err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    assert err < 1e-6, f"relative error {err:.2e}"


def _schedule(M=128, N=64, K=64, BN=64, mma=None, axis="ci", order=None, dtype="float16",
              threads=128):
    """wgmma_gemm_schedule's CF stage with a chosen intrinsic, axis and loop order."""
    A, Bt, AS, BS, C = tc.wgmma_gemm_compute(M, N, K, dtype)
    s = create_schedule(C.op)
    CF = s.cache_write(C, "wgmma.accumulator")
    i, j = C.op.axis
    bi, ii = s[C].split(i, factor=64)
    bj, jj = s[C].split(j, factor=BN)
    s[C].reorder(bi, bj, ii, jj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[CF].compute_at(s[C], bj)
    ci, cj = CF.op.axis
    kb, kk = CF.op.reduce_axis
    ko, kbi = s[CF].split(kb, factor=4)
    kf, kb2 = s[CF].split(kbi, factor=2)
    loops = dict(ko=ko, kf=kf, ci=ci, cj=cj, kb2=kb2, kk=kk)
    s[CF].reorder(*[loops[n] for n in (order or ("ko", "kf", "ci", "cj", "kb2", "kk"))])
    s[CF].tensorize(loops[axis], mma or tc.wgmma_mma(BN, dtype))
    for S in (AS, BS):
        s[S].set_scope("shared")
        s[S].compute_at(s[CF], ko)
        f, tx = s[S].split(s[S].fuse(*S.op.axis), factor=threads)
        s[S].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, Bt, C]


def _refused(s, args, *words):
    with pytest.raises(ScheduleError) as exc:
        lower(s, args, target="cuda -arch=sm_90a", stop_after=None)
    msg = str(exc.value)
    for w in ("tensorize", "C.wgmma.accumulator", *words):
        assert w in msg, msg
    return msg


def test_the_matching_schedule_is_accepted():
    s, args = _schedule()
    f = lower(s, args, target="cuda -arch=sm_90a", stop_after=None)
    assert "wgmma_m64n64k16_float16.update" in str(f)


def test_refuses_a_wrong_extent():
    # the intrinsic computes 64 x 32, the region under ci is 64 x 64
    s, args = _schedule(mma=tc.wgmma_mma(32))
    _refused(s, args, "'i.c'", "extent differs", "64 values", "extent 32")


def test_refuses_a_wrong_dtype():
    s, args = _schedule(mma=tc.wgmma_mma(64, "bfloat16"))
    _refused(s, args, "'i.c'", "dtype float16", "bfloat16")


def test_refuses_a_reduce_axis_outside_the_region():
    # kb2 outside ci: the region under ci sums over kk only
    s, args = _schedule(order=("ko", "kf", "kb2", "ci", "cj", "kk"))
    _refused(s, args, "'i.c'", "missing reduce axis", "'kb'")


def test_refuses_a_transposed_order_of_the_region():
    # cj outside ci: the region under ci is one column of the tile
    s, args = _schedule(order=("ko", "kf", "cj", "ci", "kb2", "kk"))
    _refused(s, args, "'i.c'", "1 axes", "2 axes")


def test_refuses_a_block_narrower_than_a_warpgroup():
    s, args = _schedule(threads=64)
    with pytest.raises(ScheduleError, match="warpgroup") as exc:
        lower(s, args, target="cuda -arch=sm_90a", stop_after=None)
    assert "threadIdx.x extent 64" in str(exc.value) and "multiple of 128" in str(exc.value)


@pytest.mark.parametrize("swizzle", ["none", "auto"])
def test_refuses_sizes_the_tiles_do_not_divide(swizzle):
    with pytest.raises(ScheduleError, match="tensorize"):
        s, args = tc.wgmma_gemm_schedule(96, 64, 64, block=(64, 64, 32), swizzle=swizzle)
        lower(s, args, target="cuda -arch=sm_90a", stop_after=None)


def test_refuses_bad_intrinsic_shapes_and_blocks():
    for n in (0, 12, 264):
        with pytest.raises(ValueError, match="multiple of 8"):
            tc.wgmma_mma(n)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        tc.wgmma_mma(64, "int8")
    with pytest.raises(ValueError, match="BM a multiple of 64"):
        tc.wgmma_gemm_schedule(128, 128, 64, block=(32, 128, 64))
    with pytest.raises(ValueError, match="multiple of 8"):
        tc.wgmma_gemm_compute(64, 64, 60)


def _sass(cubin: bytes) -> str:
    text = cubin_sass(cubin)
    if text is None:
        pytest.skip("cuobjdump not found")
    return text


@pytest.mark.parametrize("block, stages, dtype", [((128, 128, 64), 3, "float16"),
                                                  ((64, 256, 32), 1, "bfloat16")])
def test_compiles_for_sm90a_with_hgmma(block, stages, dtype):
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    s, args = tc.wgmma_gemm_schedule(256, 256, 256, block=block, stages=stages, dtype=dtype,
                                     swizzle="none")
    m = polytile.build(s, args, target="cuda -arch=sm_90a", compiler="nvcc")
    src = m.get_source()
    p = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    for op in (f"wgmma.mma_async.sync.aligned.m64n{block[1]}k16.f32.{p}.{p}",
               "wgmma.fence.sync.aligned", "fence.proxy.async.shared::cta",
               f"pt_wgmma_acc<{block[1]}> ", "cp_async_cg_shared_global(",
               "wgmma_store_d("):
        assert op in src, op
    assert m.cubin
    if shutil.which("cuobjdump") is None:
        return   # no disassembler here: the HGMMA count is checked where it exists
    sass = _sass(m.cubin)
    assert "HGMMA" in sass and "LDGSTS" in sass


def test_plain_sm90_is_refused_with_a_clear_message():
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    s, args = tc.wgmma_gemm_schedule(128, 128, 64, block=(64, 128, 64))
    with pytest.raises(BuildError, match="sm_90a"):
        polytile.build(s, args, target="cuda -arch=sm_90", compiler="nvcc")


#: (size, block, stages, dtype, swizzle) of the GPU runs of the tensorized schedule
#: (swizzle "auto": the swizzled, overlapped path; "none": the core-matrix one)
GPU_CASES = [((64, 64, 16), (64, 64, 16), 1, "float16", "none"),
             ((384, 256, 320), (128, 128, 64), 3, "float16", "none"),
             ((320, 96, 144), (64, 48, 16), 2, "bfloat16", "none"),
             ((1024, 1024, 1024), (128, 256, 64), 3, "float16", "none"),
             ((64, 64, 64), (64, 64, 64), 1, "float16", "auto"),        # 128B, synchronous
             ((384, 256, 640), (128, 128, 64), 4, "float16", "auto"),   # 128B, mma_wait 1
             ((320, 96, 160), (64, 48, 32), 3, "bfloat16", "auto"),     # 64B
             ((192, 64, 96), (64, 64, 16), 2, "float16", "auto"),       # 32B, mma_wait 0
             ((1024, 1024, 1024), (128, 256, 64), 4, "float16", "auto")]


def test_gpu_case_parameters_lower_on_the_cpu():
    for size, block, stages, dtype, swizzle in GPU_CASES:
        s, args = tc.wgmma_gemm_schedule(*size, block=block, stages=stages, dtype=dtype,
                                         swizzle=swizzle)
        lower(s, args, target="cuda -arch=sm_90a")


@pytest.mark.gpu
@pytest.mark.parametrize("size, block, stages, dtype, swizzle", GPU_CASES)
def test_tensorized_wgmma_gemm_on_the_gpu(size, block, stages, dtype, swizzle):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma)")
    M, N, K = size
    s, args = tc.wgmma_gemm_schedule(M, N, K, block=block, stages=stages, dtype=dtype,
                                     swizzle=swizzle)
    err = _gpu_relative_error(s, args, M, N, K, dtype, "k", seed=3)
    assert err < 1e-5, f"tensorized wgmma {dtype} {size} block {block}: error {err:.2e}"


# ------------------------------------------------ B MN-major (b_major="mn", imm-trans-b 1)
def _nn_inputs(M, N, K, dtype, seed=0):
    a, bt = _inputs(M, N, K, dtype, seed)
    return a, np.ascontiguousarray(bt.T)


def _gpu_relative_error(s, args, M: int, N: int, K: int, dtype: str, b_major: str,
                        seed: int) -> float:
    """Build the wgmma GEMM schedule ``s`` for sm_90a, run it on the GPU on the random
    ``A[M, K]`` and ``B[K, N]`` of :func:`_nn_inputs` (passed as ``Bt[N, K]``, the data of
    :func:`_inputs`, for ``b_major="k"``) into a NaN-poisoned ``C``, and return
    ``||C - A @ B|| / ||A @ B||`` against float64."""
    f = polytile.build(s, args, target="cuda -arch=sm_90a", compiler="nvcc")
    a, b = _nn_inputs(M, N, K, dtype, seed=seed)
    bin_ = b if b_major == "mn" else np.ascontiguousarray(b.T)
    da = polytile.nd.array(a, device="cuda")
    db = polytile.nd.array(bin_, device="cuda")
    dc = polytile.nd.array(np.full((M, N), np.nan, "float32"), device="cuda")
    f(da, db, dc)
    ref = a.astype("float64") @ b.astype("float64")
    return float(np.linalg.norm(dc.numpy() - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("size, block, stages, dtype", [
    ((64, 64, 16), (64, 64, 16), 1, "float16"),            # 32B: 4 atoms, one k16 step
    pytest.param((64, 64, 64), (64, 64, 64), 1, "float16",    # 128B: one atom, 4 k16 steps
                 marks=pytest.mark.slow),
    pytest.param((64, 64, 48), (64, 64, 16), 2, "bfloat16",   # 32B: 4 atoms, 3 k tiles
                 marks=pytest.mark.slow),
    pytest.param((128, 128, 96), (64, 128, 32), 3, "float16",  # 64B: 4 atoms, pipelined
                 marks=pytest.mark.slow)])
def test_mn_major_b_on_the_interpreter_matches_float64(size, block, stages, dtype):
    # C = A @ B with B[K, N] as it is: BR, the swizzled atoms of B, read MN-major
    M, N, K = size
    s, args = tc.wgmma_gemm_schedule(M, N, K, block=block, stages=stages, dtype=dtype,
                                     b_major="mn")
    assert args[1].shape == (K, N)
    f = lower(s, args, target="cuda -arch=sm_90a", stop_after=None)
    assert f"_mn{'_async' if stages > 1 else ''}.update" in str(f)
    a, b = _nn_inputs(M, N, K, dtype)
    c = np.full((M, N), np.nan, "float32")
    run(f, a, b, c)
    ref = a.astype("float64") @ b.astype("float64")
    err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    assert err < 1e-6, f"relative error {err:.2e}"


def test_mn_major_descriptor_reads_the_interpreters_layout():
    # the interpreter's BR[N / 64, BK, 64] (row-major offsets swizzled by swizzle_elements)
    # read through the helper's descriptor (LBO = the atom stride, SBO = 8 rows of 128
    # bytes) by the PTX ISA's MN-major 128B model (wgmma.descriptor_read) gives B's k16 step
    from polytile.targets.cuda import wgmma as wg

    BK, BN = 64, 192
    b = np.random.default_rng(1).uniform(-1, 1, (BK, BN)).astype("float16")
    smem = np.zeros(BK * BN, "float16")
    k, n = np.meshgrid(np.arange(BK), np.arange(BN), indexing="ij")
    logical = (n // 64) * BK * 64 + k * 64 + n % 64
    smem[wg.swizzle_elements(logical, "128B", 2)] = b
    assert (wg.swizzle_elements(logical, "128B", 2) == wg.b_offset_128b(k, n, BK)).all()
    text = tc.wgmma_mma(BN, swizzle="128B", asynchronous=True, b_major="mn")
    helper = tc.C_HELPERS[f"wgmma.mma_async_m64n{BN}k16_f16_sw128_mn_async"][1]
    assert "wgmma_descriptor(b, 2u * b_atom, 1024u, 1u)" in helper
    assert f"m64n{BN}k16.f32.f16.f16" in helper and "p, 1, 1, 0, 1;" in helper   # trans-b
    assert text.name == f"wgmma_m64n{BN}k16_float16_sw128_mn_async"
    for kf in range(BK // 16):
        d = wg.make_descriptor(2 * kf * 16 * 64, 2 * BK * 64, 1024, "128B")
        got = wg.descriptor_read(smem, d, 16, BN, "MN")
        assert (got == b[16 * kf:16 * kf + 16]).all()


def test_mn_major_refusals():
    with pytest.raises(ValueError, match="multiple of 64"):
        tc.wgmma_mma(96, swizzle="128B", b_major="mn")
    with pytest.raises(ValueError, match="needs a swizzled layout"):
        tc.wgmma_mma(64, b_major="mn")
    with pytest.raises(ValueError, match="'k' or 'mn'"):
        tc.wgmma_mma(64, swizzle="128B", b_major="t")
    with pytest.raises(ValueError, match="needs a swizzle"):
        tc.wgmma_gemm_schedule(64, 64, 64, block=(64, 64, 64), swizzle="none", b_major="mn")
    # a stage reading Bt[j, k] (K-major B) does not match the MN-major intrinsic
    from polytile.targets.cuda import wgmma_intrin as wi

    A = te.placeholder((64, 64), name="A", dtype="float16")
    Bt = te.placeholder((64, 64), name="Bt", dtype="float16")
    C = wi.wgmma_nt_compute(A, Bt)
    s = create_schedule(C.op)
    CF = s.cache_write(C, "wgmma.accumulator")
    BS = s.cache_read(Bt, "shared", [CF])
    with pytest.raises(ScheduleError, match="tensorize") as exc:
        wi._schedule_swizzled(s, C, CF, A, BS, (64, 64, 64), 1, "128B", None, "mn")
        lower(s, [A, Bt, C], target="cuda -arch=sm_90a", stop_after=None)
    # the cause (the layouts) and the fix, not only the ranks
    msg = str(exc.value)
    for w in ("C.wgmma.accumulator", "reads operand 'b' MN-major", "'Bt.shared' is in another "
              "layout", "hint: for a K-major B", "b_major='k'"):
        assert w in msg, msg


def test_k_major_intrinsic_on_an_mn_major_stage_names_the_layouts():
    # the converse: B restaged MN-major (wgmma_nn_compute's BR) under the K-major intrinsic
    from polytile.targets.cuda import wgmma_intrin as wi

    A = te.placeholder((64, 64), name="A", dtype="float16")
    B = te.placeholder((64, 64), name="B", dtype="float16")
    BR, C = wi.wgmma_nn_compute(A, B, "128B")
    s = create_schedule(C.op)
    CF = s.cache_write(C, "wgmma.accumulator")
    s[BR].set_scope("shared")
    with pytest.raises(ScheduleError, match=r"(?s)intrinsic 'wgmma_m64n64k16_float16_sw128' reads "
                       r"operand 'b' K-major: .* the stage's 'BR' is in another layout "
                       r"\(it reads BR\[.*hint: for B\[K, N\] read as it is \(MN-major\).*"
                       r"b_major='mn'"):
        wi._schedule_swizzled(s, C, CF, A, BR, (64, 64, 64), 1, "128B", None, "k")
        lower(s, [A, B, C], target="cuda -arch=sm_90a", stop_after=None)


def test_mn_major_compiles_for_sm90a_with_hgmma():
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    s, args = tc.wgmma_gemm_schedule(64, 128, 128, block=(64, 128, 64), stages=2,
                                     b_major="mn")
    m = polytile.build(s, args, target="cuda -arch=sm_90a", compiler="nvcc")
    src = m.get_source()
    for op in ("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16",
               "p, 1, 1, 0, 1;", "wgmma_m64n128k16_f16_sw128_mn_async(",
               "cp_async_cg_shared_global("):
        assert op in src, op
    assert m.cubin
    if shutil.which("cuobjdump") is None:
        return
    sass = _sass(m.cubin)
    assert "HGMMA" in sass and "LDGSTS" in sass


#: (size, block, stages, dtype) of the GPU runs of C = A @ B with B read MN-major
GPU_NN_CASES = [((64, 64, 64), (64, 64, 64), 1, "float16"),          # 128B, synchronous
                ((384, 256, 640), (128, 128, 64), 4, "float16"),     # 128B, 2 atoms
                ((320, 96, 160), (64, 96, 32), 3, "bfloat16"),       # 64B, 3 atoms
                ((192, 64, 96), (64, 64, 16), 2, "float16"),         # 32B, 4 atoms
                ((1024, 1024, 1024), (128, 256, 64), 4, "float16")]


#: (size, block, stages, dtype, b_major, options) of the GPU runs of the block order,
#: copies after the MMA wait and 16-byte epilogue of ``wgmma_gemm_schedule``
GPU_OPT_CASES = [
    ((384, 512, 640), (128, 128, 64), 4, "float16", "mn",
     {"group": 3, "epilogue": "16B", "copy_after_wait": True}),
    ((256, 192, 320), (64, 64, 64), 3, "bfloat16", "k",
     {"group": 2, "copy_after_wait": True, "mma_wait": 0}),
    ((320, 96, 160), (64, 96, 32), 4, "float16", "mn",
     {"group": 5, "epilogue": "16B", "copy_after_wait": True, "mma_wait": 2}),
    ((1024, 1024, 1024), (128, 256, 64), 4, "float16", "mn",
     {"group": 8, "epilogue": "16B", "copy_after_wait": True}),
    ((1024, 1024, 1024), (128, 128, 64), 3, "float16", "k", {"group": 4}),
    ((512, 256, 192), (128, 256, 64), 4, "float16", "mn",
     {"group": 2, "epilogue": "16B_stream"})]


def test_gpu_opt_case_parameters_lower_on_the_cpu():
    for size, block, stages, dtype, b_major, opts in GPU_OPT_CASES:
        s, args = tc.wgmma_gemm_schedule(*size, block=block, stages=stages, dtype=dtype,
                                         b_major=b_major, **opts)
        lower(s, args, target="cuda -arch=sm_90a")


@pytest.mark.gpu
@pytest.mark.parametrize("size, block, stages, dtype, b_major, opts", GPU_OPT_CASES)
def test_grouped_and_16b_wgmma_gemm_on_the_gpu(size, block, stages, dtype, b_major, opts):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma)")
    M, N, K = size
    s, args = tc.wgmma_gemm_schedule(M, N, K, block=block, stages=stages, dtype=dtype,
                                     b_major=b_major, **opts)
    err = _gpu_relative_error(s, args, M, N, K, dtype, b_major, seed=5)
    assert err < 1e-5, f"wgmma {dtype} {size} block {block} {opts}: error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("size, block, stages, dtype", GPU_NN_CASES)
def test_mn_major_wgmma_gemm_on_the_gpu(size, block, stages, dtype):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma)")
    M, N, K = size
    s, args = tc.wgmma_gemm_schedule(M, N, K, block=block, stages=stages, dtype=dtype,
                                     b_major="mn")
    err = _gpu_relative_error(s, args, M, N, K, dtype, "mn", seed=3)
    assert err < 1e-5, f"MN-major wgmma {dtype} {size} block {block}: error {err:.2e}"
