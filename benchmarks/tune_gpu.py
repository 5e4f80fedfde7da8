"""Benchmark: tuning on the GPU (``polytile tune --target cuda``) against torch in the same run.

For each workload: ``tune(..., target="cuda")`` searches the template's space (candidates
built in parallel worker processes, timed in the GPU runner process), then the fastest
configs of the search and the default config (for ``matmul``: the fastest hand schedule of
``tutorials/04_cuda_gemm.py``, 8x8 vthread register tiles, k tiles of 16 in a 3-stage
``cp.async`` pipeline, groups of 8; on tensor cores the template's hand default) are
re-measured alternately with torch on the GPU (cuBLAS fp32 with TF32 off for matmul), 4
rounds, with CUDA events, and the fastest of that re-measure is the tuned config (the
search covers the template's preferred configs unless ``--full-space``). One line per
figure, with the ratio to torch, the tuning wall time and trials per second; memory-bound
workloads also print their bandwidth (bytes read + written over the time) against
``--copy-tbs``. float16/bfloat16 ``matmul`` with ``--triton``: the tuned and default
configs are then timed in this process interleaved with cuBLAS and Triton
(``benchmarks/gemm_final.py``); its ``FINAL`` lines are the figures to quote.

Run on the GPU machine (each workload bounded by ``--budget`` seconds of search)::

    python benchmarks/tune_gpu.py --workloads matmul --trials 64
    python benchmarks/tune_gpu.py --workloads softmax layernorm row_sum --trials 16
    python benchmarks/tune_gpu.py --workloads softmax layernorm --dtypes float32 float16 \
        --trials 16 --budget 60 --measure-copy

``--plot DIR`` writes each workload's tuning curves (best GFLOP/s so far per trial) as a
PNG; ``--tuners model random`` runs both tuners (records not shared: ``transfer=False``)
for the sample-efficiency comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import time

#: workload -> (default args, bytes moved per call for elements of ``b`` bytes, or None for
#: compute-bound workloads)
WORKLOADS = {
    "matmul": ((4096, 4096, 4096), None),
    "softmax": ((4096, 4096), lambda M, N, b=4: 2 * b * M * N),
    "layernorm": ((4096, 4096), lambda M, N, b=4: 2 * b * M * N + 2 * b * N),
    "rmsnorm": ((4096, 4096), lambda M, N, b=4: 2 * b * M * N + b * N),
    "row_sum": ((4096, 4096), lambda M, N, b=4: b * M * N + b * M),
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["matmul"], choices=sorted(WORKLOADS))
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--budget", type=float, default=420.0,
                    help="seconds of search per workload (default 420)")
    ap.add_argument("--tuners", nargs="+", default=["model"],
                    choices=("model", "random", "grid"),
                    help="tuners to run one after the other on each workload (model random: "
                    "the sample-efficiency comparison; --plot draws their curves together)")
    ap.add_argument("--log", default="tune_gpu.jsonl")
    ap.add_argument("--full-space", action="store_true",
                    help="search the whole space, not the template's preferred part")
    ap.add_argument("--plot", default=None, metavar="DIR")
    ap.add_argument("--copy-tbs", type=float, default=4.16,
                    help="device copy bandwidth in TB/s for the bandwidth bound (H200: 4.16)")
    ap.add_argument("--measure-copy", action="store_true",
                    help="measure the copy bandwidth (torch copy_ of 1 GiB, CUDA events) "
                    "and use it instead of --copy-tbs")
    ap.add_argument("--dtypes", nargs="+", default=["float32"],
                    choices=("float32", "float16", "bfloat16"),
                    help="matmul in float16/bfloat16: the tensor-core space (mma.sync or "
                    "WMMA; the default config is tensor_core.MMA_BEST, the tutorial's hand "
                    "schedule), float32 accumulation and output")
    ap.add_argument("--target", default="cuda",
                    help="target string (default cuda; 'cuda -arch=sm_90a' adds wgmma to "
                    "the float16/bfloat16 matmul space and makes it the default)")
    ap.add_argument("--triton", action="store_true",
                    help="matmul in float16/bfloat16: after the tuning run, time the tuned "
                    "and default configs interleaved with cuBLAS and Triton's GEMM (best of "
                    "benchmarks/triton_gemm.py CONFIGS) in this process "
                    "(benchmarks/gemm_final.py)")
    a = ap.parse_args(argv)
    if a.measure_copy:
        a.copy_tbs = _copy_bandwidth()
        print(f"device copy bandwidth (torch copy_ of 1 GiB, median of 20): "
              f"{a.copy_tbs:.2f} TB/s")

    from polytile.autotune import MeasureOptions, tune
    from polytile.autotune.anchors import available
    from polytile.autotune.template import get_template

    for name in a.workloads:
        dtypes = a.dtypes if WORKLOADS[name][1] is not None or name == "matmul" else \
            ["float32"]
        for dtype in dtypes:
            curves = {}
            for tuner in a.tuners:
                curves[tuner], res = _one(a, name, tuner, tune, available, get_template,
                                          MeasureOptions, dtype)
                if name == "matmul" and dtype != "float32" and a.triton:
                    _final_lines(WORKLOADS[name][0], dtype, res)
            if a.plot and any(c for c in curves.values()):
                _plot_curves(a.plot, name if dtype == "float32" else f"{name}_{dtype}",
                             curves)


def _final_lines(args: tuple, dtype: str, res) -> None:
    """The tuned config (``res.best``, picked by the tuner's final re-measure) and the
    default config timed interleaved with cuBLAS and Triton in this process
    (:func:`gemm_final.final_line`: same buffers, then rotated), after the tuning run."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if res is None or res.best is None:
        return
    import gemm_final

    configs = {"polytile tuned": res.best.config}
    if res.default is not None and res.default.config != res.best.config:
        configs["polytile hand"] = res.default.config
    print(f"  tuned config {json.dumps(res.best.config)}")
    fig = gemm_final.final_line(args, dtype, configs, label="FINAL ")
    for mode, tf in fig.items():
        tuned = tf.get("polytile tuned")
        if tuned is None:
            continue
        hand = tf.get("polytile hand", tuned)
        parts = [f"{tuned / tf[a]:.3f} x {a} ({tf[a]:.1f})" for a in ("cuBLAS", "Triton")
                 if a in tf]
        print(f"FINAL {dtype} tuned {tuned:.1f} TFLOP/s [{mode}] = {', '.join(parts)}, "
              f"{tuned / hand:.3f} x the hand default ({hand:.1f})", flush=True)


def _copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device copy bandwidth in TB/s: bytes read + written by ``dst.copy_(src)`` of
    ``nbytes`` over its median time (CUDA events, 20 repeats after 3 warm-ups)."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for k in range(23):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        stop.record()
        stop.synchronize()
        if k >= 3:
            times.append(start.elapsed_time(stop) / 1e3)
    times.sort()
    return 2 * nbytes / times[len(times) // 2] / 1e12


def _plot_curves(folder: str, name: str, curves: dict) -> None:
    """Best-so-far throughput per trial of each tuner, one PNG per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    ref = None
    for tuner, (curve, torch_rate) in curves.items():
        if curve:
            ax.plot(range(1, len(curve) + 1), curve, label=f"{tuner} tuner, best so far")
        ref = ref or torch_rate
    if ref:
        ax.axhline(ref, color="gray", linestyle="--", label="torch on the GPU")
    ax.set_xlabel("trial")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"{name} on the GPU", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = os.path.join(folder, f"tune_gpu_{name}.png")
    fig.savefig(path)
    plt.close(fig)
    print(f"  plot {path}")


def _one(a, name, tuner, tune, available, get_template, MeasureOptions, dtype="float32"):
    """Tune ``name`` with ``tuner``, print its figures; returns (curve, torch GFLOP/s)."""
    args, nbytes = WORKLOADS[name]
    t = get_template(name)
    anchors = tuple(available(t, args, "cuda"))
    opt = MeasureOptions(parallel=os.cpu_count() or 1)
    t0 = time.perf_counter()
    res = tune(name, args, dtype=dtype, target=a.target, tuner=tuner, n_trial=a.trials,
               measure_option=opt, log_file=a.log, timeout_total=a.budget,
               anchors=anchors, transfer=False, full_space=a.full_space)
    wall = time.perf_counter() - t0
    dev = res.device or {}
    if nbytes is not None:
        itemsize = 4 if dtype == "float32" else 2
        moved = nbytes(*args, itemsize)
        bound = moved / (a.copy_tbs * 1e12)
        print(f"{name}{args} {dtype}: copy bound {bound * 1e3:.4f} ms ({moved / 2**20:.0f} MiB "
              f"read + written at {a.copy_tbs:.2f} TB/s)")
        nbytes = lambda *_: moved   # noqa: E731
    print(f"{name}{args} {dtype} [{tuner} tuner] on {dev.get('name')} ({dev.get('arch')}, driver "
          f"{dev.get('driver')}, CUDA {dev.get('cuda')}): {res.n_trials} trials "
          f"({res.n_failed} failed, runner restarts {res.runner_restarts}) in {wall:.0f} s,"
          f" {res.n_trials / max(wall, 1e-9):.2f} trials/s; stopped: {res.stop_reason}")
    cmp = res.comparison
    if res.best is None or cmp is None:
        print(f"{name}: no result ({res.failures()})")
        return ([], None), res
    flops = res.flops or 0.0
    ref = cmp.timing("torch-cuda") if anchors else None
    for label, key in (("polytile tuned", "best"), ("polytile hand (default config)", "default"),
                       ("torch (cuBLAS, no TF32)" if name == "matmul" and dtype ==
                        "float32" else f"torch (cuBLAS {dtype})" if name == "matmul"
                        else "torch",
                        "torch-cuda")):
        tm = cmp.timing(key)
        if tm is None:
            if key in cmp.errors:
                print(f"  {label:30s} not timed: {cmp.errors[key][1][:100]}")
            continue
        line = f"  {label:30s} {tm.median * 1e3:9.4f} ms ± {tm.spread * 100:4.1f} %"
        if flops:
            line += f"  {flops / tm.median / 1e12:7.2f} TFLOP/s"
        if nbytes is not None:
            bw = nbytes(*args) / tm.median / 1e12
            line += f"  {bw:5.2f} TB/s = {bw / a.copy_tbs:5.2f} x copy bound"
        if ref is not None and key != "torch-cuda":
            line += f"  {ref.median / tm.median:6.3f} x torch"
        print(line)
    print(f"  best config {res.best.config}")
    curve = res.curve()
    for k in (8, 16, 32, 64):
        if k <= len(curve):
            print(f"  best after {k:3d} trials  {curve[k - 1]:9.1f} GFLOP/s"
                  if res.flops else f"  best after {k:3d} trials  {curve[k - 1]:.4g} 1/s")
    for rec, tm in res.finalists:
        if tm is not None and flops:
            mark = "  <- best" if rec is res.best else ""
            print(f"  finalist {flops / rec.cost / 1e12:7.2f} TFLOP/s searched, "
                  f"{flops / tm.median / 1e12:7.2f} re-measured{mark}  {json.dumps(rec.config)}")
    return (curve, (flops / ref.median / 1e9 if ref is not None and flops else None)), res


if __name__ == "__main__":
    main()
