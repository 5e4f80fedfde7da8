"""Failure isolation: candidates that crash, hang, exhaust memory, are illegal or compute
the wrong result are recorded with their error codes, and the run finishes."""

from __future__ import annotations

import os

from polytile.autotune import MeasureOptions, read_records, tune

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTY = os.path.join(HERE, "faulty_template.py") + ":faulty"

EXPECTED = {"ok": None, "segv": "build_error", "hang": "timeout", "oom": "build_error",
            "invalid": "invalid_config", "wrong": "wrong_result", "crash_run": "runtime_error",
            "hang_run": "timeout"}


def test_every_failure_is_recorded_and_the_run_finishes(tmp_path):
    log = tmp_path / "faulty.jsonl"
    opt = MeasureOptions(parallel=2, check=True, build_timeout=2.0, run_timeout=2.0,
                         mem_limit_mb=2048)
    res = tune(FAULTY, (16,), tuner="grid", n_trial=len(EXPECTED), measure_option=opt,
               log_file=str(log))
    assert res.n_trials == len(EXPECTED) and not res.interrupted
    got = {r.config["mode"]: (r.error, r.error_msg) for r in res.records}
    assert {m: e for m, (e, _) in got.items()} == EXPECTED
    assert "SIGSEGV" in got["segv"][1] and "SIGSEGV" in got["crash_run"][1]
    assert "out of memory" in got["oom"][1]
    assert "parallel loop 'i.inner' inside it" in got["invalid"][1]
    assert res.best is not None and res.best.config["mode"] == "ok"
    on_disk = read_records(log)
    assert [r.error for r in on_disk] == [r.error for r in res.records]
    assert all(r.error_msg for r in on_disk if r.error)
