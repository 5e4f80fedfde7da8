"""Built-in GPU templates (target kind ``cuda``): ``matmul``, ``batch_matmul``,
``softmax``, ``layernorm``, ``row_sum`` (the convolutions: :mod:`.templates_gpu_conv`).

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
``unroll_k`` unrolls the inner k loop. The tutorial's hand schedule (``[128, 128, 16, 8,
8]``, ``vec`` 4) is the default config. ``batch_matmul`` is the same schedule per batch,
batches on ``blockIdx.z``.

``softmax``: one block per row; the row maximum and the sum of exponentials are
cross-thread reductions over ``threads`` threads (TVM's all-reduce), each a kernel of its
own. (Attaching them to the output's row with ``compute_at`` would save two kernels, but
lowering puts barriers inside the thread-0 combine of an attached cross-thread reduction
today; the interpreter refuses that schedule, so the space leaves it out.)

``layernorm``: as ``softmax``, with the mean and the variance as cross-thread reductions
over ``threads`` threads and the normalised row written by ``out_threads`` threads.

``row_sum``: ``B[i] = sum_k A[i, k]``; ``layout`` ``[threads, rows]``: a row per block
reduced across ``threads`` threads, or (``[1, rows]``) one row per thread with ``rows``
rows per block.
"""

from __future__ import annotations

import numpy as np

from polytile import te
from polytile.targets.gpu_tiling import cooperative_copy

from . import gpu_limits
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


def _mm_knobs(cfg, M: int, N: int, dtype: str) -> tuple:
    """Declare the knobs of the (batched) GEMM schedule; ``(BM, BN, BK, TM, TN, vec)``."""
    limits = gpu_limits.current()
    itemsize = np.dtype(dtype).itemsize if dtype != "bfloat16" else 2
    tiles = matmul_tiles(limits, itemsize, large=M >= LARGE and N >= LARGE) or \
        matmul_tiles(limits, itemsize)
    default = [128, 128, 16, 8, 8] if [128, 128, 16, 8, 8] in tiles else tiles[0]
    cfg.define_knob("tile", tiles, default=default)
    cfg.define_knob("vec", [1, 2, 4], default=4)
    cfg.define_knob("unroll_k", [True, False], default=True)
    return (*cfg["tile"].val, cfg["vec"].val)


@template("matmul", target="cuda", default_args=(1024, 1024, 1024),
          flops=lambda M, N, K: 2.0 * M * N * K, reference=_mm_reference)
def matmul_cuda(M: int, N: int, K: int, dtype: str = "float32"):
    """C[M, N] = A[M, K] @ B[K, N] on the GPU: shared-memory and register tiling."""
    cfg = get_config()
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    r = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return _gemm_schedule(cfg, A, B, C, _mm_knobs(cfg, M, N, dtype)), [A, B, C]


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
    return _gemm_schedule(cfg, A, B, C, _mm_knobs(cfg, M, N, dtype)), [A, B, C]


def _gemm_schedule(cfg, A, B, C, knobs: tuple):
    """The shared + register tiled schedule of a GEMM ``C`` (2-D, or 3-D with a leading
    batch axis bound to ``blockIdx.z``); see the module docstring."""
    bm, bn, bk, tm, tn, vec = knobs
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    ty_n, tx_n = bm // tm, bn // tn
    axes = C.op.axis
    bi, bj, ii, jj = s[C].tile(axes[-2], axes[-1], bm, bn)
    ty, iin = s[C].split(ii, factor=tm)
    tx, jin = s[C].split(jj, factor=tn)
    s[C].reorder(*axes[:-2], bi, bj, ty, tx, iin, jin)
    if len(axes) == 3:
        s[C].bind(axes[0], te.thread_axis("blockIdx.z"))
    s[C].bind(bi, _by())
    s[C].bind(bj, _bx())
    s[C].bind(ty, _ty())
    s[C].bind(tx, _tx())
    if tm > 1:
        s[C].unroll(iin)
    if tn > 1:
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
    return s


