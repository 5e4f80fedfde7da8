"""The tutorials run as scripts at small sizes (each checks its own results and exits
non-zero on a wrong one)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from helpers import normwise_bound

TUTORIALS = pathlib.Path(__file__).resolve().parents[2] / "tutorials"


def _run(script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(TUTORIALS / script), *args],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_01_compute_and_schedule():
    out = _run("01_compute_and_schedule.py", "--n", "13")
    assert out.count("result matches numpy\n") == 14       # every CPU step checks itself
    assert "for i.outer in parallel(" in out
    assert "    C[i, 12] = (A[i, 12] * B[i, 12])" in out         # unroll's partial tile
    assert "A.local = alloc(" in out and "E.local = alloc(" in out
    assert "for k.inner in parallel(0, 8):" in out and "E.rf = alloc(" in out
    assert "launch main_kernel0(grid=[1, 1, 1], block=[32, 1, 1]):" in out
    assert "parallel: loop 'k' of stage 'E' carries a dependence" in out


def test_02_cpu_matmul():
    out = _run("02_cpu_matmul.py", "--n", "96", "--threads", "2")
    assert "numpy (OpenBLAS)" in out
    assert out.count("x numpy") == 10


def test_03_autotune_matmul(tmp_path):
    # an odd size: 65 columns have no factor of 8, 16 or 32 ("knob 'tile_j' has no choices")
    out = _run("03_autotune_matmul.py", "--n", "65", "--trials", "3", "--log",
               str(tmp_path / "matmul.jsonl"))
    assert "ConfigSpace(" in out and "tuned 3 configs" in out
    assert "result matches numpy" in out and "ratio" in out


def _t04():
    """tutorials/04_cuda_gemm.py as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("t04", TUTORIALS / "04_cuda_gemm.py")
    t04 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t04)
    return t04


def _interpreted_gemm(s, args, m, n, k, seed):
    """Lower the CUDA GEMM ``s`` (``C[m, n] = A[m, k] @ B[k, n]``, float32), run it on the
    reference interpreter (output poisoned) and check it against float64; returns the
    lowered function."""
    import numpy as np

    from polytile.schedule.interpreter import run
    from polytile.schedule.pipeline import lower

    f = lower(s, args, target="cuda", stop_after=None)
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, n)).astype("float32")
    c = np.full((m, n), np.nan, "float32")
    run(f, a, b, c)
    ref = a.astype("float64") @ b.astype("float64")
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < 1e-6
    return f


def test_04_cuda_gemm_builds_without_a_gpu():
    from polytile.targets.cuda import compile as cc

    if cc.nvcc_path() is None and cc.nvrtc_version() is None:
        pytest.skip("neither NVRTC nor nvcc is available")
    out = _run("04_cuda_gemm.py", "--n", "256", "--no-run", "--variants")
    assert out.count("built in") == 4 + len(_t04().VARIANTS)   # the steps, then VARIANTS


@pytest.mark.parametrize("m, n, k, stages", [   # the interpreter takes a minute a case: CI time
    pytest.param(68, 40, 44, 2, marks=pytest.mark.slow), (36, 44, 20, 3), (32, 32, 8, 1)])
def test_04_pipelined_register_tiles_on_the_interpreter(m, n, k, stages):
    # the vthread + cp.async SGEMM step at ragged block and k tiles, run by the reference
    # interpreter (asynchronous copies landing at their wait_group) against float64
    s, args = _t04().pipelined_tiles(m, n, k, block=32, threads=4, vt=2, kt=8, stages=stages)
    f = _interpreted_gemm(s, args, m, n, k, seed=3)
    if stages > 1:
        assert f"cp.async.wait_group({stages - 2})" in str(f)


