"""Hopper wgmma (sm_90a): descriptor fields against hand-computed values of the PTX ISA
"Matrix Descriptor" format, the shared layouts and the D fragment checked on a CPU model of
the kernel, nvcc compiles for sm_90a (SASS ``HGMMA`` where ``cuobjdump`` exists),
refusals, and runs on a GPU (marked ``gpu``) against a float64 reference.

Every GPU test's id names its main loop, so that these four commands split the GPU tests
(each selected by exactly one; checked by ``test_gpu_selection_commands_partition``)::

    pytest -m gpu tests/targets/test_wgmma.py -k sync   # cp.async + __syncthreads loop
    pytest -m gpu tests/targets/test_wgmma.py -k ws     # warp-specialized cp.async loop
    pytest -m gpu tests/targets/test_wgmma.py -k tma    # warp-specialized TMA loop
    pytest -m gpu tests/targets/test_wgmma.py -k 16b    # 16-byte epilogue (all loops)
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from polytile.errors import BuildError, ScheduleError
from polytile.targets.cuda import compile as cc
from polytile.targets.cuda import wgmma as wg
from tests.helpers import cubin_sass


def test_descriptor_fields_by_hand():
    # start 0x400 bytes -> 0x40 in bits 0-13; LBO 128 -> 8 in bits 16-29; SBO 1024 -> 64
    # in bits 32-45; no swizzle (bits 62-63 = 0)
    assert wg.make_descriptor(0x400, 128, 1024) == 0x40 | (8 << 16) | (64 << 32)
    assert wg.make_descriptor(0x400, 128, 1024) == 0x0000_0040_0008_0040
    # 128B swizzle sets bit 62; the largest start address fills the 14 bits
    assert wg.make_descriptor(0, 16, 1024, "128B") == (1 << 62) | (1 << 16) | (64 << 32)
    assert wg.make_descriptor(0x3FFF0, 0, 0) == 0x3FFF
    d = wg.make_descriptor(0x1230, 256, 2048, "64B")
    assert wg.decode_descriptor(d) == {"addr": 0x1230, "lbo": 256, "sbo": 2048,
                                       "base_offset": 0, "swizzle": 2}


def test_descriptor_128b_by_hand():
    # A K-major, 128B swizzle: tile at 0x400, second k16 step 32 bytes on -> start 0x420
    # (0x42), LBO unused (field 1), SBO 1024 (64), bits 62-63 = 1
    assert wg.operand_offsets_128b(64) == ((16, 1024), (8192, 1024))
    assert wg.make_descriptor(0x420, 16, 1024, "128B") == 0x4000_0040_0001_0042
    # B MN-major, 128B: tile at 0x2000, LBO 8192 between 64-column atoms (0x200), SBO 1024
    assert wg.make_descriptor(0x2000, 8192, 1024, "128B") == 0x4000_0040_0200_0200


def test_128b_offsets_are_the_swizzled_row_major_bytes():
    # hand values: row 1's chunk 0 is stored at chunk 1; row 9's chunk 1 at chunk 0
    assert wg.a_offset_128b(1, 0, 128, 64) == 64 + 8
    assert wg.a_offset_128b(9, 8, 128, 64) == 9 * 64
    assert wg.b_offset_128b(3, 64 + 17, 64) == 64 * 64 + 3 * 64 + (2 ^ 3) * 8 + 1
    assert wg.swizzle_128b(0x3A0) == 0x3A0 ^ 0x70      # row 7: chunk 2 -> chunk 5
    BM, BN, BK = 128, 192, 128
    m, k = np.meshgrid(np.arange(BM), np.arange(BK), indexing="ij")
    a = wg.a_offset_128b(m, k, BM, BK)
    assert sorted(a.ravel()) == list(range(BM * BK))
    # each 64-column K-atom: rows of 128 bytes, XOR of address bits 4-6 by bits 7-9
    assert (2 * a == wg.swizzle_128b((k // 64) * BM * 128 + m * 128 + (k % 64) * 2)).all()
    k, n = np.meshgrid(np.arange(BK), np.arange(BN), indexing="ij")
    b = wg.b_offset_128b(k, n, BK)
    assert sorted(b.ravel()) == list(range(BK * BN))
    assert (2 * b == wg.swizzle_128b((n // 64) * BK * 128 + k * 128 + (n % 64) * 2)).all()


@pytest.mark.parametrize("BM, BN, BK", [(128, 256, 64), (64, 64, 128)])
def test_128b_copies_are_coalesced_and_conflict_free(BM, BN, BK):
    # 8 consecutive copies: one contiguous 128-byte run of one global row, into 8 distinct
    # 16-byte bank groups of shared memory; every element copied once to its offset
    for chunk, offset, n_c, args in ((wg.a_chunk_128b, wg.a_offset_128b, BM * BK // 8,
                                      (BM, BK)),
                                     (wg.b_chunk_128b, wg.b_offset_128b, BK * BN // 8, (BK,))):
        span = BK if chunk is wg.a_chunk_128b else BN
        seen = set()
        for c0 in range(0, n_c, 8):
            rc = [chunk(c, span) for c in range(c0, c0 + 8)]
            assert len({r for r, _ in rc}) == 1
            assert [col for _, col in rc] == list(range(rc[0][1], rc[0][1] + 64, 8))
            dst = [offset(r, col, *args) for r, col in rc]
            assert len({(d // 8) % 8 for d in dst}) == 8
            for (r, col), d in zip(rc, dst):
                assert [offset(r, col + e, *args) for e in range(8)] == list(range(d, d + 8))
                seen.add(d)
        assert len(seen) == n_c


def test_swizzled_read_differs_from_the_unswizzled_bytes():
    # the CPU model is sensitive to the swizzle: a row-major (unswizzled) tile read
    # through a 128B descriptor is permuted
    smem = np.arange(64 * 64, dtype=float)
    plain = smem.reshape(64, 64)[:, :16]
    d = wg.make_descriptor(0, 16, 1024, "128B")
    got = wg.descriptor_read(smem, d, 64, 16, "K")
    assert (got[::8] == plain[::8]).all() and not (got == plain).all()


def test_tile_order_groups_rows_and_is_a_permutation():
    # 5 tile rows x 3 columns, groups of 2 rows: (0,0) (1,0) (0,1) (1,1) (0,2) (1,2), then
    # (2,0) (3,0) ..., the last group of one row
    order = [wg.tile_coords(t, 5, 3, 2) for t in range(15)]
    assert order[:8] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 0), (3, 0)]
    assert order[12:] == [(4, 0), (4, 1), (4, 2)]
    assert sorted(order) == [(m, n) for m in range(5) for n in range(3)]
    assert [wg.tile_coords(t, 4, 3, 1) for t in range(4)] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    with pytest.raises(ScheduleError, match="group_m"):
        wg.gemm_source(128, 128, 64, (64, 128, 64), stages=1, group_m=0)


@pytest.mark.parametrize("swizzle", ["none", "128B"])
def test_kernel_model_grouped_order_matches_float64(swizzle):
    rng = np.random.default_rng(6)
    A = rng.uniform(-1, 1, (320, 64))
    B = rng.uniform(-1, 1, (64, 192))
    C = wg.emulate_gemm(A, B, (64, 64, 64), 1, swizzle=swizzle, group_m=2)
    assert np.linalg.norm(C - A @ B) / np.linalg.norm(A @ B) < 1e-13


def test_128b_refusals():
    with pytest.raises(ScheduleError, match="multiples of 64"):
        wg.gemm_source(128, 128, 64, (64, 128, 32), stages=1, swizzle="128B")
    with pytest.raises(ScheduleError, match="multiples of 64"):
        wg.gemm_source(128, 96, 64, (64, 96, 64), stages=1, swizzle="128B")
    with pytest.raises(ScheduleError, match="swizzle '64B'"):
        wg.gemm_source(128, 128, 64, (64, 128, 64), stages=1, swizzle="64B")


@pytest.mark.parametrize("bad", [(8, 128, 1024), (0, 120, 1024), (1 << 18, 128, 1024)])
def test_descriptor_refuses_unencodable_offsets(bad):
    with pytest.raises(BuildError, match="wgmma descriptor"):
        wg.make_descriptor(*bad)


def test_layout_offsets_are_a_bijection_onto_core_matrices():
    BM, BN, BK = 128, 64, 32
    m, k = np.meshgrid(np.arange(BM), np.arange(BK), indexing="ij")
    a = wg.a_offset(m, k, BK)
    assert sorted(a.ravel()) == list(range(BM * BK))
    # 8 consecutive k of one row are contiguous (16-byte cp.async chunks)
    assert (np.diff(a[:, :8], axis=1) == 1).all()
    k, n = np.meshgrid(np.arange(BK), np.arange(BN), indexing="ij")
    b = wg.b_offset(k, n, BK)
    assert sorted(b.ravel()) == list(range(BK * BN))
    assert (np.diff(b[:, :8], axis=1) == 1).all()
    assert wg.operand_offsets(BK) == (128, 512)


def test_d_fragment_covers_the_64xn_tile_once():
    for n in (64, 128, 256):
        t, r = np.meshgrid(np.arange(128), np.arange(n // 2), indexing="ij")
        rows, cols = wg.d_fragment(t, r)
        flat = sorted((rows * n + cols).ravel())
        assert flat == list(range(64 * n))
    # hand-checked: thread 37 (warp 1, lane 5), register 6 (chunk 1, r = 2): row 16 + 1
    # + 8, column 8 + 2
    assert wg.d_fragment(37, 6) == (25, 10)


@pytest.mark.parametrize("size, block, stages, swizzle", [
    ((128, 192, 128), (128, 64, 32), 3, "none"), ((64, 64, 64), (64, 64, 64), 1, "none"),
    ((192, 256, 96), (64, 256, 16), 4, "none"), ((128, 128, 64), (128, 128, 16), 2, "none"),
    ((128, 192, 128), (128, 64, 64), 3, "128B"), ((64, 128, 64), (64, 128, 64), 1, "128B"),
    ((192, 256, 192), (64, 256, 64), 4, "128B"), ((128, 128, 256), (128, 128, 128), 2, "128B")])
def test_kernel_model_matches_float64(size, block, stages, swizzle):
    M, N, K = size
    rng = np.random.default_rng(3 if swizzle == "none" else 4)
    A = rng.uniform(-1, 1, (M, K))
    B = rng.uniform(-1, 1, (K, N))
    C = wg.emulate_gemm(A, B, block, stages, swizzle=swizzle)
    assert np.linalg.norm(C - A @ B) / np.linalg.norm(A @ B) < 1e-13


@pytest.mark.parametrize("size, block, what", [
    ((100, 128, 64), (64, 128, 64), "axis 'i' of extent 100"),
    ((128, 120, 64), (64, 128, 64), "axis 'j' of extent 120"),
    ((128, 128, 40), (64, 128, 16), "axis 'k' of extent 40"),
    ((128, 128, 64), (32, 128, 16), "BM a multiple of 64"),
    ((128, 128, 64), (64, 264, 16), "BN in 8..256"),
])
def test_refuses_tiles_it_cannot_compute(size, block, what):
    with pytest.raises(ScheduleError, match="wgmma_gemm") as exc:
        wg.gemm_source(*size, block=block, stages=1)
    assert what in str(exc.value)


def test_refuses_too_much_shared_memory_and_other_dtypes():
    with pytest.raises(ScheduleError, match="shared memory"):
        wg.gemm_source(4096, 4096, 4096, (256, 256, 64), stages=4)
    with pytest.raises(ScheduleError, match="dtype"):
        wg.gemm_source(128, 128, 64, (64, 128, 64), stages=1, dtype="float32")


def test_refuses_sm90_without_a():
    with pytest.raises(BuildError, match="sm_90a") as exc:
        wg.compile_gemm(128, 128, 64, (64, 128, 64), 1, arch="sm_90")
    assert "target architecture 'sm_90'" in str(exc.value)


def _sass(cubin: bytes) -> str:
    text = cubin_sass(cubin)
    if text is None:
        pytest.skip("cuobjdump not found")
    return text


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block, stages, swizzle", [
    ((128, 128, 64), 4, "none"), ((128, 256, 64), 3, "none"), ((64, 64, 32), 1, "none"),
    ((128, 256, 64), 4, "128B")])
def test_compiles_for_sm90a_with_hgmma(dtype, block, stages, swizzle):
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    src = wg.gemm_source(512, 512, 512, block, stages, dtype, swizzle=swizzle)
    assert "wgmma.mma_async.sync.aligned.m64n" in src
    assert "fence.proxy.async.shared::cta" in src
    cubin, log = cc.compile_nvcc(src, "sm_90a", ("-Werror", "all-warnings"))
    sass = _sass(cubin)
    assert "HGMMA" in sass
    assert "LDGSTS" in sass


# ------------------------------------------------------------------------------ GPU
#: the -k words of the module docstring's GPU commands; each GPU test id holds exactly one
GPU_SELECTIONS = ("sync", "ws", "tma", "16b")


def _fmt(v) -> str:
    if isinstance(v, tuple):
        return "x".join(map(str, v))
    if isinstance(v, bool):
        return "persistent" if v else "tiles"
    if isinstance(v, dict):      # WgmmaGemm keywords of a 16B case: no selection word
        loop = "bulk" if v.get("tma") else "spec" if v.get("warp_specialized") else "plain"
        return f"{loop}-{v.get('swizzle', 'none')}"
    return str(v)


def gpu_params(variant: str, cases) -> list:
    """``cases`` as ``pytest.param`` with ids ``variant-<fields>`` (``-k variant`` selects
    them; sizes as ``MxNxK``)."""
    return [pytest.param(*c, id="-".join([variant, *map(_fmt, c)])) for c in cases]


def test_gpu_selection_commands_partition():
    # the documented commands (module docstring) select every GPU test exactly once: the
    # -k matching is pytest's own (collect-only runs), not a model of it
    def collect(*args):
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                              "-p", "no:cacheprovider", "-m", "gpu", __file__, *args],
                             capture_output=True, text=True, timeout=240,
                             cwd=pathlib.Path(__file__).resolve().parents[2]).stdout
        return [ln for ln in out.splitlines() if "::" in ln]
    every = collect()
    assert len(every) > 50
    picked = [t for word in GPU_SELECTIONS for t in collect("-k", word)]
    assert sorted(picked) == sorted(every), sorted(set(every) ^ set(picked))
def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma)")
    return torch


#: (size, block, stages) of the GPU runs, no swizzle
GPU_CASES = [
    ((64, 64, 16), (64, 64, 16), 1),          # one wgmma: the descriptors themselves
    ((128, 64, 64), (64, 64, 64), 1),
    ((256, 384, 192), (128, 128, 64), 3),
    ((384, 512, 640), (128, 256, 64), 4),
    ((1024, 1024, 1024), (128, 128, 64), 4)]
#: (size, block, stages) of the GPU runs with the 128B swizzle
GPU_CASES_128B = [
    ((64, 64, 64), (64, 64, 64), 1),          # one k tile: the swizzled descriptors
    ((128, 128, 64), (64, 128, 64), 1),       # two 64-column atoms of B (LBO)
    ((256, 384, 192), (128, 128, 64), 3),
    ((384, 512, 640), (128, 256, 64), 4),
    ((256, 256, 384), (128, 128, 128), 2),    # two K-atoms of A per tile
    ((1024, 1024, 1024), (128, 256, 64), 4)]
#: (size, block, stages, group_m, persistent) of the tile-order GPU runs (both swizzles)
GPU_CASES_GRID = [
    ((2304, 2048, 192), (128, 128, 64), 4, 8, True),    # 288 tiles over the SMs, last
    ((2304, 2048, 192), (128, 128, 64), 4, 8, False),   # group of 2 tile rows
    ((1152, 1280, 320), (128, 256, 64), 3, 4, True),    # fewer tiles than SMs
    ((4096, 4096, 192), (128, 256, 64), 4, 1, True)]    # 3 k tiles: 4 stages allowed


def test_gpu_case_parameters_pass_the_cpu_checks():
    # a GPU test whose sizes the kernel refuses fails only on a GPU: build every GPU case's
    # source here (check_tiles, group_m), so that the CPU suite catches it
    for size, block, stages in GPU_CASES:
        for dtype in ("float16", "bfloat16"):
            assert "wgmma.mma_async" in wg.gemm_source(*size, block, stages, dtype)
    for size, block, stages in GPU_CASES_128B:
        assert "wgmma.mma_async" in wg.gemm_source(*size, block, stages, swizzle="128B")
    for size, block, stages, group_m, _ in GPU_CASES_GRID:
        for swizzle in ("none", "128B"):
            assert "wgmma.mma_async" in wg.gemm_source(*size, block, stages, swizzle=swizzle,
                                                       group_m=group_m)
    wg.gemm_source(64, 64, 16, (64, 64, 16), 1, swap_b=True)       # the probes
    wg.gemm_source(64, 128, 64, (64, 128, 64), 1, swap_b=True, swizzle="128B")


def test_stages_past_k_tiles_plus_one_are_refused():
    # the failure GPU tests once hit: 4 stages over K // BK = 2 k tiles
    with pytest.raises(ScheduleError, match=r"stages=4 over 2 k tiles"):
        wg.gemm_source(4096, 4096, 128, (128, 256, 64), 4, swizzle="128B")
    wg.gemm_source(4096, 4096, 128, (128, 256, 64), 3, swizzle="128B")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("size, block, stages", gpu_params("sync", GPU_CASES))
def test_wgmma_gemm_on_the_gpu(size, block, stages, dtype):
    torch = _torch_cuda()
    M, N, K = size
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    g = torch.Generator().manual_seed(5)
    a = (torch.rand(M, K, generator=g) * 2 - 1).to(tdt).cuda()
    b = (torch.rand(K, N, generator=g) * 2 - 1).to(tdt).cuda()
    c = torch.full((M, N), float("nan"), dtype=torch.float32, device="cuda")
    f = wg.WgmmaGemm(M, N, K, block, stages, dtype)
    torch.cuda.synchronize()
    f(a.data_ptr(), b.data_ptr(), c.data_ptr())
    f.synchronize()
    ref = a.double() @ b.double()
    err = (torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)).item()
    assert err < 1e-5, (f"wgmma {dtype} {size} block {block} stages {stages}: relative "
                        f"error {err:.2e}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("size, block, stages", gpu_params("sync", GPU_CASES_128B))
def test_wgmma_gemm_128b_swizzle_on_the_gpu(size, block, stages, dtype):
    torch = _torch_cuda()
    err = _gpu_run(torch, *size, block, stages, dtype, swizzle="128B")
    assert err < 1e-5, (f"wgmma 128B swizzle {dtype} {size} block {block} stages {stages}: "
                        f"relative error {err:.2e}")


@pytest.mark.gpu
@pytest.mark.parametrize("swizzle", ["none", "128B"])
@pytest.mark.parametrize("size, block, stages, group_m, persistent",
                         gpu_params("sync", GPU_CASES_GRID))
def test_wgmma_gemm_persistent_grouped_on_the_gpu(size, block, stages, group_m, persistent,
                                                  swizzle):
    torch = _torch_cuda()
    err = _gpu_run(torch, *size, block, stages, "float16", swizzle=swizzle, group_m=group_m,
                   persistent=persistent)
    assert err < 1e-5, (f"wgmma {size} block {block} stages {stages} group_m {group_m} "
                        f"persistent {persistent} swizzle {swizzle}: relative error {err:.2e}")


def _gpu_run(torch, M, N, K, block, stages, dtype, **kw):
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    g = torch.Generator().manual_seed(7)
    a = (torch.rand(M, K, generator=g) * 2 - 1).to(tdt).cuda()
    b = (torch.rand(K, N, generator=g) * 2 - 1).to(tdt).cuda()
    c = torch.full((M, N), float("nan"), dtype=torch.float32, device="cuda")
    f = wg.WgmmaGemm(M, N, K, block, stages, dtype, **kw)
    torch.cuda.synchronize()
    f(a.data_ptr(), b.data_ptr(), c.data_ptr())
    f.synchronize()
    ref = a.double() @ b.double()
    return (torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)).item()


@pytest.mark.gpu
def test_wgmma_sync_descriptor_reading_probe():
    """One m64n64k16 per block: the PTX reading (B MN-major: LBO between K-adjacent core
    matrices, SBO between N-adjacent) must be right and its swap wrong; the message
    says which one the GPU agrees with."""
    torch = _torch_cuda()
    ours = _gpu_run(torch, 64, 64, 16, (64, 64, 16), 1, "float16")
    swapped = _gpu_run(torch, 64, 64, 16, (64, 64, 16), 1, "float16", swap_b=True)
    assert ours < 1e-5 and swapped > 1e-2, (f"relative error {ours:.2e} as documented, "
                                            f"{swapped:.2e} with B's LBO/SBO swapped")


@pytest.mark.gpu
def test_wgmma_sync_128b_descriptor_reading_probe():
    """B MN-major with the 128B swizzle: LBO between 64-column N-atoms, SBO between 8-row
    K groups must be right, the swap wrong (N = 128: two atoms)."""
    torch = _torch_cuda()
    ours = _gpu_run(torch, 64, 128, 64, (64, 128, 64), 1, "float16", swizzle="128B")
    swapped = _gpu_run(torch, 64, 128, 64, (64, 128, 64), 1, "float16", swizzle="128B",
                       swap_b=True)
    assert ours < 1e-5 and swapped > 1e-2, (f"relative error {ours:.2e} as documented, "
                                            f"{swapped:.2e} with B's LBO/SBO swapped")


def test_target_string_sm90a_builds_with_nvcc():
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    import polytile
    from polytile import te
    from polytile.schedule import create_schedule

    A = te.placeholder((256,), name="A")
    B = te.compute((256,), lambda i: A[i] * 2, name="B")
    s = create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=128)
    s[B].bind(o, te.thread_axis("blockIdx.x"))
    s[B].bind(i, te.thread_axis("threadIdx.x"))
    m = polytile.build(s, [A, B], target="cuda -arch=sm_90a", compiler="nvcc")
    assert m.cubin and "arch='sm_90a'" in repr(m)


@pytest.mark.parametrize("BM, BN, BK", [(128, 256, 64), (64, 64, 16), (192, 128, 32)])
def test_copy_chunks_land_where_the_layouts_say(BM, BN, BK):
    # the kernel's thread -> chunk maps (a_chunk, b_chunk) write chunk c at element 8 c;
    # every chunk's 8 elements are where a_offset/b_offset put them
    for c in range(BM * BK // 8):
        m, k = wg.a_chunk(c, BK)
        assert [wg.a_offset(m, k + e, BK) for e in range(8)] == list(range(8 * c, 8 * c + 8))
    assert sorted(wg.a_chunk(c, BK) for c in range(BM * BK // 8)) == sorted(
        (m, k) for m in range(BM) for k in range(0, BK, 8))
    for c in range(BK * BN // 8):
        k, n = wg.b_chunk(c, BK)
        assert [wg.b_offset(k, n + e, BK) for e in range(8)] == list(range(8 * c, 8 * c + 8))
    assert sorted(wg.b_chunk(c, BK) for c in range(BK * BN // 8)) == sorted(
        (k, n) for k in range(BK) for n in range(0, BN, 8))


# ------------------------------------------------------------ warp specialization
@pytest.mark.parametrize("swizzle", ["none", "128B"])
@pytest.mark.parametrize("size, block, stages, seed", [
    ((192, 128, 192), (64, 64, 64), 2, 0),     # 6 tiles through one block: slots reused
    ((128, 128, 256), (128, 64, 64), 3, 1),    # across tile boundaries, passes 0..3
    ((256, 128, 320), (128, 128, 64), 4, 2),
    ((128, 64, 64), (64, 64, 64), 3, 3)])      # more stages than k tiles per tile
def test_kernel_model_warp_specialized_matches_float64(size, block, stages, seed, swizzle):
    M, N, K = size
    rng = np.random.default_rng(8)
    A = rng.uniform(-1, 1, (M, K))
    B = rng.uniform(-1, 1, (K, N))
    C = wg.emulate_gemm(A, B, block, stages, swizzle=swizzle, warp_specialized=True,
                        seed=seed)
    assert np.linalg.norm(C - A @ B) / np.linalg.norm(A @ B) < 1e-13


def test_mbarrier_model_parity_by_hand():
    bar = wg._MBarrier(2)
    # a fresh barrier: the phase "before" phase 0 (parity 1) counts as complete
    assert bar.try_wait_parity(1) and not bar.try_wait_parity(0)
    bar.arrive()
    assert not bar.try_wait_parity(0)
    bar.arrive()
    assert bar.try_wait_parity(0) and not bar.try_wait_parity(1)


def test_ws_model_catches_a_wrong_protocol(monkeypatch):
    # waits that never block: the consumers read slots not yet filled or refilled under
    # their MMAs -- the model must notice (an assertion or a wrong product)
    rng = np.random.default_rng(9)
    A = rng.uniform(-1, 1, (128, 256))
    B = rng.uniform(-1, 1, (256, 64))
    monkeypatch.setattr(wg._MBarrier, "try_wait_parity", lambda self, parity: True)
    monkeypatch.setattr(wg._MBarrier, "arrive", lambda self, n=1: None)
    try:
        C = wg.emulate_gemm(A, B, (64, 64, 64), 2, warp_specialized=True, seed=1)
    except AssertionError:
        return
    assert not np.linalg.norm(C - A @ B) / np.linalg.norm(A @ B) < 1e-13


def test_ws_model_deadlocks_with_one_stage():
    # the refused configuration, run on the protocol model directly: it cannot progress
    with pytest.raises(RuntimeError, match="deadlock"):
        wg._ws_run([(0, 0)], 3, 1, 1, lambda *a: None, lambda *a: np.zeros(1),
                   lambda *a: None, np.zeros(1), 0)
    with pytest.raises(ScheduleError, match="warp_specialized with stages=1"):
        wg.gemm_source(128, 128, 128, (64, 128, 64), 1, warp_specialized=True)


def test_ws_threads_registers_and_smem():
    assert wg.block_threads((128, 256, 64), True) == 384
    assert wg.block_threads((128, 256, 64)) == 256
    # the pool is the launch allocation: 384 threads x 168 registers; the consumers may
    # take no more than the producer frees (setmaxnreg.inc would wait forever)
    assert wg.launch_registers(384) == 168
    assert wg.ws_registers(2) == (72, 216) and wg.ws_registers(2, 40) == (40, 232)
    for consumers in (1, 2, 3, 4):
        threads = (consumers + 1) * 128
        for producer in (40, 72):
            p, c = wg.ws_registers(consumers, producer)
            assert c % 8 == 0 and 24 <= c <= 240
            assert p * 128 + c * consumers * 128 <= threads * wg.launch_registers(threads)
    assert wg.ws_registers(3, 40) == (40, 152) and wg.ws_registers(4, 40) == (40, 104)
    assert wg.smem_bytes((128, 256, 64), 4, "128B", True) == 4 * 49152 + 1024 + 64


@pytest.mark.parametrize("swizzle", ["none", "128B"])
@pytest.mark.parametrize("block, stages", [((128, 256, 64), 4), ((64, 128, 64), 2),
                                           ((192, 128, 64), 3)])
def test_ws_compiles_for_sm90a_without_spills(block, stages, swizzle):
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    src = wg.gemm_source(768, 768, 768, block, stages, swizzle=swizzle, group_m=8,
                         warp_specialized=True)
    for op in ("mbarrier.try_wait.parity", "cp.async.mbarrier.arrive.noinc",
               "setmaxnreg.dec", "__launch_bounds__("):
        assert op in src
    cubin, log = cc.compile_nvcc(src, "sm_90a", ("-Werror", "all-warnings", "-Xptxas", "-v"))
    assert "0 bytes spill stores" in log and "0 bytes spill loads" in log, log
    _check_launch_registers(log, block)
    if shutil.which("cuobjdump"):
        sass = _sass(cubin)
        assert "HGMMA" in sass and "LDGSTS" in sass


def _check_launch_registers(log, block):
    # setmaxnreg's budget assumes ptxas gives launch_registers(threads) per thread
    import re

    used = int(re.search(r"Used (\d+) registers", log).group(1))
    assert used == wg.launch_registers(wg.block_threads(block, True)), log


#: (size, block, stages, swizzle, group_m, persistent) of the warp-specialized GPU runs
GPU_CASES_WS = [
    ((64, 64, 64), (64, 64, 64), 2, "none", 1, False),      # one k tile
    ((128, 128, 128), (64, 128, 64), 2, "128B", 1, False),
    ((256, 384, 640), (128, 128, 64), 3, "128B", 1, False),  # 10 k tiles, 4 passes
    ((384, 512, 640), (128, 256, 64), 4, "none", 1, False),
    ((2304, 2048, 192), (128, 128, 64), 4, "128B", 8, True),  # slots across tiles
    ((1152, 1280, 320), (128, 256, 64), 3, "none", 4, True),
    ((1024, 1024, 1024), (128, 256, 64), 4, "128B", 8, True),
    ((384, 384, 256), (192, 128, 64), 3, "128B", 1, True)]   # 3 consumer warpgroups


def test_ws_gpu_case_parameters_pass_the_cpu_checks():
    for size, block, stages, swizzle, group_m, _ in GPU_CASES_WS:
        wg.gemm_source(*size, block, stages, swizzle=swizzle, group_m=group_m,
                       warp_specialized=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("size, block, stages, swizzle, group_m, persistent",
                         gpu_params("ws", GPU_CASES_WS))
def test_wgmma_gemm_warp_specialized_on_the_gpu(size, block, stages, swizzle, group_m,
                                                persistent, dtype):
    torch = _torch_cuda()
    err = _gpu_run(torch, *size, block, stages, dtype, swizzle=swizzle, group_m=group_m,
                   persistent=persistent, warp_specialized=True)
    assert err < 1e-5, (f"wgmma warp-specialized {dtype} {size} block {block} stages "
                        f"{stages} swizzle {swizzle} group_m {group_m} persistent "
                        f"{persistent}: relative error {err:.2e}")


# ------------------------------------------------------------------------------ TMA
@pytest.mark.parametrize("size, block, stages, seed", [
    ((192, 128, 192), (64, 64, 64), 2, 0),
    ((128, 256, 256), (128, 128, 128), 3, 1),    # two A boxes (K-atoms) per slot
    ((256, 256, 320), (128, 256, 64), 4, 2),     # four B boxes (N-atoms) per slot
    ((192, 128, 128), (192, 128, 64), 3, 3)])    # 3 consumer warpgroups, 192-row boxes
def test_kernel_model_tma_matches_float64(size, block, stages, seed):
    M, N, K = size
    rng = np.random.default_rng(10)
    A = rng.uniform(-1, 1, (M, K))
    B = rng.uniform(-1, 1, (K, N))
    C = wg.emulate_gemm(A, B, block, stages, swizzle="128B", warp_specialized=True,
                        seed=seed, tma=True)
    assert np.linalg.norm(C - A @ B) / np.linalg.norm(A @ B) < 1e-13


def test_tma_box_layout_is_the_descriptor_layout_by_hand():
    # row 3 of a box: its 16-byte chunk 1 (elements 8..15) lands at chunk 1 ^ 3 = 2 of
    # the 128-byte row, i.e. a_offset_128b's place for (m=3, k=8)
    byte = wg.swizzle_128b(3 * 128 + 8 * 2)
    assert byte == 3 * 128 + 2 * 16
    assert byte // 2 == wg.a_offset_128b(3, 8, 64, 64)
    assert wg.swizzle_128b(9 * 128 + 17 * 2) // 2 == wg.b_offset_128b(9, 17, 64)


@pytest.mark.parametrize("kw, what", [
    ({"tma": True, "warp_specialized": False, "swizzle": "128B"}, "warp_specialized=False"),
    ({"tma": True, "warp_specialized": True, "swizzle": "none"}, "swizzle 'none'"),
])
def test_tma_refusals(kw, what):
    with pytest.raises(ScheduleError, match="tma with") as exc:
        wg.gemm_source(256, 256, 256, (128, 128, 64), 3, **kw)
    assert what in str(exc.value)


@pytest.mark.parametrize("block, stages", [((128, 256, 64), 4), ((64, 128, 64), 2),
                                           ((128, 128, 128), 3), ((192, 128, 64), 3)])
def test_tma_compiles_for_sm90a_without_spills(block, stages):
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    src = wg.gemm_source(768, 768, 768, block, stages, swizzle="128B", group_m=8,
                         warp_specialized=True, tma=True)
    for op in ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
               "mbarrier.arrive.expect_tx", "__grid_constant__ PtTensorMap tmA",
               "fence.mbarrier_init", "setmaxnreg.dec.sync.aligned.u32 %0"):
        assert op in src
    assert "cp.async.cg" not in src.split("extern \"C\"")[1]    # no per-thread copies
    cubin, log = cc.compile_nvcc(src, "sm_90a", ("-Werror", "all-warnings", "-Xptxas", "-v"))
    assert "0 bytes spill stores" in log and "0 bytes spill loads" in log, log
    _check_launch_registers(log, block)
    if shutil.which("cuobjdump"):
        sass = _sass(cubin)
        assert "HGMMA" in sass and "UTMALDG" in sass and "LDGSTS" not in sass


#: (size, block, stages, group_m, persistent) of the TMA GPU runs
GPU_CASES_TMA = [
    ((64, 64, 64), (64, 64, 64), 2, 1, False),         # one box of each, one k tile
    ((128, 256, 128), (64, 256, 64), 2, 1, False),     # 4 B boxes
    ((256, 384, 640), (128, 128, 128), 3, 1, False),   # 2 A boxes, 5 k tiles
    ((2304, 2048, 192), (128, 128, 64), 4, 8, True),   # slots across tiles
    ((1024, 1024, 1024), (128, 256, 64), 4, 8, True),
    ((384, 384, 256), (192, 128, 64), 3, 1, True)]     # 192-row boxes


def test_tma_gpu_case_parameters_pass_the_cpu_checks():
    for size, block, stages, group_m, _ in GPU_CASES_TMA:
        wg.gemm_source(*size, block, stages, swizzle="128B", group_m=group_m,
                       warp_specialized=True, tma=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("size, block, stages, group_m, persistent",
                         gpu_params("tma", GPU_CASES_TMA))
def test_wgmma_gemm_tma_on_the_gpu(size, block, stages, group_m, persistent, dtype):
    torch = _torch_cuda()
    err = _gpu_run(torch, *size, block, stages, dtype, swizzle="128B", group_m=group_m,
                   persistent=persistent, warp_specialized=True, tma=True)
    assert err < 1e-5, (f"wgmma TMA {dtype} {size} block {block} stages {stages} group_m "
                        f"{group_m} persistent {persistent}: relative error {err:.2e}")


# ------------------------------------------------------------------- 16-byte epilogue
def test_d_store_16b_covers_the_tile_once_with_aligned_float4():
    for n in (8, 64, 256):
        seen = {}
        for th in range(128):
            for j in range(n // 8):
                (r, c), src = wg.d_store_16b(th, j)
                assert c % 4 == 0 and 0 <= r < 64
                # the four values are those d_fragment places at (r, c .. c + 3), from the
                # thread itself and its lane partner only
                assert [wg.d_fragment(*x) for x in src] == [(r, c + e) for e in range(4)]
                assert {t for t, _ in src} <= {th, th ^ 1}
                for e in range(4):
                    seen[(r, c + e)] = seen.get((r, c + e), 0) + 1
        assert seen == {(r, c): 1 for r in range(64) for c in range(n)}
    # by hand: thread 5 (odd lane 5: row 1 + 8, its columns 2, 3 after lane 4's 0, 1)
    assert wg.d_store_16b(5, 0) == ((9, 0), [(4, 2), (4, 3), (5, 2), (5, 3)])


@pytest.mark.parametrize("kw", [{}, {"swizzle": "128B"}, {"warp_specialized": True},
                                {"warp_specialized": True, "tma": True, "swizzle": "128B"}])
def test_kernel_model_16b_epilogue_matches_float64(kw):
    rng = np.random.default_rng(11)
    A = rng.uniform(-1, 1, (192, 128))
    B = rng.uniform(-1, 1, (128, 128))
    C = wg.emulate_gemm(A, B, (64, 64, 64), 2, epilogue="16B", **kw)
    assert np.linalg.norm(C - A @ B) / np.linalg.norm(A @ B) < 1e-13
    with pytest.raises(ScheduleError, match="epilogue '4B'"):
        wg.gemm_source(192, 128, 128, (64, 64, 64), 2, epilogue="4B", **kw)


@pytest.mark.parametrize("kw", [{}, {"warp_specialized": True},
                                {"warp_specialized": True, "tma": True}])
def test_16b_epilogue_compiles_without_spills(kw):
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    src = wg.gemm_source(512, 512, 512, (128, 256, 64), 4, swizzle="128B", epilogue="16B",
                         **kw)
    assert "__shfl_xor_sync" in src and "float4" in src
    cubin, log = cc.compile_nvcc(src, "sm_90a", ("-Werror", "all-warnings", "-Xptxas", "-v"))
    assert "0 bytes spill stores" in log and "0 bytes spill loads" in log, log


#: (size, block, stages, WgmmaGemm keywords) of the 16-byte epilogue GPU runs
GPU_CASES_16B = [
    ((64, 64, 16), (64, 64, 16), 1, {}),
    ((384, 512, 640), (128, 256, 64), 4, {"swizzle": "128B"}),
    ((2304, 2048, 192), (128, 128, 64), 4,
     {"swizzle": "128B", "warp_specialized": True, "group_m": 8, "persistent": True}),
    ((1024, 1024, 1024), (128, 256, 64), 4,
     {"swizzle": "128B", "warp_specialized": True, "tma": True, "group_m": 8,
      "persistent": True})]


def test_16b_gpu_case_parameters_pass_the_cpu_checks():
    for size, block, stages, kw in GPU_CASES_16B:
        kw = {k: v for k, v in kw.items() if k != "persistent"}
        wg.gemm_source(*size, block, stages, epilogue="16B", **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("size, block, stages, kw", gpu_params("16b", GPU_CASES_16B))
def test_wgmma_gemm_16b_epilogue_on_the_gpu(size, block, stages, kw):
    torch = _torch_cuda()
    err = _gpu_run(torch, *size, block, stages, "float16", epilogue="16B", **kw)
    assert err < 1e-5, f"wgmma 16B epilogue {size} block {block} {kw}: relative error {err:.2e}"
