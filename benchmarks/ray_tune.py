"""Benchmark: the same matmul tuning run with the local worker pool and on a local Ray
instance (``tune(..., ray=...)``): trials/s of each, Ray's overhead per trial, and the
constants of the projection for N nodes in docs/distributed.md.

Per tuner and mode the run is made ``--rounds`` times, alternating local / Ray (so that a
drift of a shared machine weighs on both), and the medians are printed:

* ``trials/s``: trials over the wall time of the search (the start-up of the workers or of
  the measuring actors excluded; it is printed apart, with ``ray.init``'s);
* ``driver ms/trial``: CPU time of the driver process per trial (proposing, Ray's
  dispatch, writing records): ``p`` of the projection;
* ``overhead ms/trial``: ``1000 * (1 / rate_ray - 1 / rate_local)``;
* an actor call's round trip with a result-sized JSON string (``--calls``);
* the constants of the projection ``trials/s(N) = 16 N / (T_p + 16 N p + 16 / r)``: ``r``
  the Ray rate of the random tuner (measuring only), ``p`` the driver's ms/trial, ``T_p``
  the model tuner's proposing time per batch (``16 / rate_model - 16 / rate_random``).

Run: ``python benchmarks/ray_tune.py [--args 256,256,256] [--trials 48] [--rounds 3]``
(needs ``pip install "polytile[ray]"``). Give ``cat /proc/loadavg`` beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from polytile.autotune import MeasureOptions, tune


def _run(mode: str, tuner: str, args, trials: int, opt, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        c0 = time.process_time()
        res = tune("matmul", args, tuner=tuner, n_trial=trials, measure_option=opt,
                   log_file=os.path.join(d, "log.jsonl"), seed=seed,
                   ray="local" if mode == "ray" else None)
        cpu = time.process_time() - c0
    search = res.wall_s - res.startup_s
    return {"rate": res.n_trials / search, "startup": res.startup_s,
            "driver_ms": 1000 * cpu / res.n_trials, "failed": res.n_failed,
            "nodes": res.nodes}


def _round_trip(ray, calls: int) -> float:
    """Milliseconds per call of an actor method taking and returning ~2 KB of JSON."""

    @ray.remote(num_cpus=0)
    class Echo:
        def echo(self, text: str) -> str:
            return text

    a = Echo.remote()
    msg = json.dumps({"costs": [1e-3] * 30, "trace": [["split", "C", [["iv", 0, "i"]],
                                                      [["factor", 64]]]] * 12})
    ray.get(a.echo.remote(msg))
    t0 = time.perf_counter()
    for _ in range(calls):
        ray.get(a.echo.remote(msg))
    ms = 1000 * (time.perf_counter() - t0) / calls
    ray.kill(a)
    return ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--args", default="256,256,256")
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tuners", default="random,model")
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    import ray

    args = tuple(int(x) for x in a.args.split(","))
    opt = MeasureOptions()  # the defaults of `polytile tune`: cores workers and threads
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
             log_to_driver=False)
    init_s = time.perf_counter() - t0
    print(f"matmul{args}, {a.trials} trials, {opt.parallel} build workers, {opt.threads} "
          f"threads; ray.init {init_s:.1f} s; load average before: "
          f"{open('/proc/loadavg').read().split()[:3]}")
    print(f"actor call round trip (2 KB of JSON each way): {_round_trip(ray, a.calls):.2f} "
          "ms")
    meds: dict = {}
    for tuner in a.tuners.split(","):
        got: dict = {"local": [], "ray": []}
        for r in range(a.rounds):
            for mode in ("local", "ray") if r % 2 == 0 else ("ray", "local"):
                got[mode].append(_run(mode, tuner, args, a.trials, opt, seed=r))
        med = {m: {k: statistics.median(x[k] for x in v) for k in ("rate", "startup",
                                                                    "driver_ms")}
               for m, v in got.items()}
        over = 1000 * (1 / med["ray"]["rate"] - 1 / med["local"]["rate"])
        for m in ("local", "ray"):
            rounds = ", ".join(f"{x['rate']:.2f}" for x in got[m])
            print(f"  {tuner:6s} {m:5s}: {med[m]['rate']:.2f} trials/s (rounds: "
                  f"{rounds}); start-up "
                  f"{med[m]['startup']:.1f} s; driver {med[m]['driver_ms']:.1f} ms/trial; "
                  f"failed {sum(x['failed'] for x in got[m])}")
        print(f"  {tuner:6s} Ray overhead: {over:.1f} ms/trial")
        meds[tuner] = med
    if "random" in meds and "model" in meds:
        r = meds["random"]["ray"]["rate"]
        t_p = 16 / meds["model"]["ray"]["rate"] - 16 / r
        for tuner, extra in (("random", 0.0), ("model", t_p)):
            p = meds[tuner]["ray"]["driver_ms"] / 1000
            proj = ", ".join(f"N={n}: {16 * n / (extra + 16 * n * p + 16 / r):.1f}"
                             for n in (1, 4, 16, 64, 256))
            print(f"  projection {tuner}: r={r:.2f} trials/s, p={p * 1000:.1f} ms, T_p="
                  f"{extra:.1f} s -> trials/s {proj}; limit 1/p = {1 / p:.0f}")
    print(f"load average after: {open('/proc/loadavg').read().split()[:3]}")
    ray.shutdown()


if __name__ == "__main__":
    main()
