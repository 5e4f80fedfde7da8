"""Built-in templates: dense linear algebra (``matmul``, ``batch_matmul``); the neural-network
ones live in :mod:`.templates_nn`. Each has default sizes, a numpy reference and a
hand-written default config (the ``default=`` of its knobs).

The CPU matmul space follows the BLAS recipe (Goto & van de Geijn, TOMS 2008; BLIS, Van Zee
& van de Geijn, TOMS 2015). The output is tiled ``i = i0 * I1 * I2 + i1 * I2 + i2``,
``j = j0 * J1 * J2 + j1 * J2 + j2``, ``k = k0 * K1 + k1``: the ``I2 x J2`` block of
accumulators (the *micro-kernel*, ``MR x NR`` in BLIS's words) stays in vector registers
(``j2`` vectorized, ``i2`` unrolled) while ``k1`` runs; ``I1 * I2`` (``MC``), ``J1 * J2``
(``NC``) and ``K1`` (``KC``) are the cache blocks. Knobs:

* ``tile_i``, ``tile_j``, ``tile_k``: the splits. Besides the divisors of the extent they
  offer register shapes that leave a ragged last tile (``I2`` of 6, 12 or 14 rows, ``J2`` of
  16 to 64 lanes): with 32 AVX-512 registers a block of 24 float32 accumulators is the
  usual best, whatever divides M. The default is 6 x 64 (4 loads of B and 6 broadcasts of
  A per k: 10 loads for 24 FMAs, where 12 x 32 needs 14): 6 to 11 % faster than 12 x 32
  at 1024^3, 4096^3 and 256x4096x64 on an AVX-512 Xeon (one thread), 12 x 32 stays the
  default of small products.
* ``pack_a`` / ``pack_b``: copy A into ``[ceil(M / I2), K, I2]`` and B into
  ``[ceil(N / J2), K, J2]`` panels (zero padded), so that the micro-kernel reads both with
  stride 1 and no cache-set conflicts of power-of-two leading dimensions. When 16 divides
  ``K1`` and ``K1`` divides K, A's panels are ``[ceil(M / I2), K / 16, I2, 16]`` instead
  (:func:`a_kblock`): packing copies rows of 16 (whole vectors) rather than transposing
  element by element (which vectorizes only as scatters: 10 % of a 1024^3 product), and
  ``k1`` is split by 16 with 8 steps unrolled, so the broadcasts read A at constant
  offsets.
* ``order``: ``"ij"`` runs ``i0, j0, <reorder of k0 i1 j1>, k1, i2, j2`` with the panels
  packed once for the whole matrix (root stages, their outer loop parallel); ``"goto"``
  runs BLAS's ``j0, k0, i0, j1, i1, k1, i2, j2`` with the B panels of one ``KC x NC``
  block packed at ``k0`` and the A panels of one ``MC x KC`` block packed at ``i0``
  (``compute_at``): each packed block is written where it is read, so it stays in cache
  (B's block in L2/L3 for the whole ``i0`` loop, A's block in L2 for the whole ``j1``
  loop, one ``KC x NR`` B panel in L1 for the whole ``i1`` loop). When ``KC`` covers K
  (one reduction block; the default up to K = 1024, :func:`default_kc`) B's block is
  packed at ``j0`` and each micro-tile accumulates in a local ``mr x nr`` tile, zeroed
  and kept in registers for its whole k loop, then stored to C once
  (:func:`register_tile`). With several reduction blocks C is zeroed in a
  pass of its own, and every block loads the micro-tile of C before its k loop
  (prefetched one tile ahead) and stores it after: the zeroing pass measured 0.14 ms of
  a 12 ms 1024^3 product and 8.6 ms of 780 ms at 4096^3 (about 1 %, one thread), far
  from the 15 % once estimated for "accumulate from zero, add C after the k loop".
  ``"blis"`` runs BLIS's loops with the roles of the operands swapped (row-major C,
  vectors along ``j``): ``i0, k0, j0, i1, j1, k1, i2, j2``, A's ``MC x KC`` block packed
  at ``k0`` (large: half or all of the rows, in L3), B's ``KC x NC`` block at ``j0``
  (``NC`` of 3 or 6 tiles: in L2), so the ``mr x KC`` A micro-panel that ``j1`` reuses
  stays in L1 while the B panels stream from L2.
  With ``parallel="i0.j0"`` A's block is BLIS's shared one: packed once, by all threads
  together, and the threads split ``j0`` below it, each packing the blocks of B of its own
  columns (:func:`blis_knobs`). Not the default yet (the figures are beside the
  ``order`` knob).
* ``parallel``: which loop the threads share: ``i0``, ``j0`` or both fused (``"i0.j0"``;
  in the ``goto`` order, where they are not adjacent, ``j0`` when it has at least two
  iterations, else ``i0``; in the ``blis`` order the panels of A's shared block, then
  ``j0``), or ``"none"`` (forced for products of at most :data:`SERIAL_PRODUCT`
  multiply-adds, :func:`serial_product`, where waking the threads costs
  more than the work). A packed block computed inside the parallel loop is private to
  each thread.
* Not a knob: above :data:`SMALL_PRODUCT` the next micro-tile of ``C`` is prefetched at
  ``i1`` (``s[C].prefetch(C, i1, 1)``): its rows are a row of ``C`` apart, which the
  hardware prefetchers do not follow, and its first load would stall the k loop.
* ``unroll`` (``k1``, ``i2``) and ``reorder`` (of ``k0, i1, j1`` in the ``ij`` order, of
  ``i0, j1, i1`` in the ``goto`` order).
"""

