"""The tensor-core space of the ``cuda`` ``matmul`` template (float16 / bfloat16,
:mod:`polytile.autotune.templates_gpu_tc`): enumeration and device limits, the mapping of
unusable knob values, sampled configs on the interpreter (float64 numpy reference) and
compiled by nvcc for sm_90 and sm_90a with ``HMMA`` in the SASS, and (marked ``gpu``) a
short tuning run with every candidate checked."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest

import polytile
from polytile.autotune import MeasureOptions, gpu_limits, tune
from polytile.autotune import templates_gpu_tc as tct
from polytile.autotune.data import make_inputs, output_positions
from polytile.autotune.template import get_template
from polytile.errors import TuneError
from polytile.schedule.interpreter import run as interpret
from polytile.targets.cuda.tensor_core import MMA_BEST, WGMMA_TENSORIZE_BEST

SM90 = "cuda -arch=sm_90"


def _space(args, dtype="float16", target=SM90):
    t = get_template("matmul")
    return t, t.space(args, dtype, target)


def test_default_is_the_best_hand_schedule_and_the_space_fits_the_device():
    _, sp = _space((4096, 4096, 4096))
    d = sp.default().knob_values()
    assert d == {"isa": "mma", "tile": [*MMA_BEST["block"], *MMA_BEST["warp"]],
                 "stages": MMA_BEST["stages"], "frags": MMA_BEST["frags"],
                 "group": MMA_BEST["group"],
                 "pad": "swizzle" if MMA_BEST.get("swizzle") is True else 8}
    lim = gpu_limits.for_arch("sm_90")
    tiles = sp.knobs["tile"]
    values = [tiles.get(r).to_json() for r in range(len(tiles))]
    assert [128, 256, 32, 64, 64] in values and [256, 256, 64, 16, 16] not in values
    for bm, bn, bk, wm, wn in values:
        assert 4096 % bm == 0 and 4096 % bk == 0 and bm % wm == 0 and bn % wn == 0
        threads = 32 * (bm // wm) * (bn // wn)
        regs = tct.tc_registers((wm, wn), bk, "step")
        assert threads <= 1024 and regs <= 255 and regs * threads <= 65536
        assert tct.tc_fits_shared([bm, bn, bk], 4096, lim)
    # every preferred config is its own effective config, and fits with its own frags
    pref = sp.preferred()
    assert sp.default_index() in pref and 100 < len(pref) < 2000
    for i in random.Random(0).sample(pref, 50):
        v = sp.get(i).knob_values()
        assert tct.effective(v, (4096, 4096, 4096), lim) == v
        bm, bn, bk, wm, wn = v["tile"]
        assert tct.tc_shared_bytes(v["tile"], v["stages"], v["pad"]) <= lim.shared_bytes_optin
        assert gpu_limits.fits(lim, 32 * (bm // wm) * (bn // wn), 0,
                               tct.tc_registers((wm, wn), bk, v["frags"]))
        assert v["isa"] == "mma" and v["stages"] >= 2


def test_sm_90a_adds_wgmma_and_defaults_to_the_tensorize_schedule():
    _, sp = _space((4096, 4096, 4096), target="cuda -arch=sm_90a")
    d = sp.default().knob_values()
    bm, bn, bk = WGMMA_TENSORIZE_BEST["block"]
    assert d["isa"] == "wgmma" and d["tile"] == [bm, bn, bk, 64, bn]
    assert d["stages"] == WGMMA_TENSORIZE_BEST["stages"]
    pref = [sp.get(i).knob_values() for i in sp.preferred()]
    wg = [v for v in pref if v["isa"] == "wgmma"]
    assert d in wg and all(v["tile"][2] == 64 and v["stages"] >= 3 for v in wg)
    # a large GEMM with wgmma tiles searches those alone, copied by TMA, with the default
    # stores: an 8-trial run covers them (blocks 128x256, 256x128; 3 or 4 stages; groups
    # of 8 or 16)
    assert wg == pref and all(v["copy"] == "tma" for v in wg) and len(wg) == 8
    assert {v["store"] for v in wg} == {"16B"} == {d["store"]}
    assert {tuple(v["tile"][:2]) for v in wg} == {(128, 256), (256, 128)}
    # sm_90 (no arch-specific features): no wgmma; the mma.sync hand schedule by default
    _, sp90 = _space((4096, 4096, 4096))
    assert "wgmma" not in [sp90.knobs["isa"].get(r).to_json()
                           for r in range(len(sp90.knobs["isa"]))]
    # a wgmma tile asked on another path builds wgmma, wgmma on an mma tile builds mma.sync
    lim = gpu_limits.for_arch("sm_90")
    wg = frozenset({(128, 256, 64, 64, 256)})
    v = dict(d, isa="mma")
    assert tct.effective(v, (4096,) * 3, lim, d, wg)["isa"] == "wgmma"
    v = dict(d, tile=[128, 256, 32, 64, 64])
    assert tct.effective(v, (4096,) * 3, lim, d, wg)["isa"] == "mma"


def test_smaller_devices_and_shapes_shrink_the_space():
    _, big = _space((4096, 4096, 4096))
    _, a100 = _space((4096, 4096, 4096), target="cuda -arch=sm_80")
    _, ada = _space((4096, 4096, 4096), target="cuda -arch=sm_89")
    assert len(ada.knobs["tile"]) <= len(a100.knobs["tile"]) <= len(big.knobs["tile"])
    lim = gpu_limits.for_arch("sm_89")
    v = dict(ada.default().knob_values(), stages=4, tile=[128, 128, 64, 64, 64])
    # 4 stages of 128x128x64 tiles (140 KiB) do not fit sm_89's 99 KiB: the deepest that does
    assert tct.effective(v, (4096,) * 3, gpu_limits.for_arch("sm_90"))["stages"] == 4
    e = tct.effective(v, (4096, 4096, 4096), lim)
    assert e["stages"] == 2 and tct.tc_shared_bytes(v["tile"], 2, 8) <= lim.shared_bytes_optin
    assert tct.tc_shared_bytes(v["tile"], 3, 8) > lim.shared_bytes_optin
    # a shape the hand schedule's block does not divide: the nearest tile that does
    _, odd = _space((384, 192, 96))
    t = odd.default().knob_values()["tile"]
    assert 384 % t[0] == 0 and 192 % t[1] == 0 and 96 % t[2] == 0 and t[:2] == [128, 64]


def test_unusable_knob_values_map_to_the_kernel_they_build():
    lim = gpu_limits.for_arch("sm_90")
    base = {"isa": "mma", "tile": [64, 64, 16, 32, 32], "stages": 3, "frags": "prefetch",
            "group": 16, "pad": 8}
    e = tct.effective(base, (192, 128, 64), lim)
    # prefetch needs two k steps per tile; 3 tile rows take groups of 3 at most (divisor)
    assert e["frags"] == "step" and e["group"] == 3 and e["stages"] == 3
    e = tct.effective(dict(base, tile=[64, 64, 32, 32, 32]), (192, 128, 32), lim)
    assert e["stages"] == 1 and e["frags"] == "step"      # one k tile: no pipeline
    e = tct.effective(dict(base, tile=[64, 64, 32, 32, 32], isa="wmma"), (192, 128, 96), lim)
    assert e["frags"] == "step"                          # the WMMA path does not prefetch


def test_no_tile_within_the_limits_is_a_clear_error():
    tiny = gpu_limits.GPULimits("sm_90", max_threads_per_block=16)
    with gpu_limits.use(tiny), pytest.raises(TuneError, match="no tensor-core tile divides "
                                             "64x64x64 within the limits of sm_90"):
        _space((64, 64, 64))


def _interpret(args, dtype, cfg=None, target="cuda"):
    t, sp = _space(args, dtype, target)
    c = sp.default() if cfg is None else sp.from_json(cfg)
    s, tensors = t.instantiate(c, args, dtype, target)
    f = polytile.lower(s, tensors, target=target)
    arrays = make_inputs(tensors, 1, args)
    outs = output_positions(tensors)
    interpret(f, *arrays)
    a, b = (x.astype("float64") for k, x in enumerate(arrays) if k not in outs)
    got = arrays[outs[0]]
    assert got.dtype == np.float32 and np.isfinite(got).all()
    want = a @ b
    # float32 accumulation of exactly representable products: float32 rounding only
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1, np.abs(want).max()),
                               err_msg=str(c.knob_values()))
    return tensors


@pytest.mark.parametrize("args, cfg", [
    ((32, 32, 32), {"isa": "mma", "tile": [32, 32, 16, 16, 32], "stages": 2, "frags": "step",
                    "group": 1, "pad": 8}),
    ((32, 32, 32), {"isa": "wmma", "tile": [32, 32, 16, 16, 32], "stages": 2, "frags": "tile",
                    "group": 1, "pad": 0}),
    # swizzled shared tiles (A: 32-byte rows, B: 64-byte rows) instead of padded ones
    ((32, 32, 32), {"isa": "mma", "tile": [32, 32, 16, 16, 32], "stages": 2, "frags": "step",
                    "group": 1, "pad": "swizzle"}),
    pytest.param((64, 32, 64), {"isa": "mma", "tile": [32, 32, 32, 16, 32], "stages": 2,
                                "frags": "prefetch", "group": 4, "pad": 8},
                 marks=pytest.mark.slow)], ids=["mma", "wmma", "mma-swizzle",
                                                "mma-prefetch-grouped"])
def test_tensor_core_configs_compute_the_definition_on_the_interpreter(args, cfg):
    """A small config of each path (2-stage pipelines; the slow one prefetches fragments
    and groups 2 tile rows) on the interpreter, which runs each MMA through its compute
    definition and checks the asynchronous copies' waits."""
    _interpret(args, "float16", cfg)


