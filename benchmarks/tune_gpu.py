"""Benchmark: tuning on the GPU (``polytile tune --target cuda``) against torch in the same run.

For each workload: ``tune(..., target="cuda")`` searches the template's space (candidates
built in parallel worker processes, timed in the GPU runner process), then the best config,
the default config (for ``matmul``: the hand schedule of ``tutorials/04_cuda_gemm.py``,
shared memory + 8x8 register tiles) and torch on the GPU (cuBLAS fp32 with TF32 off for
matmul) are timed alternately, 4 rounds, with CUDA events. One line per figure, with the
ratio to torch, the tuning wall time and trials per second; memory-bound workloads also
print their bandwidth (bytes read + written over the time) against ``--copy-tbs``.

Run on the GPU machine (each workload bounded by ``--budget`` seconds of search)::

    python benchmarks/tune_gpu.py --workloads matmul --trials 64
    python benchmarks/tune_gpu.py --workloads softmax layernorm row_sum --trials 16

``--plot DIR`` writes each workload's tuning curves (best GFLOP/s so far per trial) as a
PNG; ``--tuners model random`` runs both tuners (records not shared: ``transfer=False``)
for the sample-efficiency comparison.
"""

from __future__ import annotations

import argparse
import os
import time

#: workload -> (default args, bytes moved per call or None for compute-bound)
WORKLOADS = {
    "matmul": ((4096, 4096, 4096), None),
    "softmax": ((4096, 4096), lambda M, N: 2 * 4 * M * N),
    "layernorm": ((4096, 4096), lambda M, N: 2 * 4 * M * N + 2 * 4 * N),
    "row_sum": ((4096, 4096), lambda M, N: 4 * M * N + 4 * M),
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
    ap.add_argument("--plot", default=None, metavar="DIR")
    ap.add_argument("--copy-tbs", type=float, default=4.16,
                    help="device copy bandwidth in TB/s for the bandwidth bound (H200: 4.16)")
    a = ap.parse_args(argv)

    from polytile.autotune import MeasureOptions, tune
    from polytile.autotune.anchors import available
    from polytile.autotune.template import get_template

    for name in a.workloads:
        curves = {}
        for tuner in a.tuners:
            curves[tuner] = _one(a, name, tuner, tune, available, get_template, MeasureOptions)
        if a.plot and any(c for c in curves.values()):
            _plot_curves(a.plot, name, curves)


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


def _one(a, name, tuner, tune, available, get_template, MeasureOptions):
    """Tune ``name`` with ``tuner``, print its figures; returns (curve, torch GFLOP/s)."""
    args, nbytes = WORKLOADS[name]
    t = get_template(name)
    anchors = tuple(available(t, args, "cuda"))
    opt = MeasureOptions(parallel=os.cpu_count() or 1)
    t0 = time.perf_counter()
    res = tune(name, args, target="cuda", tuner=tuner, n_trial=a.trials,
               measure_option=opt, log_file=a.log, timeout_total=a.budget,
               anchors=anchors, transfer=False)
    wall = time.perf_counter() - t0
    dev = res.device or {}
    print(f"{name}{args} [{tuner} tuner] on {dev.get('name')} ({dev.get('arch')}, driver "
          f"{dev.get('driver')}, CUDA {dev.get('cuda')}): {res.n_trials} trials "
          f"({res.n_failed} failed, runner restarts {res.runner_restarts}) in {wall:.0f} s,"
          f" {res.n_trials / max(wall, 1e-9):.2f} trials/s; stopped: {res.stop_reason}")
    cmp = res.comparison
    if res.best is None or cmp is None:
        print(f"{name}: no result ({res.failures()})")
        return [], None
    flops = res.flops or 0.0
    ref = cmp.timing("torch-cuda") if anchors else None
    for label, key in (("polytile tuned", "best"), ("polytile default config", "default"),
                       ("torch (cuBLAS, no TF32)" if name == "matmul" else "torch",
                        "torch-cuda")):
        tm = cmp.timing(key)
        if tm is None:
            if key in cmp.errors:
                print(f"  {label:28s} not timed: {cmp.errors[key][1][:100]}")
            continue
        line = f"  {label:28s} {tm.median * 1e3:9.3f} ms ± {tm.spread * 100:4.1f} %"
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
    return curve, (flops / ref.median / 1e9 if ref is not None and flops else None)


if __name__ == "__main__":
    main()
