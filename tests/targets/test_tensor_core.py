"""Tensor cores (WMMA) through tensorize: the lowering checked on the interpreter (which
runs each intrinsic's compute definition), the CUDA source compiled with nvcc for sm_80
and sm_90 (PTX ``wmma.mma.sync``; SASS ``HMMA`` where ``cuobjdump`` exists), refusals,
and real runs on a GPU (marked ``gpu``)."""

from __future__ import annotations


import numpy as np
import pytest

import polytile
from polytile import te
from polytile.errors import BuildError, ScheduleError
from polytile.schedule.interpreter import run
from polytile.schedule.pipeline import lower
from polytile.targets.cuda import tensor_core as tc

from helpers import compile_with_nvcc, nvcc_text

SMALL = dict(block=(32, 32, 16), warp=(16, 32))


def _inputs(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (M, K)).astype("float16"),
            rng.uniform(-1, 1, (K, N)).astype("float16"))


def _rel(c, ref):
    return np.linalg.norm(c.astype("float64") - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("acc, bound", [("float32", 1e-6), ("float16", 2e-3)])
def test_wmma_gemm_lowering_on_the_interpreter(acc, bound):
    M, N, K = 32, 64, 48
    s, args = tc.wmma_gemm(M, N, K, acc=acc, **SMALL)
    f = lower(s, args, target="cuda", stop_after=None)
    text = str(f)
    for part in ("wmma_mma_float16_%s.reset" % acc, "wmma_mma_float16_%s.update" % acc,
                 "wmma_load_a_float16_row_major.body", "wmma_store_%s.body" % acc):
        assert "tensorize " + part in text
    a, b = _inputs(M, N, K)
    c = np.full((M, N), np.nan, acc)
    run(f, a, b, c)
    assert _rel(c, a.astype("float64") @ b.astype("float64")) < bound


@pytest.mark.parametrize("acc, bound", [("float32", 1e-6), ("float16", 2e-3)])
def test_mma_sync_gemm_lowering_on_the_interpreter(acc, bound):
    M, N, K = 32, 32, 32
    s, args = tc.wmma_gemm(M, N, K, acc=acc, block=(32, 32, 16), warp=(16, 16), isa="mma")
    f = lower(s, args, target="cuda", stop_after=None)
    text = str(f)
    for part in ("mma_m16n8k16_float16_%s.update" % acc, "mma_load_a.body",
                 "mma_load_b.body", "mma_store_%s.body" % acc):
        assert "tensorize " + part in text
    a, b = _inputs(M, N, K)
    c = np.full((M, N), np.nan, acc)
    run(f, a, b, c)
    assert _rel(c, a.astype("float64") @ b.astype("float64")) < bound


def test_wmma_source_compiles_for_sm80_and_sm90_with_mma_instructions():
    s, args = tc.wmma_gemm(256, 256, 128)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert "#include <mma.h>" in src
    assert ("nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> "
            "C_wmma_accumulator[16];") in src
    assert "wmma_mma_sync(C_wmma_accumulator[" in src
    # 16-byte copies into shared memory are cp.async (an ordinary uint4 copy below sm_80)
    assert "cp_async_cg_shared_global(&A_shared[" in src
    assert "cp_async_cg_shared_global(&B_shared[" in src
    assert src.index("cp_async_wait_group(0);") < src.index("wmma_mma_sync(C_wmma")
    for arch in ("sm_80", "sm_90"):
        compile_with_nvcc(src, arch)
    ptx = nvcc_text(src, "ptx")
    if ptx is None:
        return
    n = ptx.count("wmma.mma.sync")     # 4x4 fragments per warp per k step, unrolled
    assert n >= 16 and n % 16 == 0
    assert "ld.local" not in ptx                    # fragments stay in registers
    sass = nvcc_text(src, "sass")
    if sass is not None:
        assert "HMMA" in sass


@pytest.mark.parametrize("acc", ["float32", "float16"])
def test_mma_sync_source_compiles_with_ldmatrix_and_mma(acc):
    s, args = tc.wmma_gemm(256, 256, 128, acc=acc, isa="mma")
    src = polytile.build(s, args, target="cuda").get_source("cu")
    ctype = {"float32": "pt_mma_c_f32", "float16": "pt_mma_c_f16"}[acc]
    assert f"{ctype} C_wmma_accumulator[16];" in src
    assert "pt_mma_a A_shared_wmma_matrix_a[4];" in src
    for helper in ("void ldmatrix_x4(", "void ldmatrix_x4_trans(", "void mma_sync_m16n8k16(",
                   "void mma_store(", "void mma_fill("):
        assert helper in src
    for arch in ("sm_80", "sm_90"):
        compile_with_nvcc(src, arch)
    ptx = nvcc_text(src, "ptx")
    if ptx is None:
        return
    n_mma = ptx.count("mma.sync.aligned.m16n8k16")
    assert n_mma >= 32 and n_mma % 32 == 0       # 2 per 16x16x16 tile, 16 tiles
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") >= 4
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") >= 4
    assert "ld.local" not in ptx
    sass = nvcc_text(src, "sass")
    if sass is not None:
        assert "HMMA" in sass and "LDSM" in sass


def test_wmma_bfloat16_on_the_interpreter_and_nvcc():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    M, N, K = 32, 64, 48
    s, args = tc.wmma_gemm(M, N, K, dtype="bfloat16", **SMALL)
    f = lower(s, args, target="cuda", stop_after=None)
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (M, K)).astype(ml_dtypes.bfloat16)
    b = rng.uniform(-1, 1, (K, N)).astype(ml_dtypes.bfloat16)
    c = np.full((M, N), np.nan, "float32")
    run(f, a, b, c)
    assert _rel(c, a.astype("float64") @ b.astype("float64")) < 1e-6
    s, args = tc.wmma_gemm(256, 256, 64, dtype="bfloat16")
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert "fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16" in src
    compile_with_nvcc(src, "sm_90")


