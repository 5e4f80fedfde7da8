"""Composite operators (compute definitions with numpy float64 references) and, per
operator, a few named schedules. Used by test_operators.py (vs numpy, and scheduled vs
unscheduled on the same backend)."""

from __future__ import annotations

import numpy as np
from helpers import Workload, rand, rng

from polytile import te

# sizes: "small" for the interpreter (<= 13x13x11), "large" (odd, awkward) for LLVM
SIZES = {
    "matmul": {"small": (7, 9, 5), "large": (127, 129, 131)},
    "batch_matmul": {"small": (2, 5, 4, 3), "large": (3, 31, 33, 29)},
    "conv2d": {"small": (1, 2, 3, 6, 5), "large": (2, 5, 7, 23, 19)},     # N, C, K, H, W
    "depthwise": {"small": (1, 3, 6, 5), "large": (2, 7, 29, 31)},        # N, C, H, W
    "max_pool": {"small": (1, 2, 7, 6), "large": (2, 5, 33, 31)},
    "avg_pool": {"small": (1, 2, 7, 6), "large": (2, 5, 33, 31)},
    "conv2d_padstage": {"small": (1, 2, 3, 6, 5), "large": (2, 5, 7, 23, 19)},
    "softmax": {"small": (4, 7), "large": (67, 131)},
    "softmax3": {"small": (4, 7), "large": (67, 131)},
    "layernorm": {"small": (4, 7), "large": (61, 127)},
    "transpose": {"small": (5, 7), "large": (127, 129)},
    "bcast_chain": {"small": (3, 5), "large": (63, 131)},
    "multi_reduce": {"small": (3, 4, 5), "large": (23, 29, 31)},
    "int8_matmul": {"small": (5, 6, 11), "large": (63, 65, 127)},
    "fp16_matmul": {"small": (5, 6, 11), "large": (63, 65, 67)},
}


def matmul(m, n, k):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    g = rng(1)
    a, b = rand((m, k), gen=g), rand((k, n), gen=g)
    return Workload(C, [A, B, C], [a, b], a.astype("float64") @ b, k=k, C=C, r=r)


def batch_matmul(bs, m, n, k):
    A = te.placeholder((bs, m, k), name="A")
    B = te.placeholder((bs, k, n), name="B")
    r = te.reduce_axis((0, k), "k")
    C = te.compute((bs, m, n), lambda b, i, j: te.sum(A[b, i, r] * B[b, r, j], axis=r),
                   name="C")
    g = rng(2)
    a, b = rand((bs, m, k), gen=g), rand((bs, k, n), gen=g)
    return Workload(C, [A, B, C], [a, b], np.matmul(a.astype("float64"), b), k=k, C=C, r=r)


def _conv_ref(x, w, pad):
    n, c, h, wd = x.shape
    k, _, R, S = w.shape
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - R + 1, wd + 2 * pad - S + 1
    out = np.zeros((n, k, oh, ow))
    for r in range(R):
        for s in range(S):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, r:r + oh, s:s + ow], w[:, :, r, s])
    return out