def _block_per_row(s, out: te.Tensor, reductions, nt: int, ot: int) -> None:
    """One block per row (``blockIdx.x``): the columns of ``out[M, N]`` split over ``ot``
    threads and each row reduction of ``reductions`` (``[M]``, reducing over ``N``) over
    ``nt`` threads (``threadIdx.x``, a cross-thread reduction)."""
    i, j = out.op.axis
    _, ji = s[out].split(j, factor=ot)
    s[out].bind(i, _bx())
    s[out].bind(ji, _tx())
    for st in reductions:
        _, ki = s[st].split(st.op.reduce_axis[0], factor=nt)
        s[st].bind(st.op.axis[0], _bx())
        s[st].bind(ki, _tx())


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


def _softmax_reference(a, *, args=()):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@template("softmax", target="cuda", default_args=(1024, 1024),
          flops=lambda M, N: 5.0 * M * N, reference=_softmax_reference)
def softmax_cuda(M: int, N: int, dtype: str = "float32"):
    """Row-wise softmax of A[M, N] on the GPU: a block per row, cross-thread max and sum."""
    cfg = get_config()
    limits = gpu_limits.current()
    threads = _reduce_threads(limits, N)
    cfg.define_knob("threads", threads, default=256 if 256 in threads else threads[-1])
    # computing the statistics in the output's kernel (compute_at) is not offered: its
    # lowering puts barriers inside the thread-0 combine of the cross-thread reduction
    # (a hang on a GPU; the interpreter refuses it), see the module docstring
    nt = cfg["threads"].val
    A = te.placeholder((M, N), name="A", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    k2 = te.reduce_axis((0, N), name="k2")
    mx = te.compute((M,), lambda i: te.max(A[i, k1], axis=k1), name="rowmax")
    sm = te.compute((M,), lambda i: te.sum(te.exp(A[i, k2] - mx[i]), axis=k2), name="rowsum")
    out = te.compute((M, N), lambda i, j: te.exp(A[i, j] - mx[i]) / sm[i], name="softmax")
    s = te.create_schedule(out.op)
    _block_per_row(s, out, (mx, sm), nt, nt)
    return s, [A, out]


def _layernorm_reference(a, g, b, *, args=()):
    mu = a.mean(axis=1, keepdims=True)
    var = ((a - mu) ** 2).mean(axis=1, keepdims=True)
    return (a - mu) / np.sqrt(var + 1e-5) * g + b


@template("layernorm", target="cuda", default_args=(1024, 1024),
          flops=lambda M, N: 8.0 * M * N, reference=_layernorm_reference)
def layernorm_cuda(M: int, N: int, dtype: str = "float32"):
    """Layer normalisation of the rows of A[M, N] on the GPU: a block per row, cross-thread
    mean and variance, then the normalised row."""
    cfg = get_config()
    limits = gpu_limits.current()
    threads = _reduce_threads(limits, N)
    cfg.define_knob("threads", threads, default=256 if 256 in threads else threads[-1])
    cfg.define_knob("out_threads", threads, default=256 if 256 in threads else threads[-1])
    nt, ot = cfg["threads"].val, cfg["out_threads"].val
    A = te.placeholder((M, N), name="A", dtype=dtype)
    G = te.placeholder((N,), name="gamma", dtype=dtype)
    Bt = te.placeholder((N,), name="beta", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    k2 = te.reduce_axis((0, N), name="k2")
    inv_n = te.const(1.0 / N, dtype)
    mean = te.compute((M,), lambda i: te.sum(A[i, k1] * inv_n, axis=k1), name="mean")
    var = te.compute((M,), lambda i: te.sum((A[i, k2] - mean[i]) * (A[i, k2] - mean[i])
                                            * inv_n, axis=k2), name="var")
    out = te.compute((M, N), lambda i, j: (A[i, j] - mean[i]) * te.rsqrt(
        var[i] + te.const(1e-5, dtype)) * G[j] + Bt[j], name="layernorm")
    s = te.create_schedule(out.op)
    _block_per_row(s, out, (mean, var), nt, ot)
    return s, [A, G, Bt, out]


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
