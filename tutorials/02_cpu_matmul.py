"""A CPU matmul from naive to blocked, vectorized, packed and parallel.

Each step prints its schedule's speed in GFLOP/s and the ratio to numpy (OpenBLAS) measured
in the same run, and checks the result. The steps follow the classic TVM tutorial "How to
optimize GEMM on CPU" (blocking for cache reuse, vectorizing the innermost loop, loop
permutation for stride-1 access, packing B into tiles, threads), then a register-blocked
micro-kernel, and last the whole BLAS recipe: both operands packed into panels inside the
cache blocks and a 6 x 64 AVX-512 micro-kernel (:func:`blas_like`).
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


def blas_like(M: int, N: int | None = None, K: int | None = None, *, mr: int | None = None,
              nr: int | None = None, kc: int | None = None, mc: int | None = None,
              nc: int | None = None,
              threads: bool | None = None, pack: bool | None = None,
              prefetch: bool | None = None, order: str | None = None):
    """The BLAS recipe (Goto & van de Geijn, TOMS 2008; BLIS, TOMS 2015) for
    ``C[M, N] = A[M, K] @ B[K, N]`` (float32; ``N`` and ``K`` default to ``M``).

    1. *Micro-kernel*: an ``mr x nr`` block of C lives in vector registers while ``k`` runs
       over a ``kc`` slice: per step, ``nr / 16`` loads of B, ``mr`` broadcasts of A and
       ``mr * nr / 16`` FMAs. AVX-512 has 32 registers of 16 floats: 6 x 64 (the
       default) and 12 x 32 both take 24 accumulators and leave room for the B vectors
       and a broadcast; 6 x 64 needs 10 loads per 24 FMAs where 12 x 32 needs 14, and
       ran 6 to 11 % faster on an AVX-512 Xeon (12 x 32 stays for small products).
    2. *Packing*: the micro-kernel reads ``packedB[p, kp, r] = B[kp, p * nr + r]`` and
       ``packedA[p, kp, r] = A[p * mr + r, kp]``: each panel contiguous in the order it is
       read, with no cache-set conflicts of power-of-two leading dimensions (1024 floats =
       4 KiB: the 12 rows of A would share one L1 set). Ragged panels are zero padded.
    3. *Cache blocks* and their loop order ``j0, k0, i0, j1, i1, k1, i2, j2``: a ``kc x nc``
       block of B is packed at ``k0`` and stays in L2/L3 for all row blocks; an
       ``mc x kc`` block of A is packed at ``i0`` and stays in L2 while ``j1`` walks the B
       panels; one ``kc x nr`` B panel (64 KiB at 6 x 64, mostly in L1) stays while ``i1``
       walks A's panels.
       ``compute_at`` writes each packed block right where it is read, so it never goes
       to memory. A's panels are stored in blocks of 16 steps of ``k``
       (``packedA[p, q, r, s] = A[p * mr + r, q * 16 + s]``) when those tile the ``kc``
       blocks: the copy then moves rows of 16 floats (one vector each) instead of
       transposing one element at a time, and ``k1`` is split by 16 (8 steps unrolled)
       so that the broadcasts read A at constant offsets. With a single ``kc`` block
       (``K <= kc``; ``kc`` defaults to all of K up to 1024) the order is ``j0, i0, j1,
       i1, i2, j2`` and B's block is packed at ``j0``: each micro-tile accumulates in a
       local ``mr x nr`` tile (``cache_write(C, "local")`` computed at ``i1``), zeroed and
       kept in registers for the whole k loop, then stored to C once. The full
       tiles of a ragged row block get constant-extent copies in lowering
       (``specialize_partial_unrolls``), so their accumulators stay in registers too.
    4. *Threads*: the column blocks ``j0`` (when there are at least two, else the row
       blocks ``i0``) run in parallel; the packed blocks computed inside are private to
       each thread. ``nc`` defaults to half of ``N`` (at most 2048): two column blocks,
       one per core of a 2-core machine, and A packed only twice.
    5. *Prefetch*: the micro-kernel's ``C`` tile is ``mr`` rows a whole row of ``C`` apart
       (``mr`` pages at ``N = 4096``), which no hardware prefetcher predicts; its first load
       would stall the k loop. ``s[C].prefetch(C, i1, 1)`` fetches the next tile's lines
       while the current one computes (about 3 % at 1024^3 and at 4096^3 here).

    6. *Order* ``"blis"``: BLIS's loops with the operands' roles swapped (here the vectors
       are B's rows and A's elements are broadcast): ``i0, k0, j0, i1, j1, k1, i2, j2``
       with a large block of A (``mc`` rows, packed at ``k0``, in L3) and a ``kc x nc``
       block of B that fits L2 (packed at ``j0``, ``nc = 256``): the ``mr x kc``
       micro-panel of A stays in L1 while ``j1`` streams B's panels from L2. As in BLIS,
       the block of A (``mc`` = all the rows, up to 4 MiB) is packed once and shared: the
       threads pack its panels together (a parallel loop at ``k0``), then split the
       column blocks ``j0`` below it, each packing the B blocks of its own columns.
       Faster at one thread where A is packed in blocks of 16 steps of k and ``nr``
       divides N (4096^3 0.92x -> 1.00x numpy, 256x4096x64 0.98x -> 1.13-1.21x);
       ``"goto"`` stays the default (as in the ``matmul`` template) until the blis
       order's two-thread figures are measured on a quiet machine.

    ``threads``, ``pack`` and ``prefetch`` default to ``True`` except for products of at
    most 64^3 multiply-adds, where waking threads and copying panels cost more than they
    save (the operands then fit in L1/L2 as they are).

    The ``matmul`` template's space holds this schedule (config ``tile_i=[-1, mc // mr,
    mr]``, ``tile_j=[-1, nc // nr, nr]``, ``tile_k=[-1, kc]``, both packs, ``order="goto"``,
    ``parallel="i0.j0"``), so the tuner can find it and its neighbours.
    """
    N = M if N is None else N
    K = M if K is None else K
    small = M * N * K <= 64**3
    threads = not small if threads is None else threads
    pack = not small if pack is None else pack
    prefetch = not small if prefetch is None else prefetch
    mr = (12 if small else 6) if mr is None else mr
    nr = (32 if small else 64) if nr is None else nr
    order = "goto" if order is None else order
    if order == "blis":
        # one block of A for all threads (all the rows, up to 4 MiB), blocks of B of up
        # to 4 tiles, at least two (one per thread)
        kc_ = min(K, 256) if small else K if K <= 1024 else 1024 if K % 1024 == 0 else 512
        kc_ = kc_ if kc is None else min(kc, K)
        pi = -(-M // mr)
        mc = mr * (pi if pi * mr * kc_ * 4 <= 4 << 20 else 64) if mc is None else mc
        nc = max(1, min(4, -(-(-(-N // nr)) // 2))) * nr if nc is None else nc
    # blocks of A of 96 x 512 with the 6 x 64 kernel: its 512 x 64 B panels (128 KiB)
    # stream from L2; 3 to 6 % faster than 192 x 256 at 1024^3 and 4096^3; 192 rows
    # when K is shorter (256x4096x64: 10 % faster than 96)
    # all of K as one block up to 1024: the C tile then starts from zero in registers and
    # is stored once (with two blocks, reloading it took about 6 % of a 1024^3 product);
    # past 1024, blocks of 1024 where they divide K: every block loads and stores the
    # whole of C, so 4096^3 makes 4 passes over C instead of 8 (2 % faster at 1 and 2
    # threads on a 2-core Zen 5)
    if kc is None:
        kc = 256 if small else K if K <= 1024 else 1024 if K % 1024 == 0 else 512
    # 192 rows with several blocks of 1024 (4096^3): each row block streams all of B's
    # block from L3 once, so twice the rows halve that traffic (5 to 7 % faster)
    if mc is None:
        mc = 192 if min(kc, K) < 512 or K > kc >= 1024 else 96
    if nc is None:
        nc = min(2048, nr * -(-N // (2 * nr)))
    # blocks no larger than the matrices (whole panels)
    mc, nc, kc = min(mc, mr * -(-M // mr)), min(nc, nr * -(-N // nr)), min(kc, K)
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    # A's panels in blocks of kb = 16 steps of k (when they tile the kc blocks): packing
    # copies rows of 16 (one vector each) instead of transposing element by element
    kb = 16 if pack and kc % 16 == 0 and K % kc == 0 else 1
    if kb > 1:
        packedA = te.compute((-(-M // mr), K // kb, mr, kb), lambda p, q, r, s: (
            te.if_then_else(p * mr + r < M, A[p * mr + r, q * kb + s], 0.0) if M % mr
            else A[p * mr + r, q * kb + s]), name="packedA")
    else:
        packedA = te.compute((-(-M // mr), K, mr), lambda p, kp, r: (
            te.if_then_else(p * mr + r < M, A[p * mr + r, kp], 0.0) if M % mr
            else A[p * mr + r, kp]), name="packedA")
    packedB = te.compute((-(-N // nr), K, nr), lambda p, kp, r: (
        te.if_then_else(p * nr + r < N, B[kp, p * nr + r], 0.0) if N % nr
        else B[kp, p * nr + r]), name="packedB")
    k = te.reduce_axis((0, K), name="k")
    if pack:
        def read_a(i, k):
            if kb > 1:
                return packedA[i // mr, k // kb, i % mr, k % kb]
            return packedA[i // mr, k, i % mr]

        C = te.compute((M, N), lambda i, j: te.sum(
            read_a(i, k) * packedB[j // nr, k, j % nr], axis=k), name="C")
    else:
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    single_k = kc >= K
    # one reduction block (goto order): the micro-tile accumulates in a local mr x nr tile
    # R, which LLVM keeps in registers (rows unrolled, lanes vectorized), and is stored
    # to C once; accumulating in C itself, its zeros went to memory and were loaded back
    # before the k loop (256x4096x64: 1.3x faster with R)
    R = s.cache_write(C, "local") if single_k and order != "blis" else C
    i, j = C.op.axis
    i0, i = s[C].split(i, factor=mc)
    i1, i2 = s[C].split(i, factor=mr)
    j0, j = s[C].split(j, factor=nc)
    j1, j2 = s[C].split(j, factor=nr)
    k0, k1 = s[R].split(s[R].op.reduce_axis[0], factor=kc)
    ri = i2  # the rows of R's micro-tile
    if order == "blis" and single_k:
        s[C].reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    elif order == "blis":
        s[C].reorder(i0, k0, j0, i1, j1, k1, i2, j2)
    elif single_k:
        # one reduction block: R's tile is computed (zeroed, then the whole k loop) at
        # each micro-tile of C, then stored (skinny and small products, K <= 1024)
        s[C].reorder(j0, i0, j1, i1, i2, j2)
        s[C].unroll(i2)
        s[R].compute_at(s[C], i1)
        ri, rj = s[R].op.axis
        s[R].reorder(k0, k1, ri, rj)
        s[R].vectorize(rj)
    else:
        s[C].reorder(j0, k0, i0, j1, i1, k1, i2, j2)
    if kb > 1:
        # the k steps of one A block unrolled (8 at a time: 16 copies of the 12-row body
        # pass the unroll limit) read A at constant offsets from the block
        k1, k1b = s[R].split(k1, factor=kb)
        s[R].unroll(s[R].split(k1b, factor=8)[1])
    s[R].unroll(ri)      # mr rows of accumulators...
    s[C].vectorize(j2)   # ...of nr lanes each (nr / 16 AVX-512 registers per row)
    if prefetch:  # the next micro-tile of C, while this one computes
        s[C].prefetch(C, j1 if order == "blis" else i1, 1)
    if threads and order == "blis":
        # below the block of A, which all threads share: each thread packs the blocks of
        # B of its own columns
        s[C].parallel(j0)
    elif threads:
        s[C].parallel(j0 if -(-N // nc) >= 2 else i0)
    if pack:
        blis = order == "blis"
        s[packedB].compute_at(s[C], j0 if single_k or blis else k0)
        s[packedB].vectorize(packedB.op.axis[2])
        s[packedA].compute_at(s[C], k0 if blis and not single_k else i0)
        if threads and blis:  # the threads pack the shared block of A together
            s[packedA].parallel(packedA.op.axis[0])
        if kb > 1:
            s[packedA].vectorize(packedA.op.axis[3])
    return s, [A, B, C]


def best(n):
    """The fastest schedule of this tutorial (used by ``benchmarks/cpu_matmul.py``)."""
    return blas_like(n)


STEPS = [
    ("naive", naive),
    ("blocked 32x32, k split by 4", blocked),
    ("+ vectorize j.inner", vectorized),
    ("+ loop permutation (k before i.inner)", permuted),
    ("+ packed B", packed),
    ("+ parallel", lambda n: packed(n, threads=True)),
    ("register tile 8x32 (no packing)", register_tiled),
    ("+ parallel", lambda n: register_tiled(n, threads=True)),
    ("BLAS-like: packed panels, 6x64 kernel", lambda n: blas_like(n, threads=False)),
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
    # the anchor once more: on a shared machine a burst of load during the first timing
    # (seen: 0.1 GFLOP/s at n=131, load 10 on 2 cores) would make every ratio above wrong
    t_again = measure_numpy_isolated("matmul", [n, n, n], threads=args.threads)["median"]
    print(f"numpy again:      {gflops(n, t_again):8.1f} GFLOP/s")
    if max(t_np, t_again) > 1.25 * min(t_np, t_again):
        print(f"warning: numpy's time moved from {t_np * 1e3:.3f} ms to {t_again * 1e3:.3f} ms "
              "during the run (the machine's load changed): the ratios above are indicative "
              "only; run again on a quieter machine")


if __name__ == "__main__":
    main()
