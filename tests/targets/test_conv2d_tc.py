"""Tensor-core conv2d as an implicit GEMM in NHWC (``polytile.targets.cuda.conv2d``):
numerics on the reference interpreter (which runs each tensor intrinsic through its
compute definition and lands each ``cp.async`` at its ``wait_group``) against a float64
numpy convolution at odd sizes (padding, stride 2, channels that are not multiples of 16,
a 1x1 filter, partial output rows), refusals, zero-filled ``cp.async`` copies, the CUDA
source compiled with nvcc (SASS ``LDGSTS``/``LDSM``/``HMMA``), and real runs marked
``gpu``."""

from __future__ import annotations

import re

import numpy as np
import pytest

import polytile
from polytile.errors import ScheduleError
from polytile.schedule.interpreter import run
from polytile.schedule.kinds import ASYNC_COPY
from polytile.schedule.loop_ir import For, walk_stmts
from polytile.schedule.passes import async_copy
from polytile.schedule.pipeline import lower
from polytile.targets.cuda.conv2d import conv2d_nhwc_tensorcore, out_size

from helpers import compile_with_nvcc, nvcc_text


def conv_nhwc_reference(a, w, stride: int, pad: int) -> np.ndarray:
    """float64 NHWC convolution of ``a[N, H, W, CI]`` with HWIO ``w[KH, KW, CI, CO]``."""
    n, h, wd, _ = a.shape
    kh, kw, _, co = w.shape
    oh, ow = out_size(h, kh, stride, pad), out_size(wd, kw, stride, pad)
    ap = np.pad(a.astype("float64"), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    out = np.zeros((n, oh, ow, co))
    for y in range(kh):
        for x in range(kw):
            win = ap[:, y:y + stride * oh:stride, x:x + stride * ow:stride, :]
            out += np.einsum("nhwc,co->nhwo", win, w[y, x].astype("float64"))
    return out


def _inputs(shape, seed: int = 0, dtype: str = "float16"):
    n, h, w, ci, co, kh, kw, _, _ = shape
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (n, h, w, ci)).astype(dtype)
    wt = rng.uniform(-1, 1, (kh, kw, ci, co)).astype(dtype)
    return a, wt


def _rel(out, ref) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _check_output(c: np.ndarray, ref: np.ndarray, bound: float) -> None:
    m = ref.shape[0] * ref.shape[1] * ref.shape[2]
    assert _rel(c[:m].reshape(ref.shape).astype("float64"), ref) < bound
    assert np.all(c[m:] == 0)   # the rows past the last output pixel are zeros


# (N, H, W, CI, CO, KH, KW, stride, pad), schedule keywords, accumulation
_CASES = [
    # padding, a pipelined mma.sync main loop (zero-filled cp.async), 30 of 32 rows
    ((1, 5, 6, 16, 32, 3, 3, 1, 1), dict(block=(32, 32, 16), warp=(16, 16), isa="mma",
                                         stages=2), "float32"),
    # stride 2 and padding, 3 input channels (padded to 16, scalar copies), two images
    ((2, 7, 5, 3, 16, 3, 3, 2, 1), dict(block=(32, 16, 16), warp=(16, 16), isa="wmma"),
     "float32"),
    # 1x1, 24 channels padded to 32 (the c // 8 test keeps the copies 16-byte cp.async)
    ((1, 6, 6, 24, 32, 1, 1, 1, 0), dict(block=(64, 32, 16), warp=(32, 16), isa="mma",
                                         stages=2), "float32"),
    # stride 2 without padding, a 3x2 filter, float16 accumulation
    ((1, 9, 7, 16, 16, 3, 2, 2, 0), dict(block=(32, 16, 32), warp=(16, 16), isa="mma"),
     "float16"),
]


@pytest.mark.parametrize("shape, kw, acc", _CASES, ids=["pad-mma-pipe", "stride2-ci3-wmma",
                                                        "1x1-ci24-pipe", "3x2-fp16acc"])
def test_implicit_gemm_conv_on_the_interpreter(shape, kw, acc):
    s, args = conv2d_nhwc_tensorcore(*shape, acc=acc, **kw)
    f = lower(s, args, target="cuda", stop_after=None)
    a, wt = _inputs(shape)
    c = np.full(tuple(int(d) for d in args[2].shape), np.nan, acc)
    run(f, a, wt, c)
    _check_output(c, conv_nhwc_reference(a, wt, shape[7], shape[8]),
                  2e-3 if acc == "float16" else 1e-6)


def test_pipelined_gather_copies_are_zero_filled_cp_async():
    s, args = conv2d_nhwc_tensorcore(1, 56, 56, 64, 64, 3, 3, 1, 1, stages=3)
    f = lower(s, args, target="cuda")
    copies = [x for x in walk_stmts(f.body) if isinstance(x, For) and ASYNC_COPY in x.pragmas]
    fills = [async_copy.copy_parts(x)[3] for x in copies]
    assert any(c is not None for c in fills) and any(c is None for c in fills)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert "cp_async_cg_shared_global_zfill(&Acol_shared[" in src
    assert "cp_async_cg_shared_global(&W_shared[" in src


def test_lane_dependent_condition_is_not_one_copy():
    # c < 20 cuts a vector of 8 channels: not one 16-byte copy, hence no pipeline
    s, args = conv2d_nhwc_tensorcore(1, 4, 4, 20, 16, 1, 1, 1, 0, block=(32, 16, 32),
                                     warp=(16, 16), stages=1)
    f = lower(s, args, target="cuda")
    assert not any(isinstance(x, For) and ASYNC_COPY in x.pragmas and any(
        getattr(y, "buffer", None) is not None and y.buffer.name == "Acol.shared"
        for y in walk_stmts(x)) for x in walk_stmts(f.body))


