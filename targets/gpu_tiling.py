"""Schedule pieces shared by the matrix-core GEMMs of every GPU backend (CUDA WMMA/mma.sync
in :mod:`polytile.targets.cuda.tensor_core`, HIP MFMA in :mod:`polytile.targets.hip.gemm`):
the block/warp/fragment tiling of ``C`` and the cooperative copy of an operand tile into
shared memory. The tensor intrinsics, which differ per backend, stay with the callers."""

from __future__ import annotations

from polytile import te


def group_rows(group: int, rows: int) -> int:
    """The group size a block order of ``group`` tile rows (``warp_tiles``, the CUDA-core
    GEMM's ``group`` knob) uses over ``rows`` tile rows: the largest divisor of ``rows`` at
    most ``group`` (at least 1). A partial last group guards the k loop's copies and
    compute with different conditions, which ``pipeline`` refuses."""
    group = max(1, min(group, rows))
    while rows % group:
        group -= 1
    return group


def warp_tiles(s, C: te.Tensor, block: tuple[int, int], warp: tuple[int, int],
               frag: tuple[int, int], group: int = 1):
    """Tile ``C[M, N]``'s ``(i, j)`` as ``bi, bj, wi, wj, fi, fj, ti, tj``: ``block = (BM, BN)``
    tiles on ``blockIdx.y/x``, ``warp = (WM, WN)`` tiles on ``threadIdx.z/y`` (one warp or
    wavefront each), ``frag = (m, n)`` fragments (``fi, fj``) of ``ti x tj`` elements.

    ``group > 1`` orders the blocks for L2 reuse (Triton's ``GROUP_M``): ``bi`` split by
    ``group``, its inner part fused under ``bj`` on ``blockIdx.x``, so the blocks launched
    one after the other walk down ``group`` tile rows of one tile column before the next
    column; a wave of blocks then reads ``group`` row panels of A and few column panels of
    B instead of one row panel and every column panel.

    Returns ``(wj, fi, fj, ti)``: where ``C``'s accumulator goes, the fragment loops to
    unroll and the axis to tensorize."""
    i, j = C.op.axis
    bi, ii = s[C].split(i, factor=block[0])
    bj, jj = s[C].split(j, factor=block[1])
    wi, ii = s[C].split(ii, factor=warp[0])
    wj, jj = s[C].split(jj, factor=warp[1])
    fi, ti = s[C].split(ii, factor=frag[0])
    fj, tj = s[C].split(jj, factor=frag[1])
    s[C].reorder(bi, bj, wi, wj, fi, fj, ti, tj)
    if group > 1:
        bo, bii = s[C].split(bi, factor=group)
        s[C].reorder(bo, bj, bii)
        bx = s[C].fuse(bj, bii)
        s[C].bind(bo, te.thread_axis("blockIdx.y"))
        s[C].bind(bx, te.thread_axis("blockIdx.x"))
    else:
        s[C].bind(bi, te.thread_axis("blockIdx.y"))
        s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(wi, te.thread_axis("threadIdx.z"))
    s[C].bind(wj, te.thread_axis("threadIdx.y"))
    return wj, fi, fj, ti


def fragment_tiles(s, CF: te.Tensor, bk: int, frag: tuple[int, int, int]):
    """Tile the accumulator stage ``CF`` (one warp's ``C`` tile, reduction ``k``) into
    ``ko, kf, cfi, cfj, cti, ctj, ki``: ``bk``-wide k tiles (``ko``, the shared-memory
    stages), then ``frag = (m, n, k)`` fragments. Returns ``(ko, kf, cfi, cfj, cti)``."""
    ci, cj = CF.op.axis
    (ck,) = CF.op.reduce_axis
    ko, kk = s[CF].split(ck, factor=bk)
    kf, ki = s[CF].split(kk, factor=frag[2])
    cfi, cti = s[CF].split(ci, factor=frag[0])
    cfj, ctj = s[CF].split(cj, factor=frag[1])
    s[CF].reorder(ko, kf, cfi, cfj, cti, ctj, ki)
    return ko, kf, cfi, cfj, cti


def cooperative_copy(s, S: te.Tensor, *, vector: int, threads: tuple[int, ...]):
    """Copy the shared-memory tile ``S`` (already placed by ``compute_at``) with every thread
    of the block: its fused axes split into ``vector``-element loads, then over
    ``threads = (x, y[, z])`` threads (``threadIdx.x`` innermost, e.g. the lanes of a warp,
    then the warps on ``threadIdx.y``, ``threadIdx.z``); the outermost loop is what is left
    (several loads per thread where the tile is larger than the block)."""
    f = s[S].fuse(*S.op.axis)
    f, v = s[S].split(f, factor=vector)
    bound = []
    for n, tag in zip(threads, ("threadIdx.x", "threadIdx.y", "threadIdx.z")):
        f, t = s[S].split(f, factor=n)
        bound.append((t, tag))
    for t, tag in bound:
        s[S].bind(t, te.thread_axis(tag))
    if vector > 1:
        s[S].vectorize(v)
