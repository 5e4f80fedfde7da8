"""The tuning loop on a real (small) matmul: records, resume, early stopping, time budget,
and building the best record afterwards."""

from __future__ import annotations

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
