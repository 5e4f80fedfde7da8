"""Built-in neural-network templates: ``conv2d_nchw``, ``conv2d_nchwc``,
``depthwise_conv2d_nchw``, ``depthwise_conv2d_nchwc``, ``softmax``,
``layernorm``, ``rmsnorm``. Each has default sizes, a numpy reference and a hand-written default config.
"""

from __future__ import annotations

import numpy as np

from polytile import te
from polytile.te import dtype as dt

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


def conv2d_nchw_compute(N, CI, H, W, CO, KH, KW, stride, pad, dtype: str):
    """The NCHW convolution of the CPU and GPU templates: input ``A`` (N, CI, H, W), weights
    ``W`` (CO, CI, KH, KW), the zero-padded input ``Ap`` (``A`` itself without padding) and
    the output ``C`` (N, CO, OH, OW), all of ``dtype``."""
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
    return A, Wt, Ap, C


@template("conv2d_nchw", default_args=(1, 64, 56, 56, 64, 3, 3, 1, 1), flops=_conv2d_flops,
          reference=_conv_reference, target="llvm")
def conv2d_nchw(N, CI, H, W, CO, KH, KW, stride, pad, dtype: str = "float32"):
    """2-D convolution, NCHW input, OIHW weights: output channels and rows register-blocked,
    output columns vectorized, input channels split."""
    cfg = get_config()
    A, Wt, Ap, C = conv2d_nchw_compute(N, CI, H, W, CO, KH, KW, stride, pad, dtype)
    rc, ry, rx = C.op.reduce_axis
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


#: weights (bytes, unpacked) from which conv2d_nchwc packs them per output-channel block
#: inside the task that uses them (the ``pack_weights`` knob's default): more than an L2
#: holds, where the packed copy made apart would go to memory and back
PACK_IN_TASK_BYTES = 1 << 20


def _blocks(n: int, widths=(16, 8, 4, 2, 1)) -> list[int]:
    """Channel block sizes for ``n`` channels: the widths that divide ``n``, widest first."""
    return [w for w in widths if n % w == 0]


@template("conv2d_nchwc", default_args=(1, 64, 56, 56, 64, 3, 3, 1, 1), flops=_conv2d_flops,
          reference=_conv_reference, target="llvm")
