"""Autotuning a matmul: write a template, tune it, build the best record.

Tutorial 02 wrote schedules by hand. Here the schedule has *knobs* (tile sizes, loop order,
unrolling) and the autotuner searches their product for the fastest kernel on this CPU:

1. a template: a function that declares knobs on ``autotune.get_config()`` and returns
   ``(schedule, tensors)``;
2. its space: every combination of knob values, indexed lazily;
3. ``autotune.tune``: candidates are built in worker processes and timed one at a time;
   every trial goes to a JSON Lines records file;
4. ``autotune.apply_history_best``: calling the template inside it builds the best record.

Run: ``python tutorials/03_autotune_matmul.py [--n 512] [--trials 32]``. The same search
from a shell, for the built-in template: ``polytile tune matmul --args 512,512,512``.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import polytile
from polytile import autotune, te


# --- 1. the template -----------------------------------------------------------------------
@autotune.template("tutorial_matmul", default_args=(512, 512, 512),
                   flops=lambda M, N, K: 2.0 * M * N * K)
def matmul_template(M: int, N: int, K: int, dtype: str = "float32"):
    """C = A @ B with a register-blocked inner kernel: every knob has a hand-written
    default (``default=``), used when there is no tuning record."""
    cfg = autotune.get_config()
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    # rows: blocks of I1 * I2; the I2 rows of a block are unrolled (registers)
    cfg.define_split("tile_i", i, num_outputs=3, max_factor=32, default=[-1, 8, 8])
    # columns: the innermost J2 become SIMD lanes (8, 16 or 32 floats)
    cfg.define_split("tile_j", j, num_outputs=3, max_factor=64,
                     filter=lambda e: e.size[-1] in (8, 16, 32), default=[-1, 4, 32])
    cfg.define_split("tile_k", k, num_outputs=2, max_factor=256, default=[-1, 64])
    i0, i1, i2 = cfg["tile_i"].apply(s, C, i)
    j0, j1, j2 = cfg["tile_j"].apply(s, C, j)
    k0, k1 = cfg["tile_k"].apply(s, C, k)
    # the order of the cache-block loops is a knob too
    cfg.define_reorder("order", [k0, i1, j1], policy="all", default=[0, 1, 2])
    mid = cfg["order"].apply(s, C, [k0, i1, j1])
    s[C].reorder(i0, j0, *mid, k1, i2, j2)
    cfg.define_annotate("unroll", [i2], policy="try_unroll", default=["unroll"])
    cfg["unroll"].apply(s, C, [i2])
    s[C].vectorize(j2)
    s[C].parallel(s[C].fuse(i0, j0))
    return s, [A, B, C]


# The decorator registers the template by name in this process; worker processes load it
# from this file by path, so the tuner addresses it by path.
SPEC = f"{os.path.abspath(__file__)}:matmul_template"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512, help="matrix size (default 512)")
    ap.add_argument("--trials", type=int, default=32, help="tuning trials (default 32)")
    ap.add_argument("--log", default=None, help="records file (default: a temporary one)")
    args = ap.parse_args(argv)
    n = args.n
    workload = (n, n, n)
    tmpl = autotune.get_template(SPEC)

    # --- 2. the space ----------------------------------------------------------------------
    space = tmpl.space(workload)
    print(space)
    print("a random config:", space.get(12345 % len(space)))

    # --- 3. tune ---------------------------------------------------------------------------
    log = args.log or os.path.join(tempfile.mkdtemp(), "matmul.jsonl")

    def progress(res, rec):
        status = f"{res.flops / rec.cost / 1e9:7.1f} GFLOP/s" if rec.ok else rec.error
        print(f"  trial {res.n_trials:3d}: {status:>16}   best {res.gflops():7.1f} GFLOP/s")

    res = autotune.tune(SPEC, workload, tuner="model", n_trial=args.trials, log_file=log,
                        callbacks=[progress])
    print(f"tuned {res.n_trials} configs in {res.wall_s:.1f} s; records in {log}")
    print("best config:", res.best.config)

    # --- 4. build the best record and compare with numpy -----------------------------------
    with autotune.apply_history_best(log):
        s, tensors = tmpl(*workload)
    f = polytile.build(s, tensors, target="llvm")
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    c = np.full((n, n), np.nan, dtype="float32")
    f(a, b, c)
    ref = a.astype("float64") @ b.astype("float64")
    err = float(np.abs(c - ref).max())
    if not err < 1e-3:
        raise SystemExit(f"wrong result: max error {err:.3g}")
    print(f"result matches numpy (max error {err:.2e})")
    t = f.time_evaluator(number=1, repeat=5, min_repeat_ms=20)(a, b, c).median
    t_np = autotune.measure_numpy("matmul", workload)
    flops = 2.0 * n ** 3
    print(f"tuned polytile: {flops / t / 1e9:8.1f} GFLOP/s")
    print(f"numpy:          {flops / t_np / 1e9:8.1f} GFLOP/s  (ratio {t_np / t:.2f})")


if __name__ == "__main__":
    main()