@pytest.mark.parametrize("kw, match", [
    (dict(block=(128, 48, 32)), r"block \[128, 48, 32\], warp \[64, 32\]: tiles that do "
                                r"not nest"),
    (dict(block=(96, 64, 32), warp=(32, 32)), r"tiles that do not nest; BM "
                                              r"dividing 128"),
    (dict(isa="wgmma"), r"isa 'wgmma'; 'wmma' or 'mma'"),
    (dict(dtype="float32"), r"dtype 'float32' with 'float32' accumulation"),
])
def test_refusals(kw, match):
    with pytest.raises(ScheduleError, match=match):
        conv2d_nhwc_tensorcore(1, 8, 8, 16, 64, 3, 3, 1, 1, **kw)


def test_output_channels_must_fill_the_block():
    with pytest.raises(ScheduleError, match=r"40 output channels are not a multiple of "
                       r"BN = 64.*\n.*hint: a BN dividing CO"):
        conv2d_nhwc_tensorcore(1, 8, 8, 16, 40, 3, 3, 1, 1, block=(64, 64, 32))


def test_pipeline_needs_channels_in_whole_vectors():
    with pytest.raises(ScheduleError, match=r"stages=2 with CI = 3 input channels, not a "
                       r"multiple of 8.*\n.*hint: stages=1"):
        conv2d_nhwc_tensorcore(1, 8, 8, 3, 64, 3, 3, 1, 1, stages=2)


def test_filter_larger_than_the_image_is_refused():
    with pytest.raises(ScheduleError, match="leaves no output of a 2x2 image"):
        conv2d_nhwc_tensorcore(1, 2, 2, 16, 64, 5, 5, 1, 0)


@pytest.mark.parametrize("isa, stages", [("mma", 3), ("wmma", 2)])
def test_resnet_layer_compiles_with_tensor_core_instructions(isa, stages):
    s, args = conv2d_nhwc_tensorcore(1, 28, 28, 128, 128, 3, 3, 1, 1, isa=isa, stages=stages)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    for arch in ("sm_80", "sm_90"):
        compile_with_nvcc(src, arch)
    ptx = nvcc_text(src, "ptx", "sm_90")
    # the zero-filled copies carry PTX's src-size operand
    assert re.search(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16, %r\d+;", ptx)
    assert ("mma.sync.aligned.m16n8k16" if isa == "mma" else "wmma.mma.sync") in ptx
    sass = nvcc_text(src, "sass", "sm_90")
    if sass is None:
        return   # no cuobjdump here: the PTX above was checked
    counts = {op: len(re.findall(rf"\b{op}\b", sass)) for op in ("LDGSTS", "LDSM", "HMMA")}
    assert counts["LDGSTS"] > 0 and counts["HMMA"] > 0, counts
    if isa == "mma":
        assert counts["LDSM"] > 0, counts


# ------------------------------------------------------------------------------ GPU
_GPU_SHAPES = [(1, 56, 56, 64, 64, 3, 3, 1, 1), (2, 28, 28, 128, 128, 3, 3, 1, 1),
               (1, 14, 14, 256, 256, 3, 3, 1, 1), (1, 7, 7, 512, 512, 3, 3, 1, 1),
               (1, 56, 56, 64, 256, 1, 1, 1, 0), (1, 56, 56, 128, 128, 3, 3, 2, 1),
               (1, 17, 13, 3, 64, 7, 7, 2, 3)]


@pytest.mark.gpu
@pytest.mark.parametrize("isa", ["mma", "wmma"])
@pytest.mark.parametrize("shape", _GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_implicit_gemm_conv_on_the_gpu(shape, isa):
    stages = 3 if shape[3] % 8 == 0 else 1
    s, args = conv2d_nhwc_tensorcore(*shape, isa=isa, stages=stages)
    f = polytile.build(s, args, target="cuda")
    a, wt = _inputs(shape, seed=1)
    c = polytile.nd.array(np.full(tuple(int(d) for d in args[2].shape), np.nan, "float32"),
                          device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(wt, device="cuda"), c)
    _check_output(c.numpy(), conv_nhwc_reference(a, wt, shape[7], shape[8]), 1e-5)


def test_zero_fill_condition_must_be_the_same_for_every_lane():
    from polytile.schedule.loop_ir import Buffer, Load
    from polytile.te.expr import Binary, Cmp, Const, Select, Var

    lane, base = Var("int32", "v"), Var("int32", "t")
    buf = Buffer("A", (64,), "float16")
    c = lambda k: Const("int32", k)  # noqa: E731
    idx = Binary("int32", "add", Binary("int32", "mul", base, c(8)), lane)
    load = Load("float16", buf, (idx,))
    zero = Const("float16", 0)
    # (8 t + v) // 8 < 3: the same for v in [0, 8), rewritten without the lane
    cond = Cmp("bool", "lt", Binary("int32", "floordiv", idx, c(8)), c(3))
    ld, fill = async_copy.zero_fill(Select("float16", cond, load, zero), lane, 8)
    assert ld is load and "v" not in str(fill) and "t" in str(fill)
    # 8 t + v < 20 cuts a vector; (8 t + v) // 4 too (4 is not a multiple of 8 lanes)
    for bad in (Cmp("bool", "lt", idx, c(20)),
                Cmp("bool", "lt", Binary("int32", "floordiv", idx, c(4)), c(5))):
        assert async_copy.zero_fill(Select("float16", bad, load, zero), lane, 8) is None
    # a non-zero fill value is not a zero-filled copy
    assert async_copy.zero_fill(Select("float16", cond, load, Const("float16", 1)), lane,
                                8) is None