def conv2d(n, c, k, h, w, pad=1, padded_stage=False):
    """NCHW conv, 3x3 kernel, stride 1, zero padding ``pad``: via te.if_then_else in the
    conv body, or via a padded stage ``P`` (``padded_stage=True``)."""
    R = S = 3
    X = te.placeholder((n, c, h, w), name="X")
    W = te.placeholder((k, c, R, S), name="W")
    oh, ow = h + 2 * pad - R + 1, w + 2 * pad - S + 1
    rc = te.reduce_axis((0, c), "rc")
    ry = te.reduce_axis((0, R), "ry")
    rx = te.reduce_axis((0, S), "rx")

    def xpad(b, ch, y, x):
        return te.if_then_else(te.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
                               X[b, ch, y - pad, x - pad], 0.0)

    stages = {}
    if padded_stage:
        P = te.compute((n, c, h + 2 * pad, w + 2 * pad), xpad, name="P")
        stages["P"] = P

        def src(b, ch, y, x):
            return P[b, ch, y, x]
    else:
        src = xpad
    Y = te.compute((n, k, oh, ow), lambda b, f, y, x: te.sum(
        src(b, rc, y + ry, x + rx) * W[f, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    g = rng(3)
    xa, wa = rand((n, c, h, w), gen=g), rand((k, c, R, S), gen=g)
    return Workload(Y, [X, W, Y], [xa, wa], _conv_ref(xa, wa, pad), k=c * R * S, Y=Y,
                    rc=rc, ry=ry, rx=rx, **stages)


def depthwise(n, c, h, w):
    R = S = 3
    X = te.placeholder((n, c, h, w), name="X")
    W = te.placeholder((c, R, S), name="W")
    ry = te.reduce_axis((0, R), "ry")
    rx = te.reduce_axis((0, S), "rx")
    P = te.compute((n, c, h + 2, w + 2), lambda b, ch, y, x: te.if_then_else(
        te.all(y >= 1, y <= h, x >= 1, x <= w), X[b, ch, y - 1, x - 1], 0.0), name="P")
    Y = te.compute((n, c, h, w), lambda b, ch, y, x: te.sum(
        P[b, ch, y + ry, x + rx] * W[ch, ry, rx], axis=[ry, rx]), name="Y")
    g = rng(4)
    xa, wa = rand((n, c, h, w), gen=g), rand((c, R, S), gen=g)
    xp = np.pad(xa.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = sum(xp[:, :, r:r + h, s:s + w] * wa[None, :, r, s, None, None]
              for r in range(R) for s in range(S))
    return Workload(Y, [X, W, Y], [xa, wa], ref, k=9, Y=Y, P=P, ry=ry, rx=rx)


def pool(n, c, h, w, kind="max"):
    """2x2 window, stride 2 (floor), then a 3x3/stride-1 avg or max over the result."""
    X = te.placeholder((n, c, h, w), name="X")
    oh, ow = h // 2, w // 2
    ry = te.reduce_axis((0, 2), "ry")
    rx = te.reduce_axis((0, 2), "rx")
    if kind == "max":
        Y = te.compute((n, c, oh, ow), lambda b, ch, y, x: te.max(
            X[b, ch, 2 * y + ry, 2 * x + rx], axis=[ry, rx]), name="Y")
    else:
        S = te.compute((n, c, oh, ow), lambda b, ch, y, x: te.sum(
            X[b, ch, 2 * y + ry, 2 * x + rx], axis=[ry, rx]), name="S")
        Y = te.compute((n, c, oh, ow), lambda b, ch, y, x: S[b, ch, y, x] / 4.0, name="Y")
    xa = rand((n, c, h, w), seed=5)
    win = xa[:, :, :2 * oh, :2 * ow].astype("float64").reshape(n, c, oh, 2, ow, 2)
    ref = win.max(axis=(3, 5)) if kind == "max" else win.mean(axis=(3, 5))
    extra = {} if kind == "max" else {"S": S}
    return Workload(Y, [X, Y], [xa], ref, k=4, Y=Y, ry=ry, rx=rx, **extra)


def softmax(m, n):
    A = te.placeholder((m, n), name="A")
    k1 = te.reduce_axis((0, n), "k1")
    k2 = te.reduce_axis((0, n), "k2")
    mx = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="mx")
    ex = te.compute((m, n), lambda i, j: te.exp(A[i, j] - mx[i]), name="ex")
    sm = te.compute((m,), lambda i: te.sum(ex[i, k2], axis=k2), name="sm")
    out = te.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="out")
    a = rand((m, n), seed=6) * 4
    e = np.exp(a.astype("float64") - a.max(1, keepdims=True))
    return Workload(out, [A, out], [a], e / e.sum(1, keepdims=True), k=n, mx=mx, ex=ex, sm=sm,
                    out=out, k1=k1, k2=k2)


def softmax3(m, n):
    """The 3-stage form: row max, sum of exp(x - max), then exp(x - max) / sum."""
    A = te.placeholder((m, n), name="A")
    k1 = te.reduce_axis((0, n), "k1")
    k2 = te.reduce_axis((0, n), "k2")
    mx = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="mx")
    es = te.compute((m,), lambda i: te.sum(te.exp(A[i, k2] - mx[i]), axis=k2), name="es")
    out = te.compute((m, n), lambda i, j: te.exp(A[i, j] - mx[i]) / es[i], name="out")
    a = rand((m, n), seed=13) * 4
    e = np.exp(a.astype("float64") - a.max(1, keepdims=True))
    return Workload(out, [A, out], [a], e / e.sum(1, keepdims=True), k=n, mx=mx, es=es,
                    out=out, k1=k1, k2=k2)


def layernorm(m, n, eps=1e-5):
    A = te.placeholder((m, n), name="A")
    G = te.placeholder((n,), name="G")
    k1 = te.reduce_axis((0, n), "k1")
    k2 = te.reduce_axis((0, n), "k2")
    mean = te.compute((m,), lambda i: te.sum(A[i, k1] / float(n), axis=k1), name="mean")
    var = te.compute((m,), lambda i: te.sum((A[i, k2] - mean[i]) * (A[i, k2] - mean[i])
                                            / float(n), axis=k2), name="var")
    out = te.compute((m, n), lambda i, j: (A[i, j] - mean[i]) * te.rsqrt(var[i] + eps) * G[j],
                     name="out")
    g = rng(7)
    a, ga = rand((m, n), gen=g), rand((n,), gen=g)
    a64 = a.astype("float64")
    mu = a64.mean(1, keepdims=True)
    ref = (a64 - mu) / np.sqrt(((a64 - mu) ** 2).mean(1, keepdims=True) + eps) * ga
    return Workload(out, [A, G, out], [a, ga], ref, k=n, mean=mean, var=var, out=out, k1=k1,
                    k2=k2)


def transpose(m, n):
    A = te.placeholder((m, n), name="A")
    T = te.compute((n, m), lambda i, j: A[j, i], name="T")
    a = rand((m, n), seed=8)
    return Workload(T, [A, T], [a], a.T.astype("float64"), T=T)


def bcast_chain(m, n):
    """relu(A * col + row) - mean-free: elementwise chain with (m,1) and (n,) operands."""
    A = te.placeholder((m, n), name="A")
    col = te.placeholder((m, 1), name="col")
    row = te.placeholder((n,), name="row")
    B = A * col
    C = B + row
    D = te.compute((m, n), lambda i, j: te.max(C[i, j], 0.0) * 2.0 - row[j], name="D")
    g = rng(9)
    a, c, r = rand((m, n), gen=g), rand((m, 1), gen=g), rand((n,), gen=g)
    ref = np.maximum(a.astype("float64") * c + r, 0) * 2 - r
    return Workload(D, [A, col, row, D], [a, c, r], ref, B=B, C=C, D=D)


def multi_reduce(a, b, c):
    """R[i] = sum over (j, k) with j + k < i + 3 of X[i, j, k] * Y[j, k]."""
    X = te.placeholder((a, b, c), name="X")
    Y = te.placeholder((b, c), name="Y")
    rj = te.reduce_axis((0, b), "rj")
    rk = te.reduce_axis((0, c), "rk")
    R = te.compute((a,), lambda i: te.sum(X[i, rj, rk] * Y[rj, rk], axis=[rj, rk],
                                          where=rj + rk < i + 3), name="R")
    g = rng(10)
    x, y = rand((a, b, c), gen=g), rand((b, c), gen=g)
    jj, kk = np.indices((b, c))
    ref = np.array([(x[i].astype("float64") * y * (jj + kk < i + 3)).sum() for i in range(a)])
    return Workload(R, [X, Y, R], [x, y], ref, k=b * c, R=R, rj=rj, rk=rk)


def int8_matmul(m, n, k):
    A = te.placeholder((m, k), dtype="int8", name="A")
    B = te.placeholder((k, n), dtype="int8", name="B")
    r = te.reduce_axis((0, k), "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("int32") * B[r, j].astype("int32"),
                                               axis=r), name="C")
    g = rng(11)
    a = g.integers(-128, 128, (m, k)).astype("int8")
    b = g.integers(-128, 128, (k, n)).astype("int8")
    return Workload(C, [A, B, C], [a, b], a.astype(np.int64) @ b.astype(np.int64), k=k, C=C,
                    r=r)