@pytest.mark.slow
def test_wgmma_config_computes_the_definition_on_the_interpreter():
    """The wgmma path of a block narrower than 64 columns (a transpose kernel, then
    128B-swizzled tiles and asynchronous MMA groups through tensorize) at 64 x 16 x 128 on
    the interpreter."""
    cfg = {"isa": "wgmma", "tile": [64, 16, 64, 64, 16], "stages": 2, "frags": "prefetch",
           "group": 8, "pad": 8}
    tensors = _interpret((64, 16, 128), "float16", cfg, target="cuda -arch=sm_90a")
    assert [t.name for t in tensors] == ["A", "B", "C"]


@pytest.mark.slow
def test_wgmma_mn_major_config_computes_the_definition_on_the_interpreter():
    """A block of 64 columns reads B MN-major (one kernel, no transpose) at 64 x 64 x 128."""
    cfg = {"isa": "wgmma", "tile": [64, 64, 64, 64, 64], "stages": 2, "frags": "prefetch",
           "group": 8, "pad": 8}
    tensors = _interpret((64, 64, 128), "float16", cfg, target="cuda -arch=sm_90a")
    assert [t.name for t in tensors] == ["A", "B", "C"]


def test_wgmma_blocks_of_64_columns_drop_the_transpose_kernel():
    t, sp = _space((128, 128, 128), target="cuda -arch=sm_90a")
    for tile, mn in (([64, 128, 64, 64, 128], True), ([64, 32, 64, 64, 32], False)):
        cfg = {"isa": "wgmma", "tile": tile, "stages": 2, "frags": "prefetch", "group": 8,
               "pad": 8}
        s, tensors = t.instantiate(sp.from_json(cfg), (128, 128, 128), "float16",
                                   "cuda -arch=sm_90a")
        text = str(polytile.lower(s, tensors, target="cuda -arch=sm_90a"))
        assert (f"wgmma_m64n{tile[1]}k16_float16_sw128_mn_async" in text) == mn, tile
        assert ("Bt[" in text) == (not mn), tile


