"""Tuning a template over a symbolic size for concrete values (``--sizes``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import polytile
from polytile import autotune
from polytile.autotune import sizes
from polytile.errors import TuneError

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "sym_templates.py") + ":sym_matmul"


def test_size_args_parse():
    assert sizes.parse("n=256") == ("n", 256)
    assert sizes.parse(3) is None
    assert sizes.concrete_args(("n=5", 7)) == (5, 7)
    with pytest.raises(TuneError, match="symbolic size with its value"):
        sizes.parse("n")


def test_space_uses_the_value_and_schedule_stays_symbolic():
    t = autotune.get_template(SPEC)
    sp = t.space(("n=24", 16, 8))
    inner = {e.size[-1] for e in sp.knobs["tile_i"].entities}
    assert 3 in inner and all(24 % f == 0 for f in inner)   # the factors of n = 24
    s, tensors = t.instantiate(sp.default(), ("n=24", 16, 8))
    f = polytile.build(s, tensors)
    for n in (0, 1, 24, 37):   # one function for every n
        a = np.random.default_rng(n).uniform(-1, 1, (n, 8)).astype("float32")
        b = np.random.default_rng(n + 1).uniform(-1, 1, (8, 16)).astype("float32")
        c = np.full((n, 16), np.nan, "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=2e-5, atol=2e-5)


def test_cli_tune_sizes_records_say_which(tmp_path):
    log = tmp_path / "sym.jsonl"
    p = subprocess.run([sys.executable, "-m", "polytile", "tune", SPEC, "--args", "n,16,8",
                        "--sizes", "n=8,13", "--trials", "3", "--log", str(log), "--quiet",
                        "--check", "--repeat", "1", "--min-repeat-ms", "1", "--no-numpy"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr + p.stdout
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert {tuple(r["workload"]["args"]) for r in recs} == {("n=8", 16, 8), ("n=13", 16, 8)}
    assert all(r.get("error_code", r.get("error")) in (None, "", "ok") or "cost" in r
               for r in recs)
    assert "sizes n=8" in p.stdout and "sizes n=13" in p.stdout
    p = subprocess.run([sys.executable, "-m", "polytile", "run", SPEC, "--args", "n,16,8",
                        "--sizes", "n=13", "--log", str(log)], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr + p.stdout
    assert "(n=13, 16, 8)" in p.stdout and "matches numpy" in p.stdout


def test_cli_sizes_errors():
    p = subprocess.run([sys.executable, "-m", "polytile", "tune", SPEC, "--args", "n,16,8",
                        "--trials", "1"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "--sizes n=" in p.stderr
    p = subprocess.run([sys.executable, "-m", "polytile", "tune", SPEC, "--args", "8,16,8",
                        "--sizes", "n=4", "--trials", "1"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "'n' is not among --args" in p.stderr


def test_features_use_the_tuned_value():
    from polytile.autotune.features import extract_features

    t = autotune.get_template(SPEC)
    sp = t.space(("n=24", 16, 8))
    s, tensors = t.instantiate(sp.default(), ("n=24", 16, 8))
    func = polytile.lower(s, tensors)
    small = extract_features(func, {"n": 2})
    big = extract_features(func, {"n": 4096})
    assert small != big   # the trip counts of the n loops differ
