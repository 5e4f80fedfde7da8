"""Tuning on a Ray cluster (``tune(..., ray=...)``, ``polytile tune --ray``) against a local
Ray instance with two worker CPUs: records of the same form as a local run's, a measuring
actor killed mid-run, resume after the driver is interrupted, refusal of a target no node
can measure, and the error without Ray. CI installs Ray (``.ci/run``: ``.[test,ray]``);
without it the Ray tests skip and say so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest

from polytile.autotune import MeasureOptions, read_records, tune
from polytile.autotune.context import canonical_target
from polytile.autotune.records import RecordWarning
from polytile.errors import TuneError

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = {"ok": None, "segv": "build_error", "hang": "timeout", "oom": "build_error",
            "invalid": "invalid_config", "wrong": "wrong_result", "crash_run": "runtime_error",
            "hang_run": "timeout"}
ARGS = (48, 40, 56)
OPT = MeasureOptions(parallel=1, threads=1, number=1, repeat=2, min_repeat_ms=2,
                     budget_s=0.02)


@pytest.fixture(scope="module")
def ray():
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install "
                              "'polytile[ray]' (CI installs it)")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _lines(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def _read_clean(path) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordWarning)
        return read_records(path)


def test_records_have_the_form_of_a_local_run(ray, tmp_path):
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    kw = dict(tuner="random", n_trial=5, measure_option=OPT, seed=3, anchors=("numpy",),
              compare_rounds=1)
    a = tune("matmul", ARGS, log_file=str(local), **kw)
    b = tune("matmul", ARGS, log_file=str(remote), ray="local", **kw)
    la, lb = _lines(local), _lines(remote)
    assert len(la) == len(lb) == 6 and b.n_failed == 0  # 5 trials and the summary
    for n, (x, y) in enumerate(zip(la, lb)):
        assert x.keys() == y.keys()
        same = ("schema", "workload", "target", "tuner", "threads", "phase")
        if n < 5:  # trials: the same configs in the same order (the summary: each its best)
            same += ("config", "config_index", "trace", "error")
        for k in same:
            assert x[k] == y[k], (n, k)
        assert y["costs"] and all(c > 0 for c in y["costs"])
    assert all(y["build_s"] > 0 for y in lb[:5])
    assert la[5]["phase"] == "summary" and la[5]["summary"].keys() == lb[5]["summary"].keys()
    assert b.comparison.timing("best") and b.comparison.timing("numpy")
    assert b.records[0].config == a.records[0].config  # the default config first
    (node,) = b.nodes
    assert node["trials"] == 5 and node["devices"] == ["cpu"] and node["trials_per_s"] > 0


def test_killed_measuring_actor_loses_its_trials_once(ray, tmp_path):
    log = tmp_path / "killed.jsonl"
    killed = []

    def kill_once(res, rec):
        if res.n_trials == 2 and not killed:
            names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["name"].startswith("polytile-measure:")]
            assert len(names) == 1  # one device, one measuring actor
            ray.kill(ray.get_actor(names[0], namespace="polytile"))
            killed.append(names[0])

    res = tune("matmul", ARGS, tuner="random", n_trial=8, measure_option=OPT,
               log_file=str(log), seed=5, batch_size=6, callbacks=[kill_once], ray="local")
    assert killed
    recs = _read_clean(log)
    assert len(recs) == len(_lines(log)) == res.n_trials >= 8
    lost = [r for r in recs if r.error_msg.startswith("lost:")]
    assert lost and all(r.error == "runtime_error" and "died" in r.error_msg for r in lost)
    assert all(r.error_msg.endswith("queued again") for r in lost)
    for r in lost:  # measured again, after, by the replacement actor
        later = [q for q in recs if q.config_index == r.config_index and q.line > r.line]
        assert len(later) == 1 and not later[0].error_msg.startswith("lost:")
    assert sum(r.ok for r in recs) >= 8 - len(lost)
    assert res.nodes[0]["trials"] == res.n_trials


def test_resume_after_the_driver_is_interrupted(ray, tmp_path):
    """Ctrl-C of `polytile tune --ray local` (a driver of its own), then --resume."""
    log = tmp_path / "resume.jsonl"
    # A shell that started pytest in the background ignores SIGINT and children inherit
    # that (the tuner then rightly ignores Ctrl-C and runs every trial): give the driver
    # the default disposition, as an interactive terminal would. Not preexec_fn: this
    # process runs Ray's threads, and a fork with threads runs no Python safely.
    main = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from polytile.cli import main; sys.exit(main())")
    cmd = [sys.executable, "-c", main, "tune", "matmul", "--args", "48,40,56",
           "--trials", "2000", "--tuner", "random", "--seed", "7", "--parallel", "1",
           "--threads", "1", "--repeat", "2", "--min-repeat-ms", "2", "--no-numpy",
           "--quiet", "--ray", "local", "--log", str(log)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and proc.poll() is None:
            if log.exists() and len(_lines(log)) >= 3:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "continue with the same command and --resume" in err
    done = _read_clean(log)
    assert 3 <= len(done) < 2000
    again = tune("matmul", ARGS, tuner="random", n_trial=len(done) + 3, measure_option=OPT,
                 log_file=str(log), seed=7, resume=True, ray="local")
    assert not again.interrupted and again.resumed == len(done)
    recs = _read_clean(log)
    assert len(recs) == len(done) + 3 == again.n_trials
    assert len({r.config_index for r in recs}) == len(recs)  # nothing measured twice


def test_faulty_candidates_fail_as_in_a_local_run(ray, tmp_path, monkeypatch):
    """Crashes, hangs, runaway allocations, wrong results: the error codes of a local run
    (tests/autotune/test_measure.py), the template named by a path relative to the
    driver's working directory."""
    monkeypatch.chdir(HERE)
    opt = MeasureOptions(parallel=2, check=True, build_timeout=2.0, run_timeout=2.0,
                         mem_limit_mb=2048)
    res = tune("faulty_template.py:faulty", (16,), tuner="grid", n_trial=len(EXPECTED),
               measure_option=opt, log_file=str(tmp_path / "faulty.jsonl"), ray="local")
    got = {r.config["mode"]: (r.error, r.error_msg) for r in res.records}
    assert {m: e for m, (e, _) in got.items()} == EXPECTED
    assert "SIGSEGV" in got["segv"][1] and "out of memory" in got["oom"][1]
    assert res.best.config["mode"] == "ok"
    assert res.records[0].workload["template"] == "faulty_template.py:faulty"


