"""A CPU matmul from naive to blocked, vectorized, packed and parallel.

Each step prints its schedule's speed in GFLOP/s and the ratio to numpy (OpenBLAS) measured
in the same run, and checks the result. The steps follow the classic TVM tutorial "How to
optimize GEMM on CPU" (blocking for cache reuse, vectorizing the innermost loop, loop
permutation for stride-1 access, packing B into tiles, threads), then a register-blocked
micro-kernel.
Run: ``python tutorials/02_cpu_matmul.py [--n 1024] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import polytile
from polytile import te

BN = 32   # block size of the output tile (rows and columns)
VEC = 16  # float32 lanes of one AVX-512 register
KU = 4    # unroll/split factor of the reduction


def matmul(n: int):
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` for n x n float32 matrices."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def naive(n):
    A, B, C, k = matmul(n)
    return te.create_schedule(C.op), [A, B, C]


def blocked(n):
    A, B, C, k = matmul(n)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], BN, BN)
    ko, ki = s[C].split(k, factor=KU)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    return s, [A, B, C]


def vectorized(n):
    s, args = blocked(n)
    C = args[2]
    st = s[C]
    io, jo, ko, ki, ii, ji = st.leaf_iter_vars
    st.vectorize(ji)
    return s, args


def permuted(n):
    """Inner loops (k, i, j): the vectorized j reads B and C with stride 1."""
    A, B, C, k = matmul(n)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], BN, BN)
    ko, ki = s[C].split(k, factor=KU)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    return s, [A, B, C]


def packed(n, threads: bool = False):
    """B repacked into [n/BN, n, BN] tiles so the inner loop walks contiguous memory."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    nb = -(-n // BN)
    packedB = te.compute((nb, n, BN), lambda x, y, z: te.if_then_else(
        x * BN + z < n, B[y, x * BN + z], 0.0), name="packedB")
    C = te.compute((n, n), lambda i, j: te.sum(
        A[i, k] * packedB[j // BN, k, j % BN], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], BN, BN)  # j tiles match the packing
    ko, ki = s[C].split(k, factor=KU)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    x, y, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    if threads:
        s[C].parallel(io)
        s[packedB].parallel(x)
    return s, [A, B, C]


def register_tiled(n, threads: bool = False, rows: int = 8, cols: int = 32):
    """A ``rows`` x ``cols`` tile of C kept in vector registers across the whole k loop:
    the row and column-vector loops are unrolled below k, so every A element loaded is
    broadcast into ``cols / VEC`` fused multiply-adds (the micro-kernel of Goto & van de
    Geijn, TOMS 2008; BLIS's register blocking)."""
    A, B, C, k = matmul(n)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=rows)
    jo, ji = s[C].split(j, factor=cols)
    jv, jl = s[C].split(ji, factor=VEC)
    s[C].reorder(io, jo, k, ii, jv, jl)
    s[C].unroll(ii)
    s[C].unroll(jv)
    s[C].vectorize(jl)
    if threads:
        s[C].parallel(io)
    return s, [A, B, C]


def best(n):
    """The fastest schedule of this tutorial (used by ``benchmarks/cpu_matmul.py``)."""
    return register_tiled(n, threads=True)


STEPS = [
    ("naive", naive),
    ("blocked 32x32, k split by 4", blocked),
    ("+ vectorize j.inner", vectorized),
    ("+ loop permutation (k before i.inner)", permuted),
    ("+ packed B", packed),
    ("+ parallel", lambda n: packed(n, threads=True)),
    ("register tile 8x32 (no packing)", register_tiled),
    ("+ parallel (best)", best),
]


def gflops(n: int, seconds: float) -> float:
    return 2.0 * n**3 / seconds / 1e9


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024, help="matrix size (default 1024)")
    ap.add_argument("--threads", type=int, default=None,
                    help="OpenMP threads for parallel steps (default: all cores)")
    ap.add_argument("--skip-naive", action="store_true", help="skip the slow naive step")
    args = ap.parse_args(argv)
    n = args.n
    if args.threads:
        polytile.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    ref = a.astype("float64") @ b.astype("float64")
    # numpy is timed in a process of its own: OpenBLAS threads keep spinning after a call
    # and would slow the kernels timed here
    from polytile.autotune.tune import measure_numpy_isolated

    t_np = measure_numpy_isolated("matmul", [n, n, n], threads=args.threads)["median"]
    print(f"numpy (OpenBLAS): {gflops(n, t_np):8.1f} GFLOP/s")
    for title, make in STEPS:
        if args.skip_naive and make is naive:
            continue
        s, targs = make(n)
        t0 = time.perf_counter()
        f = polytile.build(s, targs, target="llvm")
        t_build = time.perf_counter() - t0
        c = np.full((n, n), np.nan, dtype="float32")
        f(a, b, c)
        err = np.abs(c - ref).max() / np.abs(ref).max()
        if not err < 1e-5:
            raise SystemExit(f"{title}: wrong result (relative error {err:.2e})")
        t = f.time_evaluator(number=1, repeat=3, min_repeat_ms=50)(a, b, c).median
        print(f"{title:42s} {gflops(n, t):8.1f} GFLOP/s  {t_np / t:6.3f} x numpy  "
              f"(build {t_build:.2f} s)")


if __name__ == "__main__":
    main()