def fp16_matmul(m, n, k):
    """float16 inputs, float32 accumulation, float16 output."""
    A = te.placeholder((m, k), dtype="float16", name="A")
    B = te.placeholder((k, n), dtype="float16", name="B")
    r = te.reduce_axis((0, k), "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") *
                                               B[r, j].astype("float32"), axis=r), name="C")
    D = te.compute((m, n), lambda i, j: C[i, j].astype("float16"), name="D")
    g = rng(12)
    a, b = rand((m, k), "float16", gen=g), rand((k, n), "float16", gen=g)
    return Workload(D, [A, B, D], [a, b], a.astype("float64") @ b.astype("float64"), k=k, C=C,
                    D=D, r=r)


BUILDERS = {"matmul": matmul, "batch_matmul": batch_matmul, "conv2d": conv2d,
            "depthwise": depthwise,
            "max_pool": lambda *a: pool(*a, kind="max"),
            "avg_pool": lambda *a: pool(*a, kind="avg"),
            "conv2d_padstage": lambda *a: conv2d(*a, padded_stage=True), "softmax": softmax,
            "softmax3": softmax3,
            "layernorm": layernorm,
            "transpose": transpose, "bcast_chain": bcast_chain, "multi_reduce": multi_reduce,
            "int8_matmul": int8_matmul, "fp16_matmul": fp16_matmul}


