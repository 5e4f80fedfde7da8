"""The wgmma (sm_90a) GEMM of :mod:`polytile.targets.cuda.wgmma` beside cuBLAS (torch):
``python benchmarks/gpu_gemm.py --dtype float16 --isa wgmma --n 4096`` calls :func:`run`.
Each block shape and pipeline depth is checked against a float64 reference (or cuBLAS
in float32 at large sizes) before it is timed; one line per figure."""

from __future__ import annotations

import itertools
import time

#: (BM, BN, BK) tiles timed by default: 2 warpgroups of 64 x BN each
BLOCKS = ((128, 256, 64), (128, 128, 64), (256, 128, 64))
#: (persistent, group_m): one block per tile in row-major order, then one block per SM
#: over tiles grouped by 8 tile rows (L2 reuse)
GRIDS = ((False, 1), (True, 8))
#: main-loop variant -> WgmmaGemm keywords: every warp copies and multiplies between
#: __syncthreads ('sync'); a cp.async producer warpgroup and wgmma consumer warpgroups
#: on mbarriers ('ws'); the producer's copies by one thread's TMA boxes ('tma', 128B
#: swizzle only: with 'none' the line says it is refused)
MAINLOOPS = {"sync": {}, "ws": {"warp_specialized": True},
             "tma": {"warp_specialized": True, "tma": True}}

#: (block, stages, WgmmaGemm keywords) timed by :func:`best` (the default line of
#: ``benchmarks/gpu_gemm.py --dtype float16``): the TMA warp-specialized persistent kernel
BEST = tuple(((128, 256, 64), st, dict(swizzle="128B", group_m=8, persistent=True,
                                      warp_specialized=True, tma=True, epilogue=epi))
             for st in (4, 3) for epi in ("8B", "16B"))


