"""Benchmark: mma.sync GEMM candidates beside cuBLAS and Triton, built in parallel.

Why: one device run has a budget of a couple of minutes, and lowering one 4096^3
mma.sync GEMM takes seconds of Python; building the candidates one after another (as
``gpu_gemm.py --variants`` does) leaves little time to time them. Here every candidate
of :data:`CANDIDATES` is lowered and compiled for ``sm_90`` in its own process (spawned
before this process touches CUDA), then each cubin is loaded
(:class:`polytile.targets.cuda.library.CubinModule`), checked against cuBLAS in float32
and timed with CUDA events (warm-up, median of ``--reps``), beside cuBLAS (torch) and
Triton's GEMM (``triton_gemm.CONFIGS[0]``, 128x256x64 tiles) timed in the same process.

Run on an sm_90 machine: ``python3 benchmarks/mma_candidates.py --dtype float16 bfloat16``
(``--pick NAME ...``: some candidates only). One line per figure: TFLOP/s, the ratio to
cuBLAS and to Triton, the SASS counts that show the path.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import multiprocessing
import sys
import time

#: name -> (wmma_gemm keywords over tensor_core.MMA_BEST, switches of
#: polytile.schedule.passes.fragment_prefetch)
CANDIDATES = {
    "best-noalt": ({}, {"ALTERNATE_SETS": False}),
    "best": ({}, {}),
    "best-steps": ({}, {"COPIES_IN_STEPS": True}),
    "256x128x64": ({"block": (256, 128, 64)}, {}),
    "128x256x32s5": ({"block": (128, 256, 32), "stages": 5}, {}),
    "128x128x64s3": ({"block": (128, 128, 64), "stages": 3}, {}),
    "128x128x32s4": ({"block": (128, 128, 32)}, {}),
    "best-g16": ({"group": 16}, {}),
    "128x256x128s2": ({"block": (128, 256, 128), "stages": 2}, {}),
    "128x256x128s2-steps": ({"block": (128, 256, 128), "stages": 2}, {"COPIES_IN_STEPS": True}),
}

_DEFAULTS: dict = {}


def _build(job: tuple) -> tuple:
    """Lower and compile one candidate (in a worker process): ``(name, dtype, image, meta,
    seconds)``, or ``(name, dtype, None, error, seconds)``."""
    name, dtype, n = job
    t0 = time.perf_counter()
    try:
        import polytile
        from polytile.schedule.passes import fragment_prefetch
        from polytile.targets.cuda import tensor_core as tc
        from polytile.targets.cuda.library import metadata

        over, switches = CANDIDATES[name]
        # a worker builds several candidates: each starts from the switches' defaults
        keys = {k for _, sw in CANDIDATES.values() for k in sw}
        _DEFAULTS.update({k: getattr(fragment_prefetch, k) for k in keys - set(_DEFAULTS)})
        for key in keys:
            setattr(fragment_prefetch, key, switches.get(key, _DEFAULTS[key]))
        cfg = dict(tc.MMA_BEST)
        cfg.update(dtype=dtype, **over)
        s, args = tc.wmma_gemm(n, n, n, **cfg)
        f = polytile.build(s, args, target="cuda -arch=sm_90")
        return name, dtype, bytes(f.image), metadata(f), time.perf_counter() - t0
    except Exception as exc:   # report it in the table, go on with the others
        return name, dtype, None, f"{type(exc).__name__}: {str(exc)[:200]}", \
            time.perf_counter() - t0


def _time(fn, reps: int) -> float:
    """Median seconds per call of ``fn`` (CUDA events, 3 warm-up calls)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return sorted(times)[len(times) // 2]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"],
                    choices=("float16", "bfloat16"))
    ap.add_argument("--pick", nargs="+", default=None, choices=tuple(CANDIDATES),
                    help="candidates to build (default: all), per dtype")
    ap.add_argument("--bf16-pick", nargs="+", default=None, choices=tuple(CANDIDATES),
                    help="bfloat16 candidates (default: those of --pick)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args(argv)
    n = args.n
    jobs = []
    for dtype in args.dtype:
        pick = args.bf16_pick if dtype == "bfloat16" and args.bf16_pick else args.pick
        jobs += [(name, dtype, n) for name in (pick or CANDIDATES)]
    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")   # before this process initialises CUDA
    pool = cf.ProcessPoolExecutor(max_workers=min(args.workers, len(jobs)), mp_context=ctx)
    futures = [pool.submit(_build, j) for j in jobs]

    import numpy as np
    import torch
    import triton_gemm
    import wgmma_gemm

    import polytile
    from polytile.targets.cuda.library import CubinModule

    flops = 2.0 * n ** 3
    for dtype in args.dtype:
        tdt = getattr(torch, dtype)
        g = torch.Generator().manual_seed(0)
        ta = (torch.rand(n, n, generator=g) * 2 - 1).to(tdt).cuda()
        tb = (torch.rand(n, n, generator=g) * 2 - 1).to(tdt).cuda()
        ref = (ta.float() @ tb.float()).cpu().numpy()
        cublas = flops / _time(lambda: ta @ tb, args.reps) / 1e12
        cfg = triton_gemm.CONFIGS[0]
        triton = flops / _time(lambda: triton_gemm.matmul(ta, tb, cfg), args.reps) / 1e12
        print(f"n={n} {dtype:8s} cuBLAS (torch) {cublas:7.1f} TFLOP/s; Triton {cfg[:3]} "
              f"{triton:7.1f} TFLOP/s = {triton / cublas:.3f}x cuBLAS", flush=True)
        np_dt = {"float16": np.float16}.get(dtype)
        if np_dt is None:
            import ml_dtypes

            np_dt = ml_dtypes.bfloat16
        da = polytile.nd.array(ta.float().cpu().numpy().astype(np_dt), device="cuda")
        db = polytile.nd.array(tb.float().cpu().numpy().astype(np_dt), device="cuda")
        dc = polytile.nd.array(np.full((n, n), np.nan, "float32"), device="cuda")
        for fut, (name, jdt, _) in zip(futures, jobs):
            if jdt != dtype:
                continue
            name, _, image, meta, secs = fut.result()
            if image is None:
                print(f"n={n} {dtype:8s} {name:19s} FAILED to build ({secs:.0f} s): {meta}",
                      flush=True)
                continue
            mod = CubinModule.from_data(image, meta)
            mod(da, db, dc)
            err = np.linalg.norm(dc.numpy() - ref) / np.linalg.norm(ref)
            if not err < 1e-4:
                print(f"n={n} {dtype:8s} {name:19s} WRONG (relative error {err:.1e})")
                continue
            mod.synchronize = False    # (a wait per call would sit between the events)
            tf = flops / _time(lambda: mod(da, db, dc), args.reps) / 1e12
            print(f"n={n} {dtype:8s} {name:19s} {tf:7.1f} TFLOP/s  {tf / cublas:.3f}x cuBLAS  "
                  f"{tf / triton:.3f}x Triton  (build {secs:.0f} s, rel. error {err:.1e}, "
                  f"{wgmma_gemm.sass_counts(image, ('HMMA', 'LDSM', 'LDGSTS', 'BAR'))})",
                  flush=True)
        again = flops / _time(lambda: ta @ tb, args.reps) / 1e12
        print(f"n={n} {dtype:8s} cuBLAS (torch) again {again:7.1f} TFLOP/s", flush=True)
    pool.shutdown()
    print(f"total {time.perf_counter() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