def test_refuses_a_target_no_node_can_measure(ray):
    host = canonical_target("llvm")
    other = "llvm -mcpu=" + ("znver4" if "znver4" not in host else "skylake")
    with pytest.raises(TuneError, match=r"no node of the Ray cluster can measure "
                       r"'llvm -mcpu=\w+'.*\n.*Nodes: .*" + host):
        tune("matmul", ARGS, n_trial=2, measure_option=OPT, target=other, ray="local")


def test_cli_ray_prints_trials_per_node(ray, tmp_path, capsys):
    from polytile.cli import main

    rc = main(["tune", "matmul", "--args", "48,40,56", "--trials", "3", "--parallel", "1",
               "--threads", "1", "--no-numpy", "--quiet", "--ray", "local",
               "--log", str(tmp_path / "cli.jsonl")])
    out = capsys.readouterr().out
    assert rc == 0 and "measured on the Ray cluster --ray local" in out
    assert "trials/s (cpu; node " in out


def test_without_ray_the_option_names_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    with pytest.raises(TuneError, match=r"needs the package 'ray'.*\n.*polytile\[ray\]"):
        tune("matmul", ARGS, n_trial=1, measure_option=OPT, ray="local")
    from polytile.cli import main

    rc = main(["tune", "matmul", "--args", "48,40,56", "--trials", "1", "--ray", "auto",
               "--log", str(tmp_path / "never.jsonl")])
    err = capsys.readouterr().err
    assert rc == 1 and not (tmp_path / "never.jsonl").exists()
    assert "--ray needs the package 'ray'" in err and 'pip install "polytile[ray]"' in err


