"""Records: JSON Lines round trip, torn and corrupt lines, schema versions; dispatch with
apply_history_best / load_best."""

from __future__ import annotations

import json

import numpy as np
import pytest

import polytile
from polytile.autotune import (FallbackWarning, Record, RecordWarning, RecordWriter,
                               apply_history_best, canonical_target, get_template, load_best,
                               read_records)
from polytile.autotune.records import SCHEMA_VERSION, best_records
from polytile.autotune.template import _warned
from polytile.errors import TuneError

ARGS = (32, 32, 32)


def _rec(knobs, costs, error=None, args=ARGS) -> Record:
    return Record(workload={"template": "matmul", "args": list(args), "dtype": "float32"},
                  target=canonical_target("llvm"), config=knobs, costs=costs, error=error,
                  error_msg="boom" if error else "", timestamp=1.0)


def _configs(n):
    sp = get_template("matmul").space(ARGS)
    return sp, [sp.get(i) for i in range(0, len(sp), len(sp) // n)][:n]


def test_round_trip_and_fields(tmp_path):
    sp, cfgs = _configs(3)
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as w:
        w.write(_rec(cfgs[0].knob_values(), [2e-3, 1e-3, 3e-3]))
        w.write(_rec(cfgs[1].knob_values(), [], error="build_error"))
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    d = json.loads(lines[0])
    for key in ("schema", "polytile", "workload", "target", "config", "trace", "costs",
                "error", "timestamp", "wall_s"):
        assert key in d
    assert d["schema"] == SCHEMA_VERSION and d["polytile"] == polytile.__version__
    recs = read_records(path)
    assert [r.line for r in recs] == [1, 2]
    assert recs[0].cost == pytest.approx(2e-3) and recs[0].ok
    assert not recs[1].ok and recs[1].error == "build_error" and recs[1].cost == float("inf")


def test_torn_last_line_is_skipped_with_its_line_number(tmp_path):
    sp, cfgs = _configs(2)
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as w:
        w.write(_rec(cfgs[0].knob_values(), [1e-3]))
    with open(path, "a") as f:
        f.write(_rec(cfgs[1].knob_values(), [1e-3]).to_json()[:40])  # torn, no newline
    with pytest.warns(RecordWarning, match=r"log.jsonl:2: skipped a torn or corrupt line"):
        recs = read_records(path)
    assert len(recs) == 1
    # appending after a torn line starts a new line
    with RecordWriter(path) as w:
        w.write(_rec(cfgs[1].knob_values(), [5e-4]))
    with pytest.warns(RecordWarning, match=":2:"):
        recs = read_records(path)
    assert [r.line for r in recs] == [1, 3]


def test_corrupt_and_incomplete_lines(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"schema": 1}\nnot json\n[1, 2]\n\n')
    with pytest.warns(RecordWarning) as got:
        assert read_records(path) == []
    text = " ".join(str(w.message) for w in got)
    assert ":1: skipped an incomplete record" in text and ":2: skipped a torn" in text
    assert ":3:" in text


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "log.jsonl"
    d = json.loads(_rec({"a": 1}, [1.0]).to_json())
    d["schema"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(d) + "\n")
    with pytest.raises(TuneError, match=rf"schema version {SCHEMA_VERSION + 1}.*reads "
                       rf"versions up to {SCHEMA_VERSION}"):
        read_records(path)


def test_missing_file():
    with pytest.raises(TuneError, match="not found"):
        read_records("/nonexistent/log.jsonl")
    assert read_records("/nonexistent/log.jsonl", missing_ok=True) == []


def test_best_records_ignore_failures():
    sp, cfgs = _configs(3)
    recs = [_rec(cfgs[0].knob_values(), [3e-3]), _rec(cfgs[1].knob_values(), [1e-3]),
            _rec(cfgs[2].knob_values(), [], error="timeout")]
    (best,) = best_records(recs).values()
    assert best.config == cfgs[1].knob_values()


def test_apply_history_best_builds_the_best_config(tmp_path):
    sp, cfgs = _configs(3)
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as w:
        w.write(_rec(cfgs[0].knob_values(), [3e-3]))
        w.write(_rec(cfgs[1].knob_values(), [1e-3]))
        w.write(_rec(cfgs[2].knob_values(), [1e-4], error="wrong_result"))
    t = get_template("matmul")
    with apply_history_best(str(path)):
        s, tensors = t(*ARGS)
    want, _ = t.instantiate(cfgs[1], ARGS)
    assert [str(x) for x in s.trace] == [str(x) for x in want.trace]
    f = polytile.build(s, tensors)
    a = np.random.rand(32, 32).astype("float32")
    b = np.random.rand(32, 32).astype("float32")
    c = np.zeros((32, 32), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    best = load_best(str(path), t.workload(ARGS))
    assert best is not None and best.config == cfgs[1].knob_values()
    assert load_best(str(path), t.workload(ARGS), target="llvm -mcpu=skylake") is None


def test_missing_record_falls_back_with_a_warning(tmp_path):
    sp, cfgs = _configs(1)
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as w:
        w.write(_rec(cfgs[0].knob_values(), [1e-3], args=(64, 64, 64)))  # other workload
    _warned.clear()
    with apply_history_best(str(path)):
        with pytest.warns(FallbackWarning, match=r"no tuning record for matmul\(32, 32, 32\)"
                          r".*polytile tune matmul --args 32,32,32"):
            s, _ = get_template("matmul")(*ARGS)
    want, _ = get_template("matmul").instantiate(sp.default(), ARGS)
    assert [str(x) for x in s.trace] == [str(x) for x in want.trace]


def test_records_never_pickle(tmp_path):
    path = tmp_path / "log.jsonl"
    with RecordWriter(path) as w:
        w.write(_rec({"tile": [-1, 4]}, [1e-3]))
    raw = path.read_bytes()
    assert raw.startswith(b"{") and b"\x80" not in raw
