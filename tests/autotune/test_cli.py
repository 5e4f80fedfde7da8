"""The ``polytile`` command line end to end (subprocesses, tiny workloads)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def polytile(*args, timeout=300, cwd=None):
    p = subprocess.run([sys.executable, "-m", "polytile", *args], capture_output=True,
                       text=True, timeout=timeout, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    log = d / "mm.jsonl"
    png = d / "curve.png"
    rc, out, err = polytile("tune", "matmul", "--args", "64,64,64", "--trials", "8",
                            "--log", str(log), "--plot", str(png), "--check", "--seed", "3",
                            "--repeat", "2", "--min-repeat-ms", "2")
    return rc, out, err, log, png


def test_tune_exit_code_log_and_summary(tuned):
    rc, out, err, log, png = tuned
    assert rc == 0, err
    lines = log.read_text().splitlines()
    assert len(lines) == 9  # 8 trials and the summary
    recs = [json.loads(x) for x in lines]
    assert all(r["workload"] == {"template": "matmul", "args": [64, 64, 64],
                                 "dtype": "float32"} for r in recs)
    assert [r["phase"] for r in recs] == ["search"] * 8 + ["summary"]
    for r in recs:
        assert r["threads"] >= 1 and r["spread"] >= 0 and isinstance(r["remeasured"], bool)
    summ = recs[-1]["summary"]
    assert set(summ["timings"]) >= {"best", "numpy"}
    assert summ["rounds"] == (8 if summ["extended"] else 4)
    assert summ["search"]["trials"] >= 1 and "numpy/best" in summ["ratios"]
    for key in ("best", "median time", "numpy", "noise", "trials", "wall time",
                "best config", "records"):
        assert f"  {key}" in out, out
    assert "GFLOP/s" in out and "x numpy" in out
    # every time is a median with its spread; the noise line says how noisy the run was
    assert out.count(" ± ") >= 2 and "timed alternately" in out and "re-measured" in out
    assert any(w in out for w in ("(quiet)", "(noisy)", "(very noisy"))
    assert "8 measured" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tuning" in err  # the progress bar
    # the anchor's BLAS kernel is named (before the search and in the summary)
    assert out.count("numpy BLAS") == 2, out


def test_records_commands(tuned):
    log = str(tuned[3])
    rc, out, _ = polytile("records", "show", log)
    assert rc == 0 and "8 records" in out  # the summary line is not a trial and "matmul(64, 64, 64)" in out
    rc, out, _ = polytile("records", "best", log)
    assert rc == 0 and "GFLOP/s" in out and len(out.strip().splitlines()) == 3
    rc, out, _ = polytile("records", "summary", log)
    assert rc == 0 and "best GFLOP/s" in out and " 8 " in out


def test_run_builds_the_best_record(tuned):
    log = str(tuned[3])
    rc, out, err = polytile("run", "matmul", "--args", "64,64,64", "--log", log, "--print-ir")
    assert rc == 0, err
    assert "matches numpy" in out and "for " in out and "GFLOP/s" in out
    assert f"{log}:" in out
    # timed as the tuning summary was, and set beside it
    assert "timed alternately" in out and f"(summary {log}:9)" in out and "now / then" in out
    assert "  numpy BLAS" in out and "kernel" in out


def test_run_refuses_a_best_record_outside_the_space(tuned, tmp_path):
    recs = [json.loads(x) for x in tuned[3].read_text().splitlines()]
    trials = [r for r in recs if r.get("config") and not r.get("error")]
    bad = dict(trials[0], cost=1e-9)  # the best, with a config no space has
    bad["config"] = dict(bad["config"], tile_i=[-1, 7, 3])
    log = tmp_path / "bad.jsonl"
    log.write_text(json.dumps(bad) + "\n")
    rc, out, err = polytile("run", "matmul", "--args", "64,64,64", "--log", str(log))
    assert rc == 1
    assert f"the best record of matmul(64, 64, 64) float32 ({log}:1) does not fit" in err
    assert "check" not in out and "Traceback" not in err


_USER_TEMPLATE = """
from polytile import autotune, te

def scaled(n: int, dtype: str = "float32"):
    cfg = autotune.get_config()
    A = te.placeholder((n,), name="A", dtype=dtype)
    cfg.define_knob("bias", [0, 1])      # a knob that changes the values (a buggy template)
    B = te.compute((n,), lambda i: A[i] * 2.0 + float(cfg["bias"].val), name="B")
    s = te.create_schedule(B.op)
    cfg.define_split("t", B.op.axis[0], num_outputs=2, max_factor=8)
    cfg["t"].apply(s, B, B.op.axis[0])
    return s, [A, B]
