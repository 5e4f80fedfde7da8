"""Tuning on the GPU: GPU templates (spaces, pruning, numerics, nvcc), the GPU runner's
restart logic with a fake runner process, records with device fields and the refusal of
records from another device class, CLI errors. Without a GPU except the ``gpu`` tests.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import polytile
from polytile.autotune import MeasureOptions, apply_history_best, load_best, tune
from polytile.autotune import gpu_limits
from polytile.autotune.data import make_inputs, output_positions
from polytile.autotune.device import device_class, same_class
from polytile.autotune.gpu_runner import GPURunner, buffer_sets
from polytile.autotune.records import Record, RecordWriter, best_records, read_records
from polytile.autotune.template import get_template
from polytile.autotune.templates_gpu import matmul_registers, matmul_tiles
from polytile.errors import TuneError
from polytile.schedule.interpreter import run as interpret

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake_gpu_runner.py")
H200 = {"name": "NVIDIA H200", "arch": "sm_90", "compute_capability": "9.0",
        "driver": "570.86", "cuda": "12.8"}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "arch": "sm_80", "compute_capability": "8.0",
        "driver": "550.54", "cuda": "12.4"}


def _fake(tmp_path, plan: str) -> list:
    return [sys.executable, FAKE, str(tmp_path / "state"), plan]


def _fake_state(tmp_path) -> tuple:
    runs, starts = (int(x) for x in (tmp_path / "state").read_text().split())
    return runs, starts


# --------------------------------------------------------------------------- spaces
def test_matmul_space_holds_the_tutorial_schedule_and_fits_the_limits():
    t = get_template("matmul")
    sp = t.space((4096, 4096, 4096), "float32", "cuda -arch=sm_90")
    # the tutorial's fastest hand schedule (16 x 8 outputs per thread, 2 stages) at 4096^3;
    # the 128 x 128 one where 128 x 256 blocks would not make two waves
    assert sp.default().knob_values() == {"tile": [128, 256, 16, 16, 8], "vec": 4,
                                          "unroll_k": True, "layout": "strided",
                                          "stages": 2, "group": 8}
    mid = t.space((2048, 2048, 2048), "float32", "cuda -arch=sm_90").default().knob_values()
    assert mid["tile"] == [128, 128, 16, 8, 8] and mid["stages"] == 3
    tiles = sp.knobs["tile"]
    lim = gpu_limits.for_arch("sm_90")
    vals = [tiles.get(i).val for i in range(len(tiles))]
    assert [128, 64, 16, 8, 8] in vals and [64, 64, 8, 4, 4] in vals  # beside the tutorial
    for bm, bn, bk, tm, tn in vals:
        threads = (bm // tm) * (bn // tn)
        assert 32 <= threads <= lim.max_threads_per_block
        assert (bm + bn) * bk * 4 <= lim.shared_bytes_per_block
        assert matmul_registers(tm, tn) * threads <= lim.registers_per_block
    # a large GEMM keeps register-tiled configs only (at least 16 outputs per thread)
    assert len(sp) == 2208 * 18 and all(tm * tn >= 16 for _, _, _, tm, tn in vals)
    assert [128, 256, 8, 8, 16] in vals   # larger register tiles than the tutorial's
    assert len(t.space((512, 512, 512), "float32", "cuda")) == 9840 * 18  # x layout, stages, group
    # the CPU schedule is another space under the same name
    assert len(t.space((64, 64, 64), "float32", "llvm")) != len(sp)


def test_records_without_the_new_gemm_knobs_load_as_the_old_kernel(tmp_path):
    # a record written before layout/stages/group existed must load (dispatch, records
    # best) as the schedule it measured: contiguous, no pipeline, no groups
    import warnings

    t = get_template("matmul")
    args, target = (1024, 1024, 1024), "cuda -arch=sm_90"
    sp = t.space(args, "float32", target)
    old = {"tile": [128, 64, 16, 8, 8], "vec": 2, "unroll_k": False}
    cfg = sp.from_json(old)
    assert cfg.knob_values() == {**old, "layout": "contiguous", "stages": 1, "group": 1}
    path = tmp_path / "old.jsonl"
    rec = Record(workload={"template": "matmul", "args": list(args), "dtype": "float32"},
                 target=target, config=old, costs=[1e-3], device=H200)
    with RecordWriter(path) as w:
        w.write(rec)
    [got] = best_records(read_records(path)).values()
    assert got.config == old
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a record that does not fit warns
        with apply_history_best(str(path), target, device=H200):
            s, tensors = t(*args)
    src = polytile.build(s, tensors, target=target).get_source("cu")
    # the old kernel (no cp.async pipeline), not the new default (which has one)
    s2, t2 = t.instantiate(cfg, args, "float32", target)
    assert polytile.build(s2, t2, target=target).get_source("cu") == src
    assert "cp_async" not in src
    s3, t3 = t.instantiate(sp.default(), args, "float32", target)
    assert "cp_async_wait_group(1)" in polytile.build(s3, t3, target=target).get_source("cu")
    # a knob without a legacy value is still required
    with pytest.raises(TuneError, match="do not match"):
        sp.from_json({"vec": 2, "unroll_k": False, "layout": "strided"})


def test_matmul_search_prefers_distinct_fast_configs():
    # the tuners search a part of the space: no duplicate kernels, and on a large float32
    # GEMM only 16-deep k tiles, 2-3 cp.async stages, groups of 8, 16-byte copies
    from polytile.autotune.templates_gpu import gemm_stages, strided_subtiles

    t = get_template("matmul")
    sp = t.space((4096, 4096, 4096), "float32", "cuda -arch=sm_90")
    pref = sp.preferred()
    assert len(sp) == 39744 and len(pref) == 282 and sp.default_index() in pref
    lim = gpu_limits.for_arch("sm_90")
    seen = set()
    for i in pref:
        v = sp.get(i).knob_values()
        bm, bn, bk, tm, tn = v["tile"]
        assert bk == 16 and v["stages"] in (2, 3) and v["group"] == 8 and v["vec"] == 4
        assert v["unroll_k"] and (v["layout"] == "contiguous" or
                                  strided_subtiles(tm, tn) != (1, 1))
        assert gemm_stages(v["stages"], v["tile"], 4, 4, (4096,) * 3, lim) == v["stages"]
        seen.add(json.dumps(v, sort_keys=True))
    assert len(seen) == len(pref)
    # a small GEMM: duplicates only (strided 1-sub-tile layouts, stages that cannot
    # pipeline, groups larger than the tile rows) are left out
    small = t.space((100, 36, 20), "float32", "cuda -arch=sm_90")
    kept = [small.get(i).knob_values() for i in small.preferred()
            if i != small.default_index()]   # the default is always searched
    assert 0 < len(kept) < len(small)
    assert {v["stages"] for v in kept} == {1, 2, 3} and {v["vec"] for v in kept} == {1, 2, 4}
    assert all(v["group"] <= -(-100 // v["tile"][0]) for v in kept)
    assert all(v["stages"] == 1 or v["vec"] == 4 for v in kept)
    # float16 runs on tensor cores: a space of its own (tests/autotune/test_gpu_tc_template)
    f16 = t.space((4096, 4096, 4096), "float16", "cuda -arch=sm_90")
    assert "isa" in f16.knobs and "vec" not in f16.knobs


def test_preferred_matmul_configs_compute_the_definition_and_compile():
    # preferred configs at odd sizes on the interpreter vs numpy, and at a large size
    # through nvcc (the 4096^3 search space's configs, built at 1024^3)
    from helpers import compile_with_nvcc

    t = get_template("matmul")
    args = (37, 29, 23)
    sp = t.space(args, "float32", "cuda")
    rng = random.Random(5)
    small = [i for i in sp.preferred()
             if sp.get(i).knob_values()["tile"][0] * sp.get(i).knob_values()["tile"][1] <= 1024]
    picks = rng.sample(small, 3)
    for i in picks:
        cfg = sp.get(i)
        s, tensors = t.instantiate(cfg, args, "float32", "cuda")
        f = polytile.lower(s, tensors, target="cuda")
        a, b, c = make_inputs(tensors, 1, args)
        c[...] = np.nan
        interpret(f, a, b, c)
        want = a.astype("float64") @ b.astype("float64")
        np.testing.assert_allclose(c, want, rtol=0, atol=1e-5 * np.abs(want).max(),
                                   err_msg=str(cfg.knob_values()))
    big = (1024, 1024, 1024)
    sp = t.space(big, "float32", "cuda -arch=sm_90")
    for i in [sp.default_index()] + rng.sample(sp.preferred(), 2):
        s, tensors = t.instantiate(sp.get(i), big, "float32", "cuda -arch=sm_90")
        src = polytile.build(s, tensors, target="cuda -arch=sm_90").get_source()
        assert "cp_async_wait_group" in src, sp.get(i).knob_values()
        compile_with_nvcc(src)


def test_gpu_spaces_shrink_with_the_device_limits():
    small = gpu_limits.GPULimits("sm_90", max_threads_per_block=128,
                                 shared_bytes_per_block=8192, registers_per_block=8192)
    tiles = matmul_tiles(small)
    assert tiles and [128, 128, 16, 8, 8] not in tiles
    for bm, bn, bk, tm, tn in tiles:
        threads = (bm // tm) * (bn // tn)
        assert threads <= 128 and (bm + bn) * bk * 4 <= 8192
        assert matmul_registers(tm, tn) * threads <= 8192
    t = get_template("softmax")
    with gpu_limits.use(small):  # a bound device wins over the target's -arch table
        sp = t.space((64, 1000), "float32", "cuda -arch=sm_90")
        layouts = [sp.knobs["layout"].get(i).val for i in range(len(sp.knobs["layout"]))]
        assert sorted({lay[0] for lay in layouts}) == [32, 64, 128]
        # shared 2: the row in registers (no shared memory for it)
        assert all(th * rows <= 128 and 8 * th * rows + (sh == 1) * rows * 4000 <= 8192
                   for th, _, rows, sh, _ in layouts)
        mm = len(get_template("matmul").space((64, 64, 64), "float32", "cuda"))
    big = t.space((64, 1000), "float32", "cuda")
    layouts = [big.knobs["layout"].get(i).val for i in range(len(big.knobs["layout"]))]
    # the space is the layouts times the output knob ``stores`` (streaming stores 0/1)
    assert len(big) == 2 * len(layouts) > len(sp) and {lay[1] for lay in layouts} == {2, 4}
    assert max(lay[0] for lay in layouts) == 512 and [256, 4, 1, 1, 0] == big.default().knob_values(
        )["layout"]
    assert mm == len(tiles) * 3 * 2 * 18 < len(get_template("matmul").space((64, 64, 64), "float32",
                                                                        "cuda -arch=sm_90"))


def test_arch_table_and_device_limits():
    assert gpu_limits.for_arch("sm_86").l2_bytes == 6 << 20
    assert gpu_limits.for_arch("sm_100").arch == "sm_100"   # nearest lower entry's numbers
    assert gpu_limits.for_arch("sm_100").max_threads_per_block == 1024
    lim = gpu_limits.from_device({"arch": "sm_90", "max_threads_per_block": 512,
                                  "max_shared_memory_per_block": 227 * 1024,
                                  "max_registers_per_block": 65536, "l2_cache_bytes": 1 << 20})
    assert lim.max_threads_per_block == 512 and lim.l2_bytes == 1 << 20
    assert lim.shared_bytes_per_block == gpu_limits.STATIC_SHARED_BYTES  # static cap
    assert gpu_limits.arch_of("cuda -arch=sm_80 -fast-math") == "sm_80"


def test_buffer_sets_exceed_l2():
    assert buffer_sets(192 << 20, 50 << 20) == 2      # 4096^2 matmul: two sets
    n = buffer_sets(1 << 20, 50 << 20)
    assert n * (1 << 20) >= 2 * (50 << 20)
    assert buffer_sets(16, 50 << 20) == 256            # capped


# --------------------------------------------------------------------------- numerics
SMALL = {"matmul": (19, 23, 13), "softmax": (5, 45), "row_sum": (7, 45), "layernorm": (5, 45),
         "rmsnorm": (3, 44), "batch_matmul": (2, 11, 13, 7)}


def _configs(name, n_random, seed=0):
    t = get_template(name)
    sp = t.space(SMALL[name], "float32", "cuda")
    rng = random.Random(seed)
    # the GEMMs' default (128x128 blocks of 256 threads) is slow to interpret: small ones
    picks = [] if "tile" in sp.knobs else [sp.default_index()]
    while len(picks) < 1 + min(n_random, len(sp) - 1):
        i = rng.randrange(len(sp))
        cfg = sp.get(i).knob_values()
        if "tile" in cfg and cfg["tile"][0] * cfg["tile"][1] > 64 * 64:
            continue  # keep the interpreter's block small
        if i not in picks:
            picks.append(i)
    return t, sp, picks


@pytest.mark.parametrize("name", sorted(SMALL))
def test_gpu_template_configs_compute_the_definition(name):
    """Sampled configs at small odd sizes (ragged tiles), lowered for cuda and run by the
    reference interpreter (races and barriers checked), against numpy in float64."""
    t, sp, picks = _configs(name, 2)
    for i in picks:
        s, tensors = t.instantiate(sp.get(i), SMALL[name], "float32", "cuda")
        f = polytile.lower(s, tensors, target="cuda")
        arrays = make_inputs(tensors, 1, SMALL[name])
        outs = output_positions(tensors)
        interpret(f, *arrays)
        ins = [a.astype("float64") for k, a in enumerate(arrays) if k not in outs]
        want = t.reference(*ins, args=SMALL[name])
        got = arrays[outs[0]]
        assert np.isfinite(got).all(), sp.get(i).knob_values()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1, np.abs(want).max()),
                                   err_msg=str(sp.get(i).knob_values()))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_gpu_template_configs_compile_with_nvcc(name):
    from helpers import compile_with_nvcc

    t, sp, picks = _configs(name, 2, seed=1)
    args = {"matmul": (256, 192, 96), "softmax": (64, 1000), "row_sum": (64, 1000),
            "layernorm": (64, 1000), "rmsnorm": (64, 1000), "batch_matmul": (2, 128, 96, 64)}[name]
    sp = t.space(args, "float32", "cuda -arch=sm_90")
    picks = [sp.default_index()] + random.Random(2).sample(range(len(sp)), min(2, len(sp) - 1))
    for i in picks:
        s, tensors = t.instantiate(sp.get(i), args, "float32", "cuda -arch=sm_90")
        compile_with_nvcc(polytile.build(s, tensors, target="cuda -arch=sm_90").get_source())


# --------------------------------------------------------------------------- runner
def test_tuning_survives_faulting_dying_and_hanging_runners(tmp_path):
    """A runner that dies (SIGSEGV), hangs, or reports a poisoned context is restarted;
    each such trial is recorded failed with what happened and tuning goes on."""
    log = tmp_path / "gpu.jsonl"
    opt = MeasureOptions(parallel=2, run_timeout=3.0,
                         runner_command=_fake(tmp_path, "ok,die,ok,hang,fault,wrong"))
    res = tune("row_sum", (37, 45), target="cuda", tuner="random", n_trial=6,
               measure_option=opt, log_file=str(log), anchors=())
    codes = [r.error for r in res.records]
    assert codes[:6] == [None, "runtime_error", None, "timeout", "runtime_error",
                         "wrong_result"]
    assert "died" in res.records[1].error_msg and "SIGSEGV" in res.records[1].error_msg
    assert "no answer within 3 s" in res.records[3].error_msg
    assert "ILLEGAL_ADDRESS" in res.records[4].error_msg
    assert "restarted" in res.records[4].error_msg
    assert res.runner_restarts == 3 and res.best is not None and res.n_trials == 6
    runs, starts = _fake_state(tmp_path)
    # then best and default, 4 rounds each after untimed rounds for a second (warm-up)
    assert runs >= 6 + 2 * 5 and (runs - 6) % 2 == 0 and starts == 4
    assert res.target == "cuda -arch=sm_90"
    recs = read_records(log)
    assert all(r.device["name"] == "Fake GPU" and r.device["cuda"] == "13.0" for r in recs)


def test_total_budget_holds_with_a_hanging_kernel(tmp_path):
    opt = MeasureOptions(parallel=1, run_timeout=2.0,
                         runner_command=_fake(tmp_path, "hang,hang,hang,hang,hang,hang"))
    res = tune("row_sum", (37, 45), target="cuda", tuner="random", n_trial=6,
               measure_option=opt, timeout_total=5.0, anchors=())
    assert res.stop_reason.startswith("time budget") or res.n_trials < 6
    assert res.wall_s < 20 and all(r.error == "timeout" for r in res.records)


def test_runner_that_cannot_start_is_a_clear_error(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import sys\nfrom multiprocessing.connection import Connection\n"
                      "c = Connection(int(sys.argv[1])); c.recv()\n"
                      "c.send(('error', 'DeviceNotFoundError: no CUDA device', ''))\n")
    r = GPURunner({"template": "row_sum", "args": [4, 4]}, [sys.executable, str(script)])
    with pytest.raises(TuneError, match=r"(?s)cannot time candidates on the GPU: "
                       r"DeviceNotFoundError: no CUDA device.*hint: tune on the GPU machine"):
        r.start()
    script.write_text("import os\nos._exit(7)\n")
    with pytest.raises(TuneError, match=r"the GPU runner failed to start: .*exited \(code 7\)"):
        r.start()


# --------------------------------------------------------------------------- records
def _rec(device, cost, config, target="cuda -arch=sm_90", args=(64, 1000)):
    return Record(workload={"template": "row_sum", "args": list(args), "dtype": "float32"},
                  target=target, config=config, costs=[cost], device=device)


def test_records_carry_the_device_and_round_trip(tmp_path):
    log = tmp_path / "r.jsonl"
    with RecordWriter(log) as w:
        w.write(_rec(H200, 1e-3, {"layout": [256, 1]}))
        w.write(_rec(A100, 5e-4, {"layout": [64, 1]}, "cuda -arch=sm_80"))
    recs = read_records(log)
    assert recs[0].device == H200 and json.loads(log.read_text().splitlines()[0])["device"] \
        == H200
    best = best_records(recs)
    assert {k[2] for k in best} == {"NVIDIA H200 (sm_90)", "NVIDIA A100-SXM4-80GB (sm_80)"}
    assert device_class({"arch": "sm_90"}) == "any sm_90" and device_class(None) == ""
    assert same_class(H200, {"arch": "sm_90"}) and not same_class(A100, {"arch": "sm_90"})
    assert same_class(None, H200)  # CPU and older records
    from conftest import cuda_device_status
    from polytile.autotune.device import current_class

    assert current_class("llvm") is None
    if not cuda_device_status()[0]:
        assert current_class("cuda") == {"arch": "sm_90"}
        assert current_class("cuda -arch=sm_80") == {"arch": "sm_80"}


def test_dispatch_selects_by_device_class_and_refuses_another(tmp_path):
    log = tmp_path / "r.jsonl"
    with RecordWriter(log) as w:
        w.write(_rec(H200, 1e-3, {"layout": [256, 1]}))
        w.write(_rec(A100, 5e-4, {"layout": [64, 1]}, "cuda -arch=sm_80"))
    # the faster A100 record is not picked on an H200
    rec = load_best(str(log), get_template("row_sum").workload((64, 1000)), "cuda",
                    device=H200)
    assert rec.config == {"layout": [256, 1]}
    with apply_history_best(str(log), "cuda", device=H200):
        s, tensors = get_template("row_sum")(64, 1000)
    assert "threadIdx.x" in str(polytile.lower(s, tensors, target="cuda"))
    # only A100 records: refused, naming both classes
    only = tmp_path / "a100.jsonl"
    with RecordWriter(only) as w:
        w.write(_rec(A100, 5e-4, {"layout": [64, 1]}, "cuda -arch=sm_80"))
    with pytest.raises(TuneError, match=r"(?s)the records of row_sum\(64, 1000\) float32 on "
                       r"'cuda' were measured on NVIDIA A100-SXM4-80GB \(sm_80\), not on this "
                       r"device class \(NVIDIA H200 \(sm_90\)\).*hint: tune on this GPU: "
                       r"polytile tune row_sum --target cuda --args 64,1000"):
        load_best(str(only), get_template("row_sum").workload((64, 1000)), "cuda",
                  device=H200)
    # without a GPU the class is the target's -arch (sm_90 without one)
    with pytest.raises(TuneError, match=r"not on this device class \(any sm_90\)"):
        load_best(str(only), get_template("row_sum").workload((64, 1000)), "cuda",
                  device={"arch": "sm_90"})
    # an explicit -arch only matches its own records: none here, the default config is used
    assert load_best(str(only), get_template("row_sum").workload((64, 1000)),
                     "cuda -arch=sm_90", device={"arch": "sm_90"}) is None
    assert load_best(str(only), get_template("row_sum").workload((64, 1000)),
                     "cuda -arch=sm_80", device={"arch": "sm_80"}).config == {"layout": [64, 1]}


def test_cli_records_best_shows_the_device(tmp_path):
    log = tmp_path / "r.jsonl"
    with RecordWriter(log) as w:
        w.write(_rec(H200, 1e-3, {"layout": [256, 1]}))
    out = subprocess.run([sys.executable, "-m", "polytile", "records", "best", str(log)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "NVIDIA H200 (sm_90)" in out.stdout


# --------------------------------------------------------------------------- CLI
def _cli(*argv, env=None, timeout=300):
    e = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, "-m", "polytile", *argv], capture_output=True,
                       text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout, p.stderr


def test_cli_tune_cuda_with_a_fake_runner(tmp_path):
    log = tmp_path / "c.jsonl"
    env = {"POLYTILE_GPU_RUNNER": " ".join(_fake(tmp_path, "ok,fault"))}
    rc, out, err = _cli("tune", "row_sum", "--args", "37,45", "--target", "cuda", "--trials",
                        "4", "--log", str(log), "--quiet", "--parallel", "1", env=env)
    assert rc == 0, err
    assert "device          Fake GPU (sm_90, driver 999.1, CUDA 13.0)" in out
    assert "1 failed (1 runtime_error)" in out and "restarted 1 times" in out
    assert "target          cuda -arch=sm_90" in out


def test_cli_templates_lists_targets():
    rc, out, _ = _cli("templates")
    assert rc == 0
    lines = {ln.split()[0]: ln.split()[1] for ln in out.splitlines()[2:]}
    assert lines["matmul"] == "llvm,cuda" and lines["row_sum"] == "cuda"
    assert lines["conv2d_nchw"] == "llvm,cuda" and lines["layernorm"] == "llvm,cuda"
    assert lines["conv2d_nhwc"] == "cuda"
    assert lines["batch_matmul"] == "llvm,cuda"


@pytest.mark.parametrize("argv, text", [
    (["tune", "row_sum", "--target", "llvm"], "template 'row_sum': has no schedule for target "
     "kind 'llvm' (it has cuda)"),
    (["tune", "matmul", "--target", "cuda -arch=sm90"], "bad GPU architecture 'sm90'"),
    (["tune", "matmul", "--target", "cuda -arch=sm_90 -mcpu=x"], "polytile: error: target"),
])
def test_cli_gpu_argument_errors(argv, text):
    rc, _, err = _cli(*argv)
    assert rc == 1 and text in err, err


def test_cli_tune_cuda_without_a_device(tmp_path):
    from conftest import cuda_device_status

    if cuda_device_status()[0]:
        pytest.skip("this machine has a GPU")
    rc, _, err = _cli("tune", "row_sum", "--args", "37,45", "--target", "cuda", "--log",
                      str(tmp_path / "x.jsonl"))
    assert rc == 1 and "cannot time candidates on the GPU" in err
    assert "hint: tune on the GPU machine" in err


# --------------------------------------------------------------------------- on a GPU
GPU_RUNS = {"matmul": ((512, 512, 512), 8), "softmax": ((1024, 4096), 4),
            "row_sum": ((1024, 4096), 6), "layernorm": ((1024, 4096), 4),
            "rmsnorm": ((1024, 4096), 4),
            "batch_matmul": ((8, 256, 256, 256), 6)}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_RUNS))
def test_short_gpu_tuning_run(name, tmp_path):
    """A bounded tuning run on the GPU with every candidate checked against numpy; then
    `polytile run --target cuda` builds the best record, checks and times it."""
    args, trials = GPU_RUNS[name]
    log = tmp_path / "gpu.jsonl"
    opt = MeasureOptions(parallel=min(8, os.cpu_count() or 1), check=True, run_timeout=20)
    res = tune(name, args, target="cuda", tuner="random", n_trial=trials, measure_option=opt,
               log_file=str(log), timeout_total=60, anchors=())
    assert res.best is not None, res.failures()
    assert not any(r.error == "wrong_result" for r in res.records), [
        r.error_msg for r in res.records if r.error]
    assert res.device and res.device["arch"].startswith("sm_")
    rc, out, err = _cli("run", name, "--args", ",".join(map(str, args)), "--target", "cuda",
                        "--log", str(log), timeout=240)
    assert rc == 0 and "matches numpy" in out, out + err


@pytest.mark.gpu
def test_real_faulting_and_hanging_kernels_restart_the_runner():
    """On the GPU: a kernel writing far out of bounds (CUDA_ERROR_ILLEGAL_ADDRESS, a lost
    context) and a kernel that never ends each fail their trial and restart the runner;
    the next kernel is timed and checked as usual."""
    from polytile.targets.cuda.compile import compile_cuda
    from polytile.targets.cuda.library import metadata

    args = (64, 1000)
    t = get_template("row_sum")
    sp = t.space(args, "float32", "cuda")
    s, tensors = t.instantiate(sp.default(), args, "float32", "cuda")
    mod = polytile.build(s, tensors, target="cuda")
    meta, src = metadata(mod), mod.get_source()
    store = "B[blockIdx_x] = 0.0f;"
    assert store in src
    fault = compile_cuda(src.replace(store, "B[blockIdx_x + (1LL << 38)] = 0.0f;"), mod.arch)
    # clock64() reads a volatile register: the compiler cannot drop this loop (a loop on a
    # volatile local ended on the H200, C++'s forward-progress rule let it go)
    hang = compile_cuda(src.replace(store, "for (long long t0 = clock64(); clock64() >= t0;) {} "
                                    + store), mod.arch)
    r = GPURunner({"template": "row_sum", "args": list(args), "dtype": "float32", "seed": 0})
    opt = {"min_repeat_ms": 1.0, "min_repeats": 3, "max_repeats": 5, "budget_s": 0.05}
    try:
        info = r.start()
        assert info["arch"].startswith("sm_") and info["name"]
        assert r.run(1, mod.image, meta, opt, 60)[0] is None
        code, msg, _, _ = r.run(2, fault, meta, opt, 60)
        assert code == "runtime_error" and "ILLEGAL_ADDRESS" in msg and r.restarts == 1, msg
        code, msg, costs, _ = r.run(3, mod.image, meta, dict(opt, check=True), 60)
        assert code is None and costs, msg
        code, msg, _, _ = r.run(4, hang, meta, opt, 10)
        assert code == "timeout" and r.restarts == 2, msg
        code, msg, costs, _ = r.run(5, mod.image, meta, dict(opt, check=True), 60)
        assert code is None and costs, msg
    finally:
        r.close()


# --------------------------------------------------------------------------- runner logic
def test_runner_checks_rotates_and_times_on_the_emulated_driver(tmp_path, monkeypatch):
    """The runner's own code (loading a cubin from plain data, poisoned outputs, the check
    against numpy on the first trial of each kernel, buffer sets, event timing) on the
    host emulation of the driver."""
    sys.path.insert(0, os.path.join(HERE, "..", "targets"))
    import cuda_emulator

    from polytile.autotune import gpu_runner
    from polytile.targets.cuda.library import metadata

    args = (37, 45)
    t = get_template("row_sum")
    sp = t.space(args, "float32", "cuda")
    with cuda_emulator.installed(tmp_path, monkeypatch):
        s, tensors = t.instantiate(sp.default(), args, "float32", "cuda")
        mod = polytile.build(s, tensors, target="cuda")
        meta = metadata(mod)
        r = gpu_runner._Runner({"template": "row_sum", "args": list(args), "dtype": "float32",
                                "seed": 0})
        assert r.info["name"] == "Emulated H100" and r.info["arch"] == "sm_90"
        opt = {"min_repeat_ms": 1.0, "min_repeats": 3, "max_repeats": 3, "budget_s": 0.01,
               "warmup": 1}
        ok = r.run(1, mod.image, meta, opt)
        assert ok[2] is None and len(ok[4]) == 3 and ok[5]["number"] >= 1, ok
        assert len(r.sets[next(iter(r.sets))]) == 256   # 2 x L2 of tiny sets: the cap
        wrong = mod.image.replace(b"+ A[", b"- A[")
        assert wrong != mod.image
        bad = r.run(2, wrong, meta, opt)
        assert bad[2] == "wrong_result" and "differs from the numpy reference" in bad[3]
        # a kernel already checked is not checked again, unless asked
        assert r.run(3, mod.image, meta, opt)[2] is None
        assert r.run(4, wrong, meta, dict(opt, check=True))[2] == "wrong_result"
        garbage = r.run(5, b"EMU:not C", meta, opt)
        assert garbage[2] == "runtime_error" and garbage[6] is False


def test_gpu_features_see_threads_shared_memory_and_occupancy():
    import math

    from polytile.autotune.features import GPU_OFFSET, N_FEATURES, N_GLOBAL, extract_features
    from polytile.schedule.pipeline import lower

    def feats(knobs, target):
        t = get_template("matmul")
        sp = t.space((256, 256, 256), "float32", target)
        cfg = sp.default() if knobs is None else sp.from_json(knobs)
        s, tensors = t.instantiate(cfg, (256, 256, 256), "float32", target)
        f = extract_features(lower(s, tensors, target=target, stop_after="storage_flattening"))
        assert len(f) == N_FEATURES
        g = N_FEATURES - N_GLOBAL + GPU_OFFSET
        return f[g:g + 6]

    assert feats(None, "llvm") == [0.0] * 6
    # the contiguous 8x8 tiles without a pipeline (a record from before layout/stages/group)
    threads, blocks, shared, local, occ, stride = feats(
        {"tile": [128, 128, 16, 8, 8], "vec": 4, "unroll_k": True}, "cuda")
    assert threads == pytest.approx(math.log2(257)) and blocks == pytest.approx(math.log2(5))
    assert shared == pytest.approx(math.log2(1 + (128 + 128) * 16 * 4))   # A and B tiles
    assert local == pytest.approx(math.log2(1 + 64 * 4))                  # 8x8 accumulators
    assert occ == pytest.approx(0.25)   # 88 registers x 256 threads: 2 blocks of 2048 threads
    small = feats({"tile": [32, 32, 8, 2, 2], "vec": 1, "unroll_k": False}, "cuda")
    assert small[0] == pytest.approx(math.log2(257)) and small[4] > occ


def test_cli_run_cuda_refuses_records_of_another_gpu(tmp_path):
    log = tmp_path / "a100.jsonl"
    with RecordWriter(log) as w:
        w.write(_rec(A100, 5e-4, {"layout": [64, 1]}, "cuda -arch=sm_80"))
    rc, out, err = _cli("run", "row_sum", "--args", "64,1000", "--target", "cuda", "--log",
                        str(log))
    assert rc == 1 and "were measured on NVIDIA A100-SXM4-80GB (sm_80), not on this device " \
        "class" in err and "hint: tune on this GPU" in err, err


def test_cli_run_cuda_without_a_device(tmp_path):
    from conftest import cuda_device_status

    if cuda_device_status()[0]:
        pytest.skip("this machine has a GPU")
    log = tmp_path / "h.jsonl"
    with RecordWriter(log) as w:
        w.write(_rec({"name": "", "arch": "sm_90", "compute_capability": "9.0", "driver": "",
                      "cuda": ""}, 1e-3, {"layout": [1, 32]}))
    rc, out, err = _cli("run", "row_sum", "--args", "64,1000", "--target", "cuda", "--log",
                        str(log))
    assert "config          layout=[1, 32]" in out
    assert rc == 1 and "no CUDA device was found" in err, err


def test_variants_do_not_depend_on_import_order():
    """Importing the GPU templates first still makes the CPU schedule the one used without
    a target (a registration-order bug once made CPU tuning build the GPU schedule)."""
    code = ("from polytile.autotune.templates_gpu import matmul_tiles\n"
            "from polytile.autotune.template import get_template\n"
            "t = get_template('matmul')\n"
            "k = t.space((64, 64, 64)).knobs\n"
            "print(t.targets, sorted(t.variants), 'tile' in k, 'tile_i' in k)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    # the CPU space (tile_i, ...), not the GPU one (tile)
    assert out.stdout.strip() == "('llvm',) ['cuda'] False True", out.stderr


def test_resume_on_the_gpu_keeps_to_the_device_class(tmp_path):
    """--resume continues a GPU run from its records; records of another GPU in the same
    file are neither resumed nor learned from."""
    log = tmp_path / "r.jsonl"
    h100 = dict(H200, name="NVIDIA H100 80GB HBM3")   # same target, another GPU
    with RecordWriter(log) as w:
        w.write(_rec(h100, 1e-6, {"layout": [1, 32]}, "cuda -arch=sm_90", (37, 45)))
    opt = MeasureOptions(parallel=1, runner_command=_fake(tmp_path, ""))
    first = tune("row_sum", (37, 45), target="cuda", tuner="random", n_trial=2,
                 measure_option=opt, log_file=str(log))
    assert first.n_trials == 2 and first.resumed == 0
    again = tune("row_sum", (37, 45), target="cuda", tuner="random", n_trial=4,
                 measure_option=opt, log_file=str(log), resume=True)
    assert again.resumed == 2 and again.n_trials == 4
    assert all(r.device["name"] == "Fake GPU" for r in again.records)
    assert again.best.cost > 1e-6   # the H100 record's 1 us was not taken


def test_only_plain_data_crosses_to_the_runner(tmp_path):
    from polytile.autotune.gpu_runner import is_plain

    assert is_plain(("run", 1, b"\x00cubin", {"kernels": [{"grid": [1, 1, 1]}]}, {"x": 1.5}))
    assert not is_plain(("run", 1, b"", {"f": len}, {}))
    assert not is_plain({1: "non-str key"}) and not is_plain(np.zeros(2))
    r = GPURunner({"template": "row_sum", "args": [4, 4]}, _fake(tmp_path, ""))
    try:
        with pytest.raises(TuneError, match="expected plain data"):
            r.run(1, b"x", {"format": "polytile-function", "hook": print}, {}, 10)
    finally:
        r.close()
