"""The tuner's figures: one timing routine (median, IQR spread, one re-measurement), anchors
timed alternately with the configs, exclusive runs, the records' new fields (old files still
read), and libgomp's wait policy set before it loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from polytile.autotune import (LocalMeasurer, MeasureOptions, get_template, read_records,
                               tune)
from polytile.autotune.anchors import AnchorProcess, available
from polytile.autotune.records import Record, RecordWriter
from polytile.autotune.timing import Timing, plan, quantile, time_calls, time_function
from polytile.errors import TuneError
from polytile.targets.llvm.runtime import omp_environment

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTY = os.path.join(HERE, "faulty_template.py") + ":faulty"


# ------------------------------------------------------------------ timing


@pytest.mark.parametrize("xs", [[3.0], [1.0, 2.0], [5.0, 1.0, 4.0, 2.0, 3.0],
                                [0.1, 7.0, 2.5, 2.5, 9.0, 1.0, 3.3]])
@pytest.mark.parametrize("q", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_quantile_matches_numpy(xs, q):
    assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))


def test_plan_gives_fast_kernels_more_repeats():
    n_fast, r_fast = plan(1e-6, min_repeat_ms=2, min_repeats=3, max_repeats=30, budget_s=0.1)
    n_slow, r_slow = plan(0.05, min_repeat_ms=2, min_repeats=3, max_repeats=30, budget_s=0.1)
    assert n_fast == 2000 and r_fast == 30       # 2 ms repeats, capped at 30
    assert n_slow == 1 and r_slow == 3           # one call lasts 50 ms: the least repeats
    assert plan(1e-3, min_repeat_ms=10, budget_s=0.1, min_repeats=3) == (10, 10)
    assert plan(1e-3, min_repeat_ms=0, number=7, budget_s=0.0, min_repeats=2) == (7, 2)


def _fake(per_call):
    """run(n) on a fake clock: the k-th repeat costs per_call[k] seconds per call."""
    calls = []

    def run(n):
        k = len(calls)
        calls.append(n)
        return per_call[min(k, len(per_call) - 1)] * n

    return run, calls


def test_time_calls_median_and_spread():
    run, calls = _fake([1e-3, 1e-3, 1.1e-3, 1.0e-3, 0.9e-3, 1.2e-3, 1.0e-3])
    t = time_calls(run, min_repeat_ms=5, min_repeats=6, max_repeats=6, budget_s=0.0)
    assert calls[0] == 1 and all(n == 5 for n in calls[1:]) and len(calls) == 7
    assert t.costs == pytest.approx((1e-3, 1.1e-3, 1e-3, 0.9e-3, 1.2e-3, 1e-3))
    assert t.median == pytest.approx(1e-3) and not t.remeasured
    assert t.iqr == pytest.approx(np.subtract(*np.percentile(t.costs, [75, 25])))
    assert t.spread == pytest.approx(t.iqr / 1e-3) and t.spread < 0.10
    assert t.min == pytest.approx(0.9e-3) and t.max == pytest.approx(1.2e-3)


def test_a_noisy_measurement_is_made_once_more_and_the_quieter_kept():
    noisy = [1e-3, 1e-3, 3e-3, 1e-3, 3e-3]          # first call, then a spread of 200 %
    quiet = [1e-3, 1.01e-3, 1e-3, 0.99e-3]
    run, calls = _fake(noisy + quiet)
    t = time_calls(run, min_repeat_ms=0, min_repeats=4, max_repeats=4, budget_s=0.0)
    assert len(calls) == 1 + 4 + 4 and t.remeasured
    assert t.costs == pytest.approx(tuple(quiet)) and t.spread < 0.10
    # never more than once, and not at all below the threshold or when told not to
    run, calls = _fake(noisy + noisy)
    t = time_calls(run, min_repeat_ms=0, min_repeats=4, max_repeats=4, budget_s=0.0)
    assert len(calls) == 9 and t.remeasured and t.spread > 0.10
    run, calls = _fake(noisy)
    t = time_calls(run, min_repeat_ms=0, min_repeats=4, max_repeats=4, budget_s=0.0,
                   remeasure=False)
    assert len(calls) == 5 and not t.remeasured
    with pytest.raises(ValueError, match="min_repeats"):
        time_calls(run, min_repeats=0)


def test_time_function_and_json_round_trip():
    a = np.random.default_rng(0).random(1000)
    t = time_function(lambda: np.sort(a), min_repeat_ms=1, min_repeats=3, budget_s=0.02)
    assert len(t.costs) >= 3 and 0 < t.min <= t.median <= t.max and t.number >= 1
    back = Timing.from_json(json.loads(json.dumps(t.to_json())))
    assert back.costs == t.costs and back.number == t.number
    assert back.spread == pytest.approx(t.spread)
    both = Timing.pooled([t, Timing((1.0,), remeasured=True)])
    assert len(both.costs) == len(t.costs) + 1 and both.remeasured


# ------------------------------------------------------------------ records


def test_old_records_still_load_and_new_fields_round_trip(tmp_path):
    old = {"schema": 1, "polytile": "0.1.0", "workload": {"template": "matmul",
           "args": [8, 8, 8], "dtype": "float32"}, "target": "llvm", "config": {"x": 1},
           "costs": [1.0, 2.0, 3.0, 4.0, 5.0], "error": None, "timestamp": 1.0}
    log = tmp_path / "r.jsonl"
    log.write_text(json.dumps(old) + "\n")
    (r,) = read_records(log)
    assert r.threads == 0 and r.phase == "search" and not r.remeasured and r.summary is None
    assert r.spread is None and r.spread_value == pytest.approx(2.0 / 3.0)  # IQR 2 / median 3
    new = Record(workload=old["workload"], target="llvm", config={"x": 2}, costs=[1.0, 1.0],
                 threads=2, spread=0.0, remeasured=True)
    summ = Record(workload=old["workload"], target="llvm", config={"x": 2}, costs=[1.0],
                  threads=2, spread=0.0, phase="summary", summary={"noise": 0.01})
    with RecordWriter(log) as w:
        w.write(new)
        w.write(summ)
    recs = read_records(log)
    assert [x.config["x"] for x in recs] == [1, 2]       # the summary is not a trial
    assert recs[1].threads == 2 and recs[1].remeasured and recs[1].spread == 0.0
    every = read_records(log, summaries=True)
    assert every[-1].phase == "summary" and every[-1].summary == {"noise": 0.01}


# ------------------------------------------------------------------ measurement


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _continued(pid: int) -> bool:
    """SIGCONT is delivered asynchronously: wait up to a second for the state to change."""
    deadline = time.time() + 1
    while _state(pid) == "T" and time.time() < deadline:
        time.sleep(0.001)
    return _state(pid) != "T"


def test_a_run_is_exclusive_other_workers_are_stopped():
    t = get_template("matmul")
    wl = t.workload((16, 16, 16))
    with LocalMeasurer(wl, "llvm", MeasureOptions(parallel=2, min_repeat_ms=1,
                                                  budget_s=0.01)) as m:
        a, b = (p.proc.pid for p in m._procs)
        with m._exclusive(a) as stopped:
            assert stopped == [b] and _state(b) == "T" and _state(a) != "T"
        assert _continued(b)
        with pytest.raises(RuntimeError):
            with m._exclusive(None):
                assert _state(a) == "T" and _state(b) == "T"
                raise RuntimeError
        assert _continued(a) and _continued(b)  # continued even after an error
        knobs = t.space(wl.args).default().knob_values()
        before = m.paused
        (res,) = m.measure([(0, knobs)])
        assert res.ok and m.paused == before + 1 and res.timing is not None
        assert res.costs == list(res.timing.costs) and res.spread >= 0


def test_compare_alternates_configs_and_anchors():
    t = get_template("matmul")
    wl = t.workload((48, 40, 32))
    sp = t.space(wl.args)
    items = [("best", sp.default().knob_values()), ("other", sp.get(7).knob_values())]
    # (on the CPU clock: the worker's and the anchor's timing loops take it too)
    with LocalMeasurer(wl, "llvm", MeasureOptions(parallel=2, min_repeat_ms=1,
                                                  budget_s=0.02, clock="cpu")) as m:
        cmp = m.compare(items, ("numpy",), rounds=3)
        assert not m._anchors  # the anchor process is gone
    ab, ba = ["best", "other", "numpy"], ["numpy", "other", "best"]
    # 3 rounds, or 6 when they left a spread past 10 % (on a busy machine)
    assert cmp.order == ([ab, ba, ab, ba, ab, ba] if cmp.extended else [ab, ba, ab])
    for name in ("best", "other", "numpy"):
        tm = cmp.timing(name)
        assert tm is not None and len(tm.costs) >= len(cmp.rounds) * 3 and tm.median > 0
    r = cmp.ratio("numpy", "best")
    assert r == pytest.approx(cmp.timing("numpy").median / cmp.timing("best").median)
    assert cmp.ratio_spread("numpy") >= 0 and cmp.noise >= 0
    d = cmp.to_json()
    assert d["rounds"] == len(cmp.rounds) and d["extended"] == cmp.extended
    assert set(d["timings"]) == {"best", "other", "numpy"}
    assert set(d["ratios"]) == {"numpy/best", "numpy/other"}


def test_compare_records_a_failing_config_and_goes_on():
    t = get_template(FAULTY)
    wl = t.workload((16,))
    ok = {"mode": "ok", "tile": [-1, 8]}
    bad = {"mode": "crash_run", "tile": [-1, 8]}
    with LocalMeasurer(wl, "llvm", MeasureOptions(parallel=1, min_repeat_ms=1,
                                                  budget_s=0.01, run_timeout=5)) as m:
        cmp = m.compare([("ok", ok), ("bad", bad)], anchors=(), rounds=2)
        # an anchor that cannot start is an error of the comparison, not an exception
        cmp2 = m.compare([("ok", ok)], anchors=("numpy",), rounds=1)
    assert cmp2.errors["numpy"][0] == "anchor_error" and "no numpy reference" in \
        cmp2.errors["numpy"][1]
    assert cmp2.timing("ok") is not None and cmp2.order in ([["ok"]], [["ok"], ["ok"]])
    assert cmp.errors["bad"][0] == "runtime_error" and "SIGSEGV" in cmp.errors["bad"][1]
    assert cmp.timing("ok") is not None and cmp.timing("bad") is None
    assert cmp.order[:2] == [["ok", "bad"], ["ok"]]
    assert all(o == ["ok"] for o in cmp.order[2:]) and len(cmp.order) in (2, 4)


def test_anchor_process():
    t = get_template("softmax")
    wl = t.workload((8, 24))
    assert available(t, wl.args)[0] == "numpy"
    a = AnchorProcess("numpy", wl, threads=1)
    try:
        tm = a.time({"min_repeat_ms": 1, "min_repeats": 3, "budget_s": 0.01})
        assert len(tm.costs) >= 3 and tm.median > 0
        tm = a.time({"min_repeat_ms": 1, "min_repeats": 3, "budget_s": 0.01, "clock": "cpu"})
        assert len(tm.costs) >= 3 and tm.median > 0
    finally:
        a.close()
    with pytest.raises(TuneError, match="anchor: the magic anchor of softmax.*unknown anchor"):
        AnchorProcess("magic", wl)
    no_ref = get_template(FAULTY)
    assert "numpy" not in available(no_ref, (16,))
    if "torch" not in sys.modules:
        try:
            import torch  # noqa: F401
        except ImportError:
            assert "torch" not in available(t, wl.args)


def test_the_numpy_anchor_writes_into_a_preallocated_output_as_the_kernels_do():
    # one definition of a timed call (module docstring of .timing): numpy's matmul is
    # timed as np.matmul(a, b, out=c), not with an allocation the kernel does not make
    from polytile.autotune.data import (make_inputs, measure_numpy, output_positions,
                                        reference_call)

    t = get_template("matmul")
    _, tensors = t.instantiate(t.space((5, 7, 3)).default(), (5, 7, 3))
    arrays = make_inputs(tensors, 1, (5, 7, 3))
    outs = output_positions(tensors)
    call = reference_call(t, arrays, outs, (5, 7, 3))
    assert call.func is np.matmul  # numpy's function itself, no wrapper of ours per call
    assert call() is arrays[2]
    np.testing.assert_allclose(arrays[2], arrays[0] @ arrays[1], rtol=1e-5)
    sm = get_template("softmax")  # a reference without out=: a new array each call
    _, tensors = sm.instantiate(sm.space((3, 4)).default(), (3, 4))
    arrays = make_inputs(tensors, 1, (3, 4))
    got = reference_call(sm, arrays, output_positions(tensors), (3, 4))()
    assert got is not arrays[1] and np.isnan(arrays[1]).all() and got.shape == (3, 4)
    assert reference_call(get_template(FAULTY), [], [1], (16,)) is None
    times: list = []
    med = measure_numpy("matmul", (8, 8, 8), min_time=0.01, times=times)
    assert len(times) >= 5 and min(times) <= med <= max(times)


def test_the_cpu_clock_ignores_time_the_process_does_not_run():
    # clock="cpu" (a loaded machine): a call that sleeps 2 ms costs its CPU time only
    from polytile.autotune.timing import CLOCKS, clock_of

    kw = dict(min_repeat_ms=2, min_repeats=3, max_repeats=3, remeasure=False)
    wall = time_function(lambda: time.sleep(0.002), **kw)
    cpu = time_function(lambda: time.sleep(0.002), clock_of({"clock": "cpu"}), **kw)
    assert wall.median >= 0.0019 and cpu.median < 0.001 and clock_of({}) is CLOCKS["wall"]
    with pytest.raises(ValueError, match="unknown clock 'tsc'"):
        clock_of({"clock": "tsc"})
    with pytest.raises(TuneError, match="clock='tsc'"):
        MeasureOptions(clock="tsc")
    assert MeasureOptions(clock="cpu").timing()["clock"] == "cpu"


def test_tune_ends_with_a_comparison_and_a_summary_record(tmp_path):
    log = tmp_path / "mm.jsonl"
    opt = MeasureOptions(parallel=2, repeat=2, min_repeat_ms=1, budget_s=0.02)
    res = tune("matmul", (24, 16, 8), tuner="random", n_trial=3, measure_option=opt,
               log_file=str(log), anchors=("numpy",), compare_rounds=2, seed=1)
    cmp = res.comparison
    assert cmp is not None and len(cmp.rounds) == (4 if cmp.extended else 2)
    assert cmp.timing("best") is not None
    assert cmp.ratio("numpy") > 0
    nz = res.noise()
    # (a trial stopped after its warm-up as too slow has one cost and no spread)
    assert 1 <= nz["trials"] <= 3 and 0 <= nz["median_spread"] <= nz["max_spread"]
    every = read_records(log, summaries=True)
    assert [r.phase for r in every] == ["search"] * 3 + ["summary"]
    summ = every[-1]
    assert summ.config == res.best.config and summ.costs == list(cmp.timing("best").costs)
    assert summ.summary["search"]["trials"] == 3 and "numpy/best" in summ.summary["ratios"]
    # a resumed run counts the trials only, not the summary
    res2 = tune("matmul", (24, 16, 8), tuner="random", n_trial=4, measure_option=opt,
                log_file=str(log), resume=True, seed=2)
    assert res2.resumed == 3 and res2.n_trials == 4 and res2.comparison is None


# ------------------------------------------------------------------ OpenMP wait policy


def test_omp_wait_policy_is_passive_unless_the_user_chose():
    env = {}
    assert omp_environment(env) == {"OMP_WAIT_POLICY": "passive"}
    assert env == {"OMP_WAIT_POLICY": "passive"}
    for user in ({"OMP_WAIT_POLICY": "active"}, {"GOMP_SPINCOUNT": "1000"}):
        env = dict(user)
        assert omp_environment(env) == {} and env == user
    code = ("import os; from polytile.targets.llvm.runtime import set_num_threads; "
            "set_num_threads(1); print(os.environ.get('OMP_WAIT_POLICY'))")
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "passive", out.stderr
    out = subprocess.run([sys.executable, "-c", code], env={**clean, "OMP_WAIT_POLICY":
                         "active"}, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "active", out.stderr


@pytest.mark.parametrize("max_spread, rounds", [(0.0, 4), (1e9, 2)])
def test_a_noisy_comparison_gets_as_many_rounds_again_once(max_spread, rounds):
    wl = get_template(FAULTY).workload((16,))
    opt = MeasureOptions(parallel=1, min_repeat_ms=1, budget_s=0.01, max_spread=max_spread)
    with LocalMeasurer(wl, "llvm", opt) as m:
        cmp = m.compare([("ok", {"mode": "ok", "tile": [-1, 8]})], anchors=(), rounds=2)
    assert len(cmp.rounds) == rounds and cmp.extended == (rounds == 4)


def test_warmup_turns_of_a_comparison_are_not_counted():
    wl = get_template(FAULTY).workload((16,))
    opt = MeasureOptions(parallel=1, min_repeat_ms=1, budget_s=0.01, max_spread=1e9)
    ok = {"mode": "ok", "tile": [-1, 8]}
    with LocalMeasurer(wl, "llvm", opt) as m:
        calls = []
        run = m._run
        m._run = lambda *a, **k: (calls.append(a[0]), run(*a, **k))[1]
        t0 = time.perf_counter()
        cmp = m.compare([("a", ok), ("b", ok)], anchors=(), rounds=2, warmup_s=0.3)
        took = time.perf_counter() - t0
    assert len(cmp.rounds) == 2 and cmp.order == [["a", "b"], ["b", "a"]]
    assert took >= 0.3 and len(calls) >= 2 * 2 + 2 and len(calls) % 2 == 0
    assert all(len(cmp.timing(n).costs) <= 2 * opt.max_repeats for n in "ab")


def test_bfloat16_inputs_reach_torch_as_bfloat16():
    # torch.from_numpy refuses ml_dtypes bfloat16 and uint16 bit patterns: the cuBLAS anchor
    # of a bfloat16 GEMM tuning died with a TypeError before its inputs were converted
    from polytile.autotune.anchors import _to_torch
    from polytile.te.dtype import bfloat16_array

    class FakeTorch:
        bfloat16 = "torch.bfloat16"

        class Tensor:
            def __init__(self, a, dtype=None):
                self.a, self.dtype = a, dtype

            def view(self, dtype):
                return FakeTorch.Tensor(self.a, dtype)

        @staticmethod
        def from_numpy(a):
            if a.dtype.kind not in "fi":
                raise TypeError(f"can't convert np.ndarray of type {a.dtype}")
            return FakeTorch.Tensor(a)

    bits = bfloat16_array(np.array([[1.0, -2.5], [3.0, 0.5]]))
    t = _to_torch(FakeTorch, bits, "bfloat16")
    assert t.dtype == "torch.bfloat16" and t.a.dtype == np.int16
    assert (t.a.view(np.uint16) == np.asarray(bits).view(np.uint16)).all()
    f = np.ones(3, np.float32)
    assert _to_torch(FakeTorch, f, "float32").a is f