def conv2d_nchwc(N, CI, H, W, CO, KH, KW, stride, pad, dtype: str = "float32"):
    """2-D convolution computed in the blocked NCHW[x]c layout of oneDNN (Intel's MKL-DNN;
    Liu et al., "Optimizing CNN model inference on CPUs", USENIX ATC 2019), NCHW input and
    output, OIHW weights. Stages:

    * ``A_nchwc[n, cb, y, x, ci]``: the input zero-padded and blocked by ``ic_block``
      channels (the layout transform, parallel over ``n, cb, y``); with
      ``in_layout="nchw"`` (the default) only zero-padded (``Apad``, none without
      padding: the input itself) and read in NCHW;
    * ``W_packed[ob, cb, ky, kx, ci, oi]``: the weights blocked by ``ic_block`` input and
      ``oc_block`` output channels; from :data:`PACK_IN_TASK_BYTES` of weights on
      (``pack_weights="ob"``) one block ``ob`` at a time, inside the parallel task that
      then computes all rows of that block (its packed weights stay in the core's L2);
    * ``C_nchwc[n, ob, y, x, oi]``: the convolution; one output row of one channel block
      per parallel task, a register tile of ``tile_ow`` output columns by ``oc_block``
      output channels (one or two vectors) accumulated over the reduction ``cb, ky, kx, ci``:
      each input element is broadcast into ``tile_ow`` fused multiply-adds with one weight
      vector;
    * ``C[n, co, y, x]``: the row tile written back in NCHW (the output transform, fused
      into the row's task).
    """
    cfg = get_config()
    OH, OW = _out_size(H, KH, stride, pad), _out_size(W, KW, stride, pad)
    cfg.define_knob("ic_block", _blocks(CI), default=_blocks(CI)[0])
    # two vectors of output channels by 14 columns: 28 of the 32 AVX-512 registers hold
    # accumulators, each broadcast input feeds two FMAs (ResNet-50 3x3 layers, 1 thread:
    # 15-20 % faster than one vector by 14 columns)
    oc_blocks = _blocks(CO, (32, 16, 8, 4, 2, 1))
    cfg.define_knob("oc_block", oc_blocks, default=oc_blocks[0])
    cfg.define_split("tile_ow", OW, num_outputs=2, max_factor=32,
                     default=[-1, next((f for f in (14, 16, 12, 8, 7) if OW % f == 0), 1)])
    cfg.define_knob("unroll_kw", [True, False], default=True)
    # the input blocked (oneDNN) or left in NCHW, padded: the kernel broadcasts single
    # input elements, which any layout serves; NCHW saves the blocked transform (a gather
    # across channel planes: the padded copy is contiguous) while its reads cross a channel
    # plane per step. 2-core Zen 5, 1 thread, CPU time, interleaved, two runs: ResNet-50's
    # 3x3 layers 56x56x64 / 28x28x128 / 14x14x256 / 7x7x512 1.32-1.36 / 1.18-1.30 /
    # 1.28-1.33 / 2.15-2.19 ms in NCHW against 1.45-1.55 / 1.36-1.42 / 1.37-1.49 /
    # 2.11-2.25 blocked (on the Skylake-SP VM of issue 13 NCHW was 5-15 % slower); without
    # padding NCHW is the input itself, no copy at all (1x1 56x56 256->64: 0.71 against
    # 1.57 ms)
    cfg.define_knob("in_layout", ["nchwc", "nchw"], default="nchw")
    bc, bo = cfg["ic_block"].val, cfg["oc_block"].val
    A = te.placeholder((N, CI, H, W), name="A", dtype=dtype)
    Wt = te.placeholder((CO, CI, KH, KW), name="W", dtype=dtype)
    zero = te.const(0.0, dtype)
    if cfg["in_layout"].val == "nchwc":
        Ab = te.compute((N, CI // bc, H + 2 * pad, W + 2 * pad, bc), lambda n, cb, y, x, ci:
                        te.if_then_else(te.all(y >= pad, y < H + pad, x >= pad, x < W + pad),
                                        A[n, cb * bc + ci, y - pad, x - pad], zero),
                        name="A_nchwc")
        read = lambda n, cb, y, x, ci: Ab[n, cb, y, x, ci]  # noqa: E731
    else:
        Ab = _padded(A, pad)
        read = lambda n, cb, y, x, ci: Ab[n, cb * bc + ci, y, x]  # noqa: E731
    Wb = te.compute((CO // bo, CI // bc, KH, KW, bc, bo), lambda ob, cb, ky, kx, ci, oi:
                    Wt[ob * bo + oi, cb * bc + ci, ky, kx], name="W_packed")
    rcb = te.reduce_axis((0, CI // bc), name="rcb")
    rci = te.reduce_axis((0, bc), name="rci")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    Cb = te.compute((N, CO // bo, OH, OW, bo), lambda n, ob, y, x, oi: te.sum(
        read(n, rcb, y * stride + ry, x * stride + rx, rci) * Wb[ob, rcb, ry, rx, rci, oi],
        axis=[rcb, ry, rx, rci]), name="C_nchwc")
    C = te.compute((N, CO, OH, OW), lambda n, co, y, x: Cb[n, co // bo, y, x, co % bo],
                   name="C")
    s = te.create_schedule(C.op)
    # the output transform: one task per (n, channel block, row); consecutive tasks share
    # the channel block's weights ("ob_y") or the input rows ("y_ob")
    cfg.define_knob("task_order", ["ob_y", "y_ob"], default="y_ob" if KH == KW == 1 else "ob_y")
    # the weights packed once for all tasks ("root"), or per output-channel block inside
    # the task that computes all of that block's rows ("ob"): the block's packed weights
    # then stay in the core's L2 instead of a round trip through memory of the whole
    # packed copy (ResNet-50 7x7x512: 9.4 MB of weights; packing them apart took about
    # as long as the convolution itself)
    big_weights = CO * CI * KH * KW * dt.nbytes(dtype) >= PACK_IN_TASK_BYTES
    cfg.define_knob("pack_weights", ["root", "ob"], default="ob" if big_weights else "root")
    n, co, y, x = C.op.axis
    ob, oi = s[C].split(co, factor=bo)
    row = None
    if cfg["pack_weights"].val == "ob":  # one task per channel block: its rows inside
        s[C].reorder(ob, n, y, oi, x)
        task, row = ob, y
    elif cfg["task_order"].val == "ob_y":
        s[C].reorder(n, ob, y, oi, x)
        task = s[C].fuse(n, ob, y)
    else:
        s[C].reorder(n, y, ob, oi, x)
        task = s[C].fuse(n, y, ob)
    s[C].parallel(task)
    # the convolution of that row, in registers
    cn, cob, cy, cx, coi = Cb.op.axis
    xo, xi = cfg["tile_ow"].apply(s, Cb, cx)
    s[Cb].reorder(cn, cob, cy, xo, rcb, ry, rx, rci, xi, coi)
    if cfg["unroll_kw"].val:
        s[Cb].unroll(rx)
    s[Cb].unroll(xi)
    s[Cb].vectorize(coi)
    s[Cb].compute_at(s[C], row if row is not None else task)
    # the layout transforms
    if Ab is not A:
        an, acb, ay = Ab.op.axis[:3]
        s[Ab].parallel(s[Ab].fuse(an, acb, ay))
        if cfg["in_layout"].val == "nchw":
            s[Ab].vectorize(s[Ab].split(Ab.op.axis[3], factor=16)[1])
        else:  # gathers across the channel planes, contiguous stores
            s[Ab].vectorize(Ab.op.axis[4])
    if row is not None:
        s[Wb].compute_at(s[C], task)
    else:
        s[Wb].parallel(Wb.op.axis[0])
    return s, [A, Wt, C]


def _parallel_and_padding(cfg, s, T, axes, name: str, Ap, pad: int,
                          pad_in_task: bool = False) -> None:
    """Knobs shared by the convolutions: parallelise the fused batch and channel loops
    (``name``), or those and the output-row tiles (``name.oh``); inline the padding stage
    or compute it in parallel over batch and channels, or with ``pad_in_task`` (where a
    task reads only its own channel: depthwise) the knob ``pad_at="task"`` computes the
    part a task reads inside the task."""
    n, ch, y0 = axes
    cfg.define_knob("parallel", [name, f"{name}.oh"], default=name)
    if cfg["parallel"].val == name:
        task = s[T].fuse(n, ch)
    else:
        task = s[T].fuse(n, ch, y0)
    s[T].parallel(task)
    cfg.define_knob("inline_pad", [False, True], default=False)
    if pad_in_task:
        # the task's padded plane made where it is read (in L1/L2), and one parallel
        # region in all instead of two
        cfg.define_knob("pad_at", ["task", "root"], default="task")
    if pad:
        if cfg["inline_pad"].val:
            s[Ap].compute_inline()
        elif pad_in_task and cfg["pad_at"].val == "task":
            s[Ap].compute_at(s[T], task)
        else:
            pn, pc, _, _ = Ap.op.axis
            s[Ap].parallel(s[Ap].fuse(pn, pc))


def _dw_flops(N, C, H, W, KH, KW, stride, pad):
    return 2.0 * N * C * _out_size(H, KH, stride, pad) * _out_size(W, KW, stride, pad) * KH * KW


@template("depthwise_conv2d_nchw", default_args=(1, 128, 56, 56, 3, 3, 1, 1), flops=_dw_flops,
          reference=lambda a, w, *, args: _conv_reference(a, w, args=args, depthwise=True),
          target="llvm")
def depthwise_conv2d_nchw(N, C, H, W, KH, KW, stride, pad, dtype: str = "float32"):
    """Depthwise 2-D convolution (channel multiplier 1), NCHW: rows register-blocked,
    columns vectorized, channels in parallel; by default each task zero-pads its own
    channel plane (``pad_at="task"``: one parallel loop, the padded plane read from the
    core's cache; 1 thread, CPU time, interleaved: 28x28x256 0.071 -> 0.052 ms, 14x14x512
    0.044 -> 0.036, 112x112x32 unchanged at 0.09-0.10)."""
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
    # one AVX-512 vector of columns, or a whole narrow row (14, 28: one load per tap)
    cfg.define_split("tile_ow", x, num_outputs=2, max_factor=64, filter=lambda e: e.size[-1] <= 64,
                     default=[-1, 16 if OW % 16 == 0 else max(
                         f for f in range(1, min(OW, 32) + 1) if OW % f == 0)])
    y0, y1 = cfg["tile_oh"].apply(s, D, y)
    x0, x1 = cfg["tile_ow"].apply(s, D, x)
    cfg.define_reorder("reorder", [ry, rx, y1], policy="all", default=[0, 1, 2])
    inner = cfg["reorder"].apply(s, D, [ry, rx, y1])
    s[D].reorder(n, c, y0, x0, *inner, x1)
    cfg.define_annotate("unroll", [ry, rx], policy="try_unroll", default=["unroll", "unroll"])
    cfg["unroll"].apply(s, D, [ry, rx])
    s[D].vectorize(x1)
    _parallel_and_padding(cfg, s, D, (n, c, y0), "n.c", Ap, pad, pad_in_task=True)
    return s, [A, Wt, D]


@template("depthwise_conv2d_nchwc", default_args=(1, 128, 56, 56, 3, 3, 1, 1),
          flops=_dw_flops,
          reference=lambda a, w, *, args: _conv_reference(a, w, args=args, depthwise=True),
          target="llvm")
def depthwise_conv2d_nchwc(N, C, H, W, KH, KW, stride, pad, dtype: str = "float32"):
    """Depthwise 2-D convolution (channel multiplier 1) computed in the blocked NCHW[x]c
    layout, NCHW input and output, CHW weights: the input zero-padded and blocked by
    ``c_block`` channels (the layout transform, a stage), the weights blocked likewise;
    the vector lanes run over the channels of a block, so every tap is one FMA of a
    contiguous input vector with a weight vector whatever the image width, over a register
    tile of ``tile_ow`` output columns (the taps unrolled); one output row of one channel
    block per parallel task, written back in NCHW in the same task."""
    cfg = get_config()
    OH, OW = _out_size(H, KH, stride, pad), _out_size(W, KW, stride, pad)
    cfg.define_knob("c_block", _blocks(C), default=_blocks(C)[0])
    cfg.define_split("tile_ow", OW, num_outputs=2, max_factor=32,
                     default=[-1, next((f for f in (8, 7, 14, 16, 4) if OW % f == 0), 1)])
    cfg.define_knob("unroll_taps", [True, False], default=True)
    bc = cfg["c_block"].val
    A = te.placeholder((N, C, H, W), name="A", dtype=dtype)
    Wt = te.placeholder((C, KH, KW), name="W", dtype=dtype)
    zero = te.const(0.0, dtype)
    Ab = te.compute((N, C // bc, H + 2 * pad, W + 2 * pad, bc), lambda n, cb, y, x, ci:
                    te.if_then_else(te.all(y >= pad, y < H + pad, x >= pad, x < W + pad),
                                    A[n, cb * bc + ci, y - pad, x - pad], zero),
                    name="A_nchwc")
    Wb = te.compute((C // bc, KH, KW, bc), lambda cb, ky, kx, ci: Wt[cb * bc + ci, ky, kx],
                    name="W_packed")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    Db = te.compute((N, C // bc, OH, OW, bc), lambda n, cb, y, x, ci: te.sum(
        Ab[n, cb, y * stride + ry, x * stride + rx, ci] * Wb[cb, ry, rx, ci], axis=[ry, rx]),
        name="D_nchwc")
    D = te.compute((N, C, OH, OW), lambda n, c, y, x: Db[n, c // bc, y, x, c % bc], name="D")
    s = te.create_schedule(D.op)
    n, c, y, x = D.op.axis
    cb, ci = s[D].split(c, factor=bc)
    s[D].reorder(n, cb, y, ci, x)
    task = s[D].fuse(n, cb, y)
    s[D].parallel(task)
    dn, dcb, dy, dx, dci = Db.op.axis
    xo, xi = cfg["tile_ow"].apply(s, Db, dx)
    s[Db].reorder(dn, dcb, dy, xo, ry, rx, xi, dci)
    if cfg["unroll_taps"].val:
        s[Db].unroll(ry)
        s[Db].unroll(rx)
    s[Db].unroll(xi)
    s[Db].vectorize(dci)
    s[Db].compute_at(s[D], task)
    an, acb, ay, _, _ = Ab.op.axis
    s[Ab].parallel(s[Ab].fuse(an, acb, ay))
    s[Wb].parallel(Wb.op.axis[0])
    return s, [A, Wt, D]


def _softmax_reference(a, *, args=()):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


#: Output size (bytes) from which the fused row schedules stream their stores by default:
#: larger than the last-level caches of common CPUs, so the output is not read back soon.
STREAM_BYTES = 8 << 20
#: ``red_lanes`` choices: lane-wise partial accumulators of the row reductions (0: a plain
#: serial reduction). 64 float32 lanes are four AVX-512 registers: four independent
#: dependence chains hide the latency of the vector add/max.
RED_LANES = (0, 16, 32, 64)


#: Rows of at least this many bytes get the next-row prefetch (:func:`_prefetch_next_row`):
#: shorter rows lie within a page of their neighbours, which the hardware prefetchers
#: follow (rows of 64 float32, rmsnorm 131072 x 64: 4 % slower with it; 256: 6-12 % faster).
PREFETCH_ROW_BYTES = 1024


def _row_reduction(s, red, out, at, lanes: int) -> None:
    """Compute row reduction ``red`` (one row per value, one reduce axis) at loop ``at`` of
    ``out``. With ``lanes`` > 0 the reduce axis is split by ``lanes`` and factored out
    (``rfactor``): a ``lanes``-wide vector of partial results accumulates the row (the
    loop over the lanes innermost and vectorized), then ``red`` reduces the ``lanes``
    partials. Lane ``l`` sees the elements ``l, l + lanes, ...``: the order of the float
    sum changes, as in any vectorized reduction (numpy's pairwise sum too).

    The partials are combined as a tree of fan-in 4 (a further ``rfactor`` per level,
    each a vector of a quarter of the partials: 64 -> 16 -> 4 -> 1), not one at a time:
    a serial chain of 64 dependent steps (the max's NaN-aware step is four instructions)
    cost more than a short row's vector work. One thread, CPU time, interleaved rounds
    (load 8-12 on 2 cores), rows of 64 / 256 / 1024 / 4096 float32: softmax 4.0 / 1.85 /
    1.14 / 1.00x the copy-bound time with the serial combine, 1.87 / 1.00 / 0.98 / 0.98x
    with the tree; layernorm 2.42 / 1.28x -> 0.86 / 0.73x at 64 / 256. With the tree, 64
    lanes are as fast as 16 or 32 on every row length measured (16 was 2.2x faster than
    64 on rows of 64 with the serial combine)."""
    if lanes:
        ko, ki = s[red].split(red.op.reduce_axis[0], factor=lanes)
        rf = s.rfactor(red, ki)
        kin, row, kout = s[rf].leaf_iter_vars
        s[rf].reorder(row, kout, kin)
        s[rf].vectorize(kin)
        s[rf].compute_at(s[out], at)
        while lanes > 4:
            lanes //= 4
            _, part = s[red].split(s[red].leaf_iter_vars[-1], factor=lanes)
            rf = s.rfactor(red, part)
            kin, row, kout = s[rf].leaf_iter_vars
            s[rf].reorder(row, kout, kin)
            s[rf].vectorize(kin)
            s[rf].compute_at(s[out], at)
    s[red].compute_at(s[out], at)


def _row_schedule(cfg, s, out, N: int, nbytes: int, reductions, elementwise, scalars=(),
                  data=None):
    """The fused schedule shared by softmax, layernorm and rmsnorm over rows of ``N``
    elements: rows split by ``tile_i`` (outer part in parallel), and for every row block,
    in order, each reduction of ``reductions`` (lane-wise partials, :func:`_row_reduction`),
    the ``scalars`` (per-row values), the ``elementwise`` intermediates (columns split by
    ``tile_j``, vectorized) and the output (same), its stores streamed (``nontemporal``
    pragma) when the knob says so. ``fuse_rows=False`` computes every stage apart over all
    rows instead (each a parallel loop; the reductions serial per row).

    Not a knob: with fused rows of at least :data:`PREFETCH_ROW_BYTES`, the first stage
    after the reductions that reads ``data`` (the ``[M, N]`` input) prefetches the next
    row of it (:func:`_prefetch_next_row`)."""
    i, j = out.op.axis
    cfg.define_split("tile_i", i, num_outputs=2, max_factor=64, default=[-1, 1])
    cfg.define_split("tile_j", j, num_outputs=2, max_factor=64, filter=_lane_filter(N),
                     default=[-1, 16])
    cfg.define_knob("fuse_rows", [True, False], default=True)
    cfg.define_knob("red_lanes", list(RED_LANES), default=64)
    cfg.define_knob("nontemporal", [False, True], default=nbytes >= STREAM_BYTES)
    i0, i1 = cfg["tile_i"].apply(s, out, i)
    j0, j1 = cfg["tile_j"].apply(s, out, j)
    s[out].reorder(i0, i1, j0, j1)
    s[out].vectorize(j1)
    s[out].parallel(i0)
    if cfg["nontemporal"].val:
        s[out].pragma(j0, "nontemporal")
    if cfg["fuse_rows"].val:
        for red in reductions:
            _row_reduction(s, red, out, i1, cfg["red_lanes"].val)
        for st in (*scalars, *elementwise):
            s[st].compute_at(s[out], i1)
    else:
        for st in (*reductions, *scalars):
            s[st].parallel(st.op.axis[0])
        for st in elementwise:
            ei, ej = st.op.axis
            s[st].vectorize(cfg["tile_j"].apply(s, st, ej)[1])
            s[st].parallel(ei)
    cols = {}
    for st in elementwise:
        if cfg["fuse_rows"].val:
            jo, ji = cfg["tile_j"].apply(s, st, st.op.axis[1])
            s[st].vectorize(ji)
            cols[st] = jo
    if data is not None and cfg["fuse_rows"].val \
            and N * dt.nbytes(data.dtype) >= PREFETCH_ROW_BYTES:
        cols[out] = j0
        readers = [st for st in (*elementwise, out)
                   if any(t.op is data.op for t in st.op.input_tensors)]
        if readers:
            _prefetch_next_row(s, readers[0], cols[readers[0]], data,
                               -(-N // cfg["tile_j"].size[-1]))


def _prefetch_next_row(s, st, jo, data, n_jo: int) -> None:
    """Prefetch row ``i + 1`` of ``data`` (row-major ``[M, N]``) while stage ``st``
    computes row ``i``: one line of the next row per iteration of ``st``'s column loop
    ``jo`` (``n_jo`` iterations of ``N / n_jo`` columns: ``n_jo`` iterations ahead is the
    same columns one row further on, as ``data`` is flattened).

    Why: the first pass of a row (its max, mean or sum of squares) streams the row from
    memory while the core waits, and the later passes (the exponential, the scaling) run
    from the cache while memory idles; the hardware prefetchers stop at 4 KiB pages and do
    not run a whole 16 KiB row ahead. Spread over the compute-bound pass, the next row's
    lines arrive while the core computes, and its first pass then reads the cache
    (``benchmarks/cpu_ops.py``, wall clock, load 2 on the 2-core VM, 4096 x 4096 float32,
    1 / 2 threads, the copy-bound time's multiple without -> with: softmax 1.36 / 1.38 ->
    0.96 / 0.98, layernorm 0.99 / 0.99 -> 0.85 / 0.85, rmsnorm 1.00 / 1.03 -> 0.75 / 0.77;
    one thread, CPU time, load 9-13: softmax 2048 x 1024 0.66x the time, 256 x 65536
    0.81x; rows of 64 floats 4 % slower, hence :data:`PREFETCH_ROW_BYTES`). From the
    cache too (the next row then comes from L2 or L3 into L1): wall clock, interleaved,
    load 3-4, one thread: softmax 1024 x 1024 0.95 -> 0.68 ms, 512 x 1024 0.49 -> 0.31,
    128 x 4096 0.59 -> 0.49, 16 x 4096 and 256 x 256 (256 KiB) 0.06-0.08 -> 0.05-0.06;
    layernorm 256 x 1024 0.15 -> 0.09 ms; rmsnorm 4096 x 256 0.85 -> 0.87 (rows of 1 KiB,
    the shortest that get it). Prefetching in layernorm's variance pass instead of its
    output pass was no faster than none. A prefetch never faults, so the lines past the
    last row cost one instruction each; with a ragged last column tile the offset is a few
    columns past the next row's, which only shifts which lines come early."""
    s[st].prefetch(data, jo, n_jo)


@template("softmax", default_args=(1024, 1024), flops=lambda M, N: 5.0 * M * N,
          reference=_softmax_reference, target="llvm")
def softmax(M: int, N: int, dtype: str = "float32"):
    """Row-wise softmax of A[M, N]: ``max``, ``e = exp(A - max)``, ``sum(e)``, then
    ``e * (1 / sum)``. The default config is the fused vectorized schedule: rows in
    parallel; per row (in the cache) the row max and the row sum as 64 lane-wise partial
    accumulators (combined as a tree, :func:`_row_reduction`), ``exp`` vectorized
    (polytile's polynomial, 1 ulp), the output stored with streaming stores from 8 MiB on,
    and the next row of A prefetched while the exponential computes
    (:func:`_prefetch_next_row`). Subtracting the row max first keeps every exponent <= 0
    (no overflow; Milakov & Gimelshein 2018 fuse the max and the sum into one pass with
    rescaling instead, which costs a second exponential per element, and a third in the
    output pass that then recomputes ``e``: with the row in the cache the separate passes
    are cheaper). Rows holding NaN or +inf give NaN rows, and rows of -inf too, as numpy
    does. The ``fast_exp`` knob (float32) takes ``te.fast_exp`` (3 ulp; exponents below
    -87.7 give 0, whose true value is under 2**-126 anyway): a fifth less compute, which
    counts where the rows are in the cache."""
    cfg = get_config()
    cfg.define_knob("fast_exp", [False, True], default=False)
    exp = te.fast_exp if cfg["fast_exp"].val and dtype != "float64" else te.exp
    A = te.placeholder((M, N), name="A", dtype=dtype)
    k1 = te.reduce_axis((0, N), name="k1")
    k2 = te.reduce_axis((0, N), name="k2")
    mx = te.compute((M,), lambda i: te.max(A[i, k1], axis=k1), name="rowmax")
    ex = te.compute((M, N), lambda i, j: exp(A[i, j] - mx[i]), name="expo")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name="rowsum")
    inv = te.compute((M,), lambda i: te.const(1.0, dtype) / sm[i], name="rowinv")
    out = te.compute((M, N), lambda i, j: ex[i, j] * inv[i], name="softmax")
    s = te.create_schedule(out.op)
    _row_schedule(cfg, s, out, N, M * N * 4, [mx, sm], [ex], [inv], data=A)
    return s, [A, out]


def _layernorm_reference(a, g, b, *, args=()):
    mu = a.mean(axis=1, keepdims=True)
    var = ((a - mu) ** 2).mean(axis=1, keepdims=True)
    return (a - mu) / np.sqrt(var + 1e-5) * g + b


@template("layernorm", default_args=(1024, 1024), flops=lambda M, N: 8.0 * M * N,
          reference=_layernorm_reference, target="llvm")
def layernorm(M: int, N: int, dtype: str = "float32"):
    """Layer normalisation over the rows of A[M, N] with gain and bias (epsilon 1e-5):
    mean, variance of ``A - mean`` (two passes over the row, the second in the cache: no
    cancellation of a one-pass sum of squares), ``rstd = rsqrt(var + eps)``, then
    ``(A - mean) * rstd * gamma + beta``. Default config: the fused vectorized row schedule
    of :func:`softmax` (lane-wise partial sums, streamed output from 8 MiB on)."""
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
    rstd = te.compute((M,), lambda i: te.rsqrt(var[i] + te.const(1e-5, dtype)), name="rstd")
    out = te.compute((M, N), lambda i, j: (A[i, j] - mean[i]) * rstd[i] * G[j] + Bt[j],
                     name="layernorm")
    s = te.create_schedule(out.op)
    _row_schedule(cfg, s, out, N, M * N * 4, [mean, var], [], [rstd], data=A)
    return s, [A, G, Bt, out]


def _rmsnorm_reference(a, g, *, args=()):
    return a / np.sqrt((a * a).mean(axis=1, keepdims=True) + 1e-6) * g


@template("rmsnorm", default_args=(1024, 1024), flops=lambda M, N: 4.0 * M * N,
          reference=_rmsnorm_reference, target="llvm")
def rmsnorm(M: int, N: int, dtype: str = "float32"):
    """RMS normalisation over the rows of A[M, N] with gain (Zhang & Sennrich 2019;
    epsilon 1e-6): ``A * rsqrt(mean(A**2) + eps) * gamma``. Default config: the fused
    vectorized row schedule of :func:`softmax`."""
    cfg = get_config()
    A = te.placeholder((M, N), name="A", dtype=dtype)
    G = te.placeholder((N,), name="gamma", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    inv_n = te.const(1.0 / N, dtype)
    ms = te.compute((M,), lambda i: te.sum(A[i, k] * A[i, k] * inv_n, axis=k), name="meansq")
    rstd = te.compute((M,), lambda i: te.rsqrt(ms[i] + te.const(1e-6, dtype)), name="rstd")
    out = te.compute((M, N), lambda i, j: A[i, j] * rstd[i] * G[j], name="rmsnorm")
    s = te.create_schedule(out.op)
    _row_schedule(cfg, s, out, N, M * N * 4, [ms], [], [rstd], data=A)
    return s, [A, G, out]
