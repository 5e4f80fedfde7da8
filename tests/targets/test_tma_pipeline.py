"""TMA copies of pipelined shared tiles: ``s[C].pipeline(ko, stages, tma=True)``.

The loop IR's TMA calls run on the reference interpreter (which lands each copy at the
mbarrier wait that completes its phase, zero-fills outside the operand and checks races),
the CUDA source compiles for sm_90a with ``UTMALDG``/``SYNCS`` in its SASS (where
``cuobjdump`` exists), refusals name the pipeline, the stage and what is not a TMA box;
marked ``gpu``: the wgmma GEMM and a float32 GEMM of odd sizes (partial boxes zero-filled
by TMA) against float64::

    pytest -m gpu tests/targets/test_tma_pipeline.py
"""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.errors import ScheduleError
from polytile.schedule import create_schedule
from polytile.schedule.interpreter import run
from polytile.schedule.passes import software_pipeline as sp
from polytile.schedule.pipeline import lower
from polytile.targets.cuda import compile as cc
from polytile.targets.cuda import tensor_core as tc
from tests.helpers import cubin_sass

TARGET = "cuda -arch=sm_90a"


def _sgemm(M, N, K, BM=8, BN=8, BK=4, stages=2, tma=True, vec=4, threads=8, pad=0):
    """A float32 GEMM with cache_read tiles of A and B pipelined at the k-tile loop."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    i, j = C.op.axis
    bi, ii = s[C].split(i, factor=BM)
    bj, jj = s[C].split(j, factor=BN)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=BK)
    s[C].reorder(bi, bj, ko, ii, jj, ki)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ii, te.thread_axis("threadIdx.y"))
    s[C].bind(jj, te.thread_axis("threadIdx.x"))
    for S in (AS, BS):
        s[S].compute_at(s[C], ko)
        if pad:
            s[S].storage_align(S.op.axis[0], pad, 0)
        f = s[S].fuse(*S.op.axis)
        f, v = s[S].split(f, factor=vec)
        f, tx = s[S].split(f, factor=threads)
        s[S].bind(tx, te.thread_axis("threadIdx.x"))
        s[S].vectorize(v)
    s[C].pipeline(ko, stages=stages, tma=tma)
    return s, [A, B, C]


def _check(f, M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    run(f, a, b, c)
    ref = a.astype("float64") @ b.astype("float64")
    return np.linalg.norm(c - ref) / np.linalg.norm(ref)


# ------------------------------------------------------------------ interpreter
@pytest.mark.parametrize("size, stages", [((11, 12, 12), 2), ((16, 8, 12), 3)])
def test_tma_sgemm_of_partial_tiles_on_the_interpreter_matches_float64(size, stages):
    # 11 rows and 12 columns of 8 x 8 blocks: the boxes of the last block row and column
    # are partial (zero-filled past the operand)
    s, args = _sgemm(*size, stages=stages)
    f = lower(s, args, target=TARGET, stop_after=None)
    text = str(f)
    # 2 tiles, in the prologue (stages - 1 k tiles ahead) and the steady state
    assert text.count("intrin:tma.load_2d(") == 2 * stages
    assert f"intrin:tma.init(&C.k.outer.mbar[0], {stages}, 2)" in text
    assert "tma.wait(" in text and "cp.async" not in text
    assert _check(f, *size) < 1e-6


@pytest.mark.slow      # ~6 s: the interpreter's wgmma model
def test_tma_wgmma_gemm_on_the_interpreter_matches_float64():
    M, N, K = 64, 8, 128
    s, args = tc.wgmma_gemm_schedule(M, N, K, block=(64, 8, 64), stages=2, tma=True)
    f = lower(s, args, target=TARGET, stop_after=None)
    assert "cp.async" not in str(f) and "intrin:tma.wait(" in str(f)
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    bt = rng.uniform(-1, 1, (N, K)).astype("float16")
    c = np.full((M, N), np.nan, "float32")
    run(f, a, bt, c)
    ref = a.astype("float64") @ bt.astype("float64").T
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < 1e-6


def test_a_wrong_phase_parity_is_caught(monkeypatch):
    # waiting with the other parity passes at once (that phase "has completed"): the
    # slot is refilled while its phase is still open, one arrival too many
    orig = sp.tma_wait
    monkeypatch.setattr(sp, "tma_wait", lambda bar, slot, parity: orig(
        bar, slot, sp.Binary("int64", "sub", sp.Const("int64", 1), parity)))
    s, args = _sgemm(16, 8, 12, stages=2)
    f = lower(s, args, target=TARGET, stop_after=None)
    with pytest.raises(RuntimeError, match=r"mbarrier C\.k\.outer\.mbar\[0\] gets 3 "
                       r"arrivals in a phase of 2"):
        _check(f, 16, 8, 12)


def test_a_missing_copy_is_a_hang_on_the_interpreter(monkeypatch):
    # one copy fewer than the mbarrier's arrivals: the wait would never complete
    orig = sp.tma_init
    monkeypatch.setattr(sp, "tma_init", lambda bar, n, arrivals: orig(bar, n, arrivals + 1))
    s, args = _sgemm(16, 8, 12, stages=2)
    f = lower(s, args, target=TARGET, stop_after=None)
    with pytest.raises(RuntimeError, match=r"waits for phase 0 of mbarrier .* 2 of its 3 "
                       r"arrivals made \(the kernel would hang\)"):
        _check(f, 16, 8, 12)


def test_the_tma_pipeline_replays_from_its_trace():
    s, args = _sgemm(16, 8, 12, stages=3)
    assert ("pipeline", "C", {"stages": 3, "tma": True}) in [
        (st.primitive, st.stage, dict(st.kwargs)) for st in s.trace]
    assert "s[C].pipeline(k.outer, stages=3, tma=True)" in str(s)
    text = str(lower(s, args, target=TARGET, stop_after=None))
    assert "tma.load_2d" in text
    assert str(lower(s.copy(), args, target=TARGET, stop_after=None)) == text


# ------------------------------------------------------------------ refusals
def test_refuses_rows_that_are_not_a_multiple_of_16_bytes():
    s, args = _sgemm(16, 8, 14)       # A's rows are 56 bytes
    with pytest.raises(ScheduleError, match=r"pipeline: loop 'k\.outer' of stage 'C': the "
                       r"copy into 'A\.shared' \(stage 'A\.shared'\) has rows of 16 bytes in "
                       r"a tile of 'A', whose rows are 56 bytes; tma=True: rows of a "
                       r"multiple of 16 bytes"):
        lower(s, args, target=TARGET)


def test_refuses_boxes_of_more_than_256_elements():
    s, args = _sgemm(8, 8, 640, BK=320)
    with pytest.raises(ScheduleError, match=r"'A\.shared'\) is a box of 8 x 320 elements; "
                       r"tma=True: box sides of at most 256"):
        lower(s, args, target=TARGET)


def test_refuses_slots_that_do_not_start_128_byte_aligned():
    s, args = _sgemm(16, 8, 8, BM=4, BN=8, BK=4)      # A's tile: 4 x 4 floats, 64 bytes
    with pytest.raises(ScheduleError, match=r"'A\.shared'\) is a tile of 64 bytes; "
                       r"tma=True: a multiple of 128 bytes"):
        lower(s, args, target=TARGET)


def test_refuses_a_shared_stage_that_computes_rather_than_copies():
    M, N, K = 16, 8, 16
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    A2 = te.compute((M, K), lambda i, k: A[i, k] * 2.0, name="A2")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A2[i, k] * B[k, j], axis=k), name="C")
    s = create_schedule(C.op)
    s[A2].set_scope("shared")
    i, j = C.op.axis
    bi, ii = s[C].split(i, factor=8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(bi, j, ko, ii, ki)
    s[C].bind(bi, te.thread_axis("blockIdx.x"))
    s[C].bind(ii, te.thread_axis("threadIdx.y"))
    s[C].bind(j, te.thread_axis("threadIdx.x"))
    s[A2].compute_at(s[C], ko)
    f, v = s[A2].split(s[A2].fuse(*A2.op.axis), factor=4)
    s[A2].bind(f, te.thread_axis("threadIdx.x"))
    s[A2].vectorize(v)
    s[C].pipeline(ko, stages=2, tma=True)
    with pytest.raises(ScheduleError, match=r"the copy into 'A2' \(stage 'A2'\) stores "
                       r".*, not an element of a global buffer of the same type; tma=True: "
                       r"cache_read copies of a global operand"):
        lower(s, [A, B, C], target=TARGET)


def test_refuses_tma_of_a_computed_operand_when_printing():
    # the template's K-major path reads Bt = B^T, computed by a first kernel: no argument
    # to build a tensor map of at launch
    from polytile.errors import BuildError
    from polytile.targets.cuda import wgmma_intrin as wi

    A = te.placeholder((128, 128), name="A", dtype="float16")
    B = te.placeholder((128, 64), name="B", dtype="float16")
    Bt = te.compute((64, 128), lambda n, k: B[k, n], name="Bt")
    C = wi.wgmma_nt_compute(A, Bt)
    s = create_schedule(C.op)
    wi.schedule_wgmma_nt(s, C, A, Bt, (64, 64, 64), 2, "128B", 0, tma=True)
    n, k = Bt.op.axis
    s[Bt].bind(n, te.thread_axis("blockIdx.x"))
    s[Bt].bind(k, te.thread_axis("threadIdx.x"))
    with pytest.raises(BuildError, match=r"a TMA copy reads 'Bt', which is not an argument "
                       r"of the function"):
        polytile.build(s, [A, B, C], target=TARGET, compiler="nvcc")


def test_refuses_tma_with_fragment_prefetch_and_non_bools():
    s, args = _sgemm(16, 8, 8, tma=False)
    C = args[2]
    ko = s[C].leaf_iter_vars[2]
    with pytest.raises(ScheduleError, match=r"tma=1 for loop 'k\.outer' of stage 'C'"):
        s[C].pipeline(ko, stages=2, tma=1)
    with pytest.raises(ScheduleError, match=r"tma without fragment_prefetch"):
        s[C].pipeline(ko, stages=2, tma=True, fragment_prefetch=True)


# ------------------------------------------------------------------ CUDA source, SASS
def test_tma_wgmma_source_compiles_for_sm90a_with_utmaldg():
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    s, args = tc.wgmma_gemm_schedule(256, 256, 256, block=(128, 128, 64), stages=3,
                                     b_major="mn", tma=True)
    m = polytile.build(s, args, target=TARGET, compiler="nvcc")
    src = m.get_source()
    for text in ("const __grid_constant__ PtTensorMap A_tmap",
                 "const __grid_constant__ PtTensorMap B_tmap", "pt_tma_init(",
                 "pt_tma_load_2d(&A_shared[0LL], &A_tmap, 0, ", "16384u", "pt_tma_wait("):
        assert text in src, text
    assert "cp_async" not in src
    assert [p.name for p in m.kernels[0].params][-2:] == ["A_tmap", "B_tmap"]
    sass = cubin_sass(m.cubin)
    if sass is not None:
        assert "UTMALDG.2D" in sass and "SYNCS" in sass and "LDGSTS" not in sass


def test_tma_below_sm90_is_a_build_error_naming_the_primitive():
    # before the #error the build failed in ptxas with a dozen lines about PTX features
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    from polytile.errors import BuildError

    s, args = _sgemm(64, 64, 64)
    with pytest.raises(BuildError, match=r"tma=True\)\) need sm_90 or later"):
        polytile.build(s, args, target="cuda -arch=sm_80", compiler="nvcc")


def test_tensor_maps_are_in_the_exported_launch_plan():
    from polytile.targets.cuda import library

    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    s, args = _sgemm(16, 8, 12)
    m = polytile.build(s, args, target=TARGET, compiler="nvcc")
    meta = library.metadata(m)
    assert meta["tensor_maps"] == [
        {"source": ["param", 0], "rows": 16, "cols": 12, "box_rows": 8, "box_cols": 4,
         "swizzle": "none", "name": "A_tmap"},
        {"source": ["param", 1], "rows": 12, "cols": 8, "box_rows": 4, "box_cols": 8,
         "swizzle": "none", "name": "B_tmap"}]
    assert meta["kernels"][0]["params"][-2:] == [["tensor_map", 0], ["tensor_map", 1]]
    # TMA writes 128-byte aligned shared memory (unswizzled buffers are 16 otherwise)
    assert "__shared__ __align__(128) float A_shared[64];" in m.get_source()
    loaded = library.CubinModule.from_data(m.cubin, meta)
    assert [type(p).__name__ for p in loaded.kernels[0].params][-2:] == ["TensorMapParam"] * 2


# ------------------------------------------------------------------ GPU
def _needs_sm90():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (TMA, wgmma)")


@pytest.mark.gpu
@pytest.mark.parametrize("size, tiles", [((200, 132, 100), (32, 32, 16)),
                                         ((67, 44, 52), (16, 32, 8)),
                                         ((129, 260, 36), (32, 32, 32))])
def test_tma_sgemm_of_odd_sizes_on_the_gpu(size, tiles):
    _needs_sm90()
    M, N, K = size
    BM, BN, BK = tiles
    s, args = _sgemm(M, N, K, BM, BN, BK, stages=3, threads=BN)
    f = polytile.build(s, args, target=TARGET, compiler="nvcc")
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    dc = polytile.nd.array(np.full((M, N), np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), dc)
    ref = a.astype("float64") @ b.astype("float64")
    err = np.linalg.norm(dc.numpy() - ref) / np.linalg.norm(ref)
    assert err < 1e-5, f"tma sgemm {size} tiles {tiles}: error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("size, block, stages, b_major, opts", [
    ((512, 768, 320), (128, 256, 64), 4, "mn", {"group": 4, "epilogue": "16B"}),
    ((256, 384, 192), (128, 128, 64), 3, "k", {}),
    ((384, 256, 512), (128, 256, 64), 4, "mn", {"copy_after_wait": True}),
    ((192, 64, 128), (64, 64, 64), 2, "mn", {"mma_wait": 0})])
def test_tma_wgmma_gemm_on_the_gpu(size, block, stages, b_major, opts):
    _needs_sm90()
    M, N, K = size
    s, args = tc.wgmma_gemm_schedule(M, N, K, block=block, stages=stages, b_major=b_major,
                                     tma=True, **opts)
    f = polytile.build(s, args, target=TARGET, compiler="nvcc")
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    b = rng.uniform(-1, 1, (K, N)).astype("float16")
    bin_ = b if b_major == "mn" else np.ascontiguousarray(b.T)
    dc = polytile.nd.array(np.full((M, N), np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(bin_, device="cuda"), dc)
    ref = a.astype("float64") @ b.astype("float64")
    err = np.linalg.norm(dc.numpy() - ref) / np.linalg.norm(ref)
    assert err < 1e-5, f"tma wgmma {size} block {block} {b_major} {opts}: error {err:.2e}"
