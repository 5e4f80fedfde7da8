"""The GPU convolution templates (``conv2d_nchw`` direct, ``conv2d_nhwc`` implicit GEMM on
tensor cores or CUDA cores): spaces pruned by the device limits, sampled configs run on
the reference interpreter at small odd sizes against the templates' float64 numpy
references, sampled configs at a ResNet-50 layer compiled with nvcc, and a short tuning
run on a GPU (marked ``gpu``)."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

import polytile
from polytile.autotune import MeasureOptions, gpu_limits, tune
from polytile.autotune.data import make_inputs, output_positions
from polytile.autotune.template import get_template
from polytile.autotune.templates_gpu_conv import (conv_direct_registers, conv_direct_tiles,
                                                  tensorcore_tiles)
from polytile.errors import ScheduleError
from polytile.schedule.interpreter import run as interpret

RESNET = (1, 64, 56, 56, 64, 3, 3, 1, 1)   # N, CI, H, W, CO, KH, KW, stride, pad


def test_tensor_core_space_fits_the_limits_and_holds_the_default():
    lim = gpu_limits.for_arch("sm_90")
    tiles = tensorcore_tiles(lim, 64)
    assert [128, 64, 32, 64, 32, 3] in tiles
    for bm, bn, bk, wm, wn, st in tiles:
        assert 64 % bn == 0 and bm % wm == 0 and bn % wn == 0
        assert 32 * (bm // wm) * (bn // wn) <= lim.max_threads_per_block
        assert st * (bm * (bk + 8) + bk * (bn + 8)) * 2 <= lim.shared_bytes_per_block
    small = gpu_limits.GPULimits("sm_80", 256, 16 * 1024, 65536, 255, 40 << 20, 108)
    fewer = tensorcore_tiles(small, 64)
    assert 0 < len(fewer) < len(tiles)
    assert all(32 * (t[0] // t[3]) * (t[1] // t[4]) <= 256 for t in fewer)


def test_direct_space_fits_the_limits():
    lim = gpu_limits.for_arch("sm_90")
    tiles = conv_direct_tiles(lim, 64, 56, 56, 3, 3, 1)
    assert [32, 4, 4, 1, 16, 2, 8] in tiles
    for bf, tf, by, ty, bx, tx, bc in tiles:
        threads = (bf // tf) * (by // ty) * (bx // tx)
        assert 32 <= threads <= 512
        assert (bf * bc * 9 + bc * (by + 2) * (bx + 2)) * 4 <= lim.shared_bytes_per_block
        assert conv_direct_registers(tf, ty, tx) * threads <= lim.registers_per_block


def test_pipeline_stages_need_whole_channel_vectors():
    t = get_template("conv2d_nhwc")
    sp = t.space((1, 3, 17, 17, 64, 7, 7, 2, 3), "float16", "cuda")
    assert {v[-1] for v in sp.knobs["tile"].values} == {1}
    sp = t.space(RESNET, "float16", "cuda")
    assert {v[-1] for v in sp.knobs["tile"].values} == {1, 2, 3, 4}


def test_tensor_cores_need_output_channels_in_whole_tiles():
    with pytest.raises(ScheduleError, match=r"conv2d_nhwc: 40 output channels on tensor cores"
                       r"; CO a multiple of 16.*\n.*hint: dtype='float32'"):
        get_template("conv2d_nhwc").space((1, 16, 8, 8, 40, 3, 3, 1, 1), "float16", "cuda")


# --------------------------------------------------------------------------- numerics
# (template, args, dtype, largest block: threads) -- small odd sizes: halos, stride 2,
# channel counts that are not multiples of the tiles, ragged output tiles
SMALL = [("conv2d_nchw", (1, 5, 7, 6, 6, 3, 3, 2, 1), "float32"),
         ("conv2d_nchw", (2, 3, 5, 5, 5, 1, 1, 1, 0), "float32"),
         ("conv2d_nhwc", (1, 6, 5, 7, 12, 3, 3, 1, 1), "float32"),
         ("conv2d_nhwc", (1, 8, 5, 6, 32, 3, 3, 2, 1), "float16")]


def _picks(t, sp, n, seed, max_threads=64):
    rng = random.Random(seed)
    picks, tries = [], 0
    while len(picks) < n and tries < 10000:
        tries += 1
        i = rng.randrange(len(sp))
        tile = sp.get(i).knob_values()["tile"]
        if sp.knobs.get("isa") is not None:           # tensor cores: BM, BN, BK, WM, WN
            threads = 32 * (tile[0] // tile[3]) * (tile[1] // tile[4])
            big = tile[0] * tile[1] > 64 * 32
        elif len(tile) == 7:                           # direct: BF, TF, BY, TY, BX, TX
            threads = (tile[0] // tile[1]) * (tile[2] // tile[3]) * (tile[4] // tile[5])
            big = False
        else:                                          # CUDA-core GEMM: BM, BN, BK, TM, TN
            threads = (tile[0] // tile[3]) * (tile[1] // tile[4])
            big = tile[0] * tile[1] > 32 * 32
        if threads <= max_threads and not big and i not in picks:
            picks.append(i)
    return picks


@pytest.mark.parametrize("name, args, dtype", SMALL,
                         ids=[f"{n}-{d}-{'x'.join(map(str, a))}" for n, a, d in SMALL])
def test_sampled_configs_compute_the_definition(name, args, dtype):
    """Sampled configs lowered for cuda and run by the reference interpreter (races and
    barriers checked) against the template's numpy reference in float64."""
    t = get_template(name)
    sp = t.space(args, dtype, "cuda")
    for i in _picks(t, sp, 2, seed=len(args) + args[1]):
        cfg = sp.get(i)
        s, tensors = t.instantiate(cfg, args, dtype, "cuda")
        f = polytile.lower(s, tensors, target="cuda")
        arrays = make_inputs(tensors, 1, args)
        outs = output_positions(tensors)
        arrays[outs[0]][...] = np.nan
        interpret(f, *arrays)
        ins = [a.astype("float64") for k, a in enumerate(arrays) if k not in outs]
        want = t.reference(*ins, args=args)
        got = arrays[outs[0]].astype("float64")
        assert got.shape == want.shape
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < 1e-6, (cfg.knob_values(), err)


