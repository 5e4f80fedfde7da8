"""Broken, foreign and mismatched records files. A records file with a few bad lines is read
around them (a ``RecordWarning`` names the file and line); a file that is not a records file
at all, a newer schema or a mismatched ``resume`` is refused with a ``TuneError``. Nothing
the user already recorded is lost: a refused run leaves the file byte for byte as it was."""

from __future__ import annotations

import json
import os

import pytest
from polytile.autotune import (
    FallbackWarning,
    Record,
    RecordWarning,
    RecordWriter,
    apply_history_best,
    canonical_target,
    get_template,
    load_best,
    read_records,
    tune,
)
from polytile.autotune.template import _warned

from polytile.errors import TargetError, TuneError

ARGS = (32, 32, 32)


@pytest.fixture(scope="module")
def config():
    return get_template("matmul").space(ARGS).default().knob_values()


@pytest.fixture(autouse=True)
def _fresh_fallback_warnings():
    _warned.clear()  # a FallbackWarning is given once per workload and target


def line(config, *, args=ARGS, target=None, **fields) -> str:
    """One JSON line of a successful record; ``fields`` overwrite its JSON fields as is."""
    rec = Record(workload={"template": "matmul", "args": list(args), "dtype": "float32"},
                 target=target or canonical_target("llvm"), config=config, costs=[1e-3],
                 timestamp=1.0)
    d = json.loads(rec.to_json())
    d.update(fields)
    return json.dumps(d, separators=(",", ":")) + "\n"


def write(tmp_path, name: str, text: str | bytes):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


TVM_LOG = json.dumps({"input": ["llvm", "matmul", [[32, 32], "float32"], {}],
                      "config": {"index": 1, "code_hash": None, "entity": []},
                      "result": [[0.001], 0, 0.1, 1.0], "version": 0.2,
                      "tvm_version": "0.19"}) + "\n"


# ------------------------------------------------------------ tolerated, with a warning
TOLERATED = [
    pytest.param(lambda c: line(c) + line(c)[:40], r"log\.jsonl:2: skipped a torn or corrupt "
                 r"line", 1, id="torn-last-line"),
    pytest.param(lambda c: line(c)[:40] + "\n" + line(c), r"log\.jsonl:1: skipped a torn or "
                 r"corrupt line", 1, id="torn-first-line"),
    pytest.param(lambda c: line(c) + "hello world\n" + line(c),
                 r"log\.jsonl:2: skipped a torn or corrupt line", 2, id="garbage-line"),
    pytest.param(lambda c: line(c) + line(c, schema="1"),
                 r"log\.jsonl:2: skipped an incomplete record \(unknown schema version '1'\)",
                 1, id="schema-version-as-string"),
    pytest.param(lambda c: line(c) + line(c, schema=0),
                 r"log\.jsonl:2: skipped an incomplete record \(unknown schema version 0\)",
                 1, id="schema-version-0"),
    pytest.param(lambda c: line(c, costs=[-1e-3]) + line(c),
                 r"log\.jsonl:1: skipped an incomplete record \(malformed costs \(expected "
                 r"positive seconds\)\)", 1, id="negative-cost"),
    pytest.param(lambda c: line(c) + line(c, costs=[0.0]),
                 r"log\.jsonl:2: skipped an incomplete record \(malformed costs", 1,
                 id="zero-cost"),
    pytest.param(lambda c: line(c) + line(c, costs=[True]),
                 r"log\.jsonl:2: skipped an incomplete record \(malformed costs", 1,
                 id="boolean-cost"),
    pytest.param(lambda c: line(c) + line(c, costs="0.001"),
                 r"log\.jsonl:2: skipped an incomplete record \(malformed costs", 1,
                 id="cost-as-a-string"),
    pytest.param(lambda c: line(c) + line(c, error="segfault"),
                 r"log\.jsonl:2: skipped an incomplete record \(unknown error code 'segfault'\)",
                 1, id="unknown-error-code"),
    pytest.param(lambda c: line(c) + line(c, target=None) .replace('"target"', '"targ"'),
                 r"log\.jsonl:2: skipped an incomplete record \('target'\)", 1,
                 id="record-without-target"),
]


@pytest.mark.parametrize("make, match, n_read", TOLERATED)
def test_bad_lines_are_skipped_with_file_and_line(tmp_path, config, make, match, n_read):
    p = write(tmp_path, "log.jsonl", make(config))
    with pytest.warns(RecordWarning, match=match):
        recs = read_records(p)
    assert len(recs) == n_read and all(r.ok for r in recs)


# ------------------------------------------------------------ refused
def _read(p, config):
    read_records(p)


def _apply(p, config):
    with apply_history_best(str(p)):
        get_template("matmul")(*ARGS)


def _append(p, config):
    with RecordWriter(p) as w:
        w.write(Record(workload={"template": "matmul", "args": list(ARGS)}, target="llvm",
                       config=config, costs=[1e-3]))


def _resume_other_workload(p, config):
    tune("matmul", args=(16, 16, 16), log_file=str(p), resume=True, n_trial=1)


def _tune_into(p, config):
    tune("matmul", args=ARGS, log_file=str(p), n_trial=1)