def test_wmma_refuses_sizes_the_tiles_do_not_divide():
    s, args = tc.wmma_gemm(40, 64, 48, **SMALL)
    with pytest.raises(ScheduleError, match=r"tensorize: stage '.*' at loop '.*': the tile "
                       r"at .* is not the intrinsic's full box"):
        lower(s, args, target="cuda")


def test_fragment_read_element_by_element_is_refused():
    # a fragment stage left untensorized: its elements cannot be read one by one in C
    M = N = K = 32
    A = te.placeholder((M, K), name="A", dtype="float16")
    B = te.placeholder((K, N), name="B", dtype="float16")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("float32") *
                                               B[k, j].astype("float32"), axis=k), name="C")
    s = te.create_schedule(C.op)
    AF = s.cache_read(A, "wmma.matrix_a", [C])
    bi, ii = s[C].split(C.op.axis[0], factor=16)
    s[C].bind(bi, te.thread_axis("blockIdx.x"))
    s[AF].compute_at(s[C], bi)
    with pytest.raises(BuildError, match=r"fragment 'A.wmma.matrix_a' \(wmma.matrix_a\) is "
                       r"not loaded by a tensor-core intrinsic"):
        polytile.build(s, [A, B, C], target="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("isa", ["wmma", "mma"])
@pytest.mark.parametrize("acc, bound", [("float32", 1e-5), ("float16", 5e-3)])
@pytest.mark.parametrize("size", [(256, 384, 128), (1024, 1024, 1024)])
def test_tensor_core_gemm_on_the_gpu(size, acc, bound, isa):
    M, N, K = size
    s, args = tc.wmma_gemm(M, N, K, acc=acc, isa=isa)
    f = polytile.build(s, args, target="cuda")
    a, b = _inputs(M, N, K, seed=1)
    c = polytile.nd.array(np.full((M, N), np.nan, acc), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), c)
    assert _rel(c.numpy(), a.astype("float64") @ b.astype("float64")) < bound


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1, 2])
def test_mma_store_of_an_unaligned_output_on_the_gpu(offset):
    # mma_store's 4-byte stores (predicated off the 16-byte ones) where C starts 4 or 8
    # bytes past a 16-byte boundary: a contiguous torch view at an element offset; the
    # floats around C stay untouched
    torch = pytest.importorskip("torch")
    M, N, K = 256, 384, 128
    s, args = tc.wmma_gemm(M, N, K, isa="mma")
    f = polytile.build(s, args, target="cuda")
    a, b = _inputs(M, N, K, seed=3)
    buf = torch.full((M * N + 4,), float("nan"), device="cuda")
    buf[:offset] = 7.0
    buf[offset + M * N:] = 7.0
    c = buf[offset:offset + M * N].view(M, N)
    f(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
    torch.cuda.synchronize()
    assert _rel(c.cpu().numpy(), a.astype("float64") @ b.astype("float64")) < 1e-5
    rest = torch.cat([buf[:offset], buf[offset + M * N:]]).cpu().numpy()
    assert (rest == 7.0).all()


@pytest.mark.gpu
def test_wmma_bfloat16_gemm_on_the_gpu():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    M, N, K = 512, 256, 384
    s, args = tc.wmma_gemm(M, N, K, dtype="bfloat16")
    f = polytile.build(s, args, target="cuda")
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (M, K)).astype(ml_dtypes.bfloat16)
    b = rng.uniform(-1, 1, (K, N)).astype(ml_dtypes.bfloat16)
    c = polytile.nd.array(np.full((M, N), np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), c)
    assert _rel(c.numpy(), a.astype("float64") @ b.astype("float64")) < 1e-5


@pytest.mark.parametrize("isa", ["wmma", "mma"])
def test_warp_collective_intrinsics_run_on_every_lane(isa):
    # a tensor-core instruction is executed by the 32 lanes of a warp together: a guard
    # that leaves lanes idle around it (as for a stage written by one thread) hangs the GPU
    s, args = tc.wmma_gemm(64, 64, 32, acc="float32", block=(32, 32, 16), warp=(16, 16),
                           isa=isa)
    f = lower(s, args, target="cuda", stop_after=None)
    lines = str(f).splitlines()
    calls = [i for i, line in enumerate(lines) if "tensorize " in line]
    assert calls
    for i in calls:
        assert "threadIdx.x" not in lines[i - 1], lines[i - 1]