@pytest.mark.parametrize("m, n, k, kw", [
    pytest.param(68, 76, 44, dict(stages=2, group=3),            # a partial block tile
                 marks=pytest.mark.slow),
    pytest.param(100, 36, 20, dict(stages=3, group=3, block_n=16, vt_n=1),  # group 2 of 4
                 marks=pytest.mark.slow),
    (36, 68, 12, dict(stages=1, block_n=64, vt_n=4, group=1)),  # 8 x 16 per thread
])
def test_04_grouped_and_rectangular_register_tiles_on_the_interpreter(m, n, k, kw):
    # pipelined_tiles' group / block_n / vt_n knobs at sizes that leave partial block
    # tiles, partial groups of tile rows and a partial k tile, against float64
    s, args = _t04().pipelined_tiles(m, n, k, block=32, threads=4, vt=2, kt=8, **kw)
    f = _interpreted_gemm(s, args, m, n, k, seed=5)
    if kw.get("group", 1) > 1:
        assert "truncmod(blockIdx.x" in str(f)                    # blockIdx.x split in groups


#: the default step's structure (register tiles of vthread sub-tiles, cp.async, 2 stages)
#: scaled down to 8 x 8 outputs per thread: quick to lower and to compile for the host
SMALL_TUNED = dict(block=16, threads=2, vt=2, block_n=32, threads_n=4, vt_n=2, kt=4,
                   stages=2, group=1)


def test_04_ragged_register_tiles_print_plain_indices():
    # At ragged sizes (TUNED at 1004 x 1028 x 516: 3.0 MB of CUDA C, 74 s of nvcc; 245 KB
    # here, 21 s of nvcc) the accesses of the register tile's statements were selects on
    # the domain of the padded instances their guard turns off (now the one affine index,
    # extended over them), each FMA had its own branch (now one per guard), and the
    # ragged copies into registers were loops of run-time extent (local memory) beside
    # unrolled copies for full tiles (now one guarded unrolled copy): 38 KB, 6 s of nvcc
    # (31 KB, 3 s at full tiles).
    import polytile
    from polytile.targets import Target
    from polytile.targets.c_printer import print_c_module
    from polytile.targets.cuda import CUDADialect

    s, args = _t04().pipelined_tiles(20, 36, 12, **SMALL_TUNED)
    f = polytile.lower(s, args, target=Target.parse("cuda"), stop_after=None)
    src = print_c_module(f, CUDADialect()).source
    body = src[src.index('extern "C"'):]
    assert " ? " not in body and "pt_min" not in body, body[:3000]
    assert len(src) < 60_000, len(src)


@pytest.mark.slow   # g++ and 32 host threads per block: CI time (the interpreter tests
@pytest.mark.parametrize("m, n, k", [(20, 36, 12), (36, 68, 20)])   # cover the lowering)
def test_04_ragged_register_tiles_on_emulated_cuda(m, n, k, cuda_build):
    # the printed CUDA C of the default step's structure at partial block and k tiles,
    # compiled for the host by the emulated driver (or run on a GPU), against float64
    import numpy as np

    import polytile

    s, args = _t04().pipelined_tiles(m, n, k, **SMALL_TUNED)
    f = cuda_build(s, args)
    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, (m, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, n)).astype("float32")
    dc = polytile.nd.array(np.full((m, n), np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), dc)
    ref = a.astype("float64") @ b.astype("float64")
    assert np.linalg.norm(dc.numpy() - ref) / np.linalg.norm(ref) < 1e-6


@pytest.mark.slow   # the interpreter: CI time
def test_04_default_step_layout_on_the_interpreter():
    # the default step's thread layout (TUNED: threads != threads_n, vt != vt_n, 2 stages,
    # k tiles of 16) scaled down, at ragged sizes (partial block and k tiles)
    kw = dict(_t04().TUNED, block=32, threads=2, vt=4, block_n=64, threads_n=8, vt_n=2)
    s, args = _t04().pipelined_tiles(36, 68, 20, group=1, **kw)
    _interpreted_gemm(s, args, 36, 68, 20, seed=7)