def test_grouped_block_order_keeps_cp_async_copies():
    """Groups of tile rows make the AST generator write a block's column as ``k * bx - k *
    (bx % g)`` or a ``select`` on ``bx``: the copies of B stay provably aligned 16-byte
    ``cp.async`` (the pipeline refused 4 of 25 sampled 512^3 configs before)."""
    t, sp = _space((256, 256, 128), target="cuda -arch=sm_90a")
    for cfg in ({"isa": "mma", "tile": [16, 128, 16, 16, 64], "stages": 3, "frags": "tile",
                 "group": 16, "pad": 8},
                {"isa": "mma", "tile": [16, 16, 32, 16, 16], "stages": 4, "frags": "tile",
                 "group": 4, "pad": 8}):
        s, tensors = t.instantiate(sp.from_json(cfg), (256, 256, 128), "float16",
                                   "cuda -arch=sm_90a")
        assert "cp.async" in str(polytile.lower(s, tensors, target="cuda -arch=sm_90a"))


def test_sides_off_the_mma_tile_keep_the_cuda_core_schedule():
    """9 x 7 x 5 float16: no MMA tile divides it; the CUDA-core schedule computes the same
    definition (float32 accumulation and output)."""
    t, sp = _space((9, 7, 5), target="cuda")
    assert "tile" in sp.knobs and "isa" not in sp.knobs
    _interpret((9, 7, 5), "float16", dict(sp.default().knob_values(), tile=[16, 32, 4, 4, 4]))


