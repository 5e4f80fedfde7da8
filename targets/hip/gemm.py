"""A hand-scheduled GEMM on AMD matrix cores (MFMA), the HIP counterpart of
:func:`polytile.targets.cuda.tensor_core.wmma_gemm`."""

from __future__ import annotations

from polytile import te

from .mfma import WAVEFRONT, _matmul, instruction, mfma_mma, mfma_store


def mfma_gemm(M: int, N: int, K: int, *, instr: str = "v_mfma_f32_32x32x8f16",
              block=(64, 64, 32), wave=(32, 32), vector: int = 4):
    """``C[M, N] = A[M, K] @ B[K, N]`` (row-major) on MFMA instruction ``instr``, ``C`` in
    the instruction's accumulation dtype (float32, or int32 for int8).

    Workgroups of ``block = (BM, BN, BK)``: each stages ``A[BM, BK]`` and ``B[BK, BN]`` in
    LDS (``__shared__``), copied with ``vector``-element loads by all its threads; each
    wavefront computes a ``wave = (WM, WN)`` tile as ``WM/m x WN/n`` accumulator tiles of
    the instruction's ``m x n``, reading its A and B operands straight from LDS. Threads:
    64 lanes (``threadIdx.x``, the LDS copies only) times ``BM/WM x BN/WN`` wavefronts
    (``threadIdx.z``, ``threadIdx.y``).

    Returns
    -------
    (Schedule, [A, B, C])

    Raises
    ------
    ValueError
        For an unknown instruction or tiles that are not multiples of its shape.
    ScheduleError
        When lowered with sizes the tiles do not divide (a partial tile cannot be an
        MFMA call).
    """
    from polytile.schedule import create_schedule

    ins = instruction(instr)
    BM, BN, BK = block
    WM, WN = wave
    if WM % ins.m or WN % ins.n or BK % ins.k or BM % WM or BN % WN:
        raise ValueError(f"mfma_gemm: block {block} and wave {wave} must be multiples of "
                         f"{ins.name}'s {ins.m}x{ins.n}x{ins.k} (and the block of the wave)")
    A = te.placeholder((M, K), name="A", dtype=ins.dtype)
    B = te.placeholder((K, N), name="B", dtype=ins.dtype)
    C = _matmul(A, B, ins.acc, "C")
    s = create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CF = s.cache_write(C, ins.scope)
    i, j = C.op.axis
    bi, ii = s[C].split(i, factor=BM)
    bj, jj = s[C].split(j, factor=BN)
    wi, ii = s[C].split(ii, factor=WM)
    wj, jj = s[C].split(jj, factor=WN)
    fi, ti = s[C].split(ii, factor=ins.m)
    fj, tj = s[C].split(jj, factor=ins.n)
    s[C].reorder(bi, bj, wi, wj, fi, fj, ti, tj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(wi, te.thread_axis("threadIdx.z"))
    s[C].bind(wj, te.thread_axis("threadIdx.y"))
    s[C].tensorize(ti, mfma_store(ins.m, ins.n, ins.acc))
    # accumulator tiles are registers: constant indices, so unroll every loop over them
    s[C].unroll(fi)
    s[C].unroll(fj)
    s[CF].compute_at(s[C], wj)
    ci, cj = CF.op.axis
    (ck,) = CF.op.reduce_axis
    ko, kk = s[CF].split(ck, factor=BK)
    kf, ki = s[CF].split(kk, factor=ins.k)
    cfi, cti = s[CF].split(ci, factor=ins.m)
    cfj, ctj = s[CF].split(cj, factor=ins.n)
    s[CF].reorder(ko, kf, cfi, cfj, cti, ctj, ki)
    s[CF].tensorize(cti, mfma_mma(ins.name))
    s[CF].unroll(cfi)
    s[CF].unroll(cfj)
    for S in (AS, BS):
        s[S].compute_at(s[CF], ko)
        f = s[S].fuse(*S.op.axis)
        f, v = s[S].split(f, factor=vector)
        f, tx = s[S].split(f, factor=WAVEFRONT)
        f, ty = s[S].split(f, factor=BN // WN)
        f, tz = s[S].split(f, factor=BM // WM)
        s[S].bind(tx, te.thread_axis("threadIdx.x"))
        s[S].bind(ty, te.thread_axis("threadIdx.y"))
        s[S].bind(tz, te.thread_axis("threadIdx.z"))
        if vector > 1:
            s[S].vectorize(v)
    return s, [A, B, C]


__all__ = ["mfma_gemm"]