@pytest.mark.parametrize("name, dtype", [("conv2d_nchw", "float32"),
                                         ("conv2d_nhwc", "float32"),
                                         ("conv2d_nhwc", "float16")])
def test_sampled_configs_compile_with_nvcc(name, dtype):
    from helpers import compile_with_nvcc

    t = get_template(name)
    target = "cuda -arch=sm_90"
    sp = t.space(RESNET, dtype, target)
    picks = [sp.default_index()] + random.Random(3).sample(range(len(sp)), 1)
    for i in picks:
        s, tensors = t.instantiate(sp.get(i), RESNET, dtype, target)
        compile_with_nvcc(polytile.build(s, tensors, target=target).get_source())


# --------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@pytest.mark.parametrize("name, dtype", [("conv2d_nhwc", "float16"),
                                         ("conv2d_nchw", "float32")])
def test_short_conv_tuning_run(name, dtype, tmp_path):
    """A bounded tuning run of a ResNet-50 layer (28x28x128, 3x3) on the GPU, every
    candidate checked against numpy."""
    args = (1, 128, 28, 28, 128, 3, 3, 1, 1)
    opt = MeasureOptions(parallel=min(8, os.cpu_count() or 1), check=True, run_timeout=20)
    res = tune(name, args, dtype=dtype, target="cuda", tuner="random", n_trial=4,
               measure_option=opt, log_file=str(tmp_path / "conv.jsonl"), timeout_total=60,
               anchors=())
    assert res.best is not None, res.failures()
    assert not any(r.error == "wrong_result" for r in res.records), [
        r.error_msg for r in res.records if r.error]