REFUSED = [
    pytest.param(lambda c: line(c, schema=7), _read, TuneError,
                 r"(?s)records: .*log\.jsonl:1 has schema version 7; this polytile .* reads "
                 r"versions up to 1.*hint: upgrade polytile", id="newer-schema-version"),
    pytest.param(lambda c: TVM_LOG * 3, _read, TuneError,
                 r"(?s)records: '.*log\.jsonl' is not a polytile records file \(line 1: a JSON "
                 r"object with the keys \[config, input, result, tvm_version, version\].*; "
                 r"expected the JSON Lines file of `polytile tune`.*hint: logs of TVM",
                 id="tvm-log-read"),
    pytest.param(lambda c: TVM_LOG, _apply, TuneError,
                 r"records: '.*log\.jsonl' is not a polytile records file",
                 id="tvm-log-in-apply-history-best"),
    pytest.param(lambda c: bytes(range(256)) * 4, _read, TuneError,
                 r"(?s)records: '.*log\.jsonl' is not a polytile records file \(line 1: it is "
                 r"not JSON\).*File: .*log\.jsonl:1", id="binary-file"),
    pytest.param(lambda c: "a,b,c\n1,2,3\n", _append, TuneError,
                 r"records: '.*log\.jsonl' is not a polytile records file \(line 1: it is not "
                 r"JSON\); nothing was appended to it; expected", id="append-to-a-csv"),
    pytest.param(lambda c: line(c), _resume_other_workload, TuneError,
                 r"(?s)tune: resume: '.*log\.jsonl' holds no record of matmul\(16, 16, 16\) "
                 r"float32 on 'llvm.*' \(it holds matmul\(32, 32, 32\) float32 on 'llvm.*'\); "
                 r"expected the log of an earlier run.*hint: check --args",
                 id="resume-onto-another-workload"),
    pytest.param(lambda c: line(c, target="llvm -mcpu=skylake-avx512"), _resume_other_workload,
                 TuneError, r"holds no record .* \(it holds matmul\(32, 32, 32\) float32 on "
                 r"'llvm -mcpu=skylake-avx512'\)", id="resume-onto-another-target"),
    pytest.param(lambda c: TVM_LOG, _tune_into, TuneError,
                 r"records: '.*log\.jsonl' is not a polytile records file",
                 id="tune-into-a-tvm-log"),
]


@pytest.mark.parametrize("make, action, exc, match", REFUSED)
def test_foreign_or_mismatched_records_are_refused_and_kept(tmp_path, config, make, action,
                                                           exc, match):
    p = write(tmp_path, "log.jsonl", make(config))
    before = p.read_bytes()
    with pytest.raises(exc, match=match):
        action(p, config)
    assert p.read_bytes() == before


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TuneError, match=r"records: file '.*nope\.jsonl' not found; expected a "
                       r"records file written by `polytile tune`"):
        load_best(str(tmp_path / "nope.jsonl"), "matmul")
    with pytest.raises(TuneError, match=r"records: '.*' is a directory; expected a records "
                       r"file"):
        read_records(tmp_path)
    with pytest.raises(TuneError, match=r"(?s)records: log '.*' is a directory; expected a "
                       r"records file path.*hint: pass '.*polytile_tune\.jsonl'"):
        RecordWriter(tmp_path)


@pytest.mark.parametrize("other, named", [
    pytest.param({"args": (64, 64, 64)}, r"matmul\(64, 64, 64\) float32 on 'llvm",
                 id="records-of-another-workload"),
    pytest.param({"target": "llvm -mcpu=skylake-avx512"},
                 r"matmul\(32, 32, 32\) float32 on 'llvm -mcpu=skylake-avx512'",
                 id="records-of-another-target"),
])
def test_records_of_another_workload_or_target_fall_back_naming_them(tmp_path, config, other,
                                                                      named):
    p = write(tmp_path, "log.jsonl", line(config, **other))
    with pytest.warns(FallbackWarning, match=r"no tuning record for matmul\(32, 32, 32\) "
                      r"float32 on target 'llvm.*' \(the active records hold only " + named +
                      r".*\); using the template's default config\. To tune it: `polytile "
                      r"tune matmul --args 32,32,32"):
        with apply_history_best(str(p)):
            get_template("matmul")(*ARGS)


def test_record_that_does_not_fit_the_space_falls_back(tmp_path, config):
    p = write(tmp_path, "log.jsonl", line({"tile_i": [-1, 3, 5]}))
    with pytest.warns(FallbackWarning, match=r"\(the active records\); using the template's "
                      r"default config"):
        with pytest.warns(UserWarning, match=r"apply_history_best: the best record of "
                          r"matmul\(32, 32, 32\) float32 \(line 1\) does not fit the "
                          r"template's space: config: knobs \['tile_i'\] do not match"):
            with apply_history_best(str(p)):
                get_template("matmul")(*ARGS)


def test_apply_history_best_argument_mistakes(tmp_path, config):
    with pytest.raises(TuneError, match=r"apply_history_best: got records of the wrong type; "
                       r"expected a records file path or a list of Record"):
        apply_history_best([json.loads(line(config))])
    with pytest.raises(TargetError, match=r"target: unknown target kind 'gpu'"):
        apply_history_best([], target="gpu")


def test_a_torn_line_is_completed_not_overwritten(tmp_path, config):
    p = write(tmp_path, "log.jsonl", line(config) + line(config)[:40])
    with RecordWriter(p) as w:
        w.write(Record.from_dict(json.loads(line(config))))
    text = p.read_text()
    assert text.startswith(line(config) + line(config)[:40] + "\n")
    assert os.path.getsize(p) > len(line(config)) * 2