def _time_cuda(fn, reps: int = 20) -> float:
    """Seconds per call of ``fn`` (CUDA events, after 3 warm-up calls)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 1e3 / reps


def _operands(n: int, dtype: str):
    """Random ``A, B : Tensor[n, n]`` in ``dtype`` (float16 or bfloat16) on the GPU, uniform
    in [-1, 1), and ``A @ B`` in float32 (from float64 up to n = 2048, from cuBLAS float32
    above)."""
    import torch

    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(n, n, generator=g) * 2 - 1).to(tdt).cuda()
    b = (torch.rand(n, n, generator=g) * 2 - 1).to(tdt).cuda()
    ref = a.float() @ b.float() if n > 2048 else (a.double() @ b.double()).float()
    return a, b, ref


def _check(f, a, b, ref):
    """Run the wgmma GEMM ``f`` once on ``a``, ``b`` into a NaN-poisoned float32 ``C``;
    returns ``C`` and its relative Frobenius error against ``ref``."""
    import torch

    n = a.shape[0]
    c = torch.full((n, n), float("nan"), dtype=torch.float32, device="cuda")
    f(a.data_ptr(), b.data_ptr(), c.data_ptr())
    f.synchronize()
    return c, (torch.linalg.norm(c - ref) / torch.linalg.norm(ref)).item()


def best(n: int, dtype: str = "float16", candidates=BEST) -> float:
    """cuBLAS (torch), Triton's GEMM (``triton_gemm``, when installed) and the fastest of
    ``candidates`` (the wgmma TMA kernel, each checked against a float32 reference first)
    at ``n``^3 in ``dtype``, one line each, all in this run. Returns cuBLAS TFLOP/s."""
    from polytile.targets.cuda import wgmma as wg

    a, b, ref = _operands(n, dtype)
    flop = 2.0 * n**3
    cublas = flop / _time_cuda(lambda: a @ b) / 1e12
    print(f"n={n:5d} {f'cuBLAS {dtype} (torch)':44s} {cublas:7.1f} TFLOP/s", flush=True)
    try:
        import triton_gemm

        tt, cfg = triton_gemm.best_tflops(a, b, lambda fn: flop / _time_cuda(fn) / 1e12)
        print(f"n={n:5d} {f'Triton {dtype} (tl.dot, best of {len(triton_gemm.CONFIGS)})':44s}"
              f" {tt:7.1f} TFLOP/s  {tt / cublas:6.3f} x cuBLAS  (tile {cfg[:3]})", flush=True)
    except ImportError as exc:
        print(f"n={n:5d} Triton: not measured ({exc})")
    top = None
    for block, depth, kw in candidates:
        try:
            f = wg.WgmmaGemm(n, n, n, block, depth, dtype, **kw)
        except Exception as exc:  # a shape the kernel refuses at this n: next one
            print(f"n={n:5d} wgmma block {block} stages {depth} {kw}: {exc}".splitlines()[0])
            continue
        c, err = _check(f, a, b, ref)
        if not err < 1e-4:
            print(f"n={n:5d} wgmma block {block} stages {depth} {kw}: WRONG result "
                  f"(relative error {err:.2e})", flush=True)
            continue
        t = flop / f.time(a.data_ptr(), b.data_ptr(), c.data_ptr()) / 1e12
        if top is None or t > top[0]:
            top = (t, block, depth, kw, err, f)
    if top is None:
        print(f"n={n:5d} wgmma: no candidate ran")
        return cublas
    t, block, depth, kw, err, f = top
    print(f"n={n:5d} {f'polytile wgmma+TMA {dtype}->float32 (best of {len(candidates)})':44s}"
          f" {t:7.1f} TFLOP/s  {t / cublas:6.3f} x cuBLAS  (block {block}, stages {depth}, "
          f"epilogue {kw['epilogue']}, rel. error {err:.1e}, {sass_counts(f.cubin)})",
          flush=True)
    return cublas


def sass_counts(cubin: bytes, ops=("HGMMA", "LDGSTS", "BAR", "WARPSYNC", "SYNCS",
                                    "USETMAXREG", "UTMALDG")) -> str:
    """``op count`` of each SASS op in ``cubin`` (``cuobjdump -sass``), or why not."""
    import os
    import shutil
    import subprocess
    import tempfile

    tool = shutil.which("cuobjdump")
    if tool is None:
        return "SASS: no cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True).stdout
    words = []
    for ln in sass.splitlines():   # "/*0100*/  @P0 HGMMA.64x128x16.F32 ... ; /* 0x... */"
        toks = ln.split("*/", 1)[1].split() if "*/" in ln else []
        toks = toks[1:] if toks and toks[0].startswith("@") else toks
        words.append(toks[0] if toks else "")
    return "SASS " + " ".join(f"{op} {sum(w.split('.')[0] == op for w in words)}" for op in ops)


def run(n: int, dtype: str = "float16", stages=(3, 4), blocks=BLOCKS,
        swizzles=("none", "128B"), grids=GRIDS, mainloops=tuple(MAINLOOPS),
        epilogues=("8B",)) -> None:
    """One line per (block, stages, swizzle, grid, main loop, epilogue) of the wgmma GEMM
    at ``n``^3, after cuBLAS; a grid is ``(persistent, group_m)``, a main loop a key of
    :data:`MAINLOOPS`, an epilogue ``"8B"`` (float2 stores) or ``"16B"`` (float4)."""
    from polytile.targets.cuda import wgmma as wg

    a, b, ref = _operands(n, dtype)

    def tflops(sec: float) -> float:
        return 2.0 * n**3 / sec / 1e12

    cublas = tflops(_time_cuda(lambda: a @ b))
    print(f"n={n:5d} {f'cuBLAS {dtype} (torch)':44s} {cublas:7.1f} TFLOP/s", flush=True)
    for block, swz, depth, (pers, gm), loop, epi in itertools.product(
            blocks, swizzles, stages, grids, mainloops, epilogues):
        grid = f"persistent g{gm}" if pers else f"tiles g{gm}"
        what = f"block {block} stages {depth} swizzle {swz} {grid} {loop} st{epi}"
        try:
            t0 = time.perf_counter()
            f = wg.WgmmaGemm(n, n, n, block, depth, dtype, swizzle=swz, group_m=gm,
                             persistent=pers, epilogue=epi, **MAINLOOPS[loop])
            t_build = time.perf_counter() - t0
        except Exception as exc:  # a shape past shared memory: say so, go on
            print(f"n={n:5d} wgmma {what}: {exc}".splitlines()[0])
            continue
        c, err = _check(f, a, b, ref)
        if not err < 1e-4:
            print(f"n={n:5d} wgmma {what}: WRONG result (relative "
                  f"error {err:.2e})", flush=True)
            continue
        t = tflops(f.time(a.data_ptr(), b.data_ptr(), c.data_ptr()))
        print(f"n={n:5d} {f'wgmma {dtype} {depth}st {swz} {grid} {loop} st{epi}':54s} "
              f"{t:7.1f} TFLOP/s  {t / cublas:6.3f} x cuBLAS  (block {block}, build "
              f"{t_build:.1f} s, rel. error {err:.1e}, {sass_counts(f.cubin)})",
              flush=True)