from __future__ import annotations

import numpy as np

from polytile import te

from .template import get_config, template

#: Vector widths (lanes) the inner j loop may take.
LANES = (8, 16, 32, 64)
#: Register rows of a micro-kernel offered even when they do not divide M (AVX-512 float32:
#: 12 x 32 and 14 x 32 hold 24 and 28 accumulators, 6 x 64 holds 24).
REG_ROWS = (4, 6, 8, 12, 14, 16)
#: Lanes of a micro-kernel offered even when they do not divide N.
REG_LANES = (16, 32, 48, 64)
#: Products of at most this many multiply-adds (64^3 and below) get a default config
#: without packing or threads: both cost more than they save there.
SMALL_PRODUCT = 1 << 18
#: Products of at most this many multiply-adds (batches included) run without parallel
#: loops whatever the ``parallel`` knob says (:func:`serial_product`). Tests set it to 0
#: to check the parallel paths on small, cheap products.
SERIAL_PRODUCT = SMALL_PRODUCT
#: Reduction blocks offered even when they do not divide K.
K_BLOCKS = (32, 64, 128, 192, 256, 384, 512)
#: Reduction extents up to which the default config takes the whole of K as one block
#: (:func:`default_kc`).
WHOLE_K = 1024


def default_kc(M: int, N: int, K: int) -> int:
    """The default reduction block ``kc``: all of ``K`` up to :data:`WHOLE_K`, else
    :data:`WHOLE_K` where it divides ``K``, else 512 (256 for products of at most
    :data:`SMALL_PRODUCT` multiply-adds).

    With one reduction block the micro-tile of ``C`` starts from zero in its k loop and is
    stored once; with several, ``C`` is zeroed in a pass of its own and every block loads
    the tile back. On a 2-core Zen 5 (one thread, CPU time, A/B rounds) 1024^3 went from
    0.94x to 0.98x numpy's SkylakeX kernel with ``kc`` 512 -> 1024: the tile loads of
    the second block, 24 lines rows 4 KiB apart that the B panel streaming through L1
    had evicted, took about 6 % of the samples (perf). The 1024 x 64 B panel (256 KiB)
    and the 96 x 1024 A block (384 KiB) still fit a 1 MiB L2 together.

    Past :data:`WHOLE_K` the blocks of 1024 (where they divide ``K``, so that A keeps its
    panels in k blocks of 16, :func:`a_kblock`) halve the passes over ``C`` that 512 takes:
    at 4096^3 each block loads and stores all of ``C`` (64 MiB, from memory), 4 times
    instead of 8. On the same machine (4096^3, 9 interleaved A/B rounds, CPU time, load
    6-19, unpinned numpy) 512 -> 1024 went from 1.01x to 1.02x numpy at one thread and
    from 1.03x to 1.05x at two (medians; the minima 1.01 -> 1.03, 1.03 -> 1.06).
    """
    if M * N * K <= SMALL_PRODUCT:
        return min(K, 256)
    if K <= WHOLE_K:
        return K
    return WHOLE_K if K % WHOLE_K == 0 else 512


def _lane_ok(n: int):
    """Inner split sizes allowed for a vectorized axis of extent ``n`` (a predicate on the
    size): widths from :data:`LANES` dividing ``n``, or any divisor up to 64 when none
    does."""
    ok = [w for w in LANES if n % w == 0]
    if ok:
        return lambda f: f in ok
    return lambda f: f <= 64


