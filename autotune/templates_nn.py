"""Built-in neural-network templates: ``conv2d_nchw``, ``depthwise_conv2d_nchw``, ``softmax``,
``layernorm``. Each has default sizes, a numpy reference and a hand-written default config.
"""

from __future__ import annotations

import numpy as np

from polytile import te

from .template import get_config, template
from .templates import _lane_filter


def _out_size(n: int, k: int, stride: int, pad: int) -> int:
    return (n + 2 * pad - k) // stride + 1


def _padded(A, pad: int, name: str = "Apad"):
    """``A`` (NCHW) zero-padded by ``pad`` on both spatial sides."""
    if pad == 0:
        return A
    N, C, H, W = (int(getattr(d, "value", d)) for d in A.shape)
    return te.compute((N, C, H + 2 * pad, W + 2 * pad), lambda n, c, y, x: te.if_then_else(
        te.all(y >= pad, y < H + pad, x >= pad, x < W + pad), A[n, c, y - pad, x - pad],
        te.const(0.0, A.dtype)), name=name)


def _conv_reference(a, w, *, args, depthwise: bool = False):
    """numpy convolution of NCHW ``a`` with OIHW (or CHW, depthwise) ``w``; ``args`` are the
    workload's, stride and pad last."""
    stride, pad = args[-2], args[-1]
    n, c, h, wd = a.shape
    ap = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[-2], w.shape[-1]
    oh, ow = _out_size(h, kh, stride, pad), _out_size(wd, kw, stride, pad)
    if depthwise:
        out = np.zeros((n, c, oh, ow), dtype=np.result_type(a, w))
        for y in range(kh):
            for x in range(kw):
                win = ap[:, :, y:y + stride * oh:stride, x:x + stride * ow:stride]
                out += win * w[None, :, y, x, None, None]
        return out
    co = w.shape[0]
    out = np.zeros((n, co, oh, ow), dtype=np.result_type(a, w))
    for y in range(kh):
        for x in range(kw):
            win = ap[:, :, y:y + stride * oh:stride, x:x + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", win, w[:, :, y, x], optimize=True)
    return out


def _conv2d_flops(N, CI, H, W, CO, KH, KW, stride, pad):
    return 2.0 * N * CO * _out_size(H, KH, stride, pad) * _out_size(W, KW, stride, pad) \
        * CI * KH * KW


@template("conv2d_nchw", default_args=(1, 64, 56, 56, 64, 3, 3, 1, 1), flops=_conv2d_flops,
          reference=_conv_reference, target="llvm")
def conv2d_nchw(N, CI, H, W, CO, KH, KW, stride, pad, dtype: str = "float32"):
    """2-D convolution, NCHW input, OIHW weights: output channels and rows register-blocked,
    output columns vectorized, input channels split."""
    cfg = get_config()
    OH, OW = _out_size(H, KH, stride, pad), _out_size(W, KW, stride, pad)
    A = te.placeholder((N, CI, H, W), name="A", dtype=dtype)
    Wt = te.placeholder((CO, CI, KH, KW), name="W", dtype=dtype)
    Ap = _padded(A, pad)
    rc = te.reduce_axis((0, CI), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    C = te.compute((N, CO, OH, OW), lambda n, f, y, x: te.sum(
        Ap[n, rc, y * stride + ry, x * stride + rx] * Wt[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="C")
    s = te.create_schedule(C.op)
    n, f, y, x = C.op.axis
    cfg.define_split("tile_co", f, num_outputs=2, max_factor=16, default=[-1, 4])
    cfg.define_split("tile_oh", y, num_outputs=2, max_factor=8, default=[-1, 2])
    cfg.define_split("tile_ow", x, num_outputs=2, max_factor=64, default=[-1, 8],
                     filter=lambda e: e.size[-1] <= 64)
    cfg.define_split("tile_ci", rc, num_outputs=2, max_factor=64, default=[-1, 8])
    f0, f1 = cfg["tile_co"].apply(s, C, f)
    y0, y1 = cfg["tile_oh"].apply(s, C, y)
    x0, x1 = cfg["tile_ow"].apply(s, C, x)
    c0, c1 = cfg["tile_ci"].apply(s, C, rc)
    cfg.define_reorder("reorder", [c1, ry, rx], policy="all", default=[1, 2, 0])
    red = cfg["reorder"].apply(s, C, [c1, ry, rx])
    s[C].reorder(n, f0, y0, x0, c0, *red, f1, y1, x1)
    cfg.define_annotate("unroll", [f1, y1], policy="try_unroll", default=["unroll", "unroll"])
    cfg["unroll"].apply(s, C, [f1, y1])
    s[C].vectorize(x1)
    _parallel_and_padding(cfg, s, C, (n, f0, y0), "n.co", Ap, pad)
    return s, [A, Wt, C]


def _parallel_and_padding(cfg, s, T, axes, name: str, Ap, pad: int) -> None:
    """Knobs shared by the convolutions: parallelise the fused batch and channel loops
    (``name``), or those and the output-row tiles (``name.oh``); inline the padding stage
    or compute it in parallel over batch and channels."""
    n, ch, y0 = axes
    cfg.define_knob("parallel", [name, f"{name}.oh"], default=name)
    if cfg["parallel"].val == name:
        s[T].parallel(s[T].fuse(n, ch))
    else:
        s[T].parallel(s[T].fuse(n, ch, y0))
    cfg.define_knob("inline_pad", [False, True], default=False)
    if pad:
        if cfg["inline_pad"].val:
            s[Ap].compute_inline()
        else:
            pn, pc, _, _ = Ap.op.axis
            s[Ap].parallel(s[Ap].fuse(pn, pc))


def _dw_flops(N, C, H, W, KH, KW, stride, pad):
    return 2.0 * N * C * _out_size(H, KH, stride, pad) * _out_size(W, KW, stride, pad) * KH * KW


@template("depthwise_conv2d_nchw", default_args=(1, 128, 56, 56, 3, 3, 1, 1), flops=_dw_flops,
          reference=lambda a, w, *, args: _conv_reference(a, w, args=args, depthwise=True), target="llvm")
def depthwise_conv2d_nchw(N, C, H, W, KH, KW, stride, pad, dtype: str = "float32"):
    """Depthwise 2-D convolution (channel multiplier 1), NCHW: rows register-blocked,
    columns vectorized, channels in parallel."""
    cfg = get_config()
    OH, OW = _out_size(H, KH, stride, pad), _out_size(W, KW, stride, pad)
    A = te.placeholder((N, C, H, W), name="A", dtype=dtype)
    Wt = te.placeholder((C, KH, KW), name="W", dtype=dtype)
    Ap = _padded(A, pad)
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    D = te.compute((N, C, OH, OW), lambda n, c, y, x: te.sum(
        Ap[n, c, y * stride + ry, x * stride + rx] * Wt[c, ry, rx], axis=[ry, rx]), name="D")
    s = te.create_schedule(D.op)
    n, c, y, x = D.op.axis
    cfg.define_split("tile_oh", y, num_outputs=2, max_factor=16, default=[-1, 4])
    cfg.define_split("tile_ow", x, num_outputs=2, max_factor=64, default=[-1, 8],
                     filter=lambda e: e.size[-1] <= 64)
    y0, y1 = cfg["tile_oh"].apply(s, D, y)
    x0, x1 = cfg["tile_ow"].apply(s, D, x)
    cfg.define_reorder("reorder", [ry, rx, y1], policy="all", default=[0, 1, 2])
    inner = cfg["reorder"].apply(s, D, [ry, rx, y1])
    s[D].reorder(n, c, y0, x0, *inner, x1)
    cfg.define_annotate("unroll", [ry, rx], policy="try_unroll", default=["unroll", "unroll"])
    cfg["unroll"].apply(s, D, [ry, rx])
    s[D].vectorize(x1)
    _parallel_and_padding(cfg, s, D, (n, c, y0), "n.c", Ap, pad)
    return s, [A, Wt, D]


def _softmax_reference(a, *, args=()):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@template("softmax", default_args=(1024, 1024), flops=lambda M, N: 5.0 * M * N,
          reference=_softmax_reference, target="llvm")
def softmax(M: int, N: int, dtype: str = "float32"):
    """Row-wise softmax of A[M, N]: max, exp, sum, divide; rows in parallel, columns of the
    elementwise stages vectorized, reductions fused into each row block or computed
    apart."""
    cfg = get_config()
    A = te.placeholder((M, N), name="A", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    k2 = te.reduce_axis((0, N), name="k2")
    mx = te.compute((M,), lambda i: te.max(A[i, k1], axis=k1), name="rowmax")
    ex = te.compute((M, N), lambda i, j: te.exp(A[i, j] - mx[i]), name="expo")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name="rowsum")
    out = te.compute((M, N), lambda i, j: ex[i, j] / sm[i], name="softmax")
    s = te.create_schedule(out.op)
    i, j = out.op.axis
    cfg.define_split("tile_i", i, num_outputs=2, max_factor=64, default=[-1, 4])
    cfg.define_split("tile_j", j, num_outputs=2, max_factor=64, filter=_lane_filter(N),
                     default=[-1, 16])
    i0, i1 = cfg["tile_i"].apply(s, out, i)
    j0, j1 = cfg["tile_j"].apply(s, out, j)
    s[out].reorder(i0, i1, j0, j1)
    s[out].vectorize(j1)
    s[out].parallel(i0)
    cfg.define_knob("fuse_rows", [True, False], default=True)
    if cfg["fuse_rows"].val:
        for st in (mx, ex, sm):
            s[st].compute_at(s[out], i1)
    else:
        for st in (mx, sm):
            s[st].parallel(st.op.axis[0])
        ei, ej = ex.op.axis
        ej0, ej1 = cfg["tile_j"].apply(s, ex, ej)
        s[ex].vectorize(ej1)
        s[ex].parallel(ei)
    return s, [A, out]


def _layernorm_reference(a, g, b, *, args=()):
    mu = a.mean(axis=1, keepdims=True)
    var = ((a - mu) ** 2).mean(axis=1, keepdims=True)
    return (a - mu) / np.sqrt(var + 1e-5) * g + b


@template("layernorm", default_args=(1024, 1024), flops=lambda M, N: 8.0 * M * N,
          reference=_layernorm_reference, target="llvm")
def layernorm(M: int, N: int, dtype: str = "float32"):
    """Layer normalisation over the rows of A[M, N] with gain and bias: mean, variance,
    normalise; rows in parallel, columns vectorized, statistics fused per row block or
    computed apart."""
    cfg = get_config()
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
    i, j = out.op.axis
    cfg.define_split("tile_i", i, num_outputs=2, max_factor=64, default=[-1, 4])
    cfg.define_split("tile_j", j, num_outputs=2, max_factor=64, filter=_lane_filter(N),
                     default=[-1, 16])
    i0, i1 = cfg["tile_i"].apply(s, out, i)
    j0, j1 = cfg["tile_j"].apply(s, out, j)
    s[out].reorder(i0, i1, j0, j1)
    s[out].vectorize(j1)
    s[out].parallel(i0)
    cfg.define_knob("fuse_rows", [True, False], default=True)
    if cfg["fuse_rows"].val:
        s[mean].compute_at(s[out], i1)
        s[var].compute_at(s[out], i1)
    else:
        s[mean].parallel(mean.op.axis[0])
        s[var].parallel(var.op.axis[0])
    return s, [A, G, Bt, out]
