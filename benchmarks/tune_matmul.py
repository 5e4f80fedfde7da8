"""Tuning figures for the 1024^3 float32 matmul on this CPU, beside numpy.

For each tuner (``model``, ``random``) and seed, one tuning run of ``--trials`` trials
(the default config is *not* measured first, so the figures show the search alone). The
best-so-far config of every run at trials 8, 16, 32, 48, 64, 96 and 128 is then measured
again, all of them and numpy (OpenBLAS, same inputs, in a process of its own) in turn,
``--passes`` times: a lucky quiet moment during a tuning run (this machine is shared)
cannot inflate a figure, and tuners and numpy see the same load. Figures are printed
twice: from the median of the re-measurements (a typical run) and from their minimum (the
least disturbed run, the usual estimate of a kernel's own speed under noise that only adds
time).
Prints one line per figure:

* best GFLOP/s after 32, 64 and 128 trials per tuner (median over seeds), and the ratio to
  numpy's GFLOP/s;
* the tuner's own overhead per trial (wall time not spent building or running candidates:
  proposing, feature extraction, model training, bookkeeping);
* the trials (among the checkpoints) the model tuner needs to reach random search's best
  after all its trials (median over seeds).

Run: ``python benchmarks/tune_matmul.py [--n 1024] [--trials 128] [--seeds 3]``. It takes
about (2 tuners x seeds x trials x 0.3 s) plus the re-measurements; not a test. On a shared
machine, timings follow the load of other processes: compare figures taken in one run only.
Where ``OPENBLAS_CORETYPE`` pins OpenBLAS to an older kernel (a workaround some machines
set), numpy is slower than it can be: run the script with ``env -u OPENBLAS_CORETYPE -u
OPENBLAS_L2_SIZE`` to compare with numpy's native kernel. The first line names the kernel
numpy uses.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import polytile
from polytile.autotune import MeasureOptions, get_template, tune
from polytile.autotune.tune import measure_numpy_isolated
from polytile.autotune.blas import anchor_note

CHECKPOINTS = (8, 16, 32, 48, 64, 96, 128)


def _best_configs(res, checkpoints) -> dict:
    """Checkpoint -> knob values of the best config among the first k trials."""
    out, best = {}, None
    for k, r in enumerate(res.records, start=1):
        if r.ok and (best is None or r.cost < best.cost):
            best = r
        if k in checkpoints and best is not None:
            out[k] = best.config
    return out


def _validate(configs: list, n: int, passes: int) -> tuple[dict, dict]:
    """Seconds of each config (knob values) and of numpy, measured in turn ``passes``
    times: kernels in this process, numpy in a process of its own each pass (BLAS threads
    spinning after a call would slow the kernels). Returns ({"median": [...], "min":
    [...]}, {"median": s, "min": s})."""
    t = get_template("matmul")
    sp = t.space((n, n, n))
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    c = np.zeros((n, n), "float32")
    mods = []
    for knobs in configs:
        s, tensors = t.instantiate(sp.from_json(knobs), (n, n, n))
        mods.append(polytile.build(s, tensors).time_evaluator(number=1, repeat=3,
                                                               min_repeat_ms=20))
    times = [[] for _ in configs]
    np_times = []
    for _ in range(passes):
        for k, ev in enumerate(mods):
            times[k] += list(ev(a, b, c).results)
        r = measure_numpy_isolated("matmul", (n, n, n), min_time=0.3,
                                   threads=MeasureOptions().threads)
        np_times += [r["median"], r["min"]]
    kern = {"median": [statistics.median(x) for x in times], "min": [min(x) for x in times]}
    return kern, {"median": statistics.median(np_times[0::2]), "min": min(np_times[1::2])}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tuners", default="model,random")
    ap.add_argument("--passes", type=int, default=7,
                    help="re-measurements of each selected kernel and of numpy")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    args = ap.parse_args(argv)
    n = args.n
    wl = (n, n, n)
    flops = 2.0 * n ** 3
    tuners = args.tuners.split(",")
    checkpoints = [k for k in CHECKPOINTS if k <= args.trials]
    if args.trials not in checkpoints:
        checkpoints.append(args.trials)
    runs: dict = {t: [] for t in tuners}      # tuner -> [checkpoint -> knobs]
    overhead: dict = {t: [] for t in tuners}
    t_start = time.time()
    polytile.set_num_threads(MeasureOptions().threads)
    desc, warn = anchor_note()
    print(f"numpy's BLAS: {desc}")
    if warn:
        print(f"warning: {warn}")
    for seed in range(args.seeds):
        for tn in tuners:
            res = tune("matmul", wl, tuner=tn, n_trial=args.trials, seed=seed,
                       include_default=False, measure_option=MeasureOptions())
            runs[tn].append(_best_configs(res, checkpoints))
            overhead[tn].append(res.overhead_s / max(1, res.n_trials))
            print(f"# {tn:6s} seed {seed}: best {res.gflops() or 0:7.1f} GFLOP/s as measured "
                  f"while tuning, {res.n_trials} trials, {res.n_failed} failed, wall "
                  f"{res.wall_s:.0f} s", flush=True)
    uniq = sorted({json.dumps(c, sort_keys=True) for rs in runs.values() for r in rs
                   for c in r.values()})
    kern, t_np = _validate([json.loads(u) for u in uniq], n, args.passes)
    for est in ("median", "min"):
        gf = {u: flops / x / 1e9 for u, x in zip(uniq, kern[est])}
        npg = flops / t_np[est] / 1e9

        def at(r, k):
            return gf[json.dumps(r[k], sort_keys=True)] if k in r else 0.0

        print(f"== re-measured kernels, {est} of {args.passes} passes x 3 runs "
              f"({'typical' if est == 'median' else 'least disturbed'} run)")
        print(f"numpy (OpenBLAS, same inputs, own process between passes): {npg:.1f} GFLOP/s")
        for tn in tuners:
            for k in (32, 64, 128):
                if k not in checkpoints:
                    continue
                vals = [at(r, k) for r in runs[tn]]
                b = statistics.median(vals)
                print(f"{tn:6s} best after {k:3d} trials: {b:7.1f} GFLOP/s  "
                      f"({b / npg:.2f} x numpy)  [seeds: {', '.join(f'{v:.1f}' for v in vals)}]")
        if "model" in runs and "random" in runs:
            last = checkpoints[-1]
            target = statistics.median(at(r, last) for r in runs["random"])
            need = []
            for r in runs["model"]:
                hit = next((k for k in checkpoints if at(r, k) >= target), None)
                need.append(hit if hit is not None else float("inf"))
            print(f"model trials to reach random's {last}-trial best ({target:.1f} GFLOP/s): "
                  f"{statistics.median(need)} (median over seeds; per seed: {need})")
    for tn in tuners:
        print(f"{tn:6s} tuner overhead per trial: "
              f"{statistics.median(overhead[tn]):.3f} s (median over seeds)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"numpy_s": t_np, "runs": runs, "configs": uniq, "kernel_s": kern,
                       "overhead": overhead}, f)
    print(f"total benchmark time {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
