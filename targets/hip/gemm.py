"""A hand-scheduled GEMM on AMD matrix cores (MFMA), the HIP counterpart of
:func:`polytile.targets.cuda.tensor_core.wmma_gemm`."""

from __future__ import annotations

from polytile import te

from ..gpu_tiling import cooperative_copy, fragment_tiles, warp_tiles
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
    wj, fi, fj, ti = warp_tiles(s, C, (BM, BN), (WM, WN), (ins.m, ins.n))
    s[C].tensorize(ti, mfma_store(ins.m, ins.n, ins.acc))
    # accumulator tiles are registers: constant indices, so unroll every loop over them
    s[C].unroll(fi)
    s[C].unroll(fj)
    s[CF].compute_at(s[C], wj)
    ko, kf, cfi, cfj, cti = fragment_tiles(s, CF, BK, (ins.m, ins.n, ins.k))
    s[CF].tensorize(cti, mfma_mma(ins.name))
    s[CF].unroll(cfi)
    s[CF].unroll(cfj)
    for S in (AS, BS):
        s[S].compute_at(s[CF], ko)
        cooperative_copy(s, S, vector=vector, threads=(WAVEFRONT, BN // WN, BM // WM))
    return s, [A, B, C]


__all__ = ["mfma_gemm"]
