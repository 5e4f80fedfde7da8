"""Benchmark: GEMM on the GPU, polytile's hand schedules vs cuBLAS (and Triton).

``--dtype float32`` (default): the SGEMM schedules of ``tutorials/04_cuda_gemm.py`` vs
cuBLAS with tensor cores off and Triton's float32 GEMM (IEEE, no tf32); ``--variants`` adds
the tutorial's ``VARIANTS``. ``--dtype float16`` (or ``bfloat16``) with the default
``--isa best``: cuBLAS, Triton, polytile's fastest path of the device (on sm_90: the
generated wgmma + TMA warp-specialized kernel, :mod:`polytile.targets.cuda.wgmma`, best of
``benchmarks/wgmma_gemm.py`` ``BEST``), the wgmma schedules through ``tensorize``
(``TENSORIZE``: swizzled, overlapped; and the unswizzled synchronous one), then the
mma.sync and WMMA schedules below (``--isa tensorize``: all but those two).
``--isa wmma``: polytile's WMMA GEMM
(:func:`polytile.targets.cuda.tensor_core.wmma_gemm`, float32 accumulation, or
float16 with ``--acc float16``) vs cuBLAS half precision through torch and a plain Triton
GEMM (``benchmarks/triton_gemm.py``, best of a few tile shapes) when installed
(``--stages 1 2 3 4``: software-pipeline depths, cp.async copies, default 3).
``--isa mma``: the best ldmatrix + mma.sync.m16n8k16 + cp.async schedule
(``tensor_core.MMA_BEST``; ``--stages N``: another depth) timed interleaved with cuBLAS
and Triton (:func:`mma_best`); with ``--acc float16``, ``--sweep`` or ``--variants``
the other mma.sync schedules. At each ``--n`` (default 4096 and 8192), all measured
in this run: one line per figure with TFLOP/s and the ratio to cuBLAS.
Run on a machine with an NVIDIA GPU: ``python benchmarks/gpu_gemm.py --dtype float16``.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import time

import numpy as np


def _tutorial():
    path = pathlib.Path(__file__).resolve().parent.parent / "tutorials" / "04_cuda_gemm.py"
    spec = importlib.util.spec_from_file_location("cuda_gemm_tutorial", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _time_torch(fn, n: int, reps: int = 20) -> float:
    """TFLOP/s of ``fn``, an ``n``^3 GEMM, timed by CUDA events."""
    import wgmma_gemm

    return 2.0 * n**3 / wgmma_gemm._time_cuda(fn, reps) / 1e12


def triton_sgemm(n: int, cublas: float | None) -> None:
    """One line: Triton's float32 GEMM without tf32 (``tl.dot(..., input_precision="ieee")``,
    best of ``triton_gemm.FP32_CONFIGS``) at ``n``^3 beside the cuBLAS figure of this run."""
    try:
        import torch
        import triton_gemm
    except ImportError as exc:
        print(f"Triton float32: not measured ({exc})")
        return
    g = torch.Generator().manual_seed(0)
    ta = (torch.rand(n, n, generator=g) * 2 - 1).cuda()
    tb = (torch.rand(n, n, generator=g) * 2 - 1).cuda()
    try:
        tt, cfg = triton_gemm.best_tflops(ta, tb, lambda fn: _time_torch(fn, n))
    except Exception as exc:  # an older Triton without input_precision: say so
        print(f"Triton float32: not measured ({type(exc).__name__}: "
              f"{str(exc).splitlines()[0][:100]})")
        return
    ratio = f"{tt / cublas:6.3f} x cuBLAS" if cublas else ""
    print(f"{f'Triton fp32 (ieee, best of {len(triton_gemm.FP32_CONFIGS)})':34s} {tt:7.2f} "
          f"TFLOP/s  {ratio}  (tile {cfg[:3]})")


def half_gemm(n: int, acc: str, isa: str, dtype: str = "float16", tiles=((128, 128, 64), (64, 64)),
              anchors: bool = True, stages=(3,), cublas: float | None = None,
              frags: str = "step", group: int = 1, min_blocks: int = 0,
              swizzle: bool | str = False) -> float | None:
    """cuBLAS, Triton (with ``anchors``) and polytile's ``wmma_gemm`` with ``tiles = (block,
    warp)``, ``frags`` and ``group`` (built for ``cuda -min-blocks=<min_blocks>`` when given) at
    ``n``^3 in ``dtype`` (float16 or bfloat16; ``swizzle``: XOR-swizzled instead of padded
    shared tiles where their rows allow, ``isa="mma"``; one line
    each), once per pipeline depth of ``stages`` (1: no software pipeline). A ``cublas``
    figure (TFLOP/s) measured earlier in this run is used as the anchor instead of timing
    cuBLAS again. Returns the cuBLAS figure (None without torch)."""
    import polytile
    from polytile.targets.cuda import tensor_core as tc

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    if dtype == "bfloat16":
        import ml_dtypes

        a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    elif dtype != "tf32":
        a, b = a.astype("float16"), b.astype("float16")
    ref = None
    cublas = None
    try:
        import torch

        tdt = {"bfloat16": torch.bfloat16, "tf32": torch.float32}.get(dtype, torch.float16)
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"   # cuBLAS on tf32 tensor cores
        ta = torch.from_numpy(a.astype("float32")).cuda().to(tdt)
        tb = torch.from_numpy(b.astype("float32")).cuda().to(tdt)
        ref = (ta.double() @ tb.double()).cpu().numpy()
        if cublas is None:
            cublas = _time_torch(lambda: ta @ tb, n)
            print(f"n={n:5d} {f'cuBLAS {dtype} (torch)':36s} {cublas:7.1f} TFLOP/s")
        try:
            if not anchors:
                raise ImportError("not asked for")
            if dtype == "tf32":   # its tile configs are sized for 16-bit operands
                raise ImportError("not for tf32")
            import triton_gemm

            tt, cfg = triton_gemm.best_tflops(ta, tb, lambda fn: _time_torch(fn, n))
            print(f"n={n:5d} {f'Triton {dtype} (tl.dot, best of {len(triton_gemm.CONFIGS)})':36s} "
                  f"{tt:7.1f} TFLOP/s  {tt / cublas:6.3f} x cuBLAS  (tile {cfg[:3]})")
        except ImportError as exc:   # triton not installed
            print(f"n={n:5d} Triton: not measured ({exc})")
    except ImportError:
        print("torch not installed: no cuBLAS anchor")
        ref = a.astype("float64") @ b.astype("float64")
    if dtype in ("bfloat16", "tf32") and acc != "float32":
        raise SystemExit(f"{dtype}: float32 accumulation only")
    if dtype == "tf32" and isa != "wmma":
        raise SystemExit("tf32: WMMA only (--isa wmma)")
    da, db = polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda")
    for depth in stages:
        t0 = time.perf_counter()
        s, args = tc.wmma_gemm(n, n, n, acc=acc, isa=isa, block=tiles[0], warp=tiles[1],
                               dtype="float32" if dtype == "tf32" else dtype, stages=depth,
                               frags=frags, group=group, **({"swizzle": swizzle} if swizzle
                                                            else {}))
        f = polytile.build(s, args, target="cuda" + (f" -min-blocks={min_blocks}"
                                                     if min_blocks else ""))
        t_build = time.perf_counter() - t0
        dc = polytile.nd.array(np.full((n, n), np.nan, acc), device="cuda")
        f(da, db, dc)
        err = np.linalg.norm(dc.numpy().astype("float64") - ref) / np.linalg.norm(ref)
        if not err < (5e-3 if acc == "float16" or dtype == "tf32" else 1e-4):
            raise SystemExit(f"polytile {isa} stages={depth}: wrong result (relative error "
                             f"{err:.2e})")
        t = f.time_evaluator(number=10, repeat=3)(da, db, dc).median
        tflops = 2.0 * n**3 / t / 1e12
        ratio = f"{tflops / cublas:6.3f} x cuBLAS" if cublas else ""
        label = {"wmma": "WMMA", "mma": "mma.sync+ldmatrix"}[isa]
        label += f" {depth} stages" if depth > 1 else ""
        extra = {"tile": ", fragments per k tile", "prefetch": ", fragments prefetched "
                 "across the barrier"}.get(frags, "") + (
            f", blocks grouped by {group} rows" if group > 1 else "") + (
            f", {min_blocks} blocks per SM" if min_blocks else "") + (
            (", swizzled tiles" if swizzle is True else f", {swizzle} swizzled" if swizzle
             else ""))
        print(f"n={n:5d} {f'polytile {label} {dtype}->{acc}':44s} {tflops:7.1f} TFLOP/s  "
              f"{ratio}  (block {tiles[0]}, warp {tiles[1]}{extra}, lower+build "
              f"{t_build:.1f} s, rel. error {err:.1e}, {_sass(f.cubin, isa)})", flush=True)
    return cublas


def mma_best(n: int, dtype: str = "float16", rounds: int = 9, calls: int = 10,
             triton: bool = True, **over) -> dict:
    """The ``--isa mma`` line: polytile's best mma.sync + ldmatrix + cp.async schedule
    (``wmma_gemm(n, n, n, **tensor_core.MMA_BEST)``, keywords ``over`` replacing some, e.g.
    ``stages``; ``min_blocks``: the target's ``-min-blocks``) at ``n``^3 in ``dtype``
    (float32 accumulation), checked against torch in float32, then timed beside cuBLAS
    (torch) and Triton's GEMM (``triton_gemm.CONFIGS[0]``; not with ``triton=False``) the
    same ways, two lines per side: ``gemm_final.interleaved`` (a second of untimed turns,
    then ``rounds`` rounds of ``calls`` back-to-back calls per side in alternating order,
    the median: every side on the clocks the sides leave each other) and
    ``gemm_final.sustained`` (each side timed after 0.3 s of its own calls: on the clocks of
    a long run of that kernel alone). Why not ``time_evaluator`` after cuBLAS as
    :func:`half_gemm` does: 30 calls right after seconds of compiling run on the clocks of
    an idle GPU. H200, 2026-12-02 (one run, MMA_BEST fp16): time_evaluator 457.9 TFLOP/s
    = 0.619x cuBLAS 740.2; interleaved (mma_candidates) 402.4 = 0.548x cuBLAS 734.4; ncu
    of one launch: 1.69 GHz, tensor pipe 76% busy, L2 35%. Returns mode -> ratio to
    cuBLAS."""
    import gemm_final
    import torch

    import polytile
    from polytile.targets.cuda import tensor_core as tc

    cfg = dict(tc.MMA_BEST, dtype=dtype)
    cfg.update(over)
    blocks = cfg.pop("min_blocks", 0)
    t0 = time.perf_counter()
    s, args = tc.wmma_gemm(n, n, n, acc="float32", **cfg)
    f = polytile.build(s, args, target="cuda" + (f" -min-blocks={blocks}" if blocks else ""))
    t_build = time.perf_counter() - t0
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    g = torch.Generator().manual_seed(0)
    ta = (torch.rand(n, n, generator=g) * 2 - 1).to(tdt).cuda()
    tb = (torch.rand(n, n, generator=g) * 2 - 1).to(tdt).cuda()
    ref = ta.float() @ tb.float()
    tc_out = torch.full((n, n), float("nan"), device="cuda", dtype=torch.float32)
    f(ta, tb, tc_out)
    err = ((tc_out - ref).norm() / ref.norm()).item()
    if not err < 1e-4:
        raise SystemExit(f"polytile mma.sync {cfg}: wrong result (relative error {err:.2e})")
    values, keep = f._convert((ta, tb, tc_out))
    prepared = f._prepare(values)
    sides = {"cuBLAS": lambda: torch.matmul(ta, tb),
             "polytile mma.sync": lambda: f._launch(prepared)}
    if triton:
        try:
            import triton_gemm

            tcfg = triton_gemm.CONFIGS[0]
            triton_gemm.matmul(ta, tb, tcfg)      # compiled before the timing
            sides["Triton"] = lambda: triton_gemm.matmul(ta, tb, tcfg)
        except ImportError as exc:
            print(f"n={n:5d} Triton: not measured ({exc})")
    how = (f"block {cfg['block']}, warp {cfg['warp']}, {cfg['stages']} stages, frags "
           f"{cfg['frags']}, group {cfg['group']}, swizzle {cfg.get('swizzle', False)}"
           + (f", {blocks} blocks per SM" if blocks else ""))
    print(f"n={n:5d} {dtype:8s} polytile mma.sync: {how}, lower+build {t_build:.1f} s, rel. "
          f"error {err:.1e}, {_sass(f.cubin, 'mma')}", flush=True)
    ratios = {}
    for mode in ("interleaved", "sustained"):
        if mode == "interleaved":
            times, clocks = gemm_final.interleaved(sides, rounds, calls), {}
            what = f"{rounds} interleaved rounds of {calls} back-to-back calls per side"
        else:
            both = gemm_final.sustained(sides, max(3, rounds // 3))
            times = {k: v[0] for k, v in both.items()}
            clocks = {k: [c for c in v[1] if c] for k, v in both.items()}
            what = (f"{max(3, rounds // 3)} rounds of 50 calls per side after 0.3 s of its "
                    "own calls")
        tf = {k: 2.0 * n**3 / sorted(v)[len(v) // 2] / 1e12 for k, v in times.items()}
        lo = {k: 2.0 * n**3 / max(v) / 1e12 for k, v in times.items()}
        hi = {k: 2.0 * n**3 / min(v) / 1e12 for k, v in times.items()}
        for k in sides:
            mhz = f"  SM clock {min(clocks[k])}-{max(clocks[k])} MHz" if clocks.get(k) else ""
            print(f"n={n:5d} {dtype:8s} [{mode:11s}] {k:20s} {tf[k]:7.1f} TFLOP/s "
                  f"({lo[k]:.1f}-{hi[k]:.1f})  {tf[k] / tf['cuBLAS']:6.3f} x cuBLAS{mhz}",
                  flush=True)
        print(f"n={n:5d} [{mode}] median and range of {what}")
        ratios[mode] = tf["polytile mma.sync"] / tf["cuBLAS"]
    del keep
    return ratios


def _sass(cubin: bytes, isa: str) -> str:
    """The SASS counts that show which path ran (``HMMA``, ``LDSM`` for ldmatrix,
    ``LDGSTS`` for cp.async, ``BAR`` barriers), or why they are missing."""
    import wgmma_gemm

    return wgmma_gemm.sass_counts(cubin, ("HMMA", "LDSM", "LDGSTS", "BAR") if isa == "mma"
                                  else ("HMMA", "LDGSTS", "BAR"))


#: (block (BM, BN, BK), warp (WM, WN)) tiles ``--sweep`` tries beside the default
SWEEP = (((128, 256, 32), (64, 64)), ((256, 128, 32), (64, 64)), ((128, 128, 32), (64, 64)),
         ((128, 128, 32), (32, 64)), ((64, 128, 32), (32, 64)), ((128, 256, 32), (64, 128)))


#: mma.sync variants ``--variants`` times in one run: (block, warp, stages, frags, group[,
#: blocks]); blocks: the target's ``-min-blocks`` (the last: [7] with three blocks of 4 warps
#: per SM instead of two: ptxas fits it in 168 registers, no spills).
#: The first is the old default (4 warps of 64x64, 212 registers on the H200 per Nsight, 2
#: blocks per SM); the others have 8 warps per block and 32-deep k tiles, the fragments of a
#: whole k tile loaded before its MMAs, and blocks grouped by 8 tile rows for L2 reuse.
#: ptxas -v (sm_90, nvcc 13; Nsight saw 212 for the first on the H200): 164, 126, 97, 212,
#: 166, 126, 166, 168, 102, 165, 166 registers, no spills (168: 3 blocks of 4 warps per SM).
#: H200, 4096^3 float16 at 781d745 (cuBLAS 740): [4] 270, [5] 226, [6] 264, [7] 310,
#: [8] 291 TFLOP/s. The frags="tile" variants then pipelined only A's copies (B's were
#: synchronous, with a cp.async.wait_group 0 per k tile); they pipeline both since 7e34a71.
MMA_VARIANTS = (((128, 128, 64), (64, 64), 3, "step", 1),
                ((128, 128, 32), (32, 64), 4, "tile", 8),
                ((128, 128, 32), (32, 64), 4, "step", 8),
                ((128, 256, 32), (64, 64), 4, "tile", 8),
                ((128, 256, 32), (64, 64), 3, "step", 8),
                ((128, 128, 32), (32, 64), 4, "tile", 1),
                ((256, 128, 32), (64, 64), 3, "step", 8),
                ((128, 128, 32), (64, 64), 4, "step", 8),
                ((128, 128, 64), (32, 64), 3, "step", 8),
                ((128, 128, 64), (64, 64), 3, "step", 8),
                ((128, 256, 32), (64, 64), 3, "tile", 8),
                ((128, 128, 32), (64, 64), 4, "step", 8, 3),
                # [12..17] frags="prefetch" (pipeline(..., fragment_prefetch=True)): the
                # first k step's fragments of tile k + 1 loaded into a second register set
                # after the barrier, under the last step's MMAs of tile k. ptxas -v (sm_90,
                # nvcc 13): 232, 238, 230, 226, 144, 238 registers, no spills
                ((128, 128, 32), (64, 64), 4, "prefetch", 8),
                ((128, 128, 64), (64, 64), 3, "prefetch", 8),
                ((128, 256, 32), (64, 64), 3, "prefetch", 8),
                ((256, 128, 32), (64, 64), 3, "prefetch", 8),
                ((128, 128, 32), (32, 64), 4, "prefetch", 8),
                ((128, 256, 64), (64, 64), 3, "prefetch", 8),
                # [18..24] around [14] (one block of 8 warps per SM: 230 registers x 256
                # threads; the barrier of each k tile stalls the whole SM, so deeper
                # pipelines and fewer barriers per k): 4 and 5 stages, 64-deep k tiles
                # in 4 stages (204 KiB of shared memory), fragments per step without
                # prefetch, and groups of 4 and 16 tile rows. ptxas -v (sm_90, nvcc 13):
                # 234, 232, 240, 166, 230, 234, 234 registers, no spills
                ((128, 256, 32), (64, 64), 4, "prefetch", 8),
                ((256, 128, 32), (64, 64), 4, "prefetch", 8),
                ((128, 256, 64), (64, 64), 4, "prefetch", 8),
                ((128, 256, 32), (64, 64), 4, "step", 8),
                ((128, 256, 32), (64, 64), 5, "prefetch", 8),
                ((128, 256, 32), (64, 64), 4, "prefetch", 16),
                ((128, 256, 32), (64, 64), 4, "prefetch", 4),
                # [25..32] more warps per SM (ncu of [14]: 2 warps per scheduler, 0.34
                # eligible per cycle, latency bound): 64x32 / 32x64 warp tiles (64
                # accumulator registers) within 128 registers, 16 warps per SM: 128x128
                # blocks of 8 warps at 2 blocks per SM (-min-blocks=2, 74 KiB of shared
                # memory each), 128x256 and 256x128 blocks of 16 warps (512 threads) at
                # one. ptxas -v (sm_90, nvcc 13): 121, 125, 98, 98, 98 registers, no
                # spills; with fragment prefetch [30..32] 128 registers and 8, 16, 8 bytes
                # of spill stores (the second fragment set does not fit)
                ((128, 128, 32), (64, 32), 4, "step", 8, 2),
                ((128, 128, 32), (32, 64), 4, "step", 8, 2),
                ((128, 256, 32), (64, 32), 3, "step", 8),
                ((128, 256, 32), (32, 64), 4, "step", 8),
                ((256, 128, 32), (64, 32), 3, "step", 8),
                ((128, 128, 32), (64, 32), 4, "prefetch", 8, 2),
                ((128, 256, 32), (64, 32), 3, "prefetch", 8),
                ((256, 128, 32), (64, 32), 3, "prefetch", 8),
                # [33] 32 warps per SM: 128x128 blocks of 16 warps of 32x32, two per SM
                # (-min-blocks=2: 64 registers, no spills; 4 ldmatrix.x4 per 8 mma)
                ((128, 128, 32), (32, 32), 4, "step", 8, 2),
                # [34..37] swizzled shared tiles (wmma_gemm swizzle=True): A's rows of 64
                # (BK 32) or 128 bytes (BK 64) XOR-swizzled instead of padded to 80 / 144
                # bytes, B's of 512 or 256 bytes in the 128B pattern over the row
                # ("128B/512") instead of padded to 528 / 272: ncu of [18] on the H200
                # counted every excess shared wavefront in LDGSTS (14.6 per instruction
                # for A's 80-byte rows, 11.2 for B's 528-byte ones, 4 ideal; LDSM ideal).
                # [18], [14], [20], [19] so
                ((128, 256, 32), (64, 64), 4, "prefetch", 8, {"swizzle": True}),
                ((128, 256, 32), (64, 64), 3, "prefetch", 8, {"swizzle": True}),
                ((128, 256, 64), (64, 64), 4, "prefetch", 8, {"swizzle": True}),
                ((256, 128, 32), (64, 64), 4, "prefetch", 8, {"swizzle": True}),
                # [38..39] around [34]: 5 stages, groups of 16 tile rows
                ((128, 256, 32), (64, 64), 5, "prefetch", 8, {"swizzle": True}),
                ((128, 256, 32), (64, 64), 4, "prefetch", 16, {"swizzle": True}),
                # [40], [41]: [34] and [37] with A's tile swizzled only, B padded: [34..39]
                # measured so (H200, one run of 2026-12-02 08:40, cuBLAS 755-765: [18] 404.0,
                # [34] 413.8, [35] 405.5, [36] 405.8, [37] 420.7 TFLOP/s) before B's tiles
                # of 256 and 512-byte rows were swizzled too ("128B/R")
                ((128, 256, 32), (64, 64), 4, "prefetch", 8, {"swizzle": "A"}),
                ((256, 128, 32), (64, 64), 4, "prefetch", 8, {"swizzle": "A"}))

#: the mma.sync variant of ``--isa best``: the fastest measured, [18] (before: [14] (H200, 4096^3 float16 at
#: 0cf242f, one run: [7] 313, [12] 318, [13] 325, [14] 371, [15] 356, [16] 285, [17] 335
#: TFLOP/s; [14] 0.483x cuBLAS): 128x256x32 blocks of 8 warps of 64x64, 3 stages,
#: fragment prefetch, grouped by 8). With the fragment loads issued before the copies
#: (e3d3e3e, 04187d6; one run at 2026-12-02 05:05, cuBLAS 754-770 TFLOP/s between the
#: lines): [14] 368.7 -> 385.2 (0.484 -> 0.501x), [21] 276.4 -> 290.5, [18] 399.7
#: (0.521x), [20] 368.3 TFLOP/s. ncu of [14] (clocks locked at 1.33 GHz by ncu): tensor
#: pipe 65% busy, 2 warps per scheduler, 6.7 cycles between issues of a warp, a third of
#: them fixed-latency dependencies (integer slot/address chains before the ldmatrix),
#: L2 59%, DRAM 11%. Since then [18] (4 stages): checkpoint run of 2026-12-02 05:37 (cuBLAS
#: 753-756): [14] 388.7 (0.515x), [18] 403.5 TFLOP/s (0.535x); with
#: software_pipeline.UNROLL_SLOTS (constant slots) 366.4 and 365.4, slower, so it is off
#: Since 2026-12-02 09:25: [36] (BK 64, both tiles swizzled), one run of --variants --pick
#: 18 40 34 41 37 36 (cuBLAS 744-752): [18] 402.5 (0.535x), [40] 409.4, [34] 402.5, [41]
#: 418.6 (0.557x), [37] 401.1, [36] 419.3 TFLOP/s (0.561x); ncu of [34]: 4 shared
#: wavefronts per LDGSTS of B (was 11.2), 8 of A (64-byte rows: half lines), L2 throughput
#: 24% (was 52%), yet no faster: 10% more integer instructions (the per-chunk lane
#: displacements of B's ldmatrix). An earlier run (08:40, cuBLAS 755-765, B padded then):
#: [18] 404.0, [34]=[40] 413.8, [35] 405.5, [36] 405.8, [37]=[41] 420.7
MMA_DEFAULT = MMA_VARIANTS[36]


def _check_mma_default() -> None:
    # the schedule the tutorial and the cuda matmul template default to
    from polytile.targets.cuda.tensor_core import MMA_BEST

    best = (MMA_BEST["block"], MMA_BEST["warp"], MMA_BEST["stages"], MMA_BEST["frags"],
            MMA_BEST["group"], {k: MMA_BEST[k] for k in ("swizzle",) if k in MMA_BEST})
    block, warp, stages, frags, group, *more = MMA_DEFAULT
    if (block, warp, stages, frags, group, _options(more)) != best:
        raise SystemExit(f"MMA_DEFAULT {MMA_DEFAULT} differs from tensor_core.MMA_BEST {best}")


def _options(more: list) -> dict:
    """The keywords of :func:`half_gemm` of an ``MMA_VARIANTS`` entry's optional last
    field: an int (the target's ``-min-blocks``) or a dict (``min_blocks``, ``swizzle``)."""
    if not more:
        return {}
    return dict(more[0]) if isinstance(more[0], dict) else {"min_blocks": more[0]}


def mma_variants(n: int, acc: str, dtype: str, variants=MMA_VARIANTS,
                 cublas: float | None = None, triton: bool = True) -> float | None:
    """One line per mma.sync variant (``(block, warp, stages, frags, group)``) at ``n``^3,
    beside cuBLAS and Triton (timed first unless ``cublas`` is given; Triton only with
    ``triton``); a variant that fails to build or run is reported and skipped. Returns the
    cuBLAS figure."""
    for i, (block, warp, depth, frags, group, *more) in enumerate(variants):
        opts = _options(more)
        try:
            cublas = half_gemm(n, acc, "mma", dtype, (block, warp), anchors=triton and
                               cublas is None and i == 0, stages=(depth,), cublas=cublas,
                               frags=frags, group=group, **opts) or cublas
        except (Exception, SystemExit) as exc:  # past a device limit or wrong: say so, go on
            print(f"n={n:5d} mma block {block}, warp {warp}, {depth} stages, frags {frags}, "
                  f"group {group}: FAILED {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0][:100]}", flush=True)
    return cublas


def wgmma_mainloops() -> tuple:
    """The main-loop variants of the wgmma GEMM (benchmarks/wgmma_gemm.py MAINLOOPS)."""
    import wgmma_gemm

    return tuple(wgmma_gemm.MAINLOOPS)


#: (block, stages, swizzle, b_major[, options]) of the tensorize lines: the swizzled,
#: overlapped schedule (``mma_wait`` 1) at two block shapes, then the unswizzled synchronous
#: one it replaced (``TENSORIZE[0]`` is ``tensor_core.WGMMA_TENSORIZE_BEST`` on ``C = A @
#: Bt^T``: groups of 8 tile rows, 16-byte epilogue, TMA copies), then ``C = A @ B`` with ``B[K, N]``
#: read MN-major (``b_major="mn"``: what the sm_90a ``cuda`` ``matmul`` template builds,
#: no transpose), with the options of ``WGMMA_TENSORIZE_BEST`` and without
TENSORIZE = (((128, 256, 64), 4, "auto", "k", {"group": 8, "epilogue": "16B", "tma": True}),
             ((128, 128, 64), 4, "auto", "k"),
             ((128, 256, 64), 3, "none", "k"),
             ((128, 256, 64), 4, "auto", "mn", {"group": 8, "epilogue": "16B", "tma": True}),
             ((128, 256, 64), 4, "auto", "mn"))


#: the ``--tsweep`` lines (``(block, stages, swizzle, b_major, options)``, ``options`` the
#: keywords ``mma_wait``, ``group``, ``epilogue`` of ``tc.wgmma_gemm_schedule``): block
#: order (groups of tile rows), copies after the MMA wait (one tile further ahead), MMA
#: groups in flight against tiles loaded ahead, the 16-byte epilogue, 128x128 blocks two
#: per SM (114 registers, 97 KiB of shared memory in 3 stages), 256x128 blocks of four
#: warpgroups, 32-deep k tiles (64B swizzle) in deeper pipelines
TENSORIZE_SWEEP = (
    # H200, 4096^3 float16, one run (cuBLAS 766.4, Triton 689.4, wgmma+TMA 726.1 TFLOP/s):
    # 583.0, 603.1, 571.4, 617.8, 560.6, 581.3, 569.2, 639.1 (the best), 527.1, 522.3,
    # 508.3, 525.3, 462.5, 422.0, 422.5, 620.7 TFLOP/s in this order
    ((128, 256, 64), 4, "auto", "mn", {}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 8}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 8, "copy_after_wait": True}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 8, "copy_after_wait": True,
                                       "epilogue": "16B"}),
    ((128, 256, 64), 3, "auto", "mn", {"group": 8, "copy_after_wait": True}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 8, "copy_after_wait": True, "mma_wait": 2}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 16, "copy_after_wait": True}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 8, "epilogue": "16B"}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 8, "mma_wait": 0}),
    ((128, 128, 64), 3, "auto", "mn", {"group": 8, "copy_after_wait": True}),
    ((128, 128, 64), 3, "auto", "mn", {"group": 8}),
    ((128, 128, 64), 3, "auto", "mn", {"group": 8, "mma_wait": 0}),
    ((256, 128, 64), 4, "auto", "mn", {"group": 8, "copy_after_wait": True}),
    ((128, 256, 32), 7, "auto", "mn", {"group": 8, "copy_after_wait": True}),
    ((128, 256, 32), 7, "auto", "mn", {"group": 8, "copy_after_wait": True, "mma_wait": 2}),
    ((128, 256, 64), 4, "auto", "k", {"group": 8, "copy_after_wait": True,
                                      "epilogue": "16B"}),
    # a second run (cuBLAS 733.7, with [7] at 626.8): streaming stores 621.9, 16B stores on
    # 128x128 blocks (two per SM) 525.2, groups of 4 and 16 with 16B stores 626.4, 627.8
    ((128, 256, 64), 4, "auto", "mn", {"group": 8, "epilogue": "16B_stream"}),
    ((128, 128, 64), 3, "auto", "mn", {"group": 8, "epilogue": "16B"}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 4, "epilogue": "16B"}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 16, "epilogue": "16B"}),
)