def _lane_filter(n: int):
    """:func:`_lane_ok` as a filter of split entities (on their innermost size)."""
    ok = _lane_ok(n)
    return lambda e: ok(e.size[-1])


def _divisors(n: int, limit: int) -> list:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _pow2(limit: int) -> list:
    return [1 << k for k in range(0, max(1, limit).bit_length()) if 1 << k <= limit]


def _block_candidates(n: int, inner: list, outer_max: int, ok=lambda f2: True) -> list:
    """``[-1, f1, f2]`` splits of an extent ``n``: the divisor pairs (``f1 * f2`` dividing
    ``n``, each at most 64) whose ``f2`` passes ``ok``, then the register sizes ``inner``
    that leave a ragged tile, each with power-of-two ``f1`` up to ``outer_max`` (product at
    most ``n``) and with the ``f1`` of a single block; for every register size, blocks of
    all the tiles, of half of them, and of 3, 4 or 6 tiles."""
    out = []
    for f2 in _divisors(n, 64):
        if ok(f2):
            out += [[-1, f1, f2] for f1 in _divisors(n // f2, 64)]
            if f2 in inner:
                out += [[-1, f1, f2] for f1 in dict.fromkeys((n // f2, -(-n // (2 * f2))))
                        if [-1, f1, f2] not in out]
    for f2 in inner:
        if f2 <= n and n % f2:
            f1s = [f1 for f1 in _pow2(outer_max) if f1 * f2 <= n]
            # one block of all the panels, and two blocks of half of them (the blis order's
            # blocks of A, one per thread), whatever their size
            whole = -(-n // f2)
            f1s += [f for f in dict.fromkeys((-(-whole // 2), whole))
                    if f not in f1s and f * f2 <= n + f2 - 1]
            out += [[-1, f1, f2] for f1 in f1s]
    for f2 in inner:
        # blocks of 3, 4 and 6 register tiles (256 columns of 64 lanes: the blis order's
        # block of B, kc x nc in L2) that leave a ragged last block
        out += [[-1, f1, f2] for f1 in (3, 4, 6) if f1 * f2 <= n and n % (f1 * f2)
                and [-1, f1, f2] not in out]
    return out


def _k_candidates(k: int) -> list:
    """``[-1, f]`` splits of the reduction extent: divisors up to :data:`WHOLE_K` and the
    blocks of :data:`K_BLOCKS` below ``k``."""
    return [[-1, f] for f in _divisors(k, WHOLE_K)] + [[-1, f] for f in K_BLOCKS
                                                     if f < k and k % f]


def _define_gemm_knobs(cfg, M: int, N: int, K: int, batch: bool = False) -> None:
    """The knobs of the matmul space (module docstring); the default is the 6 x 64 BLAS
    micro-kernel with both operands packed, in the Goto order, blocks of 96 x kc of A
    and kc x N/2 of B (``kc``: all of K up to 1024, else 1024 or 512, :func:`default_kc`; at
    most 2048 columns: two column blocks for two threads) or the whole matrix when
    smaller; for products of at most :data:`SMALL_PRODUCT` multiply-adds the
    12 x 32 micro-kernel without packing or threads (``blas_like`` of
    ``tutorials/02_cpu_matmul.py``)."""
    small = M * N * K <= SMALL_PRODUCT
    mr, nr = default_micro_kernel(M, N, K)
    # 6 x 64: A blocks of 96 x 512, B panels of 512 x 64 (128 KiB, streamed from L2): 3 to
    # 6 % faster than 192 x 256 at 4096^3 (CPU time, one thread); 192 rows when K is
    # shorter (256x4096x64: 10 % faster than 96), and with several reduction blocks of
    # 1024 (4096^3): each row block streams all of B's kc x nc block from L3 through L2
    # once, so 192 rows halve that traffic; A's block (768 KiB) may spill to L3, but the
    # micro-kernel reads A at one float per 16 of B. 4096^3 (2-core Zen 5, CPU time, 6-7
    # interleaved rounds, load 5-26, unpinned numpy; medians of two runs): 96 -> 192
    # rows 0.97-1.00x -> 1.02-1.05x numpy at one thread, 1.00-1.03x -> 1.07-1.10x at two
    kc = default_kc(M, N, K)
    mc = 192 if kc < 512 or K > kc >= WHOLE_K else 96
    cfg.define_split("tile_i", M, policy="candidate", num_outputs=3,
                     candidate=_block_candidates(M, list(REG_ROWS), 64,
                                                 ok=lambda f2: f2 <= 32),
                     default=[-1, min(mc // mr, -(-M // mr)), mr])
    cfg.define_split("tile_j", N, policy="candidate", num_outputs=3,
                     candidate=_block_candidates(N, list(REG_LANES), 64,
                                                 ok=_lane_ok(N)),
                     default=[-1, min(2048 // nr, -(-N // (2 * nr))), nr])
    cfg.define_split("tile_k", K, policy="candidate", candidate=_k_candidates(K),
                     default=[-1, kc])
    cfg.define_knob("pack_a", [False, True], default=not small)
    cfg.define_knob("pack_b", [False, True], default=not small)
    # blis is faster at one thread where A is packed in k blocks of 16 (CPU time, load
    # 7-25: 4096^3 0.92x -> 1.00x numpy, 256x4096x64 0.98x -> 1.13-1.21x; ragged N
    # slower: 1024x1003x1024 0.95x -> 0.90x). Its two-thread figure (1024^3, quiet: 168
    # / 154 GFLOP/s at 1 / 2 threads, goto 163 / 302, numpy 158 / 290) was that of one
    # thread: a parallel loop of two ragged iterations was split into two pieces of serial
    # code by full-tile isolation (fixed in schedule/tree.py), and each thread packed all
    # of B; A's block is now shared ("i0.j0"). goto stays the default until blis's two-
    # thread figures are measured on a quiet machine
    cfg.define_knob("order", ["ij", "goto", "blis"], default="goto")
    if batch:
        cfg.define_knob("parallel", ["b", "b.i0", "b.i0.j0", "none"], default="b.i0")
    else:
        cfg.define_knob("parallel", ["i0", "i0.j0", "j0", "none"],
                        default="none" if small else "i0.j0")


#: Bytes of the block of A that the blis order packs once for all threads (``mc x kc``
#: float32): all the rows up to this size, else the largest block that fits (in L3).
BLIS_A_BLOCK = 4 << 20


def blis_knobs(M: int, N: int, K: int) -> dict:
    """Knob values of the blis order (module docstring) for ``M x N x K``, to overlay on
    the default config: the default micro-kernel and ``kc``; one block of A's row panels
    for all threads (all of them when ``mc x kc`` takes at most :data:`BLIS_A_BLOCK`
    bytes, else the largest candidate block that fits), packed by the threads together;
    blocks of B of up to 4 tiles (256 columns of the 6 x 64 kernel: ``kc x nc`` = 512
    KiB, in L2), at least two of them where there are two tiles, shared out among the
    threads (``parallel="i0.j0"``)."""
    mr, nr = default_micro_kernel(M, N, K)
    pj = -(-N // nr)
    kc = default_kc(M, N, K)
    out = dict(order="blis", parallel="i0.j0")
    # (smaller matrices than a register tile keep the default's tiles)
    if M >= mr:
        cands = sorted({c[1] for c in _block_candidates(M, list(REG_ROWS), 64,
                                                        ok=lambda f2: f2 <= 32)
                        if c[2] == mr})
        fit = [f for f in cands if f * mr * kc * 4 <= BLIS_A_BLOCK]
        out["tile_i"] = [-1, max(fit) if fit else cands[0], mr]
    if N >= nr:
        out["tile_j"] = [-1, max(1, min(4, -(-pj // 2))), nr]
    return out


def default_micro_kernel(M: int, N: int, K: int) -> tuple[int, int]:
    """``(mr, nr)`` of the default micro-kernel: 6 x 64 (module docstring), 12 x 32 for
    products of at most :data:`SMALL_PRODUCT` multiply-adds."""
    return (12, 32) if M * N * K <= SMALL_PRODUCT else (6, 64)


def _pad(cond, value, ragged: bool):
    """``value``, guarded by ``cond`` (zero elsewhere) only when the panels are ragged."""
    return te.if_then_else(cond, value, 0.0) if ragged else value


#: Reduction elements of one packed A block (:func:`_packed_operands`): one vector of
#: float32 lanes, so that packing copies whole vectors.
A_KBLOCK = 16


def a_kblock(K: int, kc: int) -> int:
    """The ``kb`` of A's packed layout for reduction extent ``K`` and blocks of ``kc``:
    :data:`A_KBLOCK` when it divides ``kc`` and ``kc`` divides ``K`` (every packed block
    then lies in one ``kc`` block and every ``k1`` loop is whole), else 1 (the plain
    panel: a ragged last ``kc`` block split by 16 ran at half the speed, 1021x1003x1009)."""
    return A_KBLOCK if kc % A_KBLOCK == 0 and K % kc == 0 else 1


def _packed_operands(A, B, mr: int, nr: int, pack_a: bool, pack_b: bool, kb: int = 1):
    """The micro-kernel's operands: ``A`` or its panels ``packedA[(b,) ceil(M/mr),
    ceil(K/kb), mr, kb]`` (``packedA[p, q, r, s] = A[p * mr + r, q * kb + s]``), ``B`` or
    ``packedB[(b,) ceil(N/nr), K, nr]`` (``packedB[p, kp, r] = B[kp, p * nr + r]``), zero
    padded; and the read functions ``read_a(b, i, k)``, ``read_b(b, k, j)`` of the product
    (``b`` a tuple of batch indices).

    With ``kb = 1`` an A panel is the ``mr`` elements of each ``k`` in turn (BLIS's
    layout): packing it is a transpose, which the vectorizer can only do with scatters.
    With ``kb = 16`` the panel holds ``mr`` rows of 16 consecutive ``k`` per block: the
    copy moves whole rows of 16 (one vector load and store each) and the micro-kernel's
    broadcasts of one ``k`` are ``kb`` elements apart, all within the block's ``mr``
    cache lines, which the next 15 steps of ``k`` read again."""
    M, K = A.shape[-2:]
    N = B.shape[-1]
    ra, rb = M % mr != 0, N % nr != 0
    PA = PB = None
    nq = -(-K // kb)

    def a_at(b, p, q, r, s):
        i, k = p * mr + r, q * kb + s
        if K % kb:
            cond = te.all(i < M, k < K) if ra else k < K
        else:
            cond = i < M
        return _pad(cond, A[(*b, i, k)], ra or K % kb != 0)

    if pack_a and kb == 1 and len(A.shape) == 2:
        PA = te.compute((-(-M // mr), K, mr), lambda p, kp, r: _pad(
            p * mr + r < M, A[p * mr + r, kp], ra), name="packedA")
    elif pack_a and kb == 1:
        PA = te.compute((A.shape[0], -(-M // mr), K, mr), lambda b, p, kp, r: _pad(
            p * mr + r < M, A[b, p * mr + r, kp], ra), name="packedA")
    elif pack_a and len(A.shape) == 2:
        PA = te.compute((-(-M // mr), nq, mr, kb),
                        lambda p, q, r, s: a_at((), p, q, r, s), name="packedA")
    elif pack_a:
        PA = te.compute((A.shape[0], -(-M // mr), nq, mr, kb),
                        lambda b, p, q, r, s: a_at((b,), p, q, r, s), name="packedA")
    if pack_b and len(B.shape) == 2:
        PB = te.compute((-(-N // nr), K, nr), lambda p, kp, r: _pad(
            p * nr + r < N, B[kp, p * nr + r], rb), name="packedB")
    elif pack_b:
        PB = te.compute((B.shape[0], -(-N // nr), K, nr), lambda b, p, kp, r: _pad(
            p * nr + r < N, B[b, kp, p * nr + r], rb), name="packedB")

    def read_a(b, i, k):
        if not pack_a:
            return A[(*b, i, k)]
        if kb == 1:
            return PA[(*b, i // mr, k, i % mr)]
        return PA[(*b, i // mr, k // kb, i % mr, k % kb)]

    def read_b(b, k, j):
        return PB[(*b, j // nr, k, j % nr)] if pack_b else B[(*b, k, j)]

    return PA, PB, read_a, read_b


def register_tile(cfg, C) -> bool:
    """Whether the template accumulates each micro-tile of the product stage ``C`` in a
    local ``mr x nr`` tile (``cache_write(C, "local")`` computed at the innermost
    cache-block loop; in registers once its rows are unrolled and its lanes vectorized)
    and stores it to ``C`` once: in the goto order with one reduction block
    (``tile_k`` covering K).

    Why: accumulating in ``C`` itself, the generated code stores the tile's zeros to
    memory and loads them back before the k loop (LLVM does not forward them across the
    promotion of the accumulators to registers). On a 2-core Zen 5 (one thread, CPU time,
    1024^3, two runs) the local tile ran at 199-202 GFLOP/s against 183-185. With several
    reduction blocks the tile must be reloaded between blocks, so C stays the
    accumulator there."""
    return (cfg["order"].val == "goto"
            and cfg["tile_k"].size[1] >= C.op.reduce_axis[0].dom.extent)


def serial_product(C) -> bool:
    """Whether the product stage ``C`` (``[(batch,) M, N]``, one reduction axis ``K``) has
    at most :data:`SERIAL_PRODUCT` multiply-adds in all (batches included), so that the
    template schedules it without parallel loops whatever its ``parallel`` knob says.

    Why: a parallel region wakes the team's threads, which polytile's runtime lets sleep
    between regions (``OMP_WAIT_POLICY=passive``, :func:`polytile.targets.llvm.runtime.
    omp_environment`), and the caller then waits for the slowest thread at the join. On
    an idle 2-core VM (the woken thread's vCPU halted) the blis order's config at 64^3
    (``blis_knobs``: ``j0`` parallel, 2 iterations of 32 columns, about 2 us of work
    each) took about 70 us a call at 2 threads against 4.5 us at 1 (7.3 vs 106
    GFLOP/s, issue 13); back to back on a busy machine 8 vs 5 us. The default config already
    chose ``parallel="none"`` there; the other values of the knob now do the same."""
    try:
        sizes = [int(x) for x in C.shape] + [int(C.op.reduce_axis[0].dom.extent)]
    except TypeError:   # a symbolic size (te.size_var): no bound on the work
        return False
    return int(np.prod(sizes)) <= SERIAL_PRODUCT


def _schedule_gemm(cfg, s, C, PA, PB, batch=None, kb: int = 1) -> None:
    """Apply the matmul knobs to the product stage ``C`` (and its packing stages), with
    ``batch`` the batch axis of a batched product (outermost, parallel) and ``kb`` the
    k block of A's packed panels (:func:`_packed_operands`)."""
    order = cfg["order"].val
    par = cfg["parallel"].val
    if serial_product(C):
        # too little work to pay for waking a thread: every config runs serially there
        # (see serial_product)
        par = "none"
    single_k = cfg["tile_k"].size[1] >= C.op.reduce_axis[0].dom.extent
    # the stage that runs the reduction: C itself, or, with one reduction block in the
    # goto order, an accumulator tile (register_tile)
    R = s.cache_write(C, "local") if register_tile(cfg, C) else C
    *_, i, j = C.op.axis
    i0, i1, i2 = cfg["tile_i"].apply(s, C, i)
    j0, j1, j2 = cfg["tile_j"].apply(s, C, j)
    k0, k1 = cfg["tile_k"].apply(s, R, s[R].op.reduce_axis[0])
    ri = i2  # the register rows of the reduction stage
    lead = [batch] if batch is not None else []
    # "ij": any order of the cache-block loops k0, i1, j1 below i0, j0; "goto": any order
    # of i0, j1, i1 below j0, k0 (the default, i0 j1 i1, is BLIS's)
    cfg.define_reorder("reorder", [k0, i1, j1], policy="all", default=[0, 1, 2])
    if order == "ij":
        mid = cfg["reorder"].apply(s, C, [k0, i1, j1])
        s[C].reorder(*lead, i0, j0, *mid, k1, i2, j2)
    elif order == "blis":
        # BLIS's loops with the operands' roles swapped (row-major C, vectors along j):
        # the broadcast operand's micro-panel (mr x kc of A) stays in L1 while j1 streams
        # the vector operand's panels (kc x nr of B) from an L2-sized block of B
        mid = cfg["reorder"].apply(s, C, [j0, i1, j1])
        if single_k:
            s[C].reorder(*lead, i0, *mid, k0, k1, i2, j2)
        else:
            s[C].reorder(*lead, i0, k0, *mid, k1, i2, j2)
    elif R is not C:
        # one reduction block: the micro-tile accumulates in a local mr x nr tile (in
        # registers once unrolled and vectorized), computed at the innermost cache-block
        # loop, then stored to C once
        mid = cfg["reorder"].apply(s, C, [i0, j1, i1])
        s[C].reorder(*lead, j0, *mid, i2, j2)
        s[C].unroll(i2)
        s[R].compute_at(s[C], mid[-1])
        *rb, ri, rj = s[R].op.axis
        s[R].reorder(*rb, k0, k1, ri, rj)
        s[R].vectorize(rj)
    else:
        mid = cfg["reorder"].apply(s, C, [i0, j1, i1])
        if single_k:
            # one reduction block: with k0 right above k1 the reduction's zero
            # initialisation runs per micro-tile, just before its k loop (while the tile is
            # in cache), instead of as a pass of its own over a whole column block of C
            s[C].reorder(*lead, j0, *mid, k0, k1, i2, j2)
        else:
            s[C].reorder(*lead, j0, k0, *mid, k1, i2, j2)
    cfg.define_annotate("unroll", [k1, ri], policy="try_unroll", default=["none", "unroll"])
    if kb > 1:
        # A's packed blocks of kb steps of k: k1's steps within one block, unrolled, read
        # A at constant offsets from the block (no index arithmetic per step)
        # (8 at a time: 16 copies of a 12-row body pass the unroll limit)
        k1, k1b = s[R].split(k1, factor=kb)
        s[R].unroll(s[R].split(k1b, factor=min(kb, 8))[1])
    cfg["unroll"].apply(s, R, [k1, ri], axis_lens=[-(-cfg["tile_k"].size[1] // kb),
                                                   cfg["tile_i"].size[2]], max_unroll=16)
    s[C].vectorize(j2)
    # the loop whose next iteration is the next micro-tile: i1 in the goto and ij orders,
    # the inner one of i1 and j1 in the blis order
    at = i1
    if order == "blis":
        ids = [id(x) for x in mid]
        at = j1 if ids.index(id(j1)) > ids.index(id(i1)) else i1
    if _prefetch_c(C) and _c_lines_below(cfg, C, mid, at, i0, j0, i1, j1) \
            <= MAX_PREFETCH_LINES:
        # the next micro-tile's rows of C (12 pages apart at a large N) arrive while this
        # one computes, instead of stalling its first k step
        s[C].prefetch(C, at, 1)
    loops = {"b": batch, "i0": i0, "j0": j0}
    shared_a = False
    if order == "goto":
        # i0 and j0 are not adjacent there: the outer loops that may be fused
        n_j0 = -(-C.shape[-1] // (cfg["tile_j"].size[1] * cfg["tile_j"].size[2]))
        if batch is None:
            par = {"i0.j0": "j0" if n_j0 >= 2 else "i0"}.get(par, par)
        else:
            par = {"b.i0": "b.j0", "b.i0.j0": "b.j0"}.get(par, par)
    elif order == "blis":
        # k0 lies between i0 and j0. "i0.j0": BLIS's sharing, A's block packed once for
        # all threads (a parallel loop over its panels), then the threads split the
        # column blocks j0 below it (one parallel region per k block), each packing the
        # B blocks of its own columns: every panel packed once. "i0": a block of A per
        # thread, each thread packing all of B (1024^3: 168 / 154 GFLOP/s at 1 / 2
        # threads); "j0": the column blocks, A packed by one thread
        if batch is None:
            shared_a = par == "i0.j0"
            par = {"i0.j0": "j0"}.get(par, par)
        else:
            par = {"b.i0.j0": "b.i0"}.get(par, par)
    fused_into = {}
    if par != "none":
        outer = [loops[x] for x in par.split(".")]
        ax = s[C].fuse(*outer) if len(outer) > 1 else outer[0]
        s[C].parallel(ax)
        # a packing stage attached at the innermost fused loop attaches at the fused one
        fused_into = {id(outer[-1]): ax} if len(outer) > 1 else {}
    if order == "blis":
        # B's block (kc x nc, L2) at j0, A's (mc x kc) at k0
        packs = ((PB, j0), (PA, i0 if single_k else k0))
    else:
        packs = ((PB, j0 if single_k else k0), (PA, i0))
    for P, at in packs:
        if P is None:
            continue
        at = fused_into.get(id(at), at)
        axes = s[P].op.axis
        # (batch,) panel, then the panel's own axes: 2 of them, 3 for A's k blocks
        blocked = P is PA and kb > 1
        nb = len(axes) - (4 if blocked else 3)
        pb, x = axes[:nb], axes[nb]
        if order != "ij":
            s[P].compute_at(s[C], at)
            if shared_a and P is PA:
                s[P].parallel(x)
        else:
            if par != "none":
                s[P].parallel(s[P].fuse(*pb, x) if pb else x)
        if P is PB or blocked:
            # B's rows of nr lanes; A's rows of kb reduction elements (one vector)
            s[P].vectorize(axes[-1])


#: The most cache lines of ``C`` one iteration of ``i1`` may span for the template to
#: prefetch them (the prefetch is for the next micro-tile; a reorder that puts ``i0`` or
#: ``j1`` below ``i1`` makes it a block of ``C``, not worth prefetching, and past
#: ``Stage.prefetch``'s limit of 1024 lines).
MAX_PREFETCH_LINES = 256


def _c_lines_below(cfg, C, mid, at, i0, j0, i1, j1) -> int:
    """Cache lines of ``C`` written by one iteration of loop ``at`` (of ``mid``, the
    reordered cache-block loops): its micro-tile, times the iterations of the block loops
    the reorder knob puts below it."""
    below = mid[[id(x) for x in mid].index(id(at)) + 1:]
    ids = {id(x) for x in below}
    mr, nr = cfg["tile_i"].size[2], cfg["tile_j"].size[2]
    ti, tj = cfg["tile_i"].size[1], cfg["tile_j"].size[1]
    rows = mr * (-(-C.shape[-2] // (mr * ti)) if id(i0) in ids else 1) * (
        ti if id(i1) in ids else 1)
    cols = nr * (tj if id(j1) in ids else 1) * (
        -(-C.shape[-1] // (nr * tj)) if id(j0) in ids else 1)
    itemsize = 8 if C.dtype in ("float64", "int64") else 4
    return rows * -(-cols * itemsize // 64)


def _prefetch_c(C) -> bool:
    """Prefetch the next micro-tile of ``C`` unless the product is small (at most
    :data:`SMALL_PRODUCT` multiply-adds per batch: ``C`` is then in L1 or L2 already)."""
    *_, M, N = C.shape
    return M * N * C.op.reduce_axis[0].dom.extent > SMALL_PRODUCT


def _mm_reference(a, b, *, args=(), out=None):
    return np.matmul(a, b, out=out)


#: what the numpy anchor times: ``np.matmul(a, b, out=c)`` (:func:`.data.reference_call`)
_mm_reference.numpy_call = np.matmul


@template("matmul", default_args=(1024, 1024, 1024),
          flops=lambda M, N, K: 2.0 * M * N * K, reference=_mm_reference, target="llvm")
def matmul(M: int, N: int, K: int, dtype: str = "float32"):
    """C[M, N] = A[M, K] @ B[K, N]: packed panels, register micro-kernel, cache blocks and
    threads as BLAS does (module docstring)."""
    cfg = get_config()
    _define_gemm_knobs(cfg, M, N, K)
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    kb = a_kblock(K, cfg["tile_k"].size[1]) if cfg["pack_a"].val else 1
    PA, PB, ra, rb = _packed_operands(A, B, cfg["tile_i"].size[2], cfg["tile_j"].size[2],
                                      cfg["pack_a"].val, cfg["pack_b"].val, kb)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(ra((), i, k) * rb((), k, j), axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    _schedule_gemm(cfg, s, C, PA, PB, kb=kb)
    return s, [A, B, C]


def _bmm_reference(a, b, *, args=(), out=None):
    return np.matmul(a, b, out=out)


_bmm_reference.numpy_call = np.matmul


@template("batch_matmul", default_args=(8, 256, 256, 256),
          flops=lambda Bt, M, N, K: 2.0 * Bt * M * N * K, reference=_bmm_reference, target="llvm")
def batch_matmul(Bt: int, M: int, N: int, K: int, dtype: str = "float32"):
    """C[b, M, N] = A[b, M, K] @ B[b, K, N]: the matmul space of each batch (packing per
    batch), with the batch loop outermost. ``parallel``: ``b``, ``b.i0`` or ``b.i0.j0``
    (fused with the batch loop; in the ``goto`` order the last two fuse ``b`` and ``j0``).
    """
    cfg = get_config()
    _define_gemm_knobs(cfg, M, N, K, batch=True)
    A = te.placeholder((Bt, M, K), name="A", dtype=dtype)
    B = te.placeholder((Bt, K, N), name="B", dtype=dtype)
    kb = a_kblock(K, cfg["tile_k"].size[1]) if cfg["pack_a"].val else 1
    PA, PB, ra, rb = _packed_operands(A, B, cfg["tile_i"].size[2], cfg["tile_j"].size[2],
                                      cfg["pack_a"].val, cfg["pack_b"].val, kb)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((Bt, M, N), lambda b, i, j: te.sum(ra((b,), i, k) * rb((b,), k, j),
                                                      axis=k), name="C")
    s = te.create_schedule(C.op)
    _schedule_gemm(cfg, s, C, PA, PB, batch=C.op.axis[0])
    return s, [A, B, C]


from . import templates_nn  # noqa: E402,F401  (registers the neural-network templates)
from . import templates_gpu  # noqa: E402,F401  (registers the GPU variants)