# --------------------------------------------------------------------------- schedules
def _tile_mm(w, s, C, fi, fj, fk):
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, fi, fj)
    ko, ki = s[C].split(w.r, factor=fk)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    return io, jo, ko, ii, ki, ji


def mm_tile_vec_par(w, s):
    io, jo, ko, ii, ki, ji = _tile_mm(w, s, w.C, 4, 8, 4)
    s[w.C].vectorize(ji)
    s[w.C].parallel(io)
    s[w.C].unroll(ki)


def mm_fuse_par(w, s):
    f = s[w.C].fuse(*w.C.op.axis)
    fo, fi = s[w.C].split(f, factor=16)
    s[w.C].parallel(fo)


def mm_k_outer(w, s):
    i, j = w.C.op.axis
    jo, ji = s[w.C].split(j, factor=16)
    s[w.C].reorder(jo, w.r, i, ji)
    s[w.C].vectorize(ji)


def mm_k_split_inner_outside(w, s):
    ko, ki = s[w.C].split(w.r, factor=3)
    s[w.C].reorder(*w.C.op.axis, ki, ko)


def bmm_fuse_batch(w, s):
    b, i, j = w.C.op.axis
    f = s[w.C].fuse(b, i)
    s[w.C].parallel(f)
    jo, ji = s[w.C].split(j, factor=8)
    s[w.C].reorder(f, jo, w.r, ji)
    s[w.C].vectorize(ji)


def bmm_tile(w, s):
    b, i, j = w.C.op.axis
    io, jo, ii, ji = s[w.C].tile(i, j, 3, 5)
    s[w.C].reorder(b, io, jo, w.r, ii, ji)
    s[w.C].unroll(ii)


def conv_tile(w, s):
    b, f, y, x = w.Y.op.axis
    yo, xo, yi, xi = s[w.Y].tile(y, x, 4, 4)
    s[w.Y].reorder(b, f, yo, xo, w.rc, w.ry, w.rx, yi, xi)
    s[w.Y].vectorize(xi)
    bf = s[w.Y].fuse(b, f)
    s[w.Y].parallel(bf)
    s[w.Y].unroll(w.rx)


def conv_channel_split(w, s):
    b, f, y, x = w.Y.op.axis
    fo, fi = s[w.Y].split(f, factor=2)
    co, ci = s[w.Y].split(w.rc, factor=2)
    s[w.Y].reorder(b, fo, y, co, w.ry, w.rx, ci, fi, x)


def pad_inline(w, s):
    s[w.P].compute_inline()


def pad_at_row(w, s):
    b, f, y, x = w.Y.op.axis
    s[w.P].compute_at(s[w.Y], y)


def pad_at_tile(w, s):
    b, f, y, x = w.Y.op.axis
    yo, xo, yi, xi = s[w.Y].tile(y, x, 4, 3)
    red = [iv for iv in (w.stages.get("rc"), w.ry, w.rx) if iv is not None]
    s[w.Y].reorder(b, f, yo, xo, *red, yi, xi)
    s[w.P].compute_at(s[w.Y], xo)
    s[w.Y].vectorize(xi)


def dw_tile_par(w, s):
    b, c, y, x = w.Y.op.axis
    s[w.P].compute_inline()
    f = s[w.Y].fuse(b, c)
    s[w.Y].parallel(f)
    xo, xi = s[w.Y].split(x, factor=8)
    s[w.Y].reorder(f, y, xo, w.ry, w.rx, xi)
    s[w.Y].vectorize(xi)


def pool_split(w, s):
    b, c, y, x = w.Y.op.axis
    xo, xi = s[w.Y].split(x, factor=4)
    s[w.Y].parallel(s[w.Y].fuse(b, c))
    if "S" in w.stages:
        s[w.S].compute_at(s[w.Y], xo)
    else:
        s[w.Y].unroll(w.rx)


def pool_reduce_outer(w, s):
    red = w.S if "S" in w.stages else w.Y
    b, c, y, x = red.op.axis
    s[red].reorder(w.ry, w.rx, b, c, y, x)


def softmax_at_row(w, s):
    i, j = w.out.op.axis
    for st in (w.mx, w.ex, w.sm):
        s[st].compute_at(s[w.out], i)
    jo, ji = s[w.out].split(j, factor=8)
    s[w.out].vectorize(ji)
    s[w.out].parallel(i)