def _isa_text(cfg, args, dtype, arch):
    """``("sass", cuobjdump -sass)`` of the config's kernel built for ``arch``, or
    ``("ptx", PTX)`` where cuobjdump is missing; None without nvcc."""
    import shutil

    from helpers import nvcc_text

    t, sp = _space(args, dtype, f"cuda -arch={arch}")
    s, tensors = t.instantiate(sp.from_json(cfg), args, dtype, f"cuda -arch={arch}")
    src = polytile.build(s, tensors, target=f"cuda -arch={arch}").get_source()
    kind = "sass" if shutil.which("cuobjdump") else "ptx"
    text = nvcc_text(src, kind, arch)
    return None if text is None else (kind, text)


def _assert_tensor_cores(got, what) -> None:
    if got is None:
        pytest.skip("nvcc not found")
    kind, text = got
    if what["isa"] == "wgmma":   # warpgroup MMA as HGMMA
        assert ("HGMMA" if kind == "sass" else "wgmma.mma_async.sync.aligned") in text, what
        return
    if kind == "sass":   # mma.sync as HMMA, ldmatrix as LDSM, cp.async as LDGSTS
        assert "HMMA.16816.F32" in text and "LDSM" in text and "LDGSTS" in text, what
    else:
        assert "mma.sync.aligned.m16n8k16.row.col.f32" in text, what
        assert "ldmatrix.sync.aligned" in text and "cp.async.cg.shared.global" in text, what


@pytest.mark.parametrize("arch", ["sm_90a", pytest.param("sm_90", marks=pytest.mark.slow)])
def test_a_pipelined_prefetching_config_compiles_to_tensor_core_instructions(arch):
    cfg = {"isa": "mma", "tile": [64, 64, 32, 32, 32], "stages": 3, "frags": "prefetch",
           "group": 1, "pad": 8}
    _assert_tensor_cores(_isa_text(cfg, (128, 128, 96), "float16", arch), cfg)


def test_a_wgmma_config_compiles_to_warpgroup_mma():
    cfg = {"isa": "wgmma", "tile": [64, 64, 64, 64, 64], "stages": 3, "frags": "prefetch",
           "group": 8, "pad": 8}
    _assert_tensor_cores(_isa_text(cfg, (128, 64, 192), "float16", "sm_90a"), cfg)


