"""The blocked-layout convolution templates ``conv2d_nchwc`` and
``depthwise_conv2d_nchwc``: every config of a small space
and the default plus one-knob variations at awkward shapes (prime sizes, channel counts
that are not multiples of the vector width, stride 2, 1x1, no padding, batch 2) against
numpy in float64 on poisoned outputs."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile.autotune import get_template

SHAPES = [
    (1, 6, 9, 11, 10, 3, 3, 1, 1),     # channels not multiples of 4, prime width
    (2, 16, 7, 5, 32, 3, 3, 2, 1),     # batch 2, stride 2
    (1, 32, 8, 8, 48, 1, 1, 1, 0),     # 1x1, no padding
    (1, 3, 13, 13, 7, 5, 5, 1, 2),     # 5x5, prime channels
    (1, 1, 1, 1, 1, 1, 1, 1, 0),       # everything 1
    (1, 4, 6, 6, 4, 3, 3, 1, 0),       # no padding, output smaller than input
]


def _run(t, cfg, args, a, w):
    s, tensors = t.instantiate(cfg, args)
    f = polytile.build(s, tensors, target="llvm")
    out = np.full(tuple(int(d) for d in tensors[2].shape), np.nan, dtype="float32")
    f(a, w, out)
    return out


def _variants(sp):
    d = sp.get(sp.default_index())
    base = d.knob_values()
    out = [d]
    for k in range(len(sp)):
        c = sp.get(k)
        if sum(v != base[n] for n, v in c.knob_values().items()) == 1:
            out.append(c)
    return out


@pytest.mark.parametrize("args", SHAPES, ids=lambda a: "x".join(map(str, a)))
def test_default_and_knob_variants_match_numpy(args):
    t = get_template("conv2d_nchwc")
    rng = np.random.default_rng(sum(args))
    n, ci, h, w_, co, kh, kw = args[:7]
    a = rng.uniform(-1, 1, (n, ci, h, w_)).astype("float32")
    w = rng.uniform(-1, 1, (co, ci, kh, kw)).astype("float32")
    ref = t.reference(a.astype("float64"), w.astype("float64"), args=args)
    tol = 2e-5 * np.sqrt(ci * kh * kw)
    for cfg in _variants(t.space(args)):
        out = _run(t, cfg, args, a, w)
        np.testing.assert_allclose(out, ref, rtol=2e-5, atol=tol, err_msg=str(cfg))


def test_sampled_configs_of_a_small_space():
    """Every value of every knob appears in some sampled config (a spread of 40 indices
    over the mixed-radix space, plus the first and last)."""
    t = get_template("conv2d_nchwc")
    args = (1, 4, 5, 6, 8, 3, 3, 1, 1)
    sp = t.space(args)
    picks = sorted({0, len(sp) - 1} | {k * 7919 % len(sp) for k in range(40)})
    seen: dict = {}
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (1, 4, 5, 6)).astype("float32")
    w = rng.uniform(-1, 1, (8, 4, 3, 3)).astype("float32")
    ref = t.reference(a.astype("float64"), w.astype("float64"), args=args)
    for k in picks:
        cfg = sp.get(k)
        for n, v in cfg.knob_values().items():
            seen.setdefault(n, set()).add(str(v))
        out = _run(t, cfg, args, a, w)
        np.testing.assert_allclose(out, ref, rtol=2e-5, atol=1e-4, err_msg=str(cfg))
    full = {n: {str(sp.get(k).knob_values()[n]) for k in range(len(sp))} for n in seen}
    assert seen == full


def test_default_schedule_is_blocked_and_register_tiled():
    t = get_template("conv2d_nchwc")
    args = (1, 64, 56, 56, 64, 3, 3, 1, 1)
    sp = t.space(args)
    cfg = sp.get(sp.default_index())
    assert cfg["ic_block"].val == 16 and cfg["oc_block"].val == 32
    s, tensors = t.instantiate(cfg, args)
    text = str(polytile.lower(s, tensors))
    assert "Apad = alloc(float32[1, 64, 58, 58]" in text  # read in NCHW (in_layout)
    assert "W_packed = alloc(float32[2, 4, 3, 3, 16, 32]" in text
    assert "vectorized(0, 32)" in text and "parallel" in text


DW_SHAPES = [
    (1, 12, 13, 10, 3, 3, 2, 1),    # 12 channels: blocks of 4, stride 2
    (2, 16, 7, 9, 3, 3, 1, 1),      # batch 2
    (1, 7, 5, 5, 5, 5, 1, 2),       # prime channels, 5x5
    (1, 32, 14, 14, 3, 3, 1, 0),    # no padding
    (1, 1, 1, 1, 1, 1, 1, 0),       # everything 1
]


@pytest.mark.parametrize("args", DW_SHAPES, ids=lambda a: "x".join(map(str, a)))
@pytest.mark.parametrize("name", ["depthwise_conv2d_nchwc", "depthwise_conv2d_nchw"])
def test_depthwise_variants_match_numpy(name, args):
    t = get_template(name)
    rng = np.random.default_rng(sum(args))
    n, c, h, w_, kh, kw = args[:6]
    a = rng.uniform(-1, 1, (n, c, h, w_)).astype("float32")
    w = rng.uniform(-1, 1, (c, kh, kw)).astype("float32")
    ref = t.reference(a.astype("float64"), w.astype("float64"), args=args)
    for cfg in _variants(t.space(args)):
        out = _run(t, cfg, args, a, w)
        np.testing.assert_allclose(out, ref, rtol=2e-5, atol=1e-4, err_msg=str(cfg))


def _default_build(args, seed):
    t = get_template("conv2d_nchwc")
    sp = t.space(args)
    cfg = sp.get(sp.default_index())
    s, tensors = t.instantiate(cfg, args)
    rng = np.random.default_rng(seed)
    n, ci, h, w_, co, kh, kw = args[:7]
    a = rng.uniform(-1, 1, (n, ci, h, w_)).astype("float32")
    w = rng.uniform(-1, 1, (co, ci, kh, kw)).astype("float32")
    out = _run(t, cfg, args, a, w)
    ref = t.reference(a.astype("float64"), w.astype("float64"), args=args)
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5 * np.sqrt(ci * kh * kw))
    return cfg, str(polytile.lower(s, tensors))


@pytest.mark.parametrize("threads", [1, 2])
def test_large_weights_are_packed_per_channel_block_in_its_task(threads):
    """Weights of 1 MiB and more (176 x 176 x 3 x 3 float32: 1.1 MB) are packed by the
    task of each output-channel block (all its rows, batch 2, odd image), not apart."""
    from polytile.autotune.templates_nn import PACK_IN_TASK_BYTES

    args = (2, 176, 5, 3, 176, 3, 3, 1, 1)
    assert 176 * 176 * 9 * 4 >= PACK_IN_TASK_BYTES
    old = polytile.get_num_threads()
    polytile.set_num_threads(threads)
    try:
        cfg, text = _default_build(args, seed=5)
    finally:
        polytile.set_num_threads(old)
    assert cfg["pack_weights"].val == "ob"
    # the packed block is allocated inside the parallel loop over the 11 channel blocks
    par = text.index("for co.outer in parallel(0, 11)")
    assert text.index("W_packed = alloc(float32[1, 11, 3, 3, 16, 16]") > par


def test_unpadded_default_reads_the_input_in_place():
    """Without padding (1x1) the default reads A in NCHW: no blocked copy of the input."""
    cfg, text = _default_build((1, 48, 7, 5, 32, 1, 1, 1, 0), seed=6)
    assert cfg["in_layout"].val == "nchw"
    assert "A_nchwc" not in text and "Apad" not in text


def test_depthwise_nchw_pads_each_channel_inside_its_task():
    """depthwise_conv2d_nchw's default pads a task's own channel plane inside the task:
    one parallel loop in all (batch 2, stride 2, prime sizes), against float64 numpy."""
    t = get_template("depthwise_conv2d_nchw")
    args = (2, 7, 13, 11, 3, 3, 2, 1)
    sp = t.space(args)
    cfg = sp.get(sp.default_index())
    assert cfg["pad_at"].val == "task"
    s, tensors = t.instantiate(cfg, args)
    text = str(polytile.lower(s, tensors))
    assert text.count("in parallel(") == 1
    assert text.index("Apad = alloc(float32[1, 1, 15, 13]") > text.index("in parallel(")
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (2, 7, 13, 11)).astype("float32")
    w = rng.uniform(-1, 1, (7, 3, 3)).astype("float32")
    out = _run(t, cfg, args, a, w)
    ref = t.reference(a.astype("float64"), w.astype("float64"), args=args)
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=1e-4)
