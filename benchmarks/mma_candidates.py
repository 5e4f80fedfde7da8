"""Benchmark: mma.sync GEMM candidates beside cuBLAS and Triton, built in parallel.

Why: one device run has a budget of a couple of minutes, and lowering one 4096^3
mma.sync GEMM takes seconds of Python; building the candidates one after another (as
``gpu_gemm.py --variants`` does) leaves little time to time them. Here every candidate
of :data:`CANDIDATES` is lowered and compiled for ``sm_90`` in its own process (spawned
before this process touches CUDA), then each cubin is loaded
(:class:`polytile.targets.cuda.library.CubinModule`), checked against cuBLAS in float32
and timed beside cuBLAS (torch) and Triton's GEMM (``triton_gemm.CONFIGS[0]``, 128x256x64
tiles) in the same process by ``gemm_final.interleaved``: after a second of untimed
turns, CUDA events around ``--calls`` back-to-back calls, every line once per round,
``--rounds`` rounds in alternating order (clocks drift over a run), the median; each
candidate launched from launch records prepared once (``--full-call``: the first one
through its checking call too).

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

#: name -> (wmma_gemm keywords over tensor_core.MMA_BEST (``min_blocks``: the target's
#: ``-min-blocks``), switches of polytile.schedule.passes.fragment_prefetch and
#: software_pipeline (:data:`SWITCH_MODULES`))
CANDIDATES = {
    "best-noalt": ({}, {"ALTERNATE_SETS": False}),
    "best": ({}, {}),
    "best-g16": ({"group": 16}, {}),
    "best-g16-noalt": ({"group": 16}, {"ALTERNATE_SETS": False}),
    "best-g32": ({"group": 32}, {}),
    "best-g4": ({"group": 4}, {}),
    "best-g1": ({"group": 1}, {}),
    "best-swA": ({"swizzle": "A"}, {}),
    "best-unroll": ({}, {"UNROLL_SLOTS": True}),
    "256x128x64": ({"block": (256, 128, 64)}, {}),
    "256x128x64-swA": ({"block": (256, 128, 64), "swizzle": "A"}, {}),
    "128x256x32s5": ({"block": (128, 256, 32), "stages": 5}, {}),
    "128x128x64s3": ({"block": (128, 128, 64), "stages": 3}, {}),
    "128x128x64s3-step": ({"block": (128, 128, 64), "stages": 3, "frags": "step"}, {}),
    "128x128x64s3-g16": ({"block": (128, 128, 64), "stages": 3, "group": 16}, {}),
    "128x128x64s3-noalt": ({"block": (128, 128, 64), "stages": 3}, {"ALTERNATE_SETS": False}),
    "128x128x32s4": ({"block": (128, 128, 32)}, {}),
    "128x128x32-64x32": ({"block": (128, 128, 32), "warp": (64, 32), "frags": "step",
                          "min_blocks": 2}, {}),
    "128x256x128s2": ({"block": (128, 256, 128), "stages": 2}, {}),
    "best-s3": ({"stages": 3}, {}),
    "128x256x32s4": ({"block": (128, 256, 32)}, {}),
    "128x128x64s3-mb2": ({"block": (128, 128, 64), "stages": 3, "min_blocks": 2}, {}),
    "128x128x64s3-mb2-g16": ({"block": (128, 128, 64), "stages": 3, "min_blocks": 2,
                              "group": 16}, {}),
    "128x128x32s4-mb2": ({"block": (128, 128, 32), "min_blocks": 2}, {}),
    "128x128x32s6-mb2": ({"block": (128, 128, 32), "stages": 6, "min_blocks": 2}, {}),
}

# H200, 2026-12-02 20:42, one run (7 rounds; cuBLAS 734.4 fp16 / 754.1 bf16), x cuBLAS fp16 /
# bf16: best 0.548 / 0.547 (through its checking call 0.543 / 0.547), best-g16 0.543 /
# 0.538, best-g1 0.536 / 0.540, best-unroll 0.537 / 0.534, 128x128x64s3 0.532 / 0.539
# (255 registers, 8 bytes of stack), best-s3 0.530 / 0.531, best-swA 0.529 / 0.524,
# best-noalt 0.526 / 0.525, 128x256x32s5 0.523 / 0.526, 128x128x64s3-mb2 0.521 / 0.527,
# 128x128x32s4-mb2 0.520 / 0.526, 128x256x128s2 0.518 / 0.524, 256x128x64 0.505 / 0.511,
# 128x128x32s6-mb2 0.499 / 0.505, 128x128x64s3-step 0.476 / 0.482, 128x128x32-64x32
# 0.409 / 0.415.

#: where each switch of :data:`CANDIDATES` lives (module attribute names)
SWITCH_MODULES = {"ALTERNATE_SETS": "fragment_prefetch", "UNROLL_SLOTS": "software_pipeline"}

_DEFAULTS: dict = {}


def _build(job: tuple) -> tuple:
    """Lower and compile one candidate (in a worker process): ``(name, dtype, image, meta,
    seconds)``, or ``(name, dtype, None, error, seconds)``."""
    name, dtype, n = job
    t0 = time.perf_counter()
    try:
        import importlib

        import polytile
        from polytile.targets.cuda import tensor_core as tc
        from polytile.targets.cuda.library import metadata

        over, switches = CANDIDATES[name]
        # a worker builds several candidates: each starts from the switches' defaults
        mods = {k: importlib.import_module(f"polytile.schedule.passes.{m}")
                for k, m in SWITCH_MODULES.items()}
        _DEFAULTS.update({k: getattr(mods[k], k) for k in set(mods) - set(_DEFAULTS)})
        for key, mod in mods.items():
            setattr(mod, key, switches.get(key, _DEFAULTS[key]))
        cfg = dict(tc.MMA_BEST)
        cfg.update(dtype=dtype, **over)
        blocks = cfg.pop("min_blocks", 0)
        s, args = tc.wmma_gemm(n, n, n, **cfg)
        f = polytile.build(s, args, target="cuda -arch=sm_90" + (
            f" -min-blocks={blocks}" if blocks else ""))
        return name, dtype, bytes(f.image), metadata(f), time.perf_counter() - t0
    except Exception as exc:   # report it in the table, go on with the others
        return name, dtype, None, f"{type(exc).__name__}: {str(exc)[:200]}", \
            time.perf_counter() - t0


def registers(cubin: bytes) -> str:
    """Registers per thread of the kernel in ``cubin`` (``cuobjdump -res-usage``: ``REG:``),
    with ``STACK:`` where there is a stack frame (spills), or ``?`` without cuobjdump."""
    import os
    import re
    import shutil
    import subprocess
    import tempfile

    tool = shutil.which("cuobjdump")
    if tool is None:
        return "?"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        out = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True).stdout
    reg = re.search(r"REG:(\d+)", out)
    stack = re.search(r"STACK:(\d+)", out)
    return (reg.group(1) if reg else "?") + (f" STACK {stack.group(1)}" if stack and
                                              stack.group(1) != "0" else "")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"],
                    choices=("float16", "bfloat16"))
    ap.add_argument("--pick", nargs="+", default=None, choices=tuple(CANDIDATES),
                    help="candidates to build (default: all), per dtype")
    ap.add_argument("--bf16-pick", nargs="+", default=None, choices=tuple(CANDIDATES),
                    help="bfloat16 candidates (default: those of --pick)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds of timing, each timing every line once (interleaved)")
    ap.add_argument("--calls", type=int, default=10, help="calls per timed batch")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--full-call", action="store_true",
                    help="time the first candidate through its full call too (argument "
                    "checks in Python before each launch)")
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

    import gemm_final
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
        np_dt = {"float16": np.float16}.get(dtype)
        if np_dt is None:
            import ml_dtypes

            np_dt = ml_dtypes.bfloat16
        da = polytile.nd.array(ta.float().cpu().numpy().astype(np_dt), device="cuda")
        db = polytile.nd.array(tb.float().cpu().numpy().astype(np_dt), device="cuda")
        dc = polytile.nd.array(np.full((n, n), np.nan, "float32"), device="cuda")
        cfg = triton_gemm.CONFIGS[0]
        keep = []
        lines = {"cuBLAS (torch)": (lambda: ta @ tb, ""),
                 f"Triton {cfg[:3]}": (lambda: triton_gemm.matmul(ta, tb, cfg), "")}
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
            sass = wgmma_gemm.sass_counts(image, ("HMMA", "LDSM", "LDGSTS", "BAR")) + \
                f" REG {registers(image)}"
            # launch records prepared once (as gemm_final does): a call checks its
            # arguments in Python first, which must not be what the events time
            values, kept = mod._convert((da, db, dc))
            prepared = mod._prepare(values)
            keep.append((kept, prepared))
            lines[name] = (lambda mod=mod, p=prepared: mod._launch(p),
                           f"build {secs:.0f} s, rel. error {err:.1e}, {sass}")
            if args.full_call and name == next(j[0] for j in jobs if j[1] == dtype):
                lines[name + " (call)"] = (lambda mod=mod: mod(da, db, dc),
                                           "the same, each call checking its arguments")
        for fn, _ in lines.values():      # Triton compiles here, before the timing
            fn()
        times = gemm_final.interleaved({k: fn for k, (fn, _) in lines.items()},
                                       args.rounds, args.calls)
        tf = {k: [flops / t / 1e12 for t in v] for k, v in times.items()}
        med = {k: sorted(v)[len(v) // 2] for k, v in tf.items()}
        cublas, triton = med["cuBLAS (torch)"], med[f"Triton {cfg[:3]}"]
        for k, (_, info) in lines.items():
            print(f"n={n} {dtype:8s} {k:19s} {med[k]:7.1f} TFLOP/s ({min(tf[k]):.1f}-"
                  f"{max(tf[k]):.1f})  {med[k] / cublas:.3f}x cuBLAS  {med[k] / triton:.3f}x "
                  f"Triton  {info}", flush=True)
    pool.shutdown()
    print(f"total {time.perf_counter() - t0:.0f} s (median and range of {args.rounds} "
          f"interleaved rounds of {args.calls} back-to-back calls)", file=sys.stderr)


if __name__ == "__main__":
    main()
