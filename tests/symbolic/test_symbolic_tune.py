"""Tuning a template over a symbolic size for concrete values (``--sizes``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import polytile
from polytile import autotune
from polytile.autotune import sizes
from polytile.autotune.template import FallbackWarning
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


def _record(n, tile_i, cost, target="llvm"):
    from polytile.autotune.context import canonical_target
    from polytile.autotune.records import Record
    return Record(workload={"template": SPEC, "args": [f"n={n}", 16, 8], "dtype": "float32"},
                  target=canonical_target(target), config={"tile_i": [-1, tile_i], "tile_j": [-1, 4]},
                  costs=[cost])


def test_apply_history_best_takes_the_nearest_tuned_size():
    from polytile.autotune.dispatch import nearest_records
    from polytile.autotune.template import Workload

    t = autotune.get_template(SPEC)
    recs = [_record(24, 3, 1e-3), _record(96, 8, 2e-3), _record(8, 2, 5e-4),
            _record(40, 5, 1e-4, target="cuda")]
    # n=40: |log2(24/40)| = 0.74 < |log2(96/40)| = 1.26 < |log2(8/40)| = 2.32; the cuda
    # record of n=40 itself is for another target
    wl = Workload(SPEC, ("n=40", 16, 8))
    LLVM = recs[0].target
    order = [r.workload["args"][0] for r in nearest_records(recs, wl, LLVM)]
    assert order == ["n=24", "n=96", "n=8"]
    # ties in ratio go to the larger tuned value: 12 and 48 are both a factor 2 from 24
    tie = [_record(12, 2, 1e-5), _record(48, 4, 1e-3)]
    assert nearest_records(tie, Workload(SPEC, ("n=24", 16, 8)), LLVM)[0] is tie[1]
    # another fixed argument or a workload without sizes never matches
    assert nearest_records(recs, Workload(SPEC, ("n=40", 16, 4)), LLVM) == []
    assert nearest_records(recs, Workload(SPEC, (40, 16, 8)), LLVM) == []

    # n=24's tile 3 does not divide 40 (not in n=40's space): the next nearest, n=96's
    # tile 8, is used; the choice is recorded
    ctx = autotune.apply_history_best(recs)
    with ctx, warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        s, tensors = t("n=40", 16, 8)
    assert ctx.chosen[str(wl)].workload["args"][0] == "n=96"
    assert "i.inner in range(0, min(8," in str(polytile.lower(s, tensors))
    f = polytile.build(s, tensors)
    for n in (40, 41, 1):
        a = np.random.default_rng(n).uniform(-1, 1, (n, 8)).astype("float32")
        b = np.random.default_rng(n + 1).uniform(-1, 1, (8, 16)).astype("float32")
        c = np.full((n, 16), np.nan, "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=2e-5, atol=2e-5)
    # an exact record still wins over nearer-looking ones
    with autotune.apply_history_best(recs + [_record(40, 10, 9.0)]) as ctx2:
        t("n=40", 16, 8)
    assert str(wl) not in ctx2.chosen