def test_the_copy_knob_of_sm_90a_picks_tma_where_b_is_read_mn_major():
    _, sp = _space((4096, 4096, 4096), target="cuda -arch=sm_90a")
    d = sp.default().knob_values()
    assert d["copy"] == ("tma" if WGMMA_TENSORIZE_BEST.get("tma") else "cp.async")
    assert "copy" not in _space((4096, 4096, 4096))[1].default().knob_values()   # sm_90
    # records from before the knob load as cp.async
    assert sp.from_json({k: v for k, v in d.items() if k != "copy"}).knob_values()[
        "copy"] == "cp.async"
    lim = gpu_limits.for_arch("sm_90")
    wg = frozenset({(128, 256, 64, 64, 256), (128, 32, 64, 64, 32)})
    v = dict(d, copy="tma")
    assert tct.effective(v, (4096,) * 3, lim, d, wg)["copy"] == "tma"
    # no pipeline, B read K-major through the transposed copy, not wgmma: cp.async
    assert tct.effective(dict(v, stages=1), (4096,) * 3, lim, d, wg)["copy"] == "cp.async"
    assert tct.effective(dict(v, tile=[128, 32, 64, 64, 32]), (4096,) * 3, lim, d,
                         wg)["copy"] == "cp.async"
    assert tct.effective(dict(v, isa="mma", tile=[128, 256, 32, 64, 64]), (4096,) * 3, lim,
                         d, wg)["copy"] == "cp.async"


def test_the_store_knob_of_sm_90a_streams_the_wgmma_epilogue():
    t, sp = _space((4096, 4096, 4096), target="cuda -arch=sm_90a")
    d = sp.default().knob_values()
    assert d["store"] == WGMMA_TENSORIZE_BEST["epilogue"] == "16B"
    assert "store" not in _space((4096, 4096, 4096))[1].default().knob_values()   # sm_90
    # records from before the knob load as the 16-byte stores
    assert sp.from_json({k: v for k, v in d.items() if k != "store"}).knob_values()[
        "store"] == "16B"
    lim = gpu_limits.for_arch("sm_90")
    wg = frozenset({(128, 256, 64, 64, 256)})
    v = dict(d, store="16B_stream")
    assert tct.effective(v, (4096,) * 3, lim, d, wg)["store"] == "16B_stream"
    # mma.sync does not read it: its default (no duplicate kernels)
    assert tct.effective(dict(v, isa="mma", tile=[128, 256, 32, 64, 64]), (4096,) * 3, lim,
                         d, wg)["store"] == "16B"
    for store, call in (("16B", "wgmma_store_d16("), ("16B_stream", "wgmma_store_d16s(")):
        s, tensors = t.instantiate(sp.from_json(dict(d, store=store)), (4096,) * 3,
                                   "float16", "cuda -arch=sm_90a")
        src = polytile.build(s, tensors, target="cuda -arch=sm_90a").get_source()
        body = src[src.index("__global__"):]
        assert call in body and ("wgmma_store_d16s(" in body) == (store == "16B_stream")


@pytest.mark.slow
def test_wgmma_tma_streaming_store_config_computes_the_definition_on_the_interpreter():
    """TMA copies and the streaming 16-byte epilogue at 128 x 128 x 192 (3 k tiles, 2
    stages, groups of tile rows) on the interpreter (it models the TMA boxes and
    mbarrier phases)."""
    cfg = {"isa": "wgmma", "tile": [64, 64, 64, 64, 64], "stages": 2, "frags": "prefetch",
           "group": 4, "pad": 8, "copy": "tma", "store": "16B_stream"}
    _interpret((128, 128, 192), "float16", cfg, target="cuda -arch=sm_90a")