"""


def test_run_checks_a_user_template_against_its_default_config(tmp_path):
    # a template without a numpy reference was run unchecked (no 'check' line)
    src = tmp_path / "user_tmpl.py"
    src.write_text(_USER_TEMPLATE)
    spec, log = f"{src}:scaled", tmp_path / "u.jsonl"
    rc, _, err = polytile("tune", spec, "--args", "37", "--tuner", "grid", "--trials", "8",
                          "--no-numpy", "--quiet", "--repeat", "2", "--log", str(log))
    assert rc == 0, err
    recs = [json.loads(x) for x in log.read_text().splitlines() if '"config"' in x]
    for bias, verdict in ((0, "matches the default config"), (1, "WRONG: differs from")):
        best = next(r for r in recs if r.get("config", {}).get("bias") == bias
                    and not r.get("error"))
        one = tmp_path / f"best{bias}.jsonl"
        one.write_text(json.dumps(dict(best, costs=[1e-9])) + "\n")
        rc, out, err = polytile("run", spec, "--args", "37", "--log", str(one))
        assert f"  check           {verdict}" in out, out + err
        assert rc == (0 if bias == 0 else 1)
    assert "disagrees with the default config" in err


def test_templates_command():
    rc, out, _ = polytile("templates")
    assert rc == 0
    for name in ("matmul", "batch_matmul", "conv2d_nchw", "depthwise_conv2d_nchw", "softmax",
                 "layernorm", "rmsnorm"):
        assert name in out
    assert "49,720,320" in out  # the space of the default matmul (tile_k up to 1024)


@pytest.mark.parametrize("args, code, text", [
    (["tune"], 2, "the following arguments are required"),
    (["tune", "matmul", "--tuner", "magic"], 2,
     "argument --tuner: expected 'model', 'random' or 'grid', got 'magic'"),
    # AutoTVM's name: argparse's 'invalid choice' hid the hint make_tuner gives
    (["tune", "matmul", "--tuner", "xgb"], 2, "(AutoTVM's 'xgb' is polytile's 'model')"),
    (["tune", "matmul", "--trials", "0"], 2, "positive integer"),
    # argparse took -3,4,4 for an option: "expected one argument"
    (["tune", "matmul", "--args", "-3,4,4"], 2,
     "argument --args: expected non-negative integers, got '-3,4,4'"),
    (["tune", "nope"], 1, "polytile: error: template: unknown template 'nope'"),
    (["records", "show", "/nonexistent.jsonl"], 1, "not found"),
    (["tune", "depthwise_conv2d_nchw", "--target", "cuda"], 1,
     "template 'depthwise_conv2d_nchw': has no schedule for target kind 'cuda'"),
    (["tune", "matmul", "--target", "llvm -mcpu"], 1, "polytile: error: target:"),
    (["tune", "matmul", "--args", "64,64,64", "--resume", "--log", "/nonexistent.jsonl"], 1,
     "does not exist"),
])
def test_exit_codes(args, code, text):
    rc, out, err = polytile(*args)
    assert rc == code
    assert text in err
    assert "Traceback" not in err


def test_debug_shows_the_traceback():
    rc, _, err = polytile("--debug", "tune", "nope")
    assert rc == 1 and "Traceback" in err


def test_ctrl_c_leaves_a_resumable_log(tmp_path):
    log = tmp_path / "int.jsonl"
    cmd = [sys.executable, "-m", "polytile", "tune", "matmul", "--args", "128,128,128",
           "--trials", "200", "--log", str(log), "--tuner", "random", "--quiet",
           "--no-numpy", "--repeat", "2", "--min-repeat-ms", "2"]
    # a shell that started pytest in the background ignores SIGINT, and children inherit
    # that: give the tuner the default disposition, as an interactive terminal would
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= 3:
            break
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "--resume" in err
    n = len(log.read_text().splitlines())  # interrupted: no summary line
    assert 3 <= n < 200
    rc, out, err = polytile("tune", "matmul", "--args", "128,128,128", "--trials", str(n + 2),
                            "--log", str(log), "--resume", "--tuner", "random", "--quiet",
                            "--no-numpy", "--repeat", "2", "--min-repeat-ms", "2")
    assert rc == 0, err
    assert len(log.read_text().splitlines()) == n + 3  # two trials and the summary
    assert f"{n} resumed" in out


def test_default_log_file(tmp_path):
    rc, _, err = polytile("run", "matmul", "--args", "32,32,32", cwd=tmp_path)
    assert rc == 1 and "polytile_tune.jsonl" in err and "polytile tune matmul" in err
    rc, out, err = polytile("tune", "matmul", "--args", "32,32,32", "--trials", "2", "--quiet",
                            "--no-numpy", "--tuner", "random", cwd=tmp_path)
    assert rc == 0, err
    assert len((tmp_path / "polytile_tune.jsonl").read_text().splitlines()) == 3
    rc, out, err = polytile("run", "matmul", "--args", "32,32,32", cwd=tmp_path)
    assert rc == 0 and "matches numpy" in out


def test_zero_is_a_workload_argument():
    # a conv without padding has pad=0; the template, not the command line, judges values
    from polytile.cli import _int_list

    assert _int_list("1,3,8,8,4,3,3,1,0") == (1, 3, 8, 8, 4, 3, 3, 1, 0)
    assert _int_list("n,0") == ("n", 0)
