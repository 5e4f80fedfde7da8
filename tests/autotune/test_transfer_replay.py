"""Transfer across shapes (records of another shape train the model, never count as
trials nor as the best) and the replay oracle of the search-quality benchmark."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from polytile.autotune import (MeasureOptions, ModelTuner, RandomTuner, Record, XGBCostModel,
                               canonical_target, get_template, load_best, read_records, tune)
from polytile.autotune.replay import Pool, ReplayOracle, replay_search, trials_to_reach
from polytile.autotune.transfer import transfer_sources
from polytile.autotune.tuner import knob_features
from polytile.errors import TuneError


# the synthetic space and cost landscape of the tuner tests
from test_tuner import _cost, _featurize, _results, _space



def _pool(sp, indices, fail=()) -> Pool:
    feats = _featurize(sp)(indices)
    return Pool({"template": "synthetic", "args": [1], "dtype": "float32"}, "llvm",
                [{"config": sp.get(i).knob_values(),
                  "costs": [] if i in fail else [_cost(sp, i)],
                  "error": "runtime_error" if i in fail else None, "features": feats[i]}
                 for i in indices], len(sp))


# --------------------------------------------------------------------------- replay
def test_replay_oracle_answers_recorded_costs_and_refuses_others():
    sp = _space()
    idx = random.Random(0).sample(range(len(sp)), 40)
    oracle = ReplayOracle(_pool(sp, idx, fail=idx[:3]), space=sp, refeaturize=False)
    assert oracle.indices == sorted(idx) and oracle.dropped == 0
    res = oracle.measure(idx[:5])
    assert [r.ok for r in res] == [False, False, False, True, True]
    assert res[3].cost == pytest.approx(_cost(sp, idx[3]))
    assert res[4].features == _featurize(sp)([idx[4]])[idx[4]]
    assert oracle.best_cost() == pytest.approx(min(_cost(sp, i) for i in idx[3:]))
    outside = next(i for i in range(len(sp)) if i not in idx)
    with pytest.raises(TuneError, match=f"config {outside} is not in the pool"):
        oracle.measure([outside])
    assert oracle.featurize([outside]) == {outside: None}


def test_replay_cost_is_the_median_or_the_min_of_the_repeats():
    sp = _space()
    idx = [3, 5]
    pool = _pool(sp, idx)
    pool.entries[0]["costs"] = [4e-3, 1e-3, 9e-3]        # one quiet repeat, two loaded ones
    pool.entries[1]["costs"] = [2e-3, 2.2e-3, 2.1e-3]
    med = ReplayOracle(pool, space=sp, refeaturize=False)
    low = ReplayOracle(pool, space=sp, refeaturize=False, stat="min")
    assert med.cost == {3: pytest.approx(4e-3), 5: pytest.approx(2.1e-3)}
    assert low.cost == {3: pytest.approx(1e-3), 5: pytest.approx(2e-3)}
    assert med.best_cost() == pytest.approx(2.1e-3) and low.best_cost() == pytest.approx(1e-3)
    with pytest.raises(TuneError, match="unknown cost statistic 'mean'"):
        ReplayOracle(pool, space=sp, refeaturize=False, stat="mean")


def test_pool_round_trip_and_bad_files(tmp_path):
    sp = _space()
    pool = _pool(sp, [1, 2, 3])
    path = str(tmp_path / "p.json")
    pool.save(path)
    back = Pool.load(path)
    assert back.entries == pool.entries and back.workload == pool.workload
    (tmp_path / "x.json").write_text(json.dumps({"kind": "other"}))
    with pytest.raises(TuneError, match="is not a replay pool"):
        Pool.load(str(tmp_path / "x.json"))
    with pytest.raises(TuneError, match="cannot read pool"):
        Pool.load(str(tmp_path / "missing.json"))


def test_pool_entries_outside_the_space_are_dropped():
    sp = _space()
    pool = _pool(sp, [0, 1])
    pool.entries.append({"config": {"a": [-1, 3, 5], "b": [-1, 8], "k": 2}, "costs": [1e-9],
                         "error": None, "features": [0.0] * 4})
    oracle = ReplayOracle(pool, space=sp, refeaturize=False)
    assert oracle.dropped == 1 and oracle.indices == [0, 1]
    assert oracle.best_cost() > 1e-6


@pytest.mark.parametrize("tuner", ["random", "model", "grid"])
def test_replayed_search_stays_in_the_pool(tuner):
    sp = _space()
    idx = random.Random(1).sample(range(len(sp)), 60)
    oracle = ReplayOracle(_pool(sp, idx), space=sp, refeaturize=False)
    curve = replay_search(oracle, tuner, n_trial=60, seed=3, batch=7)
    assert len(curve) == 60  # every pool config once (oracle.measure refuses others)
    assert all(b <= a for a, b in zip(curve, curve[1:]))
    assert curve[-1] == pytest.approx(oracle.best_cost())
    assert trials_to_reach(curve, oracle.best_cost()) <= 60
    assert trials_to_reach(curve, oracle.best_cost() / 2) is None


def test_model_beats_random_on_a_learnable_pool():
    """On the synthetic landscape (smooth in the features) the model reaches the pool's
    best in fewer trials than random search, on average over seeds."""
    sp = _space()
    idx = random.Random(2).sample(range(len(sp)), 200)
    oracle = ReplayOracle(_pool(sp, idx), space=sp, refeaturize=False)
    best = oracle.best_cost()

    def mean_reach(t):
        reach = [trials_to_reach(replay_search(oracle, t, 120, seed=s, batch=8), best)
                 for s in range(4)]
        return np.mean([r or 121 for r in reach])
    assert mean_reach("model") < mean_reach("random")


def test_replay_transfer_from_the_same_workload_is_refused():
    sp = _space()
    oracle = ReplayOracle(_pool(sp, [1, 2, 3]), space=sp, refeaturize=False)
    with pytest.raises(TuneError, match="transfer from the same workload"):
        replay_search(oracle, "model", 3, transfer=[oracle])


# --------------------------------------------------------------------------- transfer
def test_transfer_data_trains_the_model_without_marking_visited():
    sp = _space()
    src = random.Random(5).sample(range(len(sp)), 80)
    t = ModelTuner(sp, _featurize(sp), seed=0)
    feats = _featurize(sp)(src)
    n = t.add_transfer([feats[i] for i in src], [_cost(sp, i) for i in src],
                       [knob_features(sp, i) for i in src])
    assert n == 80 and not t.visited and not t.costs
    batch = t.next_batch(8)  # proposed by the model before any own measurement
    assert t.model.trained and len(set(batch)) == 8
    opt = sp.from_json({"a": [-1, 4, 4], "b": [-1, 8], "k": 2}).index
    bad = sp.from_json({"a": [-1, 1, 1], "b": [-1, 1], "k": 0}).index
    s = t.predicted([opt, bad])
    assert s[0] > s[1]
    # warm batches are better than random ones on this landscape
    rnd = RandomTuner(sp, seed=0).next_batch(8)
    assert min(_cost(sp, i) for i in batch) < min(_cost(sp, i) for i in rnd)
    t.update(batch, _results(sp, batch))
    assert set(t.visited) == set(batch)


def test_transfer_rows_without_features_or_successes_are_skipped():
    sp = _space()
    t = ModelTuner(sp, _featurize(sp), seed=0)
    assert t.add_transfer([[1.0] * 4, [2.0] * 4], [math.inf, math.inf]) == 0
    assert t.add_transfer([None, [1.0] * 4, [2.0] * 4], [1e-3, 2e-3, math.inf]) == 2
    # knob features of another width (another template's space) are not used
    assert t.add_transfer([[1.0] * 4, [2.0] * 4], [1e-3, 2e-3], [[1.0], [2.0]]) == 2
    assert t.transfer[-1][2] is None


def test_cost_model_groups_must_cover_the_rows():
    m = XGBCostModel()
    x = np.random.default_rng(0).random((6, 3))
    y = [0.1, 0.5, 1.0, 0.2, 0.3, 1.0]
    m.fit(x, y, groups=[3, 3])
    assert m.trained
    with pytest.raises(TuneError, match="groups sum to 5"):
        m.fit(x, y, groups=[3, 2])


def _fake_records(args, n, cost):
    """Records of matmul at ``args`` with configs of its space and a made-up (tiny) cost."""
    sp = get_template("matmul").space(args)
    rng = random.Random(0)
    out = []
    for k, i in enumerate(rng.sample(range(len(sp)), n)):
        out.append(Record(workload={"template": "matmul", "args": list(args),
                                    "dtype": "float32"}, target=canonical_target("llvm"),
                          config=sp.get(i).knob_values(), config_index=i,
                          costs=[cost * (1 + k)], tuner="model"))
    return out


def test_transfer_sources_filter():
    recs = _fake_records((48, 32, 16), 3, 1e-9) + _fake_records((64, 64, 64), 2, 1e-9)
    from polytile.autotune.template import Workload

    wl = Workload("matmul", (64, 64, 64), "float32")
    src = transfer_sources(recs, wl, canonical_target("llvm"))
    assert list(src) == [(48, 32, 16)] and len(src[(48, 32, 16)]) == 3
    assert transfer_sources(recs, wl, "cuda") == {}
    assert transfer_sources(recs, Workload("matmul", (64, 64, 64), "float64"),
                            canonical_target("llvm")) == {}


def test_tune_warm_starts_from_another_shape_but_never_applies_it(tmp_path):
    """Records of matmul(48, 32, 16) with impossibly fast costs train the model for
    matmul(40, 32, 24): they are not trials, not the best, and ``load_best`` of the tuned
    shape never returns them."""
    log = tmp_path / "log.jsonl"
    other = _fake_records((48, 32, 16), 12, 1e-12)
    log.write_text("".join(r.to_json() + "\n" for r in other))
    opt = MeasureOptions(parallel=2, number=1, repeat=2, min_repeat_ms=2)
    args = (40, 32, 24)
    res = tune("matmul", args, tuner="model", n_trial=4, measure_option=opt,
               log_file=str(log), batch_size=4, seed=0)
    assert res.transferred == 12 and res.transfer_shapes == 1
    assert res.n_trials == 4
    assert all(r.workload["args"] == list(args) for r in res.records)
    assert res.best.workload["args"] == list(args) and res.best.cost > 1e-9
    best = load_best(str(log), get_template("matmul").workload(args))
    assert best is not None and best.workload["args"] == list(args) and best.cost > 1e-9
    assert len(read_records(log)) == 12 + 4
    # the random tuner ignores transfer data
    res = tune("matmul", args, tuner="random", n_trial=1, measure_option=opt,
               log_file=str(log), seed=0)
    assert res.transferred == 0


def test_tune_transfer_file(tmp_path):
    src = tmp_path / "src.jsonl"
    src.write_text("".join(r.to_json() + "\n" for r in _fake_records((48, 32, 16), 6, 1e-6)))
    opt = MeasureOptions(parallel=1, number=1, repeat=1, min_repeat_ms=1)
    res = tune("matmul", (40, 32, 24), tuner="model", n_trial=2, measure_option=opt,
               transfer_from=str(src), seed=0)
    assert res.transferred == 6 and all(r.workload["args"] == [40, 32, 24]
                                        for r in res.records)
    with pytest.raises(TuneError, match="holds no record of softmax float32"):
        tune("softmax", (8, 8), tuner="model", n_trial=1, measure_option=opt,
             transfer_from=str(src))
    with pytest.raises(TuneError, match="does not exist"):
        tune("matmul", (40, 32, 24), n_trial=1, measure_option=opt,
             transfer_from=str(tmp_path / "none.jsonl"))


def test_stale_pool_features_are_computed_again():
    from polytile.autotune.features import N_FEATURES

    t = get_template("softmax")
    sp = t.space((8, 24))
    tgt = canonical_target("llvm")
    pool = Pool({"template": "softmax", "args": [8, 24], "dtype": "float32"}, tgt,
                [{"config": sp.get(i).knob_values(), "costs": [1e-6 * (i + 1)], "error": None,
                  "features": [1.0, 2.0]} for i in (0, 1, 2)], len(sp))
    oracle = ReplayOracle(pool)
    assert oracle.refeaturized == 3
    assert all(len(f) == N_FEATURES for f in oracle.features.values())
    assert oracle.best_cost() == pytest.approx(1e-6)


def test_measure_pool_continues_an_interrupted_pool(tmp_path):
    from polytile.autotune.features import N_FEATURES
    from polytile.autotune.replay import measure_pool

    path = str(tmp_path / "pool.json")
    opt = MeasureOptions(parallel=1, threads=1, number=1, repeat=1, min_repeat_ms=1)
    first = measure_pool("softmax", (8, 24), n=2, seed=4, options=opt, path=path, batch=2)
    assert len(first.entries) == 2 and Pool.load(path).entries == first.entries
    more = measure_pool("softmax", (8, 24), n=4, seed=4, options=opt, path=path, batch=2)
    assert more.entries[:2] == first.entries and len(more.entries) == 4
    assert len({json.dumps(e["config"], sort_keys=True) for e in more.entries}) == 4
    assert all(e["costs"] and len(e["features"]) == N_FEATURES for e in more.entries)
    oracle = ReplayOracle(Pool.load(path))
    assert oracle.refeaturized == 0 and len(oracle.indices) == 4
    assert replay_search(oracle, "random", 4, seed=0)[-1] == pytest.approx(oracle.best_cost())


def test_gpu_pool_with_a_fake_runner(tmp_path):
    """The GPU path of the benchmark without a GPU: the fake runner times candidates built
    here (nvcc), the pool carries the device and its limits, GPU features come from the
    workers, and a replay runs on it."""
    import os
    import shutil
    import sys

    from polytile.autotune.features import N_FEATURES, N_GLOBAL
    from polytile.autotune.replay import measure_pool

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    fake = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_gpu_runner.py")
    opt = MeasureOptions(parallel=2, runner_command=[sys.executable, fake,
                                                     str(tmp_path / "state"), ""])
    path = str(tmp_path / "gpu.json")
    seen = []
    # batches of one: the 2nd and 3rd candidates build while the one before runs
    pool = measure_pool("matmul", (128, 128, 64), target="cuda", n=3, seed=1, options=opt,
                        path=path, on_entry=lambda k, n, e, r: seen.append((k, n, e)),
                        batch=1)
    assert pool.target == "cuda -arch=sm_90" and pool.device["name"] == "Fake GPU"
    assert pool.gpu_limits is not None
    # drawn from the configs the tuners search (the GEMM template prefers a part of its
    # space), each reported as it finished
    space = pool.space()
    preferred = space.preferred()
    assert preferred and pool.candidates == len(preferred) < len(space)
    assert {space.from_json(e["config"]).index for e in pool.entries} <= set(preferred)
    assert [(k, n) for k, n, _ in seen] == [(1, 3), (2, 3), (3, 3)]
    assert [e for _, _, e in seen] == pool.entries
    ok = [e for e in pool.entries if e["costs"]]
    assert ok and all(len(e["features"]) == N_FEATURES for e in ok)
    g = N_FEATURES - N_GLOBAL
    assert all(e["features"][g + 18] > 0 for e in ok)  # global bytes: a GPU kernel
    oracle = ReplayOracle(Pool.load(path))
    assert oracle.refeaturized == 0 and len(oracle.indices) == 3
    curve = replay_search(oracle, "model", 3, seed=0, batch=2)
    assert curve[-1] == pytest.approx(oracle.best_cost())


def test_cli_tune_transfer(tmp_path):
    import subprocess
    import sys

    src = tmp_path / "src.jsonl"
    src.write_text("".join(r.to_json() + "\n" for r in _fake_records((48, 32, 16), 5, 1e-6)))
    p = subprocess.run([sys.executable, "-m", "polytile", "tune", "matmul", "--args",
                        "40,32,24", "--trials", "2", "--transfer", str(src), "--no-numpy",
                        "--quiet", "--repeat", "1", "--log", str(tmp_path / "log.jsonl")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "model trained on 5 records of 1 other shape(s)" in p.stdout
    assert all(r.workload["args"] == [40, 32, 24] for r in read_records(tmp_path / "log.jsonl"))
    p = subprocess.run([sys.executable, "-m", "polytile", "tune", "softmax", "--args", "8,8",
                        "--trials", "1", "--transfer", str(src), "--no-numpy", "--quiet",
                        "--log", str(tmp_path / "log2.jsonl")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "holds no record of softmax float32" in p.stderr


# ------------------------------------------------------------ search quality on a real pool
_SOFTMAX_POOL = (__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"
                 / "pools" / "softmax_512x1024_llvm_n192_s0.json")


def _softmax_means(oracle, seeds, n_trial=16):
    best = oracle.best_cost()
    return {t: float(np.mean([best / replay_search(oracle, t, n_trial, seed=s, batch=8)[-1]
                              for s in seeds])) for t in ("model", "random")}


def test_model_beats_random_on_a_recorded_pool():
    """Issue 13: replayed over the recorded CPU softmax pool of ``benchmarks/pools`` (192
    configs timed once, with their loop-IR features), the model tuner's best after 16
    trials (a random first batch of 8, then one batch picked by the model), averaged over
    a fixed set of seeds, beats random search's by a margin. Replays are deterministic;
    on this pool (measured again at load 3, 2026-12-02) the gap is about 3.4 points over
    these 12 seeds (0.944 vs 0.910 of the pool's best), so a model that ranks no better
    than chance (broken features, a constant model) fails."""
    oracle = ReplayOracle(Pool.load(str(_SOFTMAX_POOL)), stat="min")
    m = _softmax_means(oracle, range(12))
    assert m["model"] >= m["random"] + 0.02, m


@pytest.mark.slow
def test_recorded_pool_check_fails_for_a_model_without_information():
    """The check above can fail: with the pool's costs shuffled among its configs (costs
    unrelated to both the loop-IR features and the knobs) the model tuner is no better
    than random search."""
    oracle = ReplayOracle(Pool.load(str(_SOFTMAX_POOL)), stat="min")
    idx = oracle.indices
    costs = [oracle.cost[i] for i in idx]
    random.Random(0).shuffle(costs)
    oracle.cost = dict(zip(idx, costs))
    m = _softmax_means(oracle, range(12))
    assert m["model"] < m["random"] + 0.02, m


# ------------------------------------------------ search quality on the recorded GPU pools
_POOLS = _SOFTMAX_POOL.parent
#: H200 pools (sm_90a) of the configs the tuners search: issue 11's GPU templates
_GPU_POOLS = ("matmul_2048x2048x2048_cuda_sm_90a_n500_s0.json",
              "softmax_4096x4096_float16_cuda_sm_90a_n500_s0.json",
              "matmul_2048x2048x2048_float16_cuda_sm_90a_n500_s0.json")


def _after_first_batch(oracle, tuner, seeds=range(8), k0=9, k1=24):
    """Mean over seeds of the best-so-far fraction of the pool's best, averaged over
    trials ``k0..k1``: the trials the model picks (the first batch of 8 is its start)."""
    best = oracle.best_cost()
    out = []
    for s in seeds:
        c = replay_search(oracle, tuner, k1, seed=s, batch=8)
        out.append(np.mean([best / c[min(k, len(c)) - 1] for k in range(k0, k1 + 1)]))
    return float(np.mean(out))


@pytest.mark.parametrize("name", _GPU_POOLS)
def test_model_not_behind_random_on_the_gpu_pools(name):
    """Issue 11: replayed over each recorded H200 pool (costs timed once on the device,
    loop-IR features stored with them), the model tuner is not behind random search
    over the trials it picks (9 to 24, the first batch of 8 being its start), on a fixed
    set of seeds (replays are deterministic). On the fp32 GEMM pool the model was ahead
    by about 1.6 points, on softmax and the fp16 GEMM by 0.1-0.3: broken GPU features
    (the fp16 GEMM's MMA loop unseen, the tile knob an index) or a model no better than
    chance put it behind (the slow test below shuffles the costs)."""
    oracle = ReplayOracle(Pool.load(str(_POOLS / name)))
    m, r = _after_first_batch(oracle, "model"), _after_first_batch(oracle, "random")
    assert m >= r, (m, r)


@pytest.mark.slow
def test_gpu_pool_check_fails_for_a_model_without_information():
    """The check above can fail: the fp32 GEMM pool's costs shuffled among its configs
    put the model tuner behind random search."""
    oracle = ReplayOracle(Pool.load(str(_POOLS / _GPU_POOLS[0])))
    idx = oracle.indices
    costs = [oracle.cost[i] for i in idx]
    random.Random(0).shuffle(costs)
    oracle.cost = dict(zip(idx, costs))
    assert _after_first_batch(oracle, "model") < _after_first_batch(oracle, "random")
