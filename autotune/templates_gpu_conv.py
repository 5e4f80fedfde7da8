"""GPU convolution templates (target kind ``cuda``): ``conv2d_nchw`` and ``conv2d_nhwc``.

``conv2d_nchw`` (a variant of the CPU template of the same name: NCHW input, OIHW
weights, NCHW output) is a *direct* convolution with shared-memory and register tiling: a
block computes ``BF`` output channels x ``BY x BX`` output pixels of one image, each
thread a ``TF x TY x TX`` register tile (``C.local``); per step of ``BC`` input channels
the block stages the weights ``W[BF, BC, KH, KW]`` and the input window (halo included,
zero padding folded into the copy) in shared memory with cooperative loads.

``conv2d_nhwc`` (GPU only; NHWC input ``A[N, H, W, CI]``, HWIO weights ``W[KH, KW, CI,
CO]``) is the implicit GEMM of :mod:`polytile.targets.cuda.conv2d`: ``C[Mp, CO]`` with
``Mp = N*OH*OW`` rounded up to a multiple of 128, whose first ``N*OH*OW`` rows are the
NHWC output and the rest zeros (the same shape for every config and dtype). float16 and
bfloat16 inputs run on tensor cores (float32 sums; knobs: block and warp tiles, ``isa``
``mma`` (ldmatrix + mma.sync) or ``wmma``, pipeline ``stages`` with zero-filled
``cp.async``); float32 inputs on CUDA cores with the shared + register tiling of the
``matmul`` template (knobs: block tile, thread tile, ``vec``).

Every knob list is pruned with :func:`.gpu_limits.current` before anything is built:
threads per block, shared memory (all pipeline stages) and an estimate of the registers.
"""

from __future__ import annotations

import numpy as np

from polytile import te
from polytile.targets.cuda.conv2d import (M_ALIGN, conv2d_nhwc_gemm_compute,
                                          conv2d_nhwc_tensorcore, out_size, round_up)
from polytile.targets.gpu_tiling import cooperative_copy

from . import gpu_limits
from . import templates_nn as _nn   # used at call time: it may still be importing
from .template import get_config, template


def _t(tag: str):
    return te.thread_axis(tag)


# ----------------------------------------------------------------------- direct, NCHW
def conv_direct_registers(tf: int, ty: int, tx: int) -> int:
    """Estimated 32-bit registers per thread of a ``tf x ty x tx`` register tile: the
    accumulators, a weight and an input per output row, 28 for addresses and loops."""
    return tf * ty * tx + tf + ty * tx + 28