@pytest.mark.slow      # nvcc, ~3-5 s (the TMA source is compiled in tests/targets/test_tma_pipeline.py)
def test_a_tma_wgmma_config_compiles_to_utmaldg():
    cfg = {"isa": "wgmma", "tile": [64, 64, 64, 64, 64], "stages": 3, "frags": "prefetch",
           "group": 1, "pad": 8, "copy": "tma"}
    got = _isa_text(cfg, (128, 128, 192), "float16", "sm_90a")
    _assert_tensor_cores(got, cfg)
    assert ("UTMALDG" if got[0] == "sass" else "cp.async.bulk.tensor.2d") in got[1]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_default_config_compiles_to_tensor_core_instructions(arch):
    """The default config (the hand schedule ``MMA_BEST``) lowered and compiled by nvcc."""
    _, sp = _space((256, 256, 64), "float16", f"cuda -arch={arch}")
    cfg = sp.default().knob_values()
    _assert_tensor_cores(_isa_text(cfg, (256, 256, 64), "float16", arch), cfg)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sampled_preferred_configs_compile_to_tensor_core_instructions(dtype):
    args = (512, 512, 256)
    _, sp = _space(args, dtype)
    for i in random.Random(3).sample(sp.preferred(), 3):
        cfg = sp.get(i).knob_values()
        got = _isa_text(cfg, args, dtype, "sm_90")
        if got is None:
            pytest.skip("nvcc not found")
        assert ("HMMA" if got[0] == "sass" else "mma.sync.aligned") in got[1], cfg


def test_runner_inputs_of_bfloat16_parameters_hold_bfloat16_values():
    """The GPU runner's bfloat16 inputs are float32 arrays of bfloat16 values (uploaded as
    bfloat16): the float64 reference then sees exactly what the kernel reads."""
    from polytile.autotune.gpu_runner import _Runner
    from polytile.te.dtype import bfloat16_bits, bfloat16_to_float32

    r = _Runner.__new__(_Runner)
    r.setup, r.host = {"seed": 0}, None
    params = [{"name": n, "kind": "array", "written": False, "dtype": d, "shape": [8, 4]}
              for n, d in (("A", "bfloat16"), ("B", "float16"))]
    host = r._host_inputs(params)
    a = host["A"]
    assert a.dtype == np.float32 and len(np.unique(a)) > 8
    np.testing.assert_array_equal(bfloat16_to_float32(bfloat16_bits(a)), a)
    assert host["B"].dtype == np.float16


def test_bfloat16_workload_data_and_comparison():
    """make_inputs gives bfloat16 parameters random values (not 0/1 patterns), and
    outputs_match compares bfloat16 outputs by value with a bfloat16 tolerance (both
    were missing: a CPU bfloat16 tuning run could not measure any candidate)."""
    from polytile import te
    from polytile.autotune.data import outputs_match
    from polytile.te.dtype import bfloat16_array, bfloat16_values

    A = te.placeholder((6, 5), name="A", dtype="bfloat16")
    B = te.compute((6, 5), lambda i, j: A[i, j] * 2, name="B")
    a, b = make_inputs([A, B], seed=0)
    va = bfloat16_values(a)
    assert len(np.unique(va)) > 20 and np.abs(va).max() < 1 and np.isnan(
        bfloat16_values(b)).all()
    want = va.astype("float64") * 2
    assert outputs_match(bfloat16_array(want), want, "bfloat16")[0]
    assert not outputs_match(bfloat16_array(want + 0.1), want, "bfloat16")[0]