@pytest.mark.parametrize("m, n, k, kw", [   # the interpreter: CI time, one cheap case
    (12, 20, 12, dict(block=(16, 32), warps=(1, 1), vt=(1, 1), stages=3, group=1)),
    pytest.param(36, 68, 20, dict(block=(32, 32), warps=(2, 1), vt=(2, 1), stages=3,
                                  group=1), marks=pytest.mark.slow),
    pytest.param(36, 68, 36, dict(block=(32, 32), warps=(1, 2), vt=(1, 2), kt=16, pad=4,
                                  stages=2, group=2), marks=pytest.mark.slow),
])
def test_04_warp_tiles_on_the_interpreter(m, n, k, kw):
    # the warp-tiled SGEMM (lanes 4 x 8, rows lr apart, vector C rows) at ragged block
    # and k tiles, warps along m or n, padded A rows, against float64
    import numpy as np

    from polytile.schedule.interpreter import run
    from polytile.schedule.pipeline import lower

    s, args = _t04().warp_tiles(m, n, k, **kw)
    f = lower(s, args, target="cuda", stop_after=None)
    rng = np.random.default_rng(6)
    a = rng.uniform(-1, 1, (m, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, n)).astype("float32")
    c = np.full((m, n), np.nan, "float32")
    run(f, a, b, c)
    ref = a.astype("float64") @ b.astype("float64")
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < 1e-6


def test_04_register_tile_write_back_is_scalar_stores():
    # C's rows are written back lane by lane: a 16-byte store (st.global.v4) from the
    # register tile makes ptxas hold each row of 4 accumulators in an aligned register
    # quad through the k loop, in B's bank: FFMA bank conflicts (0.73x cuBLAS, not 0.86x)
    import re

    from helpers import nvcc_text

    import polytile

    s, args = _t04().warp_tiles(64, 64, 16, block=(32, 64), warps=(2, 1), vt=(1, 2))
    src = polytile.build(s, args, target="cuda").get_source()
    assert "float4{C_local[" not in src
    assert len(re.findall(r"\bC\[[^\n]*\] = C_local", src)) == 8   # 2 vthreads x 4 lanes
    ptx = nvcc_text(src, "ptx")
    if ptx is not None:
        assert "st.global.f32" in ptx and "st.global.v4.f32" not in ptx


def _ffma_bank_conflicts(sass: str) -> tuple[int, int]:
    """(FFMA count, register-bank conflicts) of a SASS listing: registers read from the
    file (not the operand reuse cache) two or more in one bank (register number mod 2,
    Volta to Hopper) cost a cycle each beyond the first."""
    import re

    prev, n, conflicts = [None] * 3, 0, 0
    for line in sass.splitlines():
        if not re.match(r"\s*/\*[0-9a-f]{4,}\*/", line):    # not an instruction
            continue
        m = re.search(r"\bFFMA (R\d+), ([^;]*);", line)
        if m is None:
            prev = [None] * 3
            continue
        cur, read = [None] * 3, set()
        for i, op in enumerate(m.group(2).split(",")[:3]):
            r = re.match(r"\s*-?R(\d+)(\.reuse)?", op)
            if r is None:
                continue
            if prev[i] != int(r.group(1)):
                read.add(int(r.group(1)))
            if r.group(2):
                cur[i] = int(r.group(1))
        prev, n = cur, n + 1
        conflicts += sum(max(0, sum(1 for x in read if x % 2 == b) - 1) for b in (0, 1))
    return n, conflicts


@pytest.mark.slow
def test_04_default_step_ffma_bank_conflicts():
    # the default SGEMM's k loop as on main before the vector write-back (1024 FFMA, 469
    # bank conflicts with nvcc 13; 771 with float4 stores of C): at most one per 2 FFMA
    from helpers import nvcc_text

    import polytile

    s, args = _t04().pipelined_tiles(4096, 4096, 4096)
    sass = nvcc_text(polytile.build(s, args, target="cuda").get_source(), "sass")
    if sass is None:
        pytest.skip("no nvcc or cuobjdump")
    n, conflicts = _ffma_bank_conflicts(sass)
    assert n == 1024 and conflicts <= n // 2, (n, conflicts)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, stages", [(1004, 1028, 516, 2), (4096, 4096, 4096, 2),
                                             (4096, 4096, 4096, 3), (1004, 1028, 516, None),
                                             (4096, 4096, 4096, None)])