def softmax_inline_exp(w, s):
    i, j = w.out.op.axis
    s[w.ex].compute_inline()
    s[w.mx].compute_at(s[w.out], i)
    s[w.sm].compute_at(s[w.out], i)
    ko, ki = s[w.sm].split(w.k2, factor=4)


def softmax_tiled_rows(w, s):
    i, j = w.out.op.axis
    io, ii = s[w.out].split(i, factor=3)
    s[w.mx].compute_at(s[w.out], io)
    s[w.ex].compute_at(s[w.out], io)
    s[w.sm].compute_at(s[w.out], io)
    s[w.out].parallel(io)


def softmax3_at_row(w, s):
    i, j = w.out.op.axis
    s[w.mx].compute_at(s[w.out], i)
    s[w.es].compute_at(s[w.out], i)
    jo, ji = s[w.out].split(j, factor=8)
    s[w.out].vectorize(ji)
    s[w.out].parallel(i)


def softmax3_rows_tiled(w, s):
    i, j = w.out.op.axis
    io, ii = s[w.out].split(i, factor=4)
    s[w.mx].compute_at(s[w.out], io)   # 4 row maxima per tile, read by es and out
    s[w.es].compute_at(s[w.out], ii)
    ko, ki = s[w.es].split(w.k2, factor=8)
    s[w.es].reorder(ko, s[w.es].op.axis[0], ki)


def ln_at_row(w, s):
    i, j = w.out.op.axis
    s[w.mean].compute_at(s[w.out], i)
    s[w.var].compute_at(s[w.out], i)
    jo, ji = s[w.out].split(j, factor=16)
    s[w.out].vectorize(ji)
    s[w.out].parallel(i)


def ln_split_reduce(w, s):
    ko, ki = s[w.var].split(w.k2, factor=5)
    s[w.var].reorder(ki, ko)
    s[w.mean].split(w.k1, nparts=3)


def tr_tile(w, s):
    i, j = w.T.op.axis
    io, jo, ii, ji = s[w.T].tile(i, j, 8, 8)
    s[w.T].parallel(io)


def tr_tile_vec(w, s):
    i, j = w.T.op.axis
    io, jo, ii, ji = s[w.T].tile(i, j, 4, 16)
    s[w.T].vectorize(ji)
    s[w.T].unroll(ii)


def bc_inline(w, s):
    s[w.B].compute_inline()
    s[w.C].compute_inline()
    i, j = w.D.op.axis
    jo, ji = s[w.D].split(j, factor=8)
    s[w.D].vectorize(ji)


def bc_at(w, s):
    i, j = w.D.op.axis
    io, ii = s[w.D].split(i, factor=2)
    s[w.C].compute_at(s[w.D], io)
    s[w.B].compute_at(s[w.C], s[w.C].op.axis[0])
    s[w.D].parallel(io)


def mr_split_fuse(w, s):
    f = s[w.R].fuse(w.rj, w.rk)
    fo, fi = s[w.R].split(f, factor=7)
    s[w.R].parallel(w.R.op.axis[0])


def mr_reorder(w, s):
    i = w.R.op.axis[0]
    s[w.R].reorder(w.rk, w.rj, i)
    if w.R.shape[0] <= 64:
        s[w.R].vectorize(i)


def fp16_at(w, s):
    i, j = w.D.op.axis
    io, jo, ii, ji = s[w.D].tile(i, j, 4, 8)
    s[w.C].compute_at(s[w.D], jo)
    s[w.D].vectorize(ji)
    s[w.D].parallel(io)


SCHEDULES = {
    "matmul": [mm_tile_vec_par, mm_fuse_par, mm_k_outer, mm_k_split_inner_outside],
    "batch_matmul": [bmm_fuse_batch, bmm_tile],
    "conv2d": [conv_tile, conv_channel_split],
    "conv2d_padstage": [pad_inline, pad_at_row, pad_at_tile, conv_channel_split],
    "depthwise": [dw_tile_par, pad_at_row, pad_at_tile],
    "max_pool": [pool_split, pool_reduce_outer],
    "avg_pool": [pool_split, pool_reduce_outer],
    "softmax": [softmax_at_row, softmax_inline_exp, softmax_tiled_rows],
    "softmax3": [softmax3_at_row, softmax3_rows_tiled],
    "layernorm": [ln_at_row, ln_split_reduce],
    "transpose": [tr_tile, tr_tile_vec],
    "bcast_chain": [bc_inline, bc_at],
    "multi_reduce": [mr_split_fuse, mr_reorder],
    "int8_matmul": [mm_tile_vec_par, mm_k_outer],
    "fp16_matmul": [fp16_at],
}
