"""The tuning loop on a real (small) matmul: records, resume, early stopping, time budget,
and building the best record afterwards."""

from __future__ import annotations

import json

import numpy as np
import pytest

import polytile
from polytile.autotune import (MeasureOptions, apply_history_best, get_template,
                               read_records, tune)

ARGS = (64, 64, 64)
OPT = MeasureOptions(parallel=2, number=1, repeat=2, min_repeat_ms=2)


@pytest.fixture(scope="module")
def tuned_log(tmp_path_factory):
    log = tmp_path_factory.mktemp("tune") / "mm.jsonl"
    res = tune("matmul", ARGS, tuner="model", n_trial=6, measure_option=OPT,
               log_file=str(log), batch_size=3, seed=1)
    return log, res


def test_tune_writes_one_record_per_trial(tuned_log):
    log, res = tuned_log
    recs = read_records(log)
    assert len(recs) == res.n_trials == 6
    assert recs[0].config == get_template("matmul").space(ARGS).default().knob_values()
    assert res.default is not None and res.best is not None
    assert res.best.cost <= res.default.cost
    assert all(r.trace for r in recs if r.ok)
    keys = [tuple(sorted((k, str(v)) for k, v in r.config.items())) for r in recs]
    assert len(keys) == len(set(keys))
    assert res.gflops() > 0 and len(res.curve()) == 6


def test_resume_continues_without_remeasuring(tuned_log, tmp_path):
    log, _ = tuned_log
    copy = tmp_path / "resume.jsonl"
    copy.write_text(log.read_text())
    res = tune("matmul", ARGS, tuner="random", n_trial=9, measure_option=OPT,
               log_file=str(copy), resume=True, seed=2)
    recs = read_records(copy)
    assert res.resumed == 6 and res.n_trials == 9 and len(recs) == 9
    keys = [tuple(sorted((k, str(v)) for k, v in r.config.items())) for r in recs]
    assert len(keys) == len(set(keys))


def test_apply_history_best_after_tuning(tuned_log):
    log, res = tuned_log
    t = get_template("matmul")
    with apply_history_best(str(log)):
        s, tensors = t(*ARGS)
    f = polytile.build(s, tensors)
    a = np.random.rand(64, 64).astype("float32")
    b = np.random.rand(64, 64).astype("float32")
    c = np.zeros((64, 64), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_early_stopping_and_time_budget():
    res = tune("matmul", ARGS, tuner="random", n_trial=40, measure_option=OPT,
               early_stopping=2, batch_size=2, seed=5)
    assert res.n_trials < 40 and "no improvement" in res.stop_reason
    res = tune("matmul", ARGS, tuner="random", n_trial=40, measure_option=OPT,
               timeout_total=0.5, batch_size=2, seed=5)
    assert res.n_trials < 40 and "time budget" in res.stop_reason


def test_cache_flush_threads_and_float64():
    opt = MeasureOptions(parallel=1, threads=1, repeat=3, flush_cache=True, check=True)
    res = tune("matmul", (32, 24, 16), dtype="float64", tuner="random", n_trial=3,
               measure_option=opt, seed=0)
    assert res.n_trials == 3 and res.n_failed == 0
    assert all(len(r.costs) == 3 for r in res.records)  # flushing: the least repeats
    assert all(r.threads == 1 and r.phase == "search" for r in res.records)
    assert res.workload.key()["dtype"] == "float64"


PREFER_TEMPLATE = '''
from polytile import te
from polytile.autotune import get_config


def scaled(n: int = 8, dtype: str = "float32"):
    cfg = get_config()
    cfg.define_knob("f", [1, 2, 4, 8], default=2)
    cfg.define_knob("g", [1, 2], default=2, legacy=1)   # added after the first records
    cfg.prefer(lambda v: v["f"] % 4 == 0)               # searched: f 4 and 8 (and default)
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=cfg["f"].val * cfg["g"].val)
    return s, [A, B]
'''


def test_tune_searches_the_preferred_configs_and_resumes_legacy_records(tmp_path):
    path = tmp_path / "prefer_template.py"
    path.write_text(PREFER_TEMPLATE)
    spec = f"{path}:scaled"
    new = tmp_path / "new.jsonl"
    res = tune(spec, (8,), tuner="random", n_trial=20, measure_option=OPT, seed=3,
               log_file=str(new))
    got = sorted((r.config["f"], r.config["g"]) for r in res.records)
    # the default first, then the 4 preferred configs: the pool ends the search
    assert got == [(2, 2), (4, 1), (4, 2), (8, 1), (8, 2)] and res.n_trials == 5
    full = tune(spec, (8,), tuner="random", n_trial=20, measure_option=OPT, seed=3,
                full_space=True)
    assert full.n_trials == 8
    # a record written before knob g existed resumes as g = 1 (not measured again)
    log = tmp_path / "old.jsonl"
    rec = json.loads(new.read_text().splitlines()[0])
    rec["config"] = {"f": 4}
    log.write_text(json.dumps(rec) + "\n")
    again = tune(spec, (8,), tuner="random", n_trial=3, measure_option=OPT, seed=4,
                 log_file=str(log), resume=True)
    assert again.resumed == 1
    assert {"f": 4, "g": 1} not in [r.config for r in again.records[1:]]