def conv_direct_tiles(limits, CO: int, OH: int, OW: int, KH: int, KW: int, stride: int,
                      itemsize: int = 4) -> list:
    """``[BF, TF, BY, TY, BX, TX, BC]`` lists that fit ``limits`` (threads, shared memory
    for the weight and input tiles of one ``BC`` channel step, registers), block tiles no
    larger than the output rounded up to a power of two."""
    def sizes(n, opts):
        cap = 1 << max(n - 1, 0).bit_length()
        return [v for v in opts if v <= cap]

    out = []
    for bf in sizes(CO, (4, 8, 16, 32, 64)):
        for tf in (1, 2, 4, 8):
            for by in sizes(OH, (1, 2, 4, 8, 16)):
                for ty in (1, 2, 4):
                    for bx in sizes(OW, (4, 8, 16, 32, 64)):
                        for tx in (1, 2, 4):
                            if bf % tf or by % ty or bx % tx:
                                continue
                            threads = (bf // tf) * (by // ty) * (bx // tx)
                            if threads < 32 or threads > 512:
                                continue
                            for bc in (4, 8, 16):
                                ih, iw = (by - 1) * stride + KH, (bx - 1) * stride + KW
                                smem = (bf * bc * KH * KW + bc * ih * iw) * itemsize
                                if gpu_limits.fits(limits, threads, smem,
                                                   conv_direct_registers(tf, ty, tx)):
                                    out.append([bf, tf, by, ty, bx, tx, bc])
    return out


@template("conv2d_nchw", target="cuda")
def conv2d_nchw_cuda(N, CI, H, W, CO, KH, KW, stride, pad, dtype: str = "float32"):
    """2-D convolution NCHW on the GPU: direct, shared-memory and register tiling."""
    cfg = get_config()
    limits = gpu_limits.current()
    OH, OW = out_size(H, KH, stride, pad), out_size(W, KW, stride, pad)
    itemsize = 2 if dtype in ("float16", "bfloat16") else np.dtype(dtype).itemsize
    tiles = conv_direct_tiles(limits, CO, OH, OW, KH, KW, stride, itemsize)
    default = [32, 4, 4, 1, 16, 2, 8]
    cfg.define_knob("tile", tiles, default=default if default in tiles else tiles[0])
    cfg.define_knob("unroll", [True, False], default=True)
    bf, tf, by, ty, bx, tx, bc = cfg["tile"].val
    A, Wt, Ap, C = _nn.conv2d_nchw_compute(N, CI, H, W, CO, KH, KW, stride, pad, dtype)
    s = te.create_schedule(C.op)
    AS = s.cache_read(Ap, "shared", [C])
    WS = s.cache_read(Wt, "shared", [C])
    if Ap is not A:
        s[Ap].compute_inline()
    CL = s.cache_write(C, "local")
    n, f, y, x = C.op.axis
    f0, fi = s[C].split(f, factor=bf)
    y0, yi = s[C].split(y, factor=by)
    x0, xi = s[C].split(x, factor=bx)
    tfa, f1 = s[C].split(fi, factor=tf)
    tya, y1 = s[C].split(yi, factor=ty)
    txa, x1 = s[C].split(xi, factor=tx)
    s[C].reorder(n, f0, y0, x0, tfa, tya, txa, f1, y1, x1)
    s[C].bind(s[C].fuse(n, f0), _t("blockIdx.z"))
    s[C].bind(y0, _t("blockIdx.y"))
    s[C].bind(x0, _t("blockIdx.x"))
    s[C].bind(tfa, _t("threadIdx.z"))
    s[C].bind(tya, _t("threadIdx.y"))
    s[C].bind(txa, _t("threadIdx.x"))
    s[CL].compute_at(s[C], txa)
    cn, cf, cy, cx = CL.op.axis
    crc, cry, crx = CL.op.reduce_axis
    ko, ki = s[CL].split(crc, factor=bc)
    s[CL].reorder(ko, ki, cry, crx, cf, cy, cx)
    if cfg["unroll"].val:
        for ax in (cry, crx, cf, cy, cx):
            s[CL].unroll(ax)
    threads = (bx // tx, by // ty, bf // tf)
    # the shared tiles copied axis by axis, one thread index each: fusing their odd
    # extents (3x3 taps, halo rows) before splitting them over the threads gives quasi-
    # affine maps that make lowering take seconds more per kernel
    s[AS].compute_at(s[CL], ko)
    _axis_copy(s, AS, AS.op.axis[1:], threads)
    s[WS].compute_at(s[CL], ko)
    f_, c_, kh_, kw_ = WS.op.axis
    _axis_copy(s, WS, (f_, c_, s[WS].fuse(kh_, kw_)), threads)
    return s, [A, Wt, C]


def _axis_copy(s, S: te.Tensor, axes, threads: tuple) -> None:
    """Copy shared tile ``S`` with the block's threads: ``axes`` (outermost first) split
    over ``threadIdx.z``, ``threadIdx.y``, ``threadIdx.x`` with ``threads = (x, y, z)``
    threads; the outer parts loop."""
    outer, inner = [], []
    for axis, nt in zip(axes, (threads[2], threads[1], threads[0])):
        o, i = s[S].split(axis, factor=nt)
        outer.append(o)
        inner.append(i)
    s[S].reorder(*outer, *inner)
    for i, tag in zip(inner, ("threadIdx.z", "threadIdx.y", "threadIdx.x")):
        s[S].bind(i, _t(tag))


# ---------------------------------------------------------------------- NHWC, GEMM view
def _nhwc_reference(a, w, *, args):
    """float64 NHWC convolution in the GEMM view ``[Mp, CO]`` (rows past ``N*OH*OW``
    zero); ``args`` the workload's ``(N, CI, H, W, CO, KH, KW, stride, pad)``."""
    stride, pad = args[-2], args[-1]
    n, h, wd, ci = a.shape
    kh, kw, _, co = w.shape
    oh, ow = out_size(h, kh, stride, pad), out_size(wd, kw, stride, pad)
    ap = np.pad(a, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    out = np.zeros((n, oh, ow, co), dtype=np.result_type(a, w))
    for y in range(kh):
        for x in range(kw):
            win = ap[:, y:y + stride * oh:stride, x:x + stride * ow:stride, :]
            out += np.einsum("nhwc,co->nhwo", win, w[y, x], optimize=True)
    m = n * oh * ow
    full = np.zeros((round_up(m, M_ALIGN), co), dtype=out.dtype)
    full[:m] = out.reshape(m, co)
    return full


def tensorcore_tiles(limits, CO: int, stage_opts=(1, 2, 3, 4)) -> list:
    """``[BM, BN, BK, WM, WN, stages]`` lists for the tensor-core conv that fit
    ``limits``: warps of 16-multiples tiling the block, ``BN`` dividing ``CO``, the padded
    shared tiles of all ``stages`` within the shared memory, the accumulators within the
    registers."""
    out = []
    for bm in (32, 64, 128):
        for bn in (16, 32, 64, 128):
            if CO % bn:
                continue
            for bk in (16, 32, 64):
                for wm in (16, 32, 64):
                    for wn in (16, 32, 64):
                        if bm % wm or bn % wn:
                            continue
                        threads = 32 * (bm // wm) * (bn // wn)
                        regs = wm * wn // 32 + (wm + wn) // 4 + 40
                        for st in stage_opts:
                            smem = st * (bm * (bk + 8) + bk * (bn + 8)) * 2
                            if threads <= 512 and gpu_limits.fits(limits, threads, smem,
                                                                  regs):
                                out.append([bm, bn, bk, wm, wn, st])
    return out


def _simt_tiles(limits, CO: int) -> list:
    """``[BM, BN, BK, TM, TN]`` for the float32 implicit GEMM on CUDA cores (the matmul
    template's tiles, ``BN`` at most ``CO`` rounded up to a power of two)."""
    from .templates_gpu import matmul_tiles

    cap = 1 << max(CO - 1, 0).bit_length()
    return [t for t in matmul_tiles(limits, 4) if t[1] <= max(cap, 16) and t[2] <= 32]


@template("conv2d_nhwc", default_args=(1, 64, 56, 56, 64, 3, 3, 1, 1),
          flops=lambda *a: _nn._conv2d_flops(*a), reference=_nhwc_reference, target="cuda")
def conv2d_nhwc_cuda(N, CI, H, W, CO, KH, KW, stride, pad, dtype: str = "float16"):
    """2-D convolution NHWC as an implicit GEMM on the GPU: tensor cores for float16 and
    bfloat16 (float32 sums), shared + register tiling for float32; output C[Mp, CO]."""
    cfg = get_config()
    limits = gpu_limits.current()
    if dtype in ("float16", "bfloat16"):
        if CO % 16:
            from polytile.errors import fail

            fail("conv2d_nhwc", f"{CO} output channels on tensor cores", "CO a multiple "
                 "of 16 (whole 16x16 MMA tiles)", hint="dtype='float32' (CUDA cores)")
        # a pipeline's copies are 16-byte cp.async of 8 channels of one pixel
        tiles = tensorcore_tiles(limits, CO, (1, 2, 3, 4) if CI % 8 == 0 else (1,))
        default = [128, 64, 32, 64, 32, 3 if CI % 8 == 0 else 1]
        cfg.define_knob("tile", tiles, default=default if default in tiles else tiles[0])
        cfg.define_knob("isa", ["mma", "wmma"], default="mma")
        bm, bn, bk, wm, wn, stages = cfg["tile"].val
        return conv2d_nhwc_tensorcore(N, H, W, CI, CO, KH, KW, stride, pad, dtype=dtype,
                                      acc="float32", block=(bm, bn, bk), warp=(wm, wn),
                                      isa=cfg["isa"].val, stages=stages)
    tiles = _simt_tiles(limits, CO)
    default = [64, 64, 16, 4, 4]
    cfg.define_knob("tile", tiles, default=default if default in tiles else tiles[0])
    cfg.define_knob("vec", [1, 4], default=4)
    bm, bn, bk, tm, tn = cfg["tile"].val
    return _simt_conv(N, CI, H, W, CO, KH, KW, stride, pad, dtype, (bm, bn, bk, tm, tn),
                      cfg["vec"].val)


def _simt_conv(N, CI, H, W, CO, KH, KW, stride, pad, dtype, tile, vec):
    """The float32 implicit GEMM: ``C[Mp, CO]`` tiled ``BM x BN`` per block, ``TM x TN``
    per thread in registers, one filter tap's ``BK`` channels staged per step."""
    bm, bn, bk, tm, tn = tile
    A, Wt, Acol, Wc, C = conv2d_nhwc_gemm_compute(N, H, W, CI, CO, KH, KW, stride, pad,
                                                  dtype=dtype, acc=dtype, bk=bk)
    s = te.create_schedule(C.op)
    AS = s.cache_read(Acol, "shared", [C])
    WS = s.cache_read(Wc, "shared", [C])
    s[Acol].compute_inline()
    if Wc is not Wt:
        s[Wc].compute_inline()
    CL = s.cache_write(C, "local")
    m, co = C.op.axis
    bi, bj, ii, jj = s[C].tile(m, co, bm, bn)
    ty, iin = s[C].split(ii, factor=tm)
    tx, jin = s[C].split(jj, factor=tn)
    s[C].reorder(bi, bj, ty, tx, iin, jin)
    s[C].bind(bi, _t("blockIdx.y"))
    s[C].bind(bj, _t("blockIdx.x"))
    s[C].bind(ty, _t("threadIdx.y"))
    s[C].bind(tx, _t("threadIdx.x"))
    s[C].unroll(iin)
    s[C].unroll(jin)
    s[CL].compute_at(s[C], tx)
    ci, cj = CL.op.axis
    ry, rx, rc = CL.op.reduce_axis
    kc, ki = s[CL].split(rc, factor=bk)
    s[CL].reorder(ry, rx, kc, ki, ci, cj)
    ko = s[CL].fuse(ry, rx, kc)
    for ax in (ki, ci, cj):
        s[CL].unroll(ax)
    # 4-wide copies only where the channels of one pixel (and the weights' rows) allow
    va = vec if CI % vec == 0 else 1
    vw = vec if CO % vec == 0 and bn % vec == 0 else 1
    for S, v in ((AS, va), (WS, vw)):
        s[S].compute_at(s[CL], ko)
        cooperative_copy(s, S, vector=v, threads=(bn // tn, bm // tm))
    return s, [A, Wt, C]