def test_bad_address_is_refused():
    with pytest.raises(TuneError, match="expected 'auto', 'local' or 'ray://host:port'"):
        tune("matmul", ARGS, n_trial=1, measure_option=OPT, ray="localhost:6379")


def test_import_polytile_does_not_import_ray():
    code = ("import sys, polytile, polytile.autotune, polytile.cli; import "
            "polytile.autotune.ray_measure, polytile.autotune.ray_node; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_template_the_nodes_cannot_load_is_refused(ray):
    from polytile.autotune.ray_measure import RayMeasurer
    from polytile.autotune.template import Workload

    m = RayMeasurer(Workload("no_such_template", (1,), "float32"), canonical_target("llvm"),
                    OPT, "local")
    try:
        with pytest.raises(TuneError, match=r"no measuring actor started: .*unknown "
                           r"template 'no_such_template'.*at the same path on every node"):
            m.start()
    finally:
        m.close()


def test_a_device_measures_for_one_run_at_a_time(ray):
    from polytile.autotune.ray_measure import RayMeasurer
    from polytile.autotune.template import Workload

    wl, tgt = Workload("matmul", ARGS, "float32"), canonical_target("llvm")
    first, second = RayMeasurer(wl, tgt, OPT, "local"), RayMeasurer(wl, tgt, OPT, "local")
    try:
        first.start()
        with pytest.raises(TuneError, match=r"every device able to measure 'llvm -mcpu=\w+' "
                           r"is measuring for another tuning run \(\S+:cpu\)"):
            second.start()
    finally:
        second.close()
        first.close()
    second = RayMeasurer(wl, tgt, OPT, "local")  # free again once the first run ended
    try:
        second.start()
        assert [s.device["id"] for s in second.slots] == ["cpu"]
    finally:
        second.close()


def test_device_matching_and_plain_data():
    """No Ray needed: which node device measures which target, and results as JSON."""
    from polytile.autotune.measure import MeasureResult
    from polytile.autotune.ray_node import result_from_data, result_to_data
    from polytile.autotune.ray_measure import device_matches
    from polytile.autotune.timing import Timing

    assert device_matches("llvm -mcpu=znver4", "llvm -mcpu=znver4")
    assert device_matches("llvm -mcpu=znver4", "llvm -opt=3 -mcpu=znver4")
    assert not device_matches("llvm -mcpu=znver4", "llvm -mcpu=skylake")
    assert not device_matches("cuda -arch=sm_90", "llvm -mcpu=znver4")
    assert not device_matches("cuda -arch=sm_90", "cuda -arch=sm_80")
    r = MeasureResult(costs=[2e-3, 3e-3], build_s=0.5, features=[1.0, 2.5], trace=[["split"]],
                      timing=Timing((2e-3, 3e-3), 1, 2e-3))
    text = json.dumps(result_to_data(r))
    back = result_from_data(json.loads(text))
    assert back.costs == r.costs and back.features == r.features and back.trace == r.trace
    assert back.timing.costs == r.timing.costs and back.ok and back.cost == r.cost


def test_past_the_deadline_no_candidate_starts_running(ray):
    import time as _time

    from polytile.autotune import get_template
    from polytile.autotune.ray_measure import RayMeasurer
    from polytile.autotune.template import Workload

    space = get_template("matmul").space(ARGS)
    items = [(i, space.get(i).knob_values()) for i in (space.default_index(), 7, 1234)]
    m = RayMeasurer(Workload("matmul", ARGS, "float32"), canonical_target("llvm"), OPT,
                    "local")
    try:
        m.start()
        seen = []
        got = m.measure(items, None, lambda k, r: seen.append(k), _time.perf_counter())
        assert all(not r.costs for r in got) and len(got) == len(seen)  # build failures only
        got = m.measure(items, None, lambda k, r: seen.append(k), None)  # and then all
        assert len(got) == 3 and got[0].ok and all(r.ok or r.error for r in got)
        assert m.node_stats()[0]["trials"] == len(seen)
    finally:
        m.close()