#: the ``--tma`` lines: the sm_90a default (``WGMMA_TENSORIZE_BEST`` on ``C = A @ B``, B
#: MN-major) with its copies by cp.async and by TMA (``pipeline(..., tma=True)``), then TMA
#: with copies after the MMA wait, on ``C = A @ Bt^T``, with 2 MMA groups in flight, and on
#: 128x128 blocks. H200, 4096^3 float16, one run (2026-12-02; cuBLAS 761.9, Triton 685.0,
#: the generated wgmma+TMA kernel 715.8): 635.4, 698.3, 700.2, 700.6, 535.4, 611.9 TFLOP/s
TENSORIZE_TMA = (
    ((128, 256, 64), 4, "auto", "mn", {"group": 8, "epilogue": "16B"}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 8, "epilogue": "16B", "tma": True}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 8, "epilogue": "16B", "tma": True,
                                       "copy_after_wait": True}),
    ((128, 256, 64), 4, "auto", "k", {"group": 8, "epilogue": "16B", "tma": True}),
    ((128, 256, 64), 4, "auto", "mn", {"group": 8, "epilogue": "16B", "tma": True,
                                       "mma_wait": 2}),
    ((128, 128, 64), 5, "auto", "mn", {"group": 8, "epilogue": "16B", "tma": True}),
)


