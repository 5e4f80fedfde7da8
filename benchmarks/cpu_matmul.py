"""Benchmark: fp32 matmul on the CPU, the tutorial's best hand schedule vs numpy (OpenBLAS).

For each thread count (1 and 2 by default) prints numpy's GFLOP/s, polytile's GFLOP/s and
their ratio, measured in the same run on the same inputs; then the time of ``lower`` and
``build`` for that schedule. Run: ``python benchmarks/cpu_matmul.py [--n 1024]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import time

import numpy as np

import polytile


def _tutorial():
    path = pathlib.Path(__file__).resolve().parent.parent / "tutorials" / "02_cpu_matmul.py"
    spec = importlib.util.spec_from_file_location("cpu_matmul_tutorial", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _numpy_seconds(a, b, threads: int, repeat: int = 5) -> float:
    """Best time of ``a @ b`` with OpenBLAS limited to ``threads`` (threadpoolctl)."""
    from threadpoolctl import threadpool_limits

    best = float("inf")
    with threadpool_limits(limits=threads):
        for _ in range(repeat):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    args = ap.parse_args()
    n = args.n
    tut = _tutorial()
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    t0 = time.perf_counter()
    s, targs = tut.best(n)
    func = polytile.lower(s, targs)
    t_lower = time.perf_counter() - t0
    t0 = time.perf_counter()
    f = polytile.build(s, targs, target="llvm")
    t_build = time.perf_counter() - t0
    c = np.full((n, n), np.nan, dtype="float32")
    f(a, b, c)
    ref = a.astype("float64") @ b.astype("float64")
    err = np.abs(c - ref).max() / np.abs(ref).max()
    assert err < 1e-5, f"wrong result: relative error {err:.2e}"
    flop = 2.0 * n**3
    for threads in (int(x) for x in args.threads.split(",")):
        polytile.set_num_threads(threads)
        t_np = _numpy_seconds(a, b, threads)
        t_pt = f.time_evaluator(number=1, repeat=5, min_repeat_ms=100)(a, b, c).min
        print(f"matmul {n}^3 fp32, {threads} thread(s): numpy {flop / t_np / 1e9:7.1f} GFLOP/s, "
              f"polytile {flop / t_pt / 1e9:7.1f} GFLOP/s, ratio {t_np / t_pt:5.2f}")
    print(f"lower {t_lower:.3f} s, lower+build {t_build:.3f} s "
          f"({len(str(func).splitlines())} lines of loop IR)")


if __name__ == "__main__":
    main()
