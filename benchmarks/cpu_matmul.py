"""Benchmark: fp32 matmul on the CPU, the tutorial's best hand schedule vs numpy (OpenBLAS).

For each thread count (1 and 2 by default) prints numpy's GFLOP/s (median, timed in a
process of its own with OpenBLAS limited to that many threads), polytile's GFLOP/s (median)
and their ratio, measured in the same run; then the time of ``lower`` and ``build`` for that
schedule. ``OPENBLAS_CORETYPE`` in the environment selects numpy's kernel: say which. Run: ``python benchmarks/cpu_matmul.py [--n 1024]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import time

import numpy as np

import polytile
from polytile.autotune.tune import measure_numpy_isolated


def _tutorial():
    path = pathlib.Path(__file__).resolve().parent.parent / "tutorials" / "02_cpu_matmul.py"
    spec = importlib.util.spec_from_file_location("cpu_matmul_tutorial", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    flop = 2.0 * n**3
    rows = []
    for threads in (int(x) for x in args.threads.split(",")):
        polytile.set_num_threads(threads)
        t_pt = f.time_evaluator(number=1, repeat=7, min_repeat_ms=100)(a, b, c).median
        # numpy in a process of its own (BLAS threads spin after each call); median seconds
        t_np = measure_numpy_isolated("matmul", [n, n, n], threads=threads)["median"]
        rows.append((threads, t_np, t_pt))
    # the float64 reference last: BLAS threads it leaves spinning would slow the kernel
    ref = a.astype("float64") @ b.astype("float64")
    err = np.abs(c - ref).max() / np.abs(ref).max()
    assert err < 1e-5, f"wrong result: relative error {err:.2e}"
    for threads, t_np, t_pt in rows:
        print(f"matmul {n}^3 fp32, {threads} thread(s): numpy {flop / t_np / 1e9:7.1f} GFLOP/s, "
              f"polytile {flop / t_pt / 1e9:7.1f} GFLOP/s, ratio {t_np / t_pt:5.2f}")
    print(f"lower {t_lower:.3f} s, build (lower + LLVM O3 + JIT) {t_build:.3f} s "
          f"({len(str(func).splitlines())} lines of loop IR)")


if __name__ == "__main__":
    main()