def wgmma_schedule_gemm(n: int, dtype: str, cublas: float, configs=TENSORIZE) -> None:
    """One line per ``(block, stages, swizzle, b_major[, options])`` of ``configs``
    (``options``: more keywords of ``wgmma_gemm_schedule``, e.g. ``group``): the warpgroup MMA
    through ``tensorize`` (:func:`polytile.targets.cuda.tensor_core.wgmma_gemm_schedule`,
    ``C = A @ Bt^T``, or ``C = A @ B`` with ``b_major="mn"``; ``swizzle="auto"``: 128B-swizzled ``cache_read`` tiles and MMA groups left in
    flight by ``s[CF].pipeline(ko, stages, mma_wait=1)``; ``"none"``: core-matrix tiles,
    each MMA waited for), checked against torch in float32, then timed, with the SASS
    counts that show the path."""
    import torch
    import wgmma_gemm

    import polytile
    from polytile.targets.cuda import tensor_core as tc

    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    g = torch.Generator().manual_seed(1)
    ta = (torch.rand(n, n, generator=g) * 2 - 1).to(tdt)
    tb = (torch.rand(n, n, generator=g) * 2 - 1).to(tdt)
    refs = {"k": (ta.float().cuda() @ tb.float().cuda().T).cpu().numpy(),
            "mn": (ta.float().cuda() @ tb.float().cuda()).cpu().numpy()}
    da = polytile.nd.array(ta.float().numpy().astype(_np_dtype(dtype)), device="cuda")
    db = polytile.nd.array(tb.float().numpy().astype(_np_dtype(dtype)), device="cuda")
    for block, stages, swizzle, b_major, *more in configs:
        opts = more[0] if more else {}
        how = "swizzled, overlapped" if swizzle != "none" else "unswizzled, synchronous"
        how += ", A@B, B MN-major" if b_major == "mn" else ""
        how += "".join(f", {k} {v}" for k, v in opts.items())
        ref = refs[b_major]
        title = f"polytile wgmma via tensorize ({how})"
        try:
            t0 = time.perf_counter()
            s, args = tc.wgmma_gemm_schedule(n, n, n, block=block, stages=stages, dtype=dtype,
                                             swizzle=swizzle, b_major=b_major, **opts)
            f = polytile.build(s, args, target="cuda -arch=sm_90a", compiler="nvcc")
            t_build = time.perf_counter() - t0
        except Exception as exc:  # report and go on with the other lines
            print(f"n={n:5d} {title}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            continue
        dc = polytile.nd.array(np.full((n, n), np.nan, "float32"), device="cuda")
        f(da, db, dc)
        err = np.linalg.norm(dc.numpy() - ref) / np.linalg.norm(ref)
        if not err < 1e-4:
            print(f"n={n:5d} {title}: WRONG result (relative error {err:.2e})")
            continue
        t = f.time_evaluator(number=10, repeat=3)(da, db, dc).median
        tflops = 2.0 * n**3 / t / 1e12
        print(f"n={n:5d} {title:80s} {tflops:7.1f} TFLOP/s  {tflops / cublas:6.3f} x cuBLAS  "
              f"(block {block}, {stages} stages, lower+build {t_build:.1f} s, rel. error "
              f"{err:.1e}, {wgmma_gemm.sass_counts(f.cubin)})", flush=True)


def _np_dtype(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def best_gemm(n: int, acc: str, dtype: str, stages=(3,), tensorize_only: bool = False,
              tensorize=TENSORIZE) -> None:
    """The default float16/bfloat16 report at ``n``^3: cuBLAS and Triton, polytile's best
    path of this device (the wgmma + TMA kernel on sm_90, float32 accumulation), the
    wgmma schedules through ``tensorize`` (:data:`TENSORIZE`), then the mma.sync+ldmatrix
    and WMMA schedules (not with ``tensorize_only``), all against the cuBLAS figure of
    this run."""
    import torch

    if dtype == "tf32":
        half_gemm(n, acc, "wmma", dtype, stages=stages)
        return
    cublas = None
    if torch.cuda.get_device_capability() == (9, 0) and acc == "float32":
        import wgmma_gemm

        cublas = wgmma_gemm.best(n, dtype)     # prints cuBLAS, Triton, then the best wgmma
        wgmma_schedule_gemm(n, dtype, cublas, tensorize)
        if tensorize_only:
            return
    else:
        print(f"n={n:5d} wgmma: not measured (needs an sm_90 device and float32 "
              f"accumulation; device sm_{''.join(map(str, torch.cuda.get_device_capability()))}"
              f", acc {acc})")
    _check_mma_default()
    cublas = mma_variants(n, acc, dtype, (MMA_DEFAULT,), cublas=cublas)
    half_gemm(n, acc, "wmma", dtype, stages=stages, anchors=False, cublas=cublas)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=None,
                    help="M = N = K (default: 4096 for float32, 4096 8192 for float16)")
    ap.add_argument("--dtype", choices=("float32", "float16", "bfloat16", "tf32"),
                    default="float32", help="float32: CUDA cores (tutorial 04); tf32: float32 "
                    "operands on tensor cores (WMMA m16n16k8), cuBLAS with allow_tf32")
    ap.add_argument("--acc", choices=("float32", "float16"), default="float32",
                    help="accumulation dtype of the float16 GEMM")
    ap.add_argument("--isa", choices=("best", "wmma", "mma", "wgmma", "tensorize"),
                    default="best",
                    help="tensor-core path of the float16 GEMM; 'best' (default): the "
                    "fastest path of the device (wgmma + TMA on sm_90, best of "
                    "benchmarks/wgmma_gemm.py BEST) beside cuBLAS and Triton, the wgmma "
                    "schedules through tensorize, then the mma.sync+ldmatrix and WMMA "
                    "lines; 'tensorize': 'best' without the mma.sync and WMMA lines; "
                    "'wgmma': every wgmma variant")
    ap.add_argument("--stages", type=int, nargs="+", default=None,
                    help="software-pipeline depths of the tensor-core GEMM (cp.async into "
                    "stages x the shared tiles; 1: no pipeline), one line each (default 3; "
                    "--isa mma: tensor_core.MMA_BEST's, one depth only)")
    ap.add_argument("--swizzle", nargs="+", choices=("none", "128B"), default=["none", "128B"],
                    help="shared layouts of the wgmma GEMM (--isa wgmma), one line each")
    ap.add_argument("--grid", nargs="+", choices=("tiles", "persistent"),
                    default=["tiles", "persistent"],
                    help="wgmma GEMM grid: one block per tile (row-major order), or one per "
                    "SM over tiles grouped by 8 tile rows; one line each")
    ap.add_argument("--mainloop", nargs="+", choices=wgmma_mainloops(),
                    default=list(wgmma_mainloops()),
                    help="wgmma GEMM main loop: 'sync' (every warp copies, then MMAs, "
                    "__syncthreads), 'ws' (a producer warpgroup of cp.async, consumer "
                    "warpgroups of wgmma, mbarriers, setmaxnreg), 'tma' (ws with one "
                    "producer thread issuing TMA boxes; 128B swizzle only); one line each")
    ap.add_argument("--epilogue", nargs="+", choices=("8B", "16B"), default=["8B", "16B"],
                    help="wgmma GEMM D stores: float2 (8B) or float4 after a lane-pair "
                    "shuffle (16B); one line each")
    ap.add_argument("--blocks", nargs="+", default=None, metavar="BMxBNxBK",
                    help="wgmma GEMM block tiles (default: those of benchmarks/wgmma_gemm.py)")
    ap.add_argument("--sweep", action="store_true",
                    help="time wmma_gemm over the block/warp tiles of SWEEP too")
    ap.add_argument("--variants", action="store_true",
                    help="--isa mma: time every mma.sync variant of MMA_VARIANTS (tiles, "
                    "stages, fragments per k step or per k tile, grouped block order) "
                    "beside cuBLAS and Triton in one run; --dtype float32: the k-tile and "
                    "pipeline depths of tutorial 04's VARIANTS too")
    ap.add_argument("--pick", type=int, nargs="+", default=None, metavar="I",
                    help="with --isa mma --variants: only MMA_VARIANTS[I] (e.g. under ncu)")
    ap.add_argument("--tsweep", action="store_true",
                    help="--isa tensorize: the lines of TENSORIZE_SWEEP (block order, MMA "
                    "groups in flight, epilogue, block shapes) instead of TENSORIZE")
    ap.add_argument("--tma", action="store_true",
                    help="--isa tensorize: the lines of TENSORIZE_TMA (cp.async against TMA "
                    "copies of the shared tiles)")
    ap.add_argument("--no-triton", action="store_true",
                    help="with --isa mma: cuBLAS only as the anchor (Triton's "
                    "tile search takes a while)")
    args = ap.parse_args()
    if args.dtype == "float32":
        for n in args.n or [4096]:
            cublas = _tutorial().main(["--n", str(n)] + ["--variants"] * args.variants)
            triton_sgemm(n, cublas)
        return
    if args.isa == "wgmma":   # sm_90a warpgroup MMA (benchmarks/wgmma_gemm.py)
        import wgmma_gemm

        for n in args.n or [4096, 8192]:
            wgmma_gemm.run(n, args.dtype, stages=args.stages or (3, 4),
                           swizzles=args.swizzle, mainloops=args.mainloop,
                           epilogues=args.epilogue,
                           grids=[(g == "persistent", 8 if g == "persistent" else 1)
                                  for g in args.grid],
                           blocks=[tuple(int(x) for x in b.split("x")) for b in args.blocks]
                           if args.blocks else wgmma_gemm.BLOCKS)
        return
    if args.isa in ("best", "tensorize"):
        for n in args.n or [4096, 8192]:
            best_gemm(n, args.acc, args.dtype, args.stages or [3], args.isa == "tensorize",
                      TENSORIZE_TMA if args.tma else
                      TENSORIZE_SWEEP if args.tsweep else TENSORIZE)
        return
    for n in args.n or [4096, 8192]:
        if args.isa == "mma" and args.variants:
            mma_variants(n, args.acc, args.dtype, [MMA_VARIANTS[i] for i in args.pick]
                         if args.pick else MMA_VARIANTS, triton=not args.no_triton)
            continue
        if args.isa == "mma" and not args.sweep and args.acc == "float32":
            # the best mma.sync schedule (tensor_core.MMA_BEST), timed as cuBLAS is
            mma_best(n, args.dtype, triton=not args.no_triton,
                     **({"stages": args.stages[0]} if args.stages else {}))
            continue
        half_gemm(n, args.acc, args.isa, args.dtype, stages=args.stages or [3])
        for tiles in SWEEP if args.sweep else ():
            try:
                half_gemm(n, args.acc, args.isa, args.dtype, tiles, anchors=False,
                          stages=args.stages or [3])
            except Exception as exc:  # a tile shape past a device limit: say so, go on
                print(f"n={n:5d} block {tiles[0]}, warp {tiles[1]}: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:100]}")


if __name__ == "__main__":
    main()
