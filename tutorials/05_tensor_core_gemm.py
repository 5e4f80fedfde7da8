"""Tensor cores: from the fp32 SGEMM to a float16 GEMM on WMMA, and tensorize on the CPU.

1. The best fp32 SGEMM of ``tutorials/04_cuda_gemm.py`` (CUDA cores: vthread 8x8
   register tiles, cp.async double buffering).
2. A float16 GEMM whose 16x16x16 tiles run on tensor cores through ``tensorize`` with the
   WMMA intrinsics of :mod:`polytile.targets.cuda.tensor_core`: A and B staged in shared
   memory, each warp owning a 64x64 tile of accumulator fragments
   (:func:`~polytile.targets.cuda.tensor_core.wmma_gemm`), float32 accumulation.
3. The same with float16 accumulation.
4. The same tiles through ``ldmatrix`` and ``mma.sync.aligned.m16n8k16`` (registers in
   PTX's lane layout) instead of WMMA.
5. The mma.sync GEMM software-pipelined: ``s[CF].pipeline(k.outer, stages=3)`` gives each
   shared tile three buffers and issues the ``cp.async`` copies (16-byte global -> shared
   copies that bypass registers, sm_80+) of tile ``k + 2`` before the MMAs of tile ``k``,
   with ``cp.async.wait_group`` and one barrier per k tile. The shared rows are padded
   (``storage_align``, 8 float16) so that the 8 rows an ``ldmatrix`` reads fall in
   different banks. Printed with ``--print-source``: one helper per PTX instruction
   (``cp_async_cg_shared_global``, ``cp_async_commit_group``, ``cp_async_wait_group``,
   ``ldmatrix_x4``, ``mma_sync_m16n8k16``).
   Then 32-deep k tiles on 128x256 blocks of 8 warps of 64x64 in 4 stages (one
   ``ldmatrix.x4`` per 4 ``mma.sync``; a 256-wide B tile serves twice the MMAs per
   shared byte of a 128x128 one), the blocks grouped by 8 tile rows (``group=8``: a split
   and a fuse of the block loops) so that the blocks running together share A and B
   panels in L2, and ``pipeline(ko, 4, fragment_prefetch=True)`` (``frags="prefetch"``):
   the first k step's fragments of tile k + 1 are loaded right after the barrier, before
   the copies of tile k + 4 and under the last step's MMAs of tile k; k tiles of 64 and
   both shared tiles XOR-swizzled instead of padded (``swizzle=True``: 4 shared
   wavefronts per 16-byte ``cp.async`` of a warp instead of 11-15 per ncu). The fastest
   mma.sync variant measured on the H200 (419.3 TFLOP/s, 0.561x cuBLAS; padded
   128x256x32 402.5, 0.535x, in the same run;
   ``benchmarks/gpu_gemm.py --isa mma --variants``). ``frags="tile"`` loads
   the fragments of a whole k tile before its MMAs instead.

Each GPU step prints TFLOP/s and the ratio to cuBLAS float16 (torch) measured in the same
run. Without a GPU (or with ``--no-run``) the steps are built (NVRTC or nvcc) and the
tensor-core lowering is checked on polytile's reference interpreter at a small size, which
runs each intrinsic through its compute definition. A last section tensorizes a CPU matmul
with an extern C micro-kernel (``tutorials/06_tensorize.py`` has the full story).
The pipelined loop is checked on the interpreter too, which lands each asynchronous copy at
the ``wait_group`` that retires it (a wrong wait count shows as a race).

6. Hopper (sm_90a): the generated wgmma GEMM of :mod:`polytile.targets.cuda.wgmma`
   (:class:`~polytile.targets.cuda.wgmma.WgmmaGemm`): ``wgmma.mma_async.m64n256k16``
   reading A and B from shared memory through 64-bit matrix descriptors (128-byte
   swizzle), a warp-specialized main loop (one producer thread issuing TMA boxes,
   ``cp.async.bulk.tensor``, two consumer warpgroups, full/empty mbarriers per stage,
   ``setmaxnreg``), a persistent grid in grouped tile order and a 16-byte epilogue. This
   kernel is generated beside the schedule language, not through ``tensorize``: it is the
   fast path (H200, 2026-12-01: 693 TFLOP/s at 4096^3, 0.935x cuBLAS). Without an sm_90
   GPU the step compiles the kernel with nvcc for sm_90a and runs the kernel's CPU model
   (:func:`~polytile.targets.cuda.wgmma.emulate_gemm`, the same layouts, swizzle and
   barrier protocol) against numpy.

   The schedule language reaches the same instruction through ``tensorize``
   (``tc.wgmma_gemm_schedule``, ``C = A @ Bt^T``), with the two things that make it fast::

       AS = s.cache_read(A, "shared", [CF]); BS = s.cache_read(Bt, "shared", [CF])
       s[CF].tensorize(ci, tc.wgmma_mma(256, swizzle="128B", asynchronous=True))
       s[CF].pipeline(ko, stages=4, mma_wait=1)   # MMAs of tile k run while k+1 lands
       s[AS].compute_at(s[CF], ko); s[AS].swizzle("128B")   # [128, 64] tiles, 128B rows

   ``swizzle`` stores the 64-element rows of the k tiles in the tensor cores' 128-byte
   swizzle (16-byte chunk ``j`` of row ``r`` at chunk ``j ^ r % 8``), which the MMA's
   descriptors name; ``mma_wait=1`` commits each k tile's MMAs as one group and waits
   with ``wgmma.wait_group 1``, so they overlap the next tile's wait and issue (the copies
   then run ``stages - 2`` tiles ahead: the slot of the group in flight is not refilled).
   Both are checked on the interpreter, which stores the tiles swizzled and reports a
   write into a slot that an unretired MMA group still reads as a race.
The autotuner searches around these schedules: ``polytile tune matmul --target "cuda
-arch=sm_90a" --dtype float16 --args 4096,4096,4096`` (block, warp and k tiles, stages,
fragment prefetch, groups, padding, mma.sync / WMMA / wgmma; the defaults are
``tc.MMA_BEST`` and ``tc.WGMMA_TENSORIZE_BEST``, the last steps below).
Run: ``python tutorials/05_tensor_core_gemm.py [--n 4096]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import time

import numpy as np

import polytile
from polytile import te, tir
from polytile.errors import ScheduleError
from polytile.schedule.interpreter import run
from polytile.schedule.pipeline import lower
from polytile.targets.cuda import tensor_core as tc


def sgemm_step():
    path = pathlib.Path(__file__).resolve().parent / "04_cuda_gemm.py"
    spec = importlib.util.spec_from_file_location("cuda_gemm_tutorial", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.pipelined_tiles


def check_on_interpreter(acc: str, isa: str = "wmma", stages: int = 1) -> None:
    """The tensor-core lowering at 32x64x48 on the interpreter vs float64 numpy."""
    m, n, k = 32, 64, 48
    s, args = tc.wmma_gemm(m, n, k, acc=acc, block=(32, 32, 16), warp=(16, 32), isa=isa,
                           stages=stages)
    f = lower(s, args, target="cuda", stop_after=None)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, k)).astype("float16")
    b = rng.uniform(-1, 1, (k, n)).astype("float16")
    c = np.full((m, n), np.nan, acc)
    run(f, a, b, c)
    ref = a.astype("float64") @ b.astype("float64")
    err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    if not err < (2e-3 if acc == "float16" else 1e-6):
        raise SystemExit(f"interpreter: wrong result for {acc} accumulation ({err:.2e})")
    what = {"wmma": "WMMA", "mma": "mma.sync"}[isa] + (f" {stages}-stage" * (stages > 1))
    print(f"interpreter: {what} fp16->{acc} lowering matches numpy (rel. error {err:.1e})")


def check_wgmma_schedule_on_interpreter() -> None:
    """The warpgroup MMA through ``tensorize`` (C = A @ Bt^T; 128B-swizzled tiles, 3
    stages, one MMA group in flight) at 64x16x192 on the interpreter vs float64 numpy."""
    m, n, k = 64, 16, 192
    s, args = tc.wgmma_gemm_schedule(m, n, k, block=(64, 16, 64), stages=3)
    f = lower(s, args, target="cuda -arch=sm_90a", stop_after=None)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, k)).astype("float16")
    bt = rng.uniform(-1, 1, (n, k)).astype("float16")
    c = np.full((m, n), np.nan, "float32")
    run(f, a, bt, c)
    ref = a.astype("float64") @ bt.astype("float64").T
    err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    if not err < 1e-6:
        raise SystemExit(f"interpreter: wgmma tensorize wrong ({err:.2e})")
    print(f"interpreter: wgmma tensorize fp16->float32 lowering matches numpy "
          f"(128B swizzle, mma_wait=1; rel. error {err:.1e})")


def cpu_tensorize() -> None:
    """C[i, j] = sum_k A[i, k] B[j, k] with a 16-wide gemv micro-kernel written in C."""
    l, m = 64, 16
    a = te.placeholder((l,), name="a")
    b = te.placeholder((m, l), name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k), name="c")
    gemv = te.decl_tensor_intrin(
        c.op, lambda ins, outs: tir.call_extern(
            "int32", "gemv16", outs[0].access_ptr("w"), ins[0].access_ptr("r"),
            ins[1].access_ptr("r"), ins[1].strides[0]),
        binds={b: tir.decl_buffer(b.shape, "float32", "B", strides=[te.var("s"), 1])},
        name="gemv16")
    code = """
    int gemv16(float *c, const float *a, const float *b, int stride) {
      for (int i = 0; i < 16; ++i) {
        float s = 0;
        for (int j = 0; j < 64; ++j) s += a[j] * b[i * stride + j];
        c[i] = s;
      }
      return 0;
    }"""
    N, M = 37, 48
    A = te.placeholder((N, l), name="A")
    B = te.placeholder((M, l), name="B")
    r = te.reduce_axis((0, l), name="r")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, r] * B[j, r], axis=r), name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=m)
    s[C].tensorize(ji, gemv)
    s[C].pragma(C.op.axis[0], "import_c", code)
    print(polytile.lower(s, [A, B, C]))
    f = polytile.build(s, [A, B, C])
    rng = np.random.default_rng(0)
    x, y = rng.uniform(size=(N, l)).astype("float32"), rng.uniform(size=(M, l)).astype("float32")
    z = np.full((N, M), np.nan, "float32")
    f(x, y, z)
    np.testing.assert_allclose(z, x @ y.T, rtol=1e-4)
    print("CPU tensorize with an extern C micro-kernel: result matches numpy")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="M = N = K (default 4096)")
    ap.add_argument("--no-run", action="store_true", help="build only (no GPU needed)")
    ap.add_argument("--print-source", action="store_true")
    args = ap.parse_args(argv)
    n = args.n
    if not args.no_run and not _have_gpu():
        print("no CUDA device: building only")
        args.no_run = True
    cublas = None
    if not args.no_run:
        rng = np.random.default_rng(0)
        a = rng.uniform(-1, 1, (n, n)).astype("float16")
        b = rng.uniform(-1, 1, (n, n)).astype("float16")
        cublas, ref = _cublas_half(a, b)
        da, db = polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda")
    steps = [("fp32 SGEMM (CUDA cores)", lambda: sgemm_step()(n, n, n), "float32"),
             ("WMMA fp16 -> fp32", lambda: tc.wmma_gemm(n, n, n, acc="float32"), "float32"),
             ("WMMA fp16 -> fp16", lambda: tc.wmma_gemm(n, n, n, acc="float16"), "float16"),
             ("mma.sync+ldmatrix fp16 -> fp32",
              lambda: tc.wmma_gemm(n, n, n, acc="float32", isa="mma"), "float32"),
             ("mma.sync + cp.async, 3 stages",
              lambda: tc.wmma_gemm(n, n, n, acc="float32", isa="mma", stages=3), "float32"),
             ("mma.sync 128x256x64, 4 stages, prefetch, swizzled",
              lambda: tc.wmma_gemm(n, n, n, acc="float32", **tc.MMA_BEST),
              "float32")]
    for title, make, out in steps:
        s, targs = make()
        t0 = time.perf_counter()
        f = polytile.build(s, targs, target="cuda")
        t_build = time.perf_counter() - t0
        if args.print_source:
            print(f.get_source())
        if args.no_run:
            print(f"{title:28s} built in {t_build:.2f} s")
            continue
        if targs[0].dtype == "float32":
            xa = polytile.nd.array(a.astype("float32"), device="cuda")
            xb = polytile.nd.array(b.astype("float32"), device="cuda")
        else:
            xa, xb = da, db
        dc = polytile.nd.array(np.full((n, n), np.nan, out), device="cuda")
        f(xa, xb, dc)
        err = np.linalg.norm(dc.numpy().astype("float64") - ref) / np.linalg.norm(ref)
        if not err < 5e-3:
            raise SystemExit(f"{title}: wrong result (relative error {err:.2e})")
        t = f.time_evaluator(number=5, repeat=3)(xa, xb, dc).median
        tflops = 2.0 * n**3 / t / 1e12
        ratio = f"{tflops / cublas:6.3f} x cuBLAS fp16" if cublas else ""
        print(f"{title:28s} {tflops:7.1f} TFLOP/s  {ratio}  (lower+build {t_build:.2f} s)")
    wgmma_step(n, None if args.no_run else (da, db), cublas, None if args.no_run else ref)
    wgmma_tensorize_step(n, None if args.no_run else (a, b), cublas,
                         None if args.no_run else ref, args.print_source)
    for acc in ("float32", "float16"):
        check_on_interpreter(acc)
    check_on_interpreter("float32", "mma", stages=3)
    check_wgmma_schedule_on_interpreter()
    cpu_tensorize()


#: the wgmma step's kernel: 128 x 256 tiles, 4 stages, TMA warp-specialized, persistent
WGMMA_BLOCK, WGMMA_STAGES = (128, 256, 64), 4
WGMMA_KW = dict(swizzle="128B", group_m=8, persistent=True, warp_specialized=True, tma=True,
                epilogue="16B")


def wgmma_step(n: int, arrays, cublas, ref) -> None:
    """Step 6: the wgmma + TMA GEMM at ``n``^3 on an sm_90 GPU (``arrays`` = the float16
    A and B on the device, ``ref`` the float64 product), else compiled for sm_90a and its
    CPU model checked at a small size."""
    from polytile.targets.cuda import compile as cc
    from polytile.targets.cuda import wgmma as wg

    title = "wgmma + TMA fp16 -> fp32"
    if arrays is not None and _capability() == (9, 0):
        da, db = arrays
        t0 = time.perf_counter()
        try:
            f = wg.WgmmaGemm(n, n, n, WGMMA_BLOCK, WGMMA_STAGES, "float16", **WGMMA_KW)
        except ScheduleError as exc:  # a size the kernel's tiles do not divide: say so
            print(f"{title:28s} not run: {str(exc).splitlines()[0]}")
            return
        t_build = time.perf_counter() - t0
        dc = polytile.nd.array(np.full((n, n), np.nan, "float32"), device="cuda")
        f(da.data_ptr, db.data_ptr, dc.data_ptr)
        f.synchronize()
        err = np.linalg.norm(dc.numpy().astype("float64") - ref) / np.linalg.norm(ref)
        if not err < 1e-4:
            raise SystemExit(f"{title}: wrong result (relative error {err:.2e})")
        tflops = 2.0 * n**3 / f.time(da.data_ptr, db.data_ptr, dc.data_ptr) / 1e12
        ratio = f"{tflops / cublas:6.3f} x cuBLAS fp16" if cublas else ""
        print(f"{title:28s} {tflops:7.1f} TFLOP/s  {ratio}  (generate+nvcc {t_build:.2f} s)")
        return
    if arrays is not None:
        print(f"{title:28s} not run: needs an sm_90 GPU (this one: sm_{_capability()})")
    kw = {k: v for k, v in WGMMA_KW.items() if k != "persistent"}   # a launch setting
    if cc.nvcc_path() is not None:
        t0 = time.perf_counter()
        try:
            wg.compile_gemm(n, n, n, WGMMA_BLOCK, WGMMA_STAGES, "float16", **kw)
            print(f"{title:28s} built for sm_90a in {time.perf_counter() - t0:.2f} s")
        except ScheduleError as exc:  # n not a multiple of the tiles
            print(f"{title:28s} not built at n={n}: {str(exc).splitlines()[0]}")
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (192, 128)).astype("float16").astype("float64")
    b = rng.uniform(-1, 1, (128, 128)).astype("float16").astype("float64")
    c = wg.emulate_gemm(a, b, (64, 64, 64), 2, **kw)
    err = np.linalg.norm(c - a @ b) / np.linalg.norm(a @ b)
    if not err < 1e-12:
        raise SystemExit(f"wgmma CPU model: wrong result ({err:.2e})")
    print(f"CPU model: wgmma + TMA kernel (192x128x128) matches numpy (rel. error {err:.1e})")


#: the tensorize step: 128 x 256 tiles of 64 k (128B rows), 4 stages, mma_wait 1, blocks in
#: groups of 8 tile rows, the 16-byte epilogue, tiles copied by TMA
TENSORIZE_BLOCK = tc.WGMMA_TENSORIZE_BEST["block"]
TENSORIZE_STAGES = tc.WGMMA_TENSORIZE_BEST["stages"]


def wgmma_tensorize_step(n: int, arrays, cublas, ref, print_source: bool = False) -> None:
    """Step 6b: the wgmma GEMM written in the schedule language
    (:func:`~polytile.targets.cuda.tensor_core.wgmma_gemm_schedule`: swizzled
    ``cache_read`` tiles, overlapped MMA groups) at ``n``^3 on an sm_90 GPU (``arrays`` =
    the float16 A and B on the host), else built with nvcc for sm_90a."""
    from polytile.targets.cuda import compile as cc

    title = "wgmma via tensorize"
    try:
        best = tc.WGMMA_TENSORIZE_BEST
        group = best["group"] if (n // TENSORIZE_BLOCK[0]) % best["group"] == 0 else 1
        s, targs = tc.wgmma_gemm_schedule(n, n, n, block=TENSORIZE_BLOCK,
                                          stages=TENSORIZE_STAGES, group=group,
                                          epilogue=best["epilogue"],
                                          tma=best.get("tma", False))
    except ValueError as exc:
        print(f"{title:28s} not built at n={n}: {str(exc).splitlines()[0]}")
        return
    on_gpu = arrays is not None and _capability() == (9, 0)
    if not on_gpu and cc.nvcc_path() is None:
        print(f"{title:28s} not built: needs nvcc (sm_90a)")
        return
    t0 = time.perf_counter()
    try:
        f = polytile.build(s, targs, target="cuda -arch=sm_90a", compiler="nvcc")
    except ScheduleError as exc:   # n not a multiple of the tiles
        print(f"{title:28s} not built at n={n}: {str(exc).splitlines()[0]}")
        return
    t_build = time.perf_counter() - t0
    if print_source:
        print(f.get_source())
    if not on_gpu:
        print(f"{title:28s} built for sm_90a in {t_build:.2f} s")
        return
    a, b = arrays
    da = polytile.nd.array(a, device="cuda")
    dbt = polytile.nd.array(np.ascontiguousarray(b.T), device="cuda")   # Bt[N, K]
    dc = polytile.nd.array(np.full((n, n), np.nan, "float32"), device="cuda")
    f(da, dbt, dc)
    err = np.linalg.norm(dc.numpy().astype("float64") - ref) / np.linalg.norm(ref)
    if not err < 1e-4:
        raise SystemExit(f"{title}: wrong result (relative error {err:.2e})")
    t = f.time_evaluator(number=10, repeat=3)(da, dbt, dc).median
    tflops = 2.0 * n**3 / t / 1e12
    ratio = f"{tflops / cublas:6.3f} x cuBLAS fp16" if cublas else ""
    print(f"{title:28s} {tflops:7.1f} TFLOP/s  {ratio}  (lower+build {t_build:.2f} s)")


def _capability():
    try:
        import torch

        return torch.cuda.get_device_capability()
    except Exception:  # no torch or no device
        from polytile.targets.cuda.driver import check, context

        st = context()
        drv = st["driver"]
        attr = drv.CUdevice_attribute
        return tuple(int(check(drv.cuDeviceGetAttribute(getattr(
            attr, f"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{w}"), st["device"]), w))
            for w in ("MAJOR", "MINOR"))


def _have_gpu() -> bool:
    try:
        from polytile.targets.cuda.runtime import device_count

        return device_count() > 0
    except Exception:  # no cuda-python, no driver
        return False


def _cublas_half(a, b):
    """cuBLAS float16 through torch: (TFLOP/s or None, float64 reference)."""
    ref = a.astype("float64") @ b.astype("float64")
    try:
        import torch
    except ImportError:
        print("torch not installed: no cuBLAS anchor")
        return None, ref
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    for _ in range(3):
        ta @ tb
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        ta @ tb
    stop.record()
    torch.cuda.synchronize()
    n = a.shape[0]
    tflops = 2.0 * n**3 / (start.elapsed_time(stop) / 1e3 / reps) / 1e12
    print(f"{'cuBLAS fp16 (torch)':28s} {tflops:7.1f} TFLOP/s")
    return tflops, ref


if __name__ == "__main__":
    main()
