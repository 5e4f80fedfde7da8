"""The Triton anchor of ``benchmarks/gpu_gemm.py``: a plain blocked GEMM written in Triton.

Each program computes one ``BM x BN`` tile of ``C = A @ B`` (row-major operands) by
walking ``K`` in steps of ``BK`` with ``tl.dot`` (tensor cores, float32 accumulation);
programs are ordered in groups of ``GROUP`` tile rows so that neighbours share tiles of
``A`` in L2 (the "grouped ordering" of Triton's matmul tutorial). :func:`best_tflops` times
a few common Hopper tile shapes and returns the best, as Triton's own autotuner would.
Needs torch and triton (the GPU machine has both; this module is imported only there).
"""

from __future__ import annotations

import triton
import triton.language as tl

#: (BM, BN, BK, warps, pipeline stages): tile shapes that suit sm_90 for float16/bfloat16
CONFIGS = ((128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (256, 128, 64, 8, 3))


@triton.jit
def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
          IEEE: tl.constexpr = False):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    in_group = GROUP * tiles_n
    first_m = (pid // in_group) * GROUP
    rows = tl.minimum(tiles_m - first_m, GROUP)
    pm = first_m + (pid % in_group) % rows
    pn = (pid % in_group) // rows
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if IEEE:   # float32 operands on CUDA cores (the default rounds them to tf32)
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


#: tile shapes for float32 operands without tensor cores (``tl.dot(..., "ieee")``)
FP32_CONFIGS = ((128, 128, 32, 8, 3), (128, 128, 16, 8, 4), (64, 128, 32, 4, 4))


def matmul(a, b, config=CONFIGS[0]):
    """``a @ b`` for 2-D CUDA torch tensors of one dtype (float16/bfloat16, or float32
    multiplied in IEEE float32), in that dtype."""
    import torch

    BM, BN, BK, warps, stages = config
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    _gemm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK, GROUP=8,
                IEEE=a.dtype == torch.float32,
                num_warps=warps, num_stages=stages)
    return c


def best_tflops(a, b, time_fn) -> tuple[float, tuple]:
    """The best TFLOP/s over :data:`CONFIGS` (``time_fn(fn) -> TFLOP/s``), after checking
    each config's result against torch's; returns ``(tflops, config)``.

    Raises
    ------
    AssertionError
        If a config computes a wrong result (relative error above 1e-2).
    """
    import torch

    ref = (a.float() @ b.float())
    best = (0.0, None)
    for cfg in FP32_CONFIGS if a.dtype == torch.float32 else CONFIGS:
        out = matmul(a, b, cfg).float()
        err = ((out - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"Triton GEMM {cfg}: relative error {err:.1e}"
        t = time_fn(lambda cfg=cfg: matmul(a, b, cfg))
        best = max(best, (t, cfg), key=lambda x: x[0])
    return best