@pytest.mark.parametrize("stages", [1, 3])
def test_wmma_int8_gemm_is_exact_on_the_interpreter(stages):
    # int8 x int8 summed in int32 (WMMA m16n16k16 s8): 16-byte copies are 16 lanes
    M, N, K = 32, 64, 96
    s, args = tc.wmma_gemm(M, N, K, dtype="int8", acc="int32", block=(32, 32, 32),
                           warp=(16, 32), stages=stages)
    f = lower(s, args, target="cuda", stop_after=None)
    assert "wmma_mma_int8_int32.update" in str(f) and "# pragma cp.async" in str(f)
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (M, K)).astype("int8")
    b = rng.integers(-128, 128, (K, N)).astype("int8")
    c = np.full((M, N), -7, "int32")
    run(f, a, b, c)
    np.testing.assert_array_equal(c, a.astype("int64") @ b.astype("int64"))
    with pytest.raises(ValueError, match="int8 inputs accumulate in 'int32'"):
        tc.wmma_gemm(M, N, K, dtype="int8", acc="float32")


@pytest.mark.parametrize("dtype, acc, source, instruction", [
    ("int8", "int32", ["nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, signed char"],
     "IMMA"),
    ("float32", "float32", [
        "nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 8, "
        "nvcuda::wmma::precision::tf32, nvcuda::wmma::row_major>",
        "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float>",
        "__float_to_tf32"], "HMMA.1684.F32.TF32")], ids=["int8", "tf32"])
def test_wmma_int8_and_tf32_sources_compile_to_their_mma(dtype, acc, source, instruction):
    # int8 runs as IMMA, float32 operands as tf32 HMMA; the copies as cp.async (LDGSTS)
    s, args = tc.wmma_gemm(256, 256, 256, dtype=dtype, acc=acc, stages=3)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    for text in source:
        assert text in src
    for arch in ("sm_80", "sm_90"):
        compile_with_nvcc(src, arch)
    sass = nvcc_text(src, "sass")
    if sass is None:
        return
    assert instruction in sass and "LDGSTS" in sass


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("size", [(384, 640, 320), (2048, 2048, 2048)])
def test_wmma_int8_gemm_on_the_gpu(size, stages):
    M, N, K = size
    s, args = tc.wmma_gemm(M, N, K, dtype="int8", acc="int32", stages=stages)
    f = polytile.build(s, args, target="cuda")
    rng = np.random.default_rng(6)
    a = rng.integers(-128, 128, (M, K)).astype("int8")
    b = rng.integers(-128, 128, (K, N)).astype("int8")
    c = polytile.nd.array(np.full((M, N), -7, "int32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), c)
    np.testing.assert_array_equal(c.numpy(), a.astype("int64") @ b.astype("int64"))


@pytest.mark.parametrize("stages", [1, 3])
def test_wmma_tf32_gemm_on_the_interpreter(stages):
    # float32 operands run as tf32 (m16n16k8: 16x8 A and 8x16 B fragments); the
    # interpreter computes the intrinsic's float32 definition
    M, N, K = 32, 64, 40
    s, args = tc.wmma_gemm(M, N, K, dtype="float32", block=(32, 32, 8), warp=(16, 32),
                           stages=stages)
    f = lower(s, args, target="cuda", stop_after=None)
    assert "wmma_mma_float32_float32.update" in str(f)
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    run(f, a, b, c)
    assert _rel(c, a.astype("float64") @ b.astype("float64")) < 1e-6
    with pytest.raises(ValueError, match="float32 inputs \\(tf32\\) take isa 'wmma'"):
        tc.wmma_gemm(M, N, K, dtype="float32", isa="mma")


@pytest.mark.parametrize("stages", [1, 3])
def test_wmma_tf32_default_tiles_fit_shared_memory(stages):
    """The default tiles of the tf32 GEMM build for every stage count the GPU test uses: 4-byte
    operands with k tile 64 need 68 KiB, over the 48 KiB of a kernel without a pipeline."""
    s, args = tc.wmma_gemm(384, 640, 320, dtype="float32", stages=stages)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert "precision::tf32" in src


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("size", [(384, 640, 320), (2048, 2048, 2048)])
def test_wmma_tf32_gemm_on_the_gpu(size, stages):
    M, N, K = size
    s, args = tc.wmma_gemm(M, N, K, dtype="float32", stages=stages)
    f = polytile.build(s, args, target="cuda")
    rng = np.random.default_rng(8)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = polytile.nd.array(np.full((M, N), np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), c)
    # tf32 keeps 10 mantissa bits of each operand: about 1e-3 relative error per product
    assert _rel(c.numpy(), a.astype("float64") @ b.astype("float64")) < 5e-3
