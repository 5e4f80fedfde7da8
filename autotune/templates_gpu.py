"""Built-in GPU templates (target kind ``cuda``): ``matmul``, ``batch_matmul``,
``softmax``, ``layernorm``, ``rmsnorm``, ``row_sum`` (the convolutions:
:mod:`.templates_gpu_conv`).

They are registered under the names of the CPU templates where one exists (one workload
name, one records key; the target picks the schedule, see
:meth:`~.template.Template.func_for`). Every knob list is pruned with
:func:`.gpu_limits.current` before anything is built: no config asks for more threads per
block, shared memory or registers (an estimate: accumulators + operands + a fixed
overhead) than the device or ``-arch`` allows.

``matmul``: the shared-memory + register tiling of ``tutorials/04_cuda_gemm.py``
(Volkov & Demmel 2008; the TVM GPU GEMM tutorial's recipe), generalised: a block computes
``BM x BN`` outputs with ``(BM/TM) x (BN/TN)`` threads, each holding a ``TM x TN`` register
tile (``C.local``) accumulated over ``k`` in steps of ``BK``; the ``BM x BK`` tile of A and
the ``BK x BN`` tile of B are staged in shared memory with ``vec``-wide cooperative loads;
``unroll_k`` unrolls the inner k loop. The tutorial's fastest hand schedule (``[128, 128, 16, 8,
8]``, ``vec`` 4, ``layout`` strided, 3 stages, groups of 8: ``pipelined_tiles``) is the
default config, or at large float32 GEMMs the 128 x 256 block of 16 x 8 outputs per thread
with 2 stages (the tutorial's default step, :func:`_wide_default`); records written before ``layout``/``stages``/``group`` existed load
as the schedule they measured (contiguous, no pipeline, no groups). ``batch_matmul`` is the same schedule per batch,
batches on ``blockIdx.z``.

``softmax``, ``layernorm``, ``rmsnorm``: one kernel per call, ``rows`` rows per block,
each row's statistics as cross-thread reductions (TVM's all-reduce, a reduce loop bound to
``threadIdx.x``) computed at the block's row loop, 16-byte vector loads and stores, the
statistics in float32, the rows staged in shared memory, kept in registers (a thread's
part of its row) or re-read from global memory (:func:`_fused_rows`; knob ``layout`` =
``[threads, vec, rows, shared, local]``).

``row_sum``: ``B[i] = sum_k A[i, k]``; ``layout`` ``[threads, rows]``: a row per block
reduced across ``threads`` threads, or (``[1, rows]``) one row per thread with ``rows``
rows per block.
"""

from __future__ import annotations

import numpy as np

from polytile import te
from polytile.targets.c_vector import VECTOR_TYPES as _VECTOR_TYPES
from polytile.targets.gpu_tiling import cooperative_copy, group_rows
from polytile.te.tensor import PlaceholderOp

from . import gpu_limits
from . import templates_gpu_tc as _tc
from . import templates as _cpu  # noqa: F401  (the CPU templates first: ours are variants)
from .template import get_config, template

#: Block tile sizes, thread tile sizes and k steps the matmul space draws from.
BLOCK_TILES = (16, 32, 64, 128, 256)
THREAD_TILES = (1, 2, 4, 8, 16)
K_TILES = (4, 8, 16, 32)
#: Threads per block the reductions may use.
REDUCE_THREADS = (32, 64, 128, 256, 512, 1024)


def _bx():
    return te.thread_axis("blockIdx.x")


def _by():
    return te.thread_axis("blockIdx.y")


def _tx():
    return te.thread_axis("threadIdx.x")


def _ty():
    return te.thread_axis("threadIdx.y")


def matmul_registers(tm: int, tn: int) -> int:
    """Estimated 32-bit registers per thread of a ``tm x tn`` register tile: the
    accumulators, one column of A and one row of B, and 24 for addresses and loop state."""
    return tm * tn + tm + tn + 24


#: Outputs per side from which the matmul space keeps register-tiled configs only.
LARGE = 1024


