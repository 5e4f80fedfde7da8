"""Dynamic shapes: one kernel for every ``n``, tuned for a few of them.

Most TE programs declare their sizes as variables (``n = te.var("n")``) rather than
numbers. polytile lowers such a program once: ``n`` becomes an isl *parameter*, so
legality, bounds checks and compute_at footprints are proved for every value of ``n``,
splits get exact tails (``min(8, n - 8*i.outer)``) with the full tiles isolated for
vectorization, and the built function reads ``n`` off the shapes of its arguments.

1. a computation over ``n`` rows, printed: the sizes it reads, what it assumes, its guards;
2. one build, called at many sizes (0, 1, primes...), checked against numpy;
3. what is refused, and why (a size that no argument carries, mismatched arrays);
4. a template over ``n`` tuned for a few concrete values (``--sizes``), each best config
   built and timed -- and still correct at every other ``n``.

Run: ``python tutorials/07_dynamic_shapes.py [--sizes 64,256] [--trials 8]``. The same
search from a shell: ``polytile tune tutorials/07_dynamic_shapes.py:rows_matmul
--args n,64,64 --sizes n=64,256``.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import polytile
from polytile import autotune, te


def check(got, want, what: str, tol: float = 1e-4) -> None:
    err = float(np.abs(got.astype("float64") - want).max()) if got.size else 0.0
    if not err <= tol * max(1.0, float(np.abs(want).max()) if want.size else 1.0):
        raise SystemExit(f"{what}: wrong result (max error {err:.3g})")


# --- 1. a computation over n rows ------------------------------------------------------------
def rows_program():
    """y[i, j] = relu(sum_k A[i, k] * W[k, j] + b[j]) for i < n: a dense layer over a batch
    of any size. ``n`` is a ``te.size_var`` (known >= 0); K and N are fixed."""
    n = te.size_var("n")
    K, N = 48, 40
    A = te.placeholder((n, K), name="A")
    W = te.placeholder((K, N), name="W")
    b = te.placeholder((N,), name="b")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((n, N), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    R = te.compute((n, N), lambda i, j: te.max(Y[i, j] + b[j], 0.0), name="R")
    s = te.create_schedule(R.op)
    i, j = R.op.axis
    io, ii = s[R].split(i, factor=4)          # a tail of n % 4 rows: exact, no padding
    jo, ji = s[R].split(j, factor=8)
    s[R].reorder(io, jo, ii, ji)
    s[R].vectorize(ji)
    s[R].parallel(io)
    s[Y].compute_at(s[R], jo)                 # a 4x8 tile of Y per (io, jo): on the stack
    yi, yj = Y.op.axis
    s[Y].reorder(k, yi, yj)
    s[Y].vectorize(yj)
    return s, [A, W, b, R], (K, N)


def reference(a, w, b):
    return np.maximum(a.astype("float64") @ w + b, 0.0)


# --- 4. a template over n ----------------------------------------------------------------------
@autotune.template("tutorial_rows_matmul", default_args=("n=256", 64, 64),
                   flops=lambda n, N, K: 2.0 * n * N * K,
                   reference=lambda a, w, *, args=(): a @ w)
def rows_matmul(n, N: int, K: int, dtype: str = "float32"):
    """C[n, N] = A[n, K] @ W[K, N] for every n. The tuner runs it with ``n`` a
    ``te.size_var`` and takes the knobs' choices from the value it tunes for."""
    cfg = autotune.get_config()
    A = te.placeholder((n, K), name="A", dtype=dtype)
    W = te.placeholder((K, N), name="W", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((n, N), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    cfg.define_split("tile_i", i, num_outputs=2, max_factor=32, default=[-1, 4])
    cfg.define_split("tile_j", j, num_outputs=2, max_factor=64,
                     filter=lambda e: e.size[-1] in (8, 16, 32, 64), default=[-1, 16])
    io, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    s[C].reorder(io, jo, k, ii, ji)
    cfg.define_annotate("unroll", [ii], policy="try_unroll", default=["none"])
    cfg["unroll"].apply(s, C, [ii])
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, W, C]


SPEC = f"{os.path.abspath(__file__)}:rows_matmul"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,256", help="values of n to tune for")
    ap.add_argument("--trials", type=int, default=8, help="tuning trials per size")
    ap.add_argument("--log", default=None, help="records file (default: a temporary one)")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x]

    # 1. the loop nest for every n: the size comes from A.shape[0]; the tails are exact
    s, tensors, (K, N) = rows_program()
    print(polytile.lower(s, tensors))

    # 2. one build, any n
    f = polytile.build(s, tensors)
    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, (K, N)).astype("float32")
    b = rng.uniform(-1, 1, (N,)).astype("float32")
    for n in (0, 1, 2, 7, 13, 64, 97):
        a = rng.uniform(-1, 1, (n, K)).astype("float32")
        r = np.full((n, N), np.nan, "float32")
        f(a, w, b, r)
        check(r, reference(a, w, b), f"n={n}")
        print(f"n = {n:3d}: result matches numpy")

    # 3. what is refused: arrays that disagree on n, a size no argument carries
    try:
        f(np.zeros((5, K), "float32"), w, b, np.zeros((6, N), "float32"))
    except ValueError as exc:
        print("refused:", str(exc).splitlines()[0])
    m = te.var("m")
    X = te.placeholder((m + 1,), name="X")
    Z = te.compute((m + 1,), lambda i: X[i] * 2.0, name="Z")
    try:
        polytile.lower(te.create_schedule(Z.op), [X, Z])
    except polytile.errors.ScheduleError as exc:
        print("refused:", str(exc).splitlines()[0])
    fz = polytile.build(te.create_schedule(Z.op), [X, Z, m])   # m as a scalar argument
    x = rng.uniform(-1, 1, 10).astype("float32")
    z = np.full(10, np.nan, "float32")
    fz(x, z, 9)
    check(z, 2.0 * x.astype("float64"), "m=9")
    print("m = 9 given as a scalar: result matches numpy")

    # 4. tune the template over n for a few values; records say which value each trial had
    log = args.log or os.path.join(tempfile.mkdtemp(), "rows.jsonl")
    tmpl = autotune.get_template(SPEC)
    for n in sizes:
        workload = (f"n={n}", 64, 64)
        res = autotune.tune(SPEC, workload, tuner="random", n_trial=args.trials,
                            log_file=log)
        print(f"n = {n}: tuned {res.n_trials} configs; best {res.best.config} "
              f"({res.gflops():.2f} GFLOP/s)")
        with autotune.apply_history_best(log):
            s, tensors = tmpl(*workload)
        f = polytile.build(s, tensors)
        a = rng.uniform(-1, 1, (n, 64)).astype("float32")
        w2 = rng.uniform(-1, 1, (64, 64)).astype("float32")
        c = np.full((n, 64), np.nan, "float32")
        f(a, w2, c)
        check(c, a.astype("float64") @ w2, f"tuned for n={n}")
        # long repeats: the tuner measured with its workers paused, this process shares cores
        t = f.time_evaluator(number=1, repeat=5, min_repeat_ms=50)(a, w2, c).median
        print(f"  tuned kernel at n={n}: {2.0 * n * 64 * 64 / t / 1e9:.2f} GFLOP/s; "
              "result matches numpy")
        # the kernel tuned for this n is still one kernel for every n
        for other in (1, n + 3):
            a2 = rng.uniform(-1, 1, (other, 64)).astype("float32")
            c2 = np.full((other, 64), np.nan, "float32")
            f(a2, w2, c2)
            check(c2, a2.astype("float64") @ w2, f"tuned for n={n}, run at n={other}")
        print(f"  the same kernel at n=1 and n={n + 3}: results match numpy")
    print(f"records in {log}")


if __name__ == "__main__":
    main()
