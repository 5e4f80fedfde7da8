"""Tensor-core conv2d as an implicit GEMM in NHWC (float16 or bfloat16 in, float32 sums).

The convolution ``out[n, y, x, co] = sum_{ky, kx, ci} A[n, y*s + ky - p, x*s + kx - p, ci]
* W[ky, kx, ci, co]`` (NHWC input, HWIO weights) is a GEMM ``C[M, CO] = Acol[M, K] @
B[K, CO]`` with ``M = N * OH * OW`` (the output pixels, row ``m = (n * OH + y) * OW + x``)
and ``K = KH * KW * CI``. Nothing is materialised: the im2col gather is a compute stage
(``Acol``) that only exists inside the shared-memory staging of A, written as a TE
compute and scheduled with the tensor-core machinery of :mod:`.tensor_core`
(``cache_read`` into ``shared`` and the ``wmma.*`` fragment scopes, ``tensorize`` with
WMMA or ldmatrix + ``mma.sync``, ``s[C].pipeline`` with ``cp.async``), exactly the
structure of :func:`.tensor_core.wmma_gemm`.

Layout of the gather: ``Acol[ky, kx, m, c]`` and the (padded) weights ``Wc[ky, kx, c,
co]``, so that for one filter tap ``(ky, kx)`` an operand tile is a 2-D box in the
trailing ``(m, c)`` / ``(c, co)`` dimensions (what ``tensorize`` matches: the intrinsic's
operand is the trailing dimensions of the buffer). The reduction runs over the filter
taps, then over ``BK``-wide channel tiles: one loop ``k.outer`` (taps and channel tiles
fused) whose iterations each stage ``Acol[ky, kx, BM rows, BK channels]`` and ``Wc[ky, kx,
BK channels, BN columns]``; the channels of one pixel are contiguous in NHWC, so every
copy moves 16-byte vectors (``cp.async`` on sm_80+ when ``CI`` is a multiple of 8).

Padding and edges are zero-filled loads: ``Acol`` is ``A`` where the tap falls inside the
image, the row is an output pixel (``m < M``) and the channel exists (``c < CI``), else 0;
``Wc`` is 0 for channels ``c >= CI``. So:

* ``CI`` is rounded up to a multiple of ``BK`` (``CIp``): any channel count works (the
  first layer's 3 included), the extra channels cost MMAs on zeros.
* ``M`` is rounded up to a multiple of :data:`M_ALIGN` (``Mp``); the output is the GEMM
  view ``C[Mp, CO]``: its first ``M`` rows, reshaped, are the NHWC output
  ``[N, OH, OW, CO]``, the remaining rows are zeros. A partial 16x16 tile cannot be one
  MMA, hence the rounding; rounding to a fixed multiple keeps the output's shape the same
  for every block tile (the tuner compares configs on one workload).
* ``CO`` must be a multiple of the block's ``BN`` (ScheduleError otherwise).
"""

from __future__ import annotations

from polytile import te
from polytile.errors import fail

from ..gpu_tiling import cooperative_copy, warp_tiles
from . import tensor_core as tc

#: Rows of the GEMM view the output is padded to a multiple of (the largest ``BM``).
M_ALIGN = 128


def out_size(n: int, k: int, stride: int, pad: int) -> int:
    """Output extent of a convolution over ``n`` inputs with a ``k`` tap filter."""
    return (n + 2 * pad - k) // stride + 1