def test_sm_90a_records_belong_to_the_sm_90_device_class(tmp_path):
    """Records tuned for ``cuda -arch=sm_90a`` on an H200 (an sm_90 device) are used there
    and for the arch alone; an A100's are refused with a hint that keeps the target."""
    from polytile.autotune import load_best
    from polytile.autotune.device import base_arch, same_class
    from polytile.autotune.records import Record, RecordWriter

    h200 = {"name": "NVIDIA H200", "arch": "sm_90", "compute_capability": "9.0",
            "driver": "580", "cuda": "13.0"}
    a100 = dict(h200, name="NVIDIA A100", arch="sm_80", compute_capability="8.0")
    assert base_arch("sm_90a") == "sm_90" and base_arch("sm_100f") == "sm_100"
    assert base_arch("sm_90") == "sm_90" and same_class(h200, {"arch": "sm_90a"})
    wl = get_template("row_sum").workload((64, 1000))
    log = tmp_path / "r.jsonl"
    with RecordWriter(log) as w:
        w.write(Record(workload=wl.key(), target="cuda -arch=sm_90a",
                       config={"layout": [256, 1]}, costs=[1e-3], device=h200))
    for dev in (h200, {"arch": "sm_90a"}):
        assert load_best(str(log), wl, "cuda -arch=sm_90a", device=dev).config == {
            "layout": [256, 1]}
    with RecordWriter(log) as w:
        w.write(Record(workload=wl.key(), target="cuda -arch=sm_90a",
                       config={"layout": [64, 1]}, costs=[1e-4], device=a100))
    assert load_best(str(log), wl, "cuda -arch=sm_90a", device=h200).config == {
        "layout": [256, 1]}
    only = tmp_path / "a.jsonl"
    with RecordWriter(only) as w:
        w.write(Record(workload=wl.key(), target="cuda -arch=sm_90a",
                       config={"layout": [64, 1]}, costs=[1e-4], device=a100))
    with pytest.raises(TuneError, match='hint: tune on this GPU: polytile tune row_sum '
                       '--target "cuda -arch=sm_90a" --args 64,1000'):
        load_best(str(only), wl, "cuda -arch=sm_90a", device=h200)


# --------------------------------------------------------------------------- on a GPU
def _compute_capability() -> tuple:
    """Device 0's compute capability, asked without creating a context here (the tuner's
    processes own the GPU)."""
    try:
        from cuda.bindings import driver as d
    except ImportError:
        from cuda import cuda as d
    d.cuInit(0)
    _, dev = d.cuDeviceGet(0)
    a = d.CUdevice_attribute
    return tuple(int(d.cuDeviceGetAttribute(getattr(
        a, f"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{w}"), dev)[1]) for w in ("MAJOR", "MINOR"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, target", [("float16", "cuda"), ("bfloat16", "cuda"),
                                           ("float16", "cuda -arch=sm_90a")])
def test_short_tensor_core_tuning_run(dtype, target, tmp_path):
    """A bounded tuning run of the float16 (bfloat16) GEMM with every candidate checked
    against the float64 numpy reference (the default config first: on sm_90a the wgmma
    schedule); then `polytile run` rebuilds and checks the best."""
    if target.endswith("sm_90a") and _compute_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90 device")
    args = (512, 512, 512)
    log = tmp_path / "tc.jsonl"
    opt = MeasureOptions(parallel=min(8, os.cpu_count() or 1), check=True, run_timeout=20)
    res = tune("matmul", args, dtype=dtype, target=target, tuner="random", n_trial=6,
               measure_option=opt, log_file=str(log), timeout_total=60, anchors=())
    assert res.best is not None, res.failures()
    assert not any(r.error == "wrong_result" for r in res.records), [
        r.error_msg for r in res.records if r.error]
    proc = subprocess.run([sys.executable, "-m", "polytile", "run", "matmul", "--args",
                           ",".join(map(str, args)), "--dtype", dtype, "--target", target,
                           "--log", str(log)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and "matches numpy" in proc.stdout, proc.stdout + proc.stderr


def test_swizzle_pad_is_padding_on_wmma_and_a_swizzle_on_mma():
    t, sp = _space((256, 256, 64))
    lim = gpu_limits.for_arch("sm_90")
    base = {"tile": [128, 128, 32, 64, 64], "stages": 2, "frags": "step", "group": 1,
            "pad": "swizzle"}
    assert tct.effective({**base, "isa": "wmma"}, (256, 256, 64), lim)["pad"] == 8
    assert tct.effective({**base, "isa": "mma"}, (256, 256, 64), lim)["pad"] == "swizzle"
    s, tensors = t.instantiate(sp.from_json({**base, "isa": "mma"}), (256, 256, 64),
                               "float16", SM90)
    text = str(polytile.lower(s, tensors, target=SM90))
    assert "swizzle='64B'" in text and "swizzle='128B/256'" in text