def test_04_pipelined_register_tiles_on_the_gpu(m, n, k, stages):
    # stages None: the default step (TUNED: 128 x 256 blocks, 16 x 8 outputs per thread)
    import importlib.util

    import numpy as np

    import polytile

    spec = importlib.util.spec_from_file_location("t04", TUTORIALS / "04_cuda_gemm.py")
    t04 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t04)
    kw = t04.TUNED if stages is None else dict(stages=stages)
    s, args = t04.pipelined_tiles(m, n, k, **kw)
    f = polytile.build(s, args, target="cuda")
    rng = np.random.default_rng(4)
    a = rng.uniform(-1, 1, (m, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, n)).astype("float32")
    dc = polytile.nd.array(np.full((m, n), np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), dc)
    ref = a.astype("float64") @ b.astype("float64")
    # float32 rounding grows with k (1.15e-6 measured at 4096: 0.15 of the bound)
    assert np.linalg.norm(dc.numpy() - ref) / np.linalg.norm(ref) < normwise_bound(k)


def test_07_dynamic_shapes():
    out = _run("07_dynamic_shapes.py", "--sizes", "16,40", "--trials", "2")
    assert "# n: int32 = A.shape[0]" in out                   # the size read off A
    assert "min(4, (int64(n) - (4 * i.outer)))" in out          # the exact tail
    assert "Y = alloc(float32[4, 8], scope='stack')" in out     # a constant footprint
    assert out.count("result matches numpy") == 10
    assert "disagree on the symbolic size 'n'" in out
    assert "the symbolic size 'm' is not a dimension of any argument" in out
    assert out.count("results match numpy") == 2                # tuned kernels at other n


def test_06_tensorize():
    out = _run("06_tensorize.py", "--n", "33", "--m", "48", "--l", "64")
    assert "gemv_update: result matches numpy" in out
    assert "gemv_reset + gemv_update: result matches numpy" in out
    assert "tensorize tensor_intrin.reset(" in out and "tensorize tensor_intrin.update(" in out


@pytest.mark.slow   # about 50 s: four nvcc builds and two interpreter runs
def test_05_tensor_core_gemm_builds_and_checks_without_a_gpu():
    from polytile.targets.cuda import compile as cc

    if cc.nvcc_path() is None and cc.nvrtc_version() is None:
        pytest.skip("neither NVRTC nor nvcc is available")
    out = _run("05_tensor_core_gemm.py", "--n", "256", "--no-run")
    assert out.count("built in") == 6
    assert "interpreter: WMMA fp16->float32 lowering matches numpy" in out
    assert "interpreter: mma.sync 3-stage fp16->float32 lowering matches numpy" in out
    assert "interpreter: WMMA fp16->float16 lowering matches numpy" in out
    assert "CPU tensorize with an extern C micro-kernel: result matches numpy" in out
    assert "CPU model: wgmma + TMA kernel (192x128x128) matches numpy" in out
    assert "interpreter: wgmma tensorize fp16->float32 lowering matches numpy" in out
    assert "(128B swizzle, mma_wait=1; rel. error" in out
    if cc.nvcc_path() is not None:   # step 6 compiles the wgmma kernels for sm_90a
        assert "wgmma + TMA fp16 -> fp32     built for sm_90a" in out
        assert "wgmma via tensorize          built for sm_90a" in out


def test_08_argmax_and_scan():
    out = _run("08_argmax_and_scan.py", "--n", "13")
    assert out.count("result matches numpy\n") == 3
    assert "T_v0_next = " in out and "PQ.v1 = alloc(" in out
    assert "rfactor refused: rfactor: polytile cannot prove that the combiner 'argmax'" in out
    assert "parallel scan axis refused: parallel: loop 't' of stage 'scan'" in out


def test_09_hip_mfma():
    from polytile.targets.hip import compile as hc

    out = _run("09_hip_mfma.py", "--n", "64")
    assert out.count("result matches numpy") == 3     # cuda, hip, MFMA on the interpreter
    assert "hip -mcpu=gfx942   extern \"C\" __global__ void __launch_bounds__(256)" in out
    assert "pt_mfma_f32_32x32x8f16(" in out                  # the MFMA call (its helper)
    if hc.hipcc_path() is not None:
        assert "gfx90a: compiled by hipcc --offload-arch=gfx90a; MFMA instructions: " \
               "v_mfma_f32_32x32x8f16 x" in out
        assert "MFMA instructions: v_mfma_f32_32x32x8_f16 x" in out    # gfx942's spelling