def matmul_tiles(limits: gpu_limits.GPULimits, itemsize: int = 4, large: bool = False) -> list:
    """``[BM, BN, BK, TM, TN]`` lists that fit ``limits``: at least one warp and at most
    the device's threads per block, both shared tiles within its shared memory, the
    register tile within its registers. ``large`` (both output sides at least
    :data:`LARGE`) keeps the register-tiled ones (``TM * TN >= 16``, blocks of at least
    64 x 64 outputs and 64 threads): on a large GEMM a thread computing fewer than 16
    outputs re-reads shared memory too often to come near the peak (Volkov & Demmel), and
    the 4096^3 space shrinks from 9,840 configs to 2,208."""
    out = []
    for bm in BLOCK_TILES:
        for bn in BLOCK_TILES:
            for bk in K_TILES:
                for tm in THREAD_TILES:
                    for tn in THREAD_TILES:
                        if bm % tm or bn % tn:
                            continue
                        threads = (bm // tm) * (bn // tn)
                        if threads < 32:
                            continue
                        if large and (tm * tn < 16 or threads < 64 or bm < 64 or bn < 64):
                            continue
                        if gpu_limits.fits(limits, threads, (bm + bn) * bk * itemsize,
                                           matmul_registers(tm, tn)):
                            out.append([bm, bn, bk, tm, tn])
    return out


def _mm_reference(a, b, *, args=()):
    return a @ b


def _mm_knobs(cfg, M: int, N: int, K: int, dtype: str) -> tuple:
    """Declare the knobs of the (batched) GEMM schedule; ``(BM, BN, BK, TM, TN, vec)``
    (the others, ``unroll_k``, ``layout``, ``stages``, ``group``, are read by
    :func:`_gemm_schedule`), and the part of the space the tuners search
    (:func:`gemm_preferred`)."""
    limits = gpu_limits.current()
    itemsize = np.dtype(dtype).itemsize if dtype != "bfloat16" else 2
    tiles = matmul_tiles(limits, itemsize, large=M >= LARGE and N >= LARGE) or \
        matmul_tiles(limits, itemsize)
    default = [128, 128, 16, 8, 8] if [128, 128, 16, 8, 8] in tiles else tiles[0]
    stages = 3
    wide = [128, 256, 16, 16, 8]
    if wide in tiles and _wide_default(M, N, K, itemsize, limits):
        default, stages = wide, 2
    cfg.define_knob("tile", tiles, default=default)
    cfg.define_knob("vec", [1, 2, 4], default=4)
    cfg.define_knob("unroll_k", [True, False], default=True)
    # the default is the fastest schedule of tutorials/04_cuda_gemm.py (pipelined_tiles:
    # 0.86x cuBLAS on an H200 at 4096^3), so a tuning run starts there; ``legacy``: the
    # values of the schedule from before these knobs, for records that lack them
    cfg.define_knob("layout", ["contiguous", "strided"], default="strided",
                    legacy="contiguous")
    cfg.define_knob("stages", [1, 2, 3], default=stages, legacy=1)
    cfg.define_knob("group", [1, 4, 8], default=8, legacy=1)
    cfg.prefer(lambda v: gemm_preferred(v, (M, N, K), itemsize, limits))
    return (*cfg["tile"].val, cfg["vec"].val)


def _wide_default(M: int, N: int, K: int, itemsize: int,
                  limits: gpu_limits.GPULimits) -> bool:
    """Whether the GEMM's default config is the 128 x 256 block of 16 x 8 outputs per
    thread, k tiles of 16, 2 stages (the tuned 4096^3 float32 config on an H200: 0.88x
    cuBLAS, against 0.86x for the 128 x 128 one): float32 with 16-byte copies (every side
    a multiple of 4) and at least two waves of such blocks on the device's SMs (smaller
    GEMMs keep the 128 x 128 blocks, twice as many)."""
    blocks = -(-M // 128) * -(-N // 256)
    return (itemsize == 4 and M % 4 == 0 and N % 4 == 0 and K % 4 == 0
            and blocks >= 2 * (limits.sm_count or 132))


def gemm_preferred(v: dict, shape: tuple, itemsize: int,
                   limits: gpu_limits.GPULimits) -> bool:
    """Whether the tuners search the GEMM config of knob values ``v`` at ``shape`` =
    ``(M, N, K)``. Left out, as duplicates of a config kept: ``layout="strided"`` where
    :func:`strided_subtiles` gives one sub-tile (the contiguous kernel), a ``stages``
    value :func:`gemm_stages` lowers to another, a ``group``
    :func:`~polytile.targets.gpu_tiling.group_rows` lowers to another. On a large GEMM
    (both output sides at least :data:`LARGE`) whose shared copies can be 16-byte
    ``cp.async`` (float32, sizes multiples of 4) also the
    regions measured slow on an H200 at 4096^3: k tiles other than 16 (8: 0.83x of the
    16-deep ones' 0.86x cuBLAS), no pipeline (0.78x), groups below 8, copies narrower
    than 16 bytes and a rolled k loop. The 4096^3 float32 search shrinks from 39,744
    configs to a few hundred (test_gpu_tune), the default among them."""
    bm, bn, bk, tm, tn = v["tile"]
    vec = v["vec"]
    if v["layout"] == "strided" and strided_subtiles(tm, tn) == (1, 1):
        return False
    if gemm_stages(v["stages"], [bm, bn, bk], vec, itemsize, shape, limits) != v["stages"]:
        return False
    if group_rows(v["group"], -(-shape[0] // bm)) != v["group"]:
        return False
    copies16 = any(w * itemsize == 16 and all(d % w == 0 for d in shape) for w in (1, 2, 4))
    if shape[0] >= LARGE and shape[1] >= LARGE and copies16:
        return (bk == 16 and v["stages"] >= 2 and v["group"] == 8
                and vec * itemsize == 16 and v["unroll_k"])
    return True


def gemm_stages(knob: int, tile: list, vec: int, itemsize: int, shape: tuple,
                limits: gpu_limits.GPULimits) -> int:
    """The pipeline depth the GEMM schedule uses for knob ``stages`` = ``knob``: 1 (no
    pipeline) unless the shared copies can be 16-byte ``cp.async`` (``vec * itemsize ==
    16`` and every dimension of ``shape`` = ``(M, N, K)`` a multiple of ``vec``, so rows
    of A and B start 16-byte aligned), else the deepest at most ``knob`` whose
    ``stages x (BM + BN) x BK`` shared tiles fit ``limits`` (an over-deep knob value is the
    deepest that fits, never a config that cannot launch)."""
    bm, bn, bk = tile[:3]
    if knob < 2 or vec * itemsize != 16 or any(d % vec for d in shape):
        return 1
    st = knob
    while st > 1 and st * (bm + bn) * bk * itemsize > limits.shared_bytes_per_block:
        st -= 1
    return st


def strided_subtiles(tm: int, tn: int) -> tuple:
    """``(vt_m, vt_n)``: the ``layout="strided"`` GEMM splits a thread's ``TM x TN``
    register tile into ``vt_m x vt_n`` sub-tiles of (at most) 4 x 4 outputs, each
    ``BM / vt_m`` (``BN / vt_n``) apart in the block tile (CUTLASS's SIMT thread layout):
    neighbouring threads then read neighbouring 16-byte vectors of B's shared tile and the
    same words of A's (a broadcast), which nvcc loads with ``LDS.128``. Sides not a
    multiple of 4 stay contiguous (1 sub-tile)."""
    return (tm // 4 if tm % 4 == 0 else 1, tn // 4 if tn % 4 == 0 else 1)


@template("matmul", target="cuda", default_args=(1024, 1024, 1024),
          flops=lambda M, N, K: 2.0 * M * N * K, reference=_mm_reference)
def matmul_cuda(M: int, N: int, K: int, dtype: str = "float32"):
    """C[M, N] = A[M, K] @ B[K, N] on the GPU: shared-memory and register tiling; float16
    and bfloat16 on tensor cores (mma.sync or WMMA, float32 accumulation and C,
    :mod:`.templates_gpu_tc`)."""
    cfg = get_config()
    if _tc.tensor_core_dtype(dtype):
        if _tc.tc_shape_ok(M, N, K):
            return _tc.matmul_tc(cfg, M, N, K, dtype)
        A, B, C = _tc.matmul_f32_acc(M, N, K, dtype)
        return _gemm_schedule(cfg, A, B, C, _mm_knobs(cfg, M, N, K, dtype)), [A, B, C]
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    r = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return _gemm_schedule(cfg, A, B, C, _mm_knobs(cfg, M, N, K, dtype)), [A, B, C]


@template("batch_matmul", target="cuda", default_args=(8, 256, 256, 256),
          flops=lambda Bt, M, N, K: 2.0 * Bt * M * N * K,
          reference=lambda a, b, *, args=(): np.matmul(a, b))
def batch_matmul_cuda(Bt: int, M: int, N: int, K: int, dtype: str = "float32"):
    """C[b, M, N] = A[b, M, K] @ B[b, K, N] on the GPU: the matmul schedule per batch,
    batches on blockIdx.z."""
    cfg = get_config()
    A = te.placeholder((Bt, M, K), name="A", dtype=dtype)
    B = te.placeholder((Bt, K, N), name="B", dtype=dtype)
    r = te.reduce_axis((0, K), name="k")
    C = te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, r] * B[b, r, j], axis=r),
                   name="C")
    return _gemm_schedule(cfg, A, B, C, _mm_knobs(cfg, M, N, K, dtype)), [A, B, C]


def _gemm_schedule(cfg, A, B, C, knobs: tuple):
    """The shared + register tiled schedule of a GEMM ``C`` (2-D, or 3-D with a leading
    batch axis bound to ``blockIdx.z``); see the module docstring.

    Knobs beside the tiles: ``layout`` (``"contiguous"``: a thread's ``TM x TN`` outputs
    side by side; ``"strided"``: :func:`strided_subtiles` on ``vthread`` axes, with A's
    column and B's row of each k step copied to registers first), ``stages``
    (:func:`gemm_stages`: ``s[C.local].pipeline(ko, stages)``, ``cp.async`` copies of the
    next k tiles overlapping this one's FMAs) and ``group`` (blocks launched ``group`` tile
    rows at a time down each tile column for L2 reuse, as
    :func:`polytile.targets.gpu_tiling.warp_tiles`)."""
    bm, bn, bk, tm, tn, vec = knobs
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    strided = cfg["layout"].val == "strided"
    if strided:
        AL = s.cache_read(AS, "local", [C])
        BL = s.cache_read(BS, "local", [C])
    CL = s.cache_write(C, "local")
    ty_n, tx_n = bm // tm, bn // tn
    vt_m, vt_n = strided_subtiles(tm, tn) if strided else (1, 1)
    axes = C.op.axis
    shape = (int(A.shape[-2]), int(B.shape[-1]), int(A.shape[-1]))
    itemsize = 2 if A.dtype == "bfloat16" else np.dtype(A.dtype).itemsize
    stages = gemm_stages(cfg["stages"].val, [bm, bn, bk], vec, itemsize, shape,
                         gpu_limits.current())
    group = group_rows(cfg["group"].val, -(-shape[0] // bm))
    bi, bj, ii, jj = s[C].tile(axes[-2], axes[-1], bm, bn)
    vthreads = []
    if strided:
        vy, ii = s[C].split(ii, nparts=vt_m)
        vx, jj = s[C].split(jj, nparts=vt_n)
        vthreads = [vy, vx]
    ty, iin = s[C].split(ii, nparts=ty_n)
    tx, jin = s[C].split(jj, nparts=tx_n)
    if group > 1:
        bo, bii = s[C].split(bi, factor=group)
        s[C].reorder(*axes[:-2], bo, bj, bii, *vthreads, ty, tx, iin, jin)
        s[C].bind(bo, _by())
        s[C].bind(s[C].fuse(bj, bii), _bx())
    else:
        s[C].reorder(*axes[:-2], bi, bj, *vthreads, ty, tx, iin, jin)
        s[C].bind(bi, _by())
        s[C].bind(bj, _bx())
    if len(axes) == 3:
        s[C].bind(axes[0], te.thread_axis("blockIdx.z"))
    for v, n, name in zip(vthreads, (vt_m, vt_n), ("vy", "vx")):
        s[C].bind(v, te.thread_axis((0, n), "vthread", name=name))
    s[C].bind(ty, _ty())
    s[C].bind(tx, _tx())
    if tm // vt_m > 1:
        s[C].unroll(iin)
    if tn // vt_n > 1:
        s[C].vectorize(jin)
    s[CL].compute_at(s[C], tx)
    ci, cj = s[CL].op.axis[-2:]
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=bk)
    s[CL].reorder(ko, ki, ci, cj)
    for ax, n in ((ki, bk if cfg["unroll_k"].val else 1), (ci, tm), (cj, tn)):
        if n > 1:
            s[CL].unroll(ax)
    for T in (AS, BS):
        s[T].compute_at(s[CL], ko)
        cooperative_copy(s, T, vector=vec, threads=(tx_n, ty_n))
    if strided:
        for T in (AL, BL):
            s[T].compute_at(s[CL], ki)
    if stages > 1:
        s[CL].pipeline(ko, stages=stages)
    return s


def _reduce_threads(limits: gpu_limits.GPULimits, n: int) -> list:
    """Thread counts for a reduction over ``n`` elements: from :data:`REDUCE_THREADS`
    within the device's limit, the smallest one at least ``n`` the largest kept."""
    out = []
    for t in REDUCE_THREADS:
        if t > limits.max_threads_per_block:
            break
        out.append(t)
        if t >= n:
            break
    return out


#: Rows per block the fused row templates may put on ``threadIdx.y`` (short rows).
ROWS_PER_BLOCK = (1, 2, 4, 8)
#: Bytes of its row a thread may keep in registers (``layout`` ``shared`` = 2): 64
#: 32-bit registers, a quarter of the 255 a thread may have, so that the statistics,
#: addresses and the output's vector still fit without spilling.
REGISTER_ROW_BYTES = 256
#: Steps of ``vec`` elements a thread may keep in registers: the loops over them must be
#: unrolled (constant indices into the array, else nvcc puts it in local memory), and at
#: 32 steps the output pass's body passes ``MAX_UNROLL_STMTS`` and stays a loop (H200
#: test run: ``unroll of j.outer.outer kept as a loop`` at 4096 / (32 x 4)).
REGISTER_ROW_STEPS = 16


def register_row_bytes(N: int, threads: int, vec: int, itemsize: int) -> int:
    """Bytes of a row of ``N`` elements of ``itemsize`` bytes one of ``threads`` threads
    keeps in registers when each reads ``vec`` elements a step: ``ceil(N / (threads *
    vec))`` steps of ``vec`` elements (the last step of a ragged row is padding)."""
    return -(-N // (threads * vec)) * vec * itemsize


def row_layouts(limits: gpu_limits.GPULimits, M: int, N: int, dtype: str,
                params: int = 0) -> list:
    """``[threads, vec, rows, shared, local]`` configs of the fused row kernels over ``M``
    rows of ``N`` elements: ``threads`` threads per row (:func:`_reduce_threads`), ``vec``
    elements per load and store (16 or 8 bytes, only widths dividing ``N`` so every vector
    is whole and aligned; one element where neither divides ``N``), ``rows`` rows per block (at most ``M``), and
    ``shared`` 1 to stage the block's rows in shared memory (read from global memory once,
    by 16-byte ``cp.async`` copies), 2 to keep each thread's part of its row in registers
    (read from global memory once, every pass reads the registers; only where that part is
    at most :data:`REGISTER_ROW_BYTES` in at most :data:`REGISTER_ROW_STEPS` steps,
    :func:`register_row_bytes`), 3 (templates with ``params`` per-column vectors of
    ``N``, layernorm's gamma and beta) as 2 and the thread's part of those vectors in
    registers too, read before the reductions so that their latency overlaps them (only
    where the row's and the vectors' parts together are at most
    :data:`REGISTER_ROW_BYTES` and the row spans the block's threads), or 0 to read them
    from global memory in every pass (L1/L2 hits after the first), ``local`` 1 (one row
    per block only) to have every thread combine the partials of a reduction into its own
    register (broadcast shared reads, no barrier after the combine) instead of thread 0
    into shared memory. Pruned by the device's threads per block and shared memory (two
    float32 partials per thread, plus the staged rows)."""
    itemsize = np.dtype("float16" if dtype == "bfloat16" else dtype).itemsize
    vecs = [w for w in dict.fromkeys((16 // itemsize, 8 // itemsize))
            if w > 1 and N % w == 0 and (dtype, w) in _VECTOR_TYPES]
    # one element per load only where no vector divides the row: scalar loads are 4 to 8
    # times the load instructions of a bandwidth-bound kernel (and half of a float16
    # space that a short tuning run samples otherwise)
    vecs = vecs or [1]
    out = []
    for vec in vecs:
        for t in _reduce_threads(limits, -(-N // vec)):
            for rows in ROWS_PER_BLOCK:
                if (rows > 1 and rows > M) or t * rows > limits.max_threads_per_block:
                    continue
                for shared in (0, 1, 2, 3)[:4 if params else 3]:
                    regs = (1 + params * (shared == 3)) * register_row_bytes(
                        N, t, vec, itemsize)
                    if shared >= 2 and (regs > REGISTER_ROW_BYTES
                                        or -(-N // (t * vec)) > REGISTER_ROW_STEPS):
                        continue
                    # the vectors' registers: every thread holds a part (a thread-owned
                    # dimension is a whole axis bound to threadIdx.x)
                    if shared == 3 and N < t * vec:
                        continue
                    nbytes = 2 * 4 * t * rows + (shared == 1) * rows * N * itemsize
                    if nbytes > limits.shared_bytes_per_block:
                        continue
                    # statistics in registers: one row per block only (a local buffer's
                    # own loops may not be bound to threadIdx.y)
                    for local in ((0, 1) if rows == 1 else (0,)):
                        out.append([t, vec, rows, shared, local])
    return out


#: float16 default layouts of the row templates where the space has them (rows of at least
#: 1024 elements): the fastest of the layouts timed side by side on the H200 at 4096 x 4096
#: (``benchmarks/rows_gpu.py``, 4 rounds, copy bound 4.12 TB/s): the row in registers,
#: 16-byte vectors, one row a block. softmax: 128 threads, 0.0193 ms = 0.84x the copy
#: bound (the earlier default, 128 threads of 4 and 4 rows a block re-read from global
#: memory: 0.0201 ms, 0.81x); layernorm: 256 threads, statistics combined by every
#: thread, 0.0206 ms = 0.79x (the earlier default, the row staged in shared memory:
#: 0.0212 ms, 0.77x; 16-trial tuning's best, 128 threads of 4 re-reading global memory:
#: 0.0206 ms too). Timed again 2026-12-02 (3 rounds, copy bound 4.14 TB/s, torch 0.0321
#: ms): the default 0.0205 ms = 0.79x (1.57x torch); gamma and beta in registers too
#: (``shared`` = 3) no faster: 256 threads 0.0210 ms, 128 threads 0.0208 (0.0209 without
#: local statistics), 512 threads 0.0232; one warp a row, 8 rows a block ``[32, 8, 8, 2,
#: 0]`` (126 registers) 0.0266 ms; streaming output stores (``benchmarks/rows_stream.py``)
#: within 0.4 %. At 16384 x 4096 the default reaches 0.94x the copy bound: the 4 us it
#: loses at 4096 x 4096 are the same at 4x the rows (launch, first and last wave)
#: layernorm since 2026-12-02: 256 threads of 8-byte vectors (4 steps) with the one-pass
#: statistics (knob ``stats`` = 1, :data:`ONE_PASS_DTYPES`): 0.0202 ms = 0.80x the copy bound
#: (3.32 TB/s of 4.17; bound 0.0161 ms; 1.60x torch's 0.0323 ms), the earlier default
#: ([256, 8, 1, 2, 1], two passes) 0.0206 ms = 0.78x in the same run (H200, 3 rounds)
#: Tried 2026-12-02 (H200, one run, copy bound 0.0161 ms, torch 0.0330 ms), all slower than
#: this default's 0.0204 ms: ``__launch_bounds__(256, 8)`` (32 registers, 8 blocks an SM)
#: 0.0207; A's loads ``ld.global.nc.L1::no_allocate`` 0.0207; PTX ``prefetch.global.L1`` of
#: gamma and beta at each block's start 0.0270-0.0272 (one line a thread or the thread's own
#: lines), and with the row of the block 792 or 1584 ahead into L2 0.0279-0.0282. The
#: ceiling of this shape: a plain copy kernel of the same grid (4096 blocks of 256 threads,
#: 8-byte vectors) takes 0.0193 ms = 0.83x the copy bound (16-byte vectors: 0.0194 with
#: 256 threads, 0.0197 with 128), so one row a block cannot pass ~0.83x at 4096 x 4096.
#: Hand-written CUDA in a second run (copy 0.0195 ms): the same layernorm without gamma and
#: beta reaches it (0.0195 ms, 0.825x), with them loaded into registers before the row
#: 0.0206; 2 or 4 rows a block (gamma and beta loaded once, the next row loaded before
#: this one's reduction) 0.0210 / 0.0208 (their copies 0.0197 / 0.0199); grid-stride
#: blocks (396-792) 0.0218-0.0233. So the ~1 us over the copy is the affine step's work per
#: element (two half-to-float conversions and an FMA), not gamma's and beta's loads: fewer
#: instructions there (half2 FMA of gamma and beta, at ~1 ulp) is what is left to try.
FLOAT16_DEFAULTS = {"softmax": [128, 8, 1, 2, 0], "layernorm": [256, 4, 1, 2, 1]}
#: float32, the same way: softmax 0.0354 ms = 0.92x the copy bound (the staged default:
#: 0.0359 ms, 0.91x), layernorm 0.0361 ms = 0.90x (staged: 0.0371 ms, 0.88x)
FLOAT32_DEFAULTS = {"softmax": [256, 4, 1, 2, 1], "layernorm": [128, 4, 1, 2, 1]}
#: layernorm's output-step knobs by dtype where they are the default (rows of at least
#: 1024, as the default layout of :data:`FLOAT16_DEFAULTS`), measured: ``affine`` 1 (gamma and beta by
#: ``__hfma2``, the ``half2`` pragma), ``scalars`` 1 (mean and 1/std once a row),
#: ``hints`` 2 (gamma/beta ``evict_last``, rows ``evict_first``), ``stores`` 1 (streaming
#: output stores). H200 2026-12-02 (``benchmarks/rows_gpu.py``, 3 rounds, copy 4.20 TB/s,
#: bound 0.0160 ms, torch 0.0323 ms), float16 4096 x 4096 at [256, 4, 1, 2, 1], one pass:
#: all four 0.0190 ms = 0.84x the copy bound (1.71x torch) against 0.0202 ms = 0.79x
#: without them; affine alone 0.0201 (0.80x), scalars alone 0.0204 (no gain: 0.0204
#: without), hints 1 0.0200, hints 2 without streaming stores 0.0208 (0.77x). A second
#: run (copy 4.15 TB/s, bound 0.0162 ms): all four 0.0191 ms = 0.85x (1.70x torch) against
#: 0.0205 = 0.79x; streaming stores alone 0.0205, with affine 0.0204, with hints 1 0.0205,
#: hints 2 + stores without affine 0.0192 (0.84x): the rows' ``evict_first`` together
#: with the streaming stores is the gain; a third (copy 4.10 TB/s): all four 0.0195 ms =
#: 0.84x against 0.0204 = 0.80x.
LAYERNORM_OUTPUT_DEFAULTS: dict = {"float16": {"affine": 1, "scalars": 1, "hints": 2,
                                               "stores": 1}}
#: dtypes whose layernorm default (rows of at least 1024) computes its statistics in one
#: pass (knob ``stats`` = 1): float16, at its default layout (:data:`FLOAT16_DEFAULTS`:
#: 0.0202 ms one pass, 0.0208 ms two passes in the same run; [256, 4, 1, 2, 0]: 0.0205 /
#: 0.0209; [256, 8, 1, 3, 1]: 0.0207 / 0.0212). At the earlier default layout, as measured
#: on the H200 2026-12-02 (``benchmarks/rows_gpu.py``, 4 rounds, copy
#: 4.19 TB/s, bound 0.0160 ms, torch 0.0323 ms): float16 4096 x 4096, two passes / one pass:
#: the default layout 0.0208 / 0.0210 ms (0.77x / 0.76x), 128 threads 0.0211 / 0.0220, without
#: local statistics 0.0213 / 0.0209 (256 threads), 0.0212 / 0.0217 (128), 512 threads
#: 0.0238 / 0.0224, 128 threads of 4 re-reading global memory 0.0208 / 0.0210; float32
#: (copy 4.14 TB/s, bound 0.0324 ms) 0.0362 / 0.0365. One barrier round fewer buys nothing:
#: the kernel is not bound by its reductions' latency (same registers, 40, for both)
ONE_PASS_DTYPES: tuple = ("float16",)
#: dtypes whose layernorm default asks for full occupancy (knob ``occupancy`` = 1): none;
#: H200 2026-12-02, float16 4096 x 4096 under ``-min-blocks=8`` (32 registers, 8 bytes
#: spilled): [256, 8, 1, 2, 1] 0.0213 ms against 0.0206 without the bound
FULL_OCCUPANCY_DTYPES: tuple = ()
#: Threads an SM holds at most (sm_80 and sm_90; sm_86/sm_89 hold 1536, where the bound
#: below asks for more blocks than fit and ptxas keeps its registers at the cap anyway).
THREADS_PER_SM = 2048


def full_occupancy_blocks(layout) -> int:
    """Blocks of ``layout``'s ``threads * rows`` threads that fill an SM (knob
    ``occupancy`` of ``layernorm``: the ``min_blocks`` pragma, ``__launch_bounds__(threads,
    N)``, caps ptxas' registers so that they fit, spilling past that), or 0 where one
    block is the SM's most (no bound)."""
    n = THREADS_PER_SM // (layout[0] * layout[2])
    return min(n, 32) if n > 1 else 0


def _row_knobs(cfg, M: int, N: int, dtype: str, name: str = "", params: int = 0) -> tuple:
    layouts = row_layouts(gpu_limits.current(), M, N, dtype, params)
    # the default: the widest vectors, one row per block staged in shared memory when it
    # fits, at most 256 threads (fewer when the row is short or the device smaller)
    one = [lay for lay in layouts if lay[2] == 1 and lay[1] == layouts[0][1]]
    # rows in registers (shared = 2) are a default only where measured (FLOAT16_DEFAULTS)
    staged = max(lay[3] for lay in one if lay[3] < 2)
    one = [lay for lay in one if lay[3] == staged]
    best = max((lay for lay in one if lay[0] <= 256), key=lambda lay: lay[0], default=one[0])
    measured = {"float16": FLOAT16_DEFAULTS, "float32": FLOAT32_DEFAULTS}.get(
        dtype, {}).get(name)
    if measured in layouts and N >= 1024:
        best = measured
    cfg.define_knob("layout", layouts, default=best)
    return tuple(cfg["layout"].val)


def _row_reader(A: te.Tensor, layout: tuple) -> tuple:
    """``(read, regs)``: how the row kernels read ``A[M, N]`` under ``layout``
    (:func:`row_layouts`). ``read(i, j)`` is ``A[i, j]``, except with ``shared`` = 2 (the
    row in registers): ``regs[M, O, threads, vec]`` with ``regs[i, o, t, v] = A[i, o *
    threads * vec + t * vec + v]`` (``O = ceil(N / (threads * vec))``; the steps past a
    ragged row's end re-read its last vector, and no reader uses them) and ``read(i, j)``
    its element of ``A[i, j]``. :func:`_fused_rows` binds ``regs``' thread axis to
    ``threadIdx.x`` in a ``local`` buffer (a thread-owned dimension, see
    ``schedule/attach.py``): each thread keeps its ``O x vec`` elements of the row."""
    nt, vec, _, shared, _ = layout
    if shared < 2:
        return (lambda i, j: A[i, j]), None
    M, N = (int(d) for d in A.shape)
    step = nt * vec
    if N % step:
        def src(i, o, t, v):
            return A[i, te.min(o * step + t * vec, N - vec) + v]
    else:
        def src(i, o, t, v):
            return A[i, o * step + t * vec + v]
    regs = te.compute((M, -(-N // step), nt, vec), src, name=f"{A.name}_regs")
    return (lambda i, j: regs[i, j // step, (j // vec) % nt, j % vec]), regs


def _param_reader(P: te.Tensor, layout: tuple) -> tuple:
    """``(read, regs)`` for a per-column vector ``P[N]`` (layernorm's gamma, beta): with
    ``shared`` = 3, ``regs[O, threads, vec]`` the thread's part of ``P`` in registers as
    :func:`_row_reader` keeps the row's (:func:`_fused_rows` loads it at the block's row
    loop, before the reductions); else ``read(j)`` is ``P[j]`` and ``regs`` None."""
    nt, vec, _, shared, _ = layout
    if shared != 3:
        return (lambda j: P[j]), None
    N = int(P.shape[0])
    step = nt * vec
    if N % step:
        def src(o, t, v):
            return P[te.min(o * step + t * vec, N - vec) + v]
    else:
        def src(o, t, v):
            return P[o * step + t * vec + v]
    regs = te.compute((-(-N // step), nt, vec), src, name=f"{P.name}_regs")
    return (lambda j: regs[j // step, (j // vec) % nt, j % vec]), regs


def _fused_rows(s, out: te.Tensor, reductions, layout: tuple, regs=None,
                param_regs=(), pre=(), half2: bool = False, hints: int = 0,
                stream: bool = False) -> None:
    """One kernel for a row-wise normalisation ``out[M, N]``; ``layout`` is ``(threads,
    vec, rows, shared, local)`` (:func:`row_layouts`): ``rows`` rows per block
    (``blockIdx.x``, rows on ``threadIdx.y``), each row's ``reductions`` (``[M]``, in order)
    as cross-thread reductions over ``threads`` threads (``threadIdx.x``) computed at the
    block's row loop (with ``local``, every thread combines the partials into its own
    register; else thread 0 into shared memory), then the row written. Every pass reads ``vec`` contiguous elements
    per thread and step (a ``local`` copy, one 16-byte load for 4 float32 or 8 float16)
    and the output is stored the same way (``cache_write`` to ``local``); consecutive
    threads read consecutive vectors (coalesced). With ``shared`` the block's rows of the
    2-D input are first copied to shared memory (16-byte ``cp.async``) and every pass reads
    them there; with ``shared`` = 2 the passes read the row from ``regs``
    (:func:`_row_reader`), each thread's part of it read once into registers by 16-byte
    loads; else every pass reads global memory (the second and third from L1/L2).
    ``param_regs`` (``shared`` = 3, :func:`_param_reader`): per-column vectors each thread
    keeps its part of in registers, loaded at the block's row loop. ``pre``: per-row
    values (``[M]``, no reduction; layernorm's shift, which the reductions read, and its
    mean and 1/std, which read them), computed at the block's row loop by every thread
    into a register (one row per block), or by the row's threads into shared memory
    (several rows: a ``local`` buffer's loops may not be bound to ``threadIdx.y``).
    ``half2``: the output's float16 arithmetic two lanes an instruction (the ``half2``
    pragma on its vector loop; even ``vec`` only). ``hints`` (vector loads only): 1 the
    per-column vectors' loads ``evict_last`` (kept in L1: every block reads them), 2 also
    the rows' loads ``evict_first``; ``stream``: the output's vector stores streaming
    (``nontemporal``: PTX ``st.global.cs``)."""
    nt, vec, rows, shared, local = layout
    tx, ty = _tx(), _ty()
    OL = s.cache_write(out, "local")
    staged = None
    if shared == 1:
        row_input = next(t for t in out.op.input_tensors if len(t.shape) == 2)
        readers = [st for st in (*reductions, OL) if any(
            t.op is row_input.op for t in s[st].op.input_tensors)]
        staged = s.cache_read(row_input, "shared", readers)
    i, j = out.op.axis
    io, ii = s[out].split(i, factor=rows)
    j0, jv = s[out].split(j, factor=vec)
    jo, jt = s[out].split(j0, factor=nt)
    s[out].reorder(io, ii, jo, jt, jv)
    s[out].bind(io, _bx())
    s[out].bind(jt, tx)
    if rows > 1:
        s[out].bind(ii, ty)
    if staged is not None:
        a0, a1 = staged.op.axis
        b0, bv = s[staged].split(a1, factor=vec)
        bo, bt = s[staged].split(b0, factor=nt)
        s[staged].reorder(a0, bo, bt, bv)
        s[staged].bind(bt, tx)
        if rows > 1:
            s[staged].bind(s[staged].split(a0, factor=rows)[1], ty)
        if vec > 1:
            s[staged].vectorize(bv)
        s[staged].compute_at(s[out], io)
    if regs is not None:
        ri, ro, rt, rv = regs.op.axis
        s[regs].set_scope("local")
        s[regs].reorder(ri, rt, ro, rv)
        s[regs].bind(rt, tx)
        if rows > 1:
            s[regs].bind(ri, ty)
        # every index of the thread's array a constant: registers, not local memory
        s[regs].unroll(ro)
        if vec > 1:
            s[regs].vectorize(rv)
            if hints >= 2:
                s[regs].pragma(rv, "evict_first")
        s[regs].compute_at(s[out], io)
        s[out].unroll(jo)
    for pr in param_regs:
        po, pt, pv = pr.op.axis
        s[pr].set_scope("local")
        s[pr].reorder(pt, po, pv)
        s[pr].bind(pt, tx)
        s[pr].unroll(po)
        if vec > 1:
            s[pr].vectorize(pv)
            if hints:
                s[pr].pragma(pv, "evict_last")
        s[pr].compute_at(s[out], io)
    s[OL].compute_at(s[out], jt)
    if vec > 1:
        s[out].vectorize(jv)
        s[OL].vectorize(OL.op.axis[1])
    if half2 and vec % 2 == 0:
        s[OL].pragma(OL.op.axis[1], "half2")
    # cache hints (vector loads only): ``hints`` 1 per-column vectors (gamma, beta) kept
    # in L1 (``evict_last``), 2 also the rows' loads evicted first; ``stream``: the
    # output's vector stores streaming (``nontemporal``: st.global.cs)
    for t in _sources(s, OL, staged):
        c = s.cache_read(t, "local", [OL])
        s[c].compute_at(s[OL], OL.op.axis[0])
        if vec > 1:
            s[c].vectorize(c.op.axis[-1])
            hint = _load_hint(t, hints)
            if hint:
                s[c].pragma(c.op.axis[-1], hint)
    if vec > 1 and stream:
        s[out].pragma(jv, "nontemporal")
    for p in pre:
        if rows > 1:
            s[p].bind(s[p].split(p.op.axis[0], factor=rows)[1], ty)
        s[p].compute_at(s[out], io)
        s[p].set_scope("local" if rows == 1 else "shared")
    for red in reductions:
        k0, kv = s[red].split(red.op.reduce_axis[0], factor=vec)
        ko, kt = s[red].split(k0, factor=nt)
        s[red].reorder(ko, kt, kv)
        s[red].bind(kt, tx)
        if rows > 1:
            s[red].bind(s[red].split(red.op.axis[0], factor=rows)[1], ty)
        for t in _sources(s, red, staged):
            c = s.cache_read(t, "local", [red])
            s[c].compute_at(s[red], ko)
            if vec > 1:
                s[c].vectorize(c.op.axis[-1])
        s[red].compute_at(s[out], io)
        if local:
            s[red].set_scope("local")


def _load_hint(t: te.Tensor, hints: int):
    """The load hint pragma of knob ``hints`` (:func:`_fused_rows`) for the vector loads
    of input ``t``: per-column vectors (1-D) ``evict_last`` from 1, rows (2-D)
    ``evict_first`` from 2; None otherwise."""
    if not isinstance(t.op, PlaceholderOp):
        return None
    if len(t.shape) == 1:
        return "evict_last" if hints >= 1 else None
    return "evict_first" if hints >= 2 else None


def _sources(s, t: te.Tensor, staged) -> list:
    """The tensors stage ``t`` reads that are inputs (placeholders) or the ``staged``
    shared copy, in order: those it reads through a ``local`` vector copy."""
    return [x for x in s[t].op.input_tensors if isinstance(x.op, PlaceholderOp)
            or (staged is not None and x.op is staged.op)]


def _f32(x):
    return x if x.dtype == "float32" else x.astype("float32")


def _softmax_reference(a, *, args=()):
    x = a.astype("float64")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@template("softmax", target="cuda", default_args=(1024, 1024),
          flops=lambda M, N: 5.0 * M * N, reference=_softmax_reference)
def softmax_cuda(M: int, N: int, dtype: str = "float32"):
    """Row-wise softmax of A[M, N] on the GPU in one kernel (:func:`_fused_rows`): the row
    maximum, then the sum of ``exp(A - max)``, then ``exp(A - max) / sum``; statistics in
    float32 whatever ``dtype``. Knob ``layout``: ``[threads, vec, rows, shared, local]``
    (:func:`row_layouts`)."""
    cfg = get_config()
    layout = _row_knobs(cfg, M, N, dtype, "softmax")
    # 1: the output's vector stores streaming (st.global.cs), as layernorm's ``stores``
    cfg.define_knob("stores", [0, 1], default=0, legacy=0)
    A = te.placeholder((M, N), name="A", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    k2 = te.reduce_axis((0, N), name="k2")
    # 16-bit outputs: the fast exp (CUDA ``__expf``: a multiply and ``ex2.approx``, errors
    # of a few float32 ulp, far below the output's rounding) instead of the accurate
    # ``expf`` (8 instructions with its range checks): issue-bound otherwise (H200, 4096^2
    # float16: ~50 SASS instructions per element, 0.5x the copy bound)
    exp = te.fast_exp if dtype in ("float16", "bfloat16") else te.exp
    X, regs = _row_reader(A, layout)
    mx = te.compute((M,), lambda i: te.max(_f32(X(i, k1)), axis=k1), name="rowmax")
    sm = te.compute((M,), lambda i: te.sum(exp(_f32(X(i, k2)) - mx[i]), axis=k2),
                    name="rowsum")
    # times the row's reciprocal: one division per row (hoisted by nvcc) instead of an
    # IEEE division per element (a ~10-instruction sequence with a slow-path call)
    out = te.compute((M, N), lambda i, j: (exp(_f32(X(i, j)) - mx[i])
                                           * (te.const(1.0, "float32") / sm[i]))
                     .astype(dtype), name="softmax")
    s = te.create_schedule(out.op)
    _fused_rows(s, out, (mx, sm), layout, regs, stream=cfg["stores"].val == 1)
    return s, [A, out]


def _layernorm_reference(a, g, b, *, args=()):
    x = a.astype("float64")
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


#: The combiner of layernorm's one-pass statistics: the row's sum and sum of squares as
#: one tuple reduction (one cross-thread combine, both elements shuffled together).
SUM_SUMSQ = te.comm_reducer(lambda x, y: (x[0] + y[0], x[1] + y[1]),
                            lambda t0, t1: (te.const(0, t0), te.const(0, t1)),
                            name="sum_sumsq")


@template("layernorm", target="cuda", default_args=(1024, 1024),
          flops=lambda M, N: 8.0 * M * N, reference=_layernorm_reference)
def layernorm_cuda(M: int, N: int, dtype: str = "float32"):
    """Layer normalisation of the rows of A[M, N] with gamma and beta (epsilon 1e-5) on the
    GPU in one kernel (:func:`_fused_rows`); statistics in float32. Knob ``layout``
    (:func:`row_layouts`) and knob ``stats``:

    * 0: the mean, then the variance of ``A - mean``: two cross-thread reductions, each
      with its combine and barriers; no cancellation.
    * 1: one pass: the shifted sums ``S1 = sum(d)``, ``S2 = sum(d * d)`` of ``d = A[i, j]
      - c`` with ``c = A[i, 0]``, as one tuple reduction (:data:`SUM_SUMSQ`: one combine,
      one barrier round); ``mean = c + S1 / N``, ``var = max(S2 / N - (S1 / N)^2, 0)``.
      Rounding: with ``g`` = ``(N / threads + log2(threads) + 2) * 2^-24`` (the float32
      additions on the longest path of a sum), ``|var' - var| <= 3 g (var + (mean -
      c)^2)`` up to second order, so the relative error of the variance is at most ``3 g
      (1 + z^2)``, ``z = (c - mean) / std`` the first element's distance from the mean in
      standard deviations (the shift keeps a large common offset out of the sums:
      without it ``z`` would be ``mean / std``). 4096-element rows over 256 threads: ``g``
      = 1.5e-6, 4.6e-6 (1 + z^2) relative, below a float16 half-ulp (2.4e-4 relative on the
      output, half that of the variance) for ``|z| <= 7``.
      Reference: Chan, Golub & LeVeque, "Algorithms for computing the sample variance"
      (1983), on shifted sums. The bound is loose where ``c`` is a far outlier of its
      row (a huge first column: ``z`` near ``sqrt(N)``); ``stats`` = 0 has no such case.

    Knob ``occupancy``: 1 bounds the kernel's registers so that an SM holds
    ``THREADS_PER_SM`` threads of its blocks (:func:`full_occupancy_blocks`, the
    ``min_blocks`` pragma), so more rows are in flight per SM; 0 leaves them to ptxas.

    The output step (:data:`LAYERNORM_OUTPUT_DEFAULTS` says which are the default):

    * ``scalars`` 1: the row's mean and ``1 / std`` computed once per row (same values).
    * ``affine`` 1 (float16 only): ``gamma * y + beta`` in float16, ``y = (x - mean) /
      std`` rounded to float16 first, two lanes an instruction (``__hfma2``). With ``u`` =
      2^-11: ``|out - (g y + b)| <= u |g y| (1 + u) + u |g y + b|`` (one rounding of
      ``g y`` more than the float32 step's single rounding of the output; ``u (2 |g y| +
      |g y + b|)`` where product and sum round apart, as in the interpreter).
    * ``hints`` 1: gamma's and beta's loads ``evict_last`` in L1; 2: also the rows' loads
      ``evict_first`` (PTX ``ld.global.nc.L1::*``).
    * ``stores`` 1: streaming output stores (``st.global.cs``).
    """
    cfg = get_config()
    layout = _row_knobs(cfg, M, N, dtype, "layernorm", params=2)
    cfg.define_knob("stats", [0, 1], default=int(dtype in ONE_PASS_DTYPES and N >= 1024),
                    legacy=0)
    one_pass = cfg["stats"].val == 1
    cfg.define_knob("occupancy", [0, 1], default=int(dtype in FULL_OCCUPANCY_DTYPES),
                    legacy=0)
    min_blocks = full_occupancy_blocks(layout) if cfg["occupancy"].val else 0
    # the output step's knobs: defaults as measured (LAYERNORM_OUTPUT_DEFAULTS), rows of
    # at least 1024 (as the default layout)
    out_default = LAYERNORM_OUTPUT_DEFAULTS.get(dtype, {}) if N >= 1024 else {}
    cfg.define_knob("affine", [0, 1] if dtype == "float16" else [0],
                    default=out_default.get("affine", 0), legacy=0)
    half_affine = cfg["affine"].val == 1
    cfg.define_knob("scalars", [0, 1], default=out_default.get("scalars", 0), legacy=0)
    row_scalars = cfg["scalars"].val == 1
    cfg.define_knob("hints", [0, 1, 2], default=out_default.get("hints", 0), legacy=0)
    cfg.define_knob("stores", [0, 1], default=out_default.get("stores", 0), legacy=0)
    A = te.placeholder((M, N), name="A", dtype=dtype)
    G = te.placeholder((N,), name="gamma", dtype=dtype)
    Bt = te.placeholder((N,), name="beta", dtype=dtype)
    g, g_regs = _param_reader(G, layout)
    b, b_regs = _param_reader(Bt, layout)
    k1 = te.reduce_axis((0, N), name="k1")
    k2 = te.reduce_axis((0, N), name="k2")
    inv_n = te.const(1.0 / N, "float32")
    X, regs = _row_reader(A, layout)
    pre = []
    if one_pass:
        shift = te.compute((M,), lambda i: _f32(A[i, 0]), name="shift")
        pre.append(shift)

        def moments(i):
            d = _f32(X(i, k1)) - shift[i]
            return SUM_SUMSQ((d, d * d), axis=k1)

        s1, s2 = te.compute((M,), moments, name="moments")
        reductions = (s1,)

        def mean(i):
            return shift[i] + s1[i] * inv_n

        def var(i):
            m1 = s1[i] * inv_n
            return te.max(s2[i] * inv_n - m1 * m1, te.const(0.0, "float32"))
    else:
        mu = te.compute((M,), lambda i: te.sum(_f32(X(i, k1)) * inv_n, axis=k1), name="mean")
        vr = te.compute((M,), lambda i: te.sum((_f32(X(i, k2)) - mu[i])
                                               * (_f32(X(i, k2)) - mu[i]) * inv_n, axis=k2),
                        name="var")
        reductions = (mu, vr)

        def mean(i):
            return mu[i]

        def var(i):
            return vr[i]
    # beta and gamma first: the stages of their registers (shared = 3) come before the
    # reductions' at the block's row loop (stages attached at one loop keep the order in
    # which the output's definition reads them), so their loads overlap the reductions
    if row_scalars:
        # the row's mean and 1 / std once per row into registers (shared memory with
        # several rows a block): inline, nvcc re-evaluates the rsqrt (and the max before
        # it) for every element, as the NaN-propagating max is an asm statement it does not
        # hoist out of the output's loop
        if one_pass:
            mu_row = te.compute((M,), mean, name="mean_row")
            pre.append(mu_row)
        else:
            mu_row = mu
        rstd = te.compute((M,), lambda i: te.rsqrt(var(i) + te.const(1e-5, "float32")),
                          name="rstd")
        pre.append(rstd)

        def normed(i, j):
            return (_f32(X(i, j)) - mu_row[i]) * rstd[i]
    else:
        def normed(i, j):
            return (_f32(X(i, j)) - mean(i)) * te.rsqrt(var(i) + te.const(1e-5, "float32"))

    if half_affine:
        out = te.compute((M, N), lambda i, j: b(j) + g(j) * normed(i, j).astype(dtype),
                         name="layernorm")
    else:
        out = te.compute((M, N), lambda i, j: (_f32(b(j)) + _f32(g(j)) * normed(i, j))
                         .astype(dtype), name="layernorm")
    s = te.create_schedule(out.op)
    _fused_rows(s, out, reductions, layout, regs,
                [r for r in (g_regs, b_regs) if r is not None], pre=pre, half2=half_affine,
                hints=cfg["hints"].val, stream=cfg["stores"].val == 1)
    if min_blocks:
        s[out].pragma(s[out].leaf_iter_vars[0], "min_blocks", min_blocks)   # the block loop
    return s, [A, G, Bt, out]


def _rmsnorm_reference(a, g, *, args=()):
    x = a.astype("float64")
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * g


@template("rmsnorm", target="cuda", default_args=(1024, 1024),
          flops=lambda M, N: 4.0 * M * N, reference=_rmsnorm_reference)
def rmsnorm_cuda(M: int, N: int, dtype: str = "float32"):
    """RMS normalisation of the rows of A[M, N] with gamma (epsilon 1e-6) on the GPU in one
    kernel (:func:`_fused_rows`): the mean of squares, then ``A * rsqrt(ms + eps) * g``."""
    cfg = get_config()
    layout = _row_knobs(cfg, M, N, dtype)
    A = te.placeholder((M, N), name="A", dtype=dtype)
    G = te.placeholder((N,), name="gamma", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    inv_n = te.const(1.0 / N, "float32")
    X, regs = _row_reader(A, layout)
    ms = te.compute((M,), lambda i: te.sum(_f32(X(i, k)) * _f32(X(i, k)) * inv_n, axis=k),
                    name="meansq")
    out = te.compute((M, N), lambda i, j: (_f32(X(i, j)) * te.rsqrt(
        ms[i] + te.const(1e-6, "float32")) * _f32(G[j])).astype(dtype), name="rmsnorm")
    s = te.create_schedule(out.op)
    _fused_rows(s, out, (ms,), layout, regs)
    return s, [A, G, out]


def _row_sum_reference(a, *, args=()):
    return a.sum(axis=1)


@template("row_sum", target="cuda", default_args=(4096, 4096),
          flops=lambda M, N: 1.0 * M * N, reference=_row_sum_reference)
def row_sum_cuda(M: int, N: int, dtype: str = "float32"):
    """B[M] = sum over the rows of A[M, N] on the GPU: across threads or one row per
    thread."""
    cfg = get_config()
    limits = gpu_limits.current()
    # [threads along a row, rows per block]: rows per block only matter with one thread
    # per row
    layouts = [[t, 1] for t in _reduce_threads(limits, N)] + [
        [1, r] for r in (32, 64, 128, 256) if r <= limits.max_threads_per_block]
    cfg.define_knob("layout", layouts, default=[256, 1] if [256, 1] in layouts
                    else layouts[0])
    nt, rows = cfg["layout"].val
    A = te.placeholder((M, N), name="A", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    B = te.compute((M,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    if nt > 1:
        _, ki = s[B].split(k, factor=nt)
        s[B].bind(B.op.axis[0], _bx())
        s[B].bind(ki, _tx())
    else:
        bo, bi = s[B].split(B.op.axis[0], factor=rows)
        s[B].bind(bo, _bx())
        s[B].bind(bi, _tx())
    return s, [A, B]


from . import templates_gpu_conv  # noqa: E402,F401  (conv2d_nchw / conv2d_nhwc on the GPU)