def round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def conv2d_nhwc_gemm_compute(N: int, H: int, W: int, CI: int, CO: int, KH: int, KW: int,
                             stride: int = 1, pad: int = 0, *, dtype: str = "float16",
                             acc: str = "float32", bk: int = 32):
    """The TE definition of the implicit-GEMM convolution (see the module docstring).

    Returns ``(A, Wt, Acol, Wc, C)``: placeholders ``A[N, H, W, CI]`` and ``Wt[KH, KW, CI,
    CO]`` of ``dtype``, the gather stages ``Acol[KH, KW, Mp, CIp]`` and ``Wc[KH, KW, CIp,
    CO]`` (``Wc`` is ``Wt`` itself when ``CI`` is a multiple of ``bk``) and the output
    ``C[Mp, CO]`` of ``acc``."""
    for name, v in (("N", N), ("H", H), ("W", W), ("CI", CI), ("CO", CO), ("KH", KH),
                    ("KW", KW), ("stride", stride)):
        if not isinstance(v, int) or v < 1:
            fail("conv2d_nhwc", f"{name} = {v!r}", "a positive integer")
    if not isinstance(pad, int) or pad < 0:
        fail("conv2d_nhwc", f"pad = {pad!r}", "a non-negative integer")
    OH, OW = out_size(H, KH, stride, pad), out_size(W, KW, stride, pad)
    if OH < 1 or OW < 1:
        fail("conv2d_nhwc", f"a {KH}x{KW} filter with stride {stride} and pad {pad} leaves "
             f"no output of a {H}x{W} image", "a filter that fits the padded image")
    M = N * OH * OW
    Mp, CIp = round_up(M, M_ALIGN), round_up(CI, bk)
    A = te.placeholder((N, H, W, CI), name="A", dtype=dtype)
    Wt = te.placeholder((KH, KW, CI, CO), name="W", dtype=dtype)
    zero = te.const(0, dtype)

    def gather(ky, kx, m, c):
        n, y, x = m // (OH * OW), m // OW % OH, m % OW
        iy, ix = y * stride + ky - pad, x * stride + kx - pad
        conds = []
        if Mp != M:
            conds.append(m < M)
        if CIp != CI:
            # whole 8-channel vectors where CI allows: a condition the same for every lane
            # of a 16-byte copy, which then stays one (zero-filled) copy
            conds.append(c // 8 < CI // 8 if CI % 8 == 0 else c < CI)
        if pad:
            conds += [iy >= 0, iy < H, ix >= 0, ix < W]
        elif (OH - 1) * stride + KH > H or (OW - 1) * stride + KW > W:
            conds += [iy < H, ix < W]   # never: out_size keeps taps inside without padding
        value = A[n, iy, ix, c]
        return te.if_then_else(te.all(*conds), value, zero) if conds else value

    Acol = te.compute((KH, KW, Mp, CIp), gather, name="Acol")
    if CIp != CI:
        Wc = te.compute((KH, KW, CIp, CO), lambda ky, kx, c, co: te.if_then_else(
            c < CI, Wt[ky, kx, c, co], zero), name="Wc")
    else:
        Wc = Wt
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    rc = te.reduce_axis((0, CIp), name="rc")
    if acc == dtype:
        body = lambda m, co: te.sum(Acol[ry, rx, m, rc] * Wc[ry, rx, rc, co],  # noqa: E731
                                    axis=[ry, rx, rc])
    else:
        body = lambda m, co: te.sum(Acol[ry, rx, m, rc].astype(acc)  # noqa: E731
                                    * Wc[ry, rx, rc, co].astype(acc), axis=[ry, rx, rc])
    C = te.compute((Mp, CO), body, name="C")
    return A, Wt, Acol, Wc, C


def conv2d_nhwc_tensorcore(N: int, H: int, W: int, CI: int, CO: int, KH: int, KW: int,
                           stride: int = 1, pad: int = 0, *, dtype: str = "float16",
                           acc: str = "float32", block=(128, 64, 32), warp=(64, 32),
                           isa: str = "mma", stages: int = 1, pad_smem: int | None = None):
    """A hand-scheduled tensor-core convolution (implicit GEMM, NHWC; module docstring).

    ``block = (BM, BN, BK)``: a block computes ``BM`` output pixels x ``BN`` output
    channels, staging per step of ``k.outer`` one filter tap's ``BM x BK`` input tile
    (the im2col gather, zero-filled) and ``BK x BN`` weight tile in shared memory; each
    warp of ``warp = (WM, WN)`` owns ``WM/16 x WN/16`` accumulator fragments. ``isa``:
    ``"wmma"`` or ``"mma"`` (ldmatrix + ``mma.sync.m16n8k16``, sm_80+); ``stages > 1``
    pipelines ``k.outer`` (``cp.async``, ``stages`` shared buffers). ``pad_smem``: shared
    row padding in elements (default 16 bytes, against ldmatrix bank conflicts).

    Returns
    -------
    (Schedule, [A, Wt, C])
        ``A[N, H, W, CI]``, ``Wt[KH, KW, CI, CO]`` of ``dtype``; ``C[Mp, CO]`` of ``acc``
        (rows ``m < N*OH*OW`` hold the NHWC output, the rest zeros).

    Raises
    ------
    ScheduleError
        For tiles that do not divide (``BM | 128``, ``BN | CO``, ``WM | BM``, ``WN | BN``,
        multiples of 16), a ``dtype``/``acc``/``isa`` the intrinsics lack.
    """
    from polytile.schedule import create_schedule

    BM, BN, BK = block
    WM, WN = warp
    where = f"conv2d_nhwc_tensorcore: block {list(block)}, warp {list(warp)}"
    if M_ALIGN % BM or BM % WM or BN % WN or WM % 16 or WN % 16 or BK % 16:
        fail(where, "tiles that do not nest", f"BM dividing {M_ALIGN}, WM | BM, WN | BN, "
             "WM, WN and BK multiples of 16")
    if CO % BN:
        fail(where, f"{CO} output channels are not a multiple of BN = {BN}",
             "CO a multiple of the block's output channels", hint="a BN dividing CO")
    if isa not in ("wmma", "mma"):
        fail(where, f"isa {isa!r}", "'wmma' or 'mma'")
    if (dtype, acc) not in (("float16", "float32"), ("float16", "float16"),
                            ("bfloat16", "float32")):
        fail(where, f"dtype {dtype!r} with {acc!r} accumulation", "float16 (float32 or "
             "float16 accumulation) or bfloat16 (float32 accumulation)")
    if stages > 1 and CI % 8:
        fail(where, f"stages={stages} with CI = {CI} input channels, not a multiple of 8",
             "CI a multiple of 8 for a pipeline (its copies are 16-byte cp.async of 8 "
             "channels of one pixel)", hint="stages=1 (synchronous copies)")
    A, Wt, Acol, Wc, C = conv2d_nhwc_gemm_compute(N, H, W, CI, CO, KH, KW, stride, pad,
                                                  dtype=dtype, acc=acc, bk=BK)
    vector = 8 if CI % 8 == 0 else 1   # 16-byte copies while channels stay in one pixel
    pad_smem = 8 if pad_smem is None else pad_smem
    s = create_schedule(C.op)
    AS = s.cache_read(Acol, "shared", [C])
    BS = s.cache_read(Wc, "shared", [C])
    s[Acol].compute_inline()
    if Wc is not Wt:
        s[Wc].compute_inline()
    CF = s.cache_write(C, "wmma.accumulator")
    AF = s.cache_read(AS, "wmma.matrix_a", [CF])
    BF = s.cache_read(BS, "wmma.matrix_b", [CF])
    mma = isa == "mma"
    wj, fi, fj, ti = warp_tiles(s, C, (BM, BN), (WM, WN), (16, 16))
    s[C].tensorize(ti, tc.mma_store(acc) if mma else tc.wmma_store(acc))
    s[C].unroll(fi)
    s[C].unroll(fj)
    s[CF].compute_at(s[C], wj)
    ci, cj = CF.op.axis
    ry, rx, rc = CF.op.reduce_axis
    kc, kk = s[CF].split(rc, factor=BK)
    kf, ki = s[CF].split(kk, factor=16)
    cfi, cti = s[CF].split(ci, factor=16)
    cfj, ctj = s[CF].split(cj, factor=16)
    s[CF].reorder(ry, rx, kc, kf, cfi, cfj, cti, ctj, ki)
    ko = s[CF].fuse(ry, rx, kc)
    s[CF].tensorize(cti, tc.mma_mma(dtype, acc) if mma else tc.wmma_mma(dtype, acc))
    s[CF].unroll(cfi)
    s[CF].unroll(cfj)
    if stages > 1:
        s[CF].unroll(kf)
    s[AF].compute_at(s[CF], kf)
    s[BF].compute_at(s[CF], kf)
    loads = ((tc.mma_load_a(dtype), tc.mma_load_b(dtype)) if mma
             else (tc.wmma_load_a(dtype), tc.wmma_load_b(dtype)))
    for F, intrin in zip((AF, BF), loads):
        a0, a1 = F.op.axis[-2:]
        o0, i0 = s[F].split(a0, factor=16)
        o1, i1 = s[F].split(a1, factor=16)
        s[F].reorder(*F.op.axis[:-2], o0, o1, i0, i1)
        s[F].tensorize(i0, intrin)
        s[F].unroll(o0)
        s[F].unroll(o1)
    if stages > 1:
        s[CF].pipeline(ko, stages=stages)
    threads = (32, BN // WN, BM // WM)
    for S, vec in ((AS, vector), (BS, 8 if CO % 8 == 0 else 1)):
        s[S].compute_at(s[CF], ko)
        if pad_smem:
            row = S.op.axis[-2]
            width = S.op.axis[-1].dom.extent
            s[S].storage_align(row, width + pad_smem if width % 32 else 32,
                               pad_smem if width % 32 == 0 else 0)
        cooperative_copy(s, S, vector=vec, threads=threads)
    return s, [A, Wt, C]
