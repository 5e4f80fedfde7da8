"""Mistakes on the ``polytile`` command line: exit code 2 with argparse's message for usage
errors, 1 with one ``polytile: error:`` line (and the fix, as a ``hint:`` line) for the
rest; never a traceback, and never a tuning run that starts and then fails on its log.
Run in-process (``polytile.cli.main``) to stay fast."""

from __future__ import annotations

import re

import pytest

from polytile.cli import main

TUNE = ["tune", "matmul", "--trials", "1", "--no-numpy", "--quiet", "--tuner", "random"]


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "file.txt").write_text("notes\n")
    (tmp_path / "tvm.log").write_text('{"input": ["llvm", "matmul"], "config": {}, '
                                      '"result": [[0.1], 0, 0.1, 1.0], "version": 0.2}\n')
    return tmp_path


def cli(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


CASES = [
    pytest.param(lambda d: ["tune", "matmull"], 1,
                 r"polytile: error: template: unknown template 'matmull'; expected one of "
                 r"\[.*'matmul'.*\] or path/to/file\.py:function", id="unknown-workload"),
    pytest.param(lambda d: ["run", "conv2d"], 1, r"unknown template 'conv2d'; expected one of",
                 id="run-unknown-workload"),
    pytest.param(lambda d: ["tune", "matmul", "--args", "64x64x64"], 2,
                 r"argument --args: expected comma-separated integers, got '64x64x64'",
                 id="args-not-comma-separated"),
    pytest.param(lambda d: ["tune", "matmul", "--args=-1,64,64"], 2,
                 r"argument --args: expected non-negative integers, got '-1,64,64'",
                 id="args-negative"),
    # a zero size used to fail with "policy 'candidate' for knob 'tile_i' without candidates"
    pytest.param(lambda d: [*TUNE, "--args", "0,16,16"], 1,
                 r"polytile: error: define_split: knob 'tile_i' splits an axis of extent 0; "
                 r"expected an extent >= 1", id="args-zero-size"),
    pytest.param(lambda d: [*TUNE, "--args", "64,64"], 1,
                 r"(?s)polytile: error: template 'matmul': takes 3 arguments \(M, N, K\) but 2 "
                 r"were given: \[64, 64\]; expected one value per argument.*hint: --args "
                 r"1024,1024,1024", id="args-too-few"),
    pytest.param(lambda d: ["run", "matmul", "--args", "64,64,64,64", "--log",
                            str(d / "file.txt")], 1,
                 r"template 'matmul': takes 3 arguments \(M, N, K\) but 4 were given",
                 id="run-args-too-many"),
    pytest.param(lambda d: [*TUNE, "--dtype", "float33"], 1,
                 r"polytile: error: dtype: unsupported dtype 'float33'; expected one of",
                 id="unknown-dtype"),
    pytest.param(lambda d: [*TUNE, "--target", "llvm -mcpu=foo"], 1,
                 r"(?s)polytile: error: target: LLVM does not know the CPU 'foo'.*hint: llc "
                 r"-mcpu=help", id="unknown-mcpu"),
    pytest.param(lambda d: [*TUNE, "--trials", "0"], 2,
                 r"argument --trials: expected a positive integer, got '0'", id="zero-trials"),
    pytest.param(lambda d: ["run", "matmul", "--log", str(d / "missing.jsonl")], 1,
                 r"polytile: error: records file '.*missing\.jsonl' not found \(tune first: "
                 r"polytile tune matmul --log", id="run-missing-log"),
    pytest.param(lambda d: ["records", "show", str(d / "missing.jsonl")], 1,
                 r"polytile: error: records: file '.*missing\.jsonl' not found; expected a "
                 r"records file", id="records-missing-log"),
    pytest.param(lambda d: ["records", "best", str(d)], 1,
                 r"polytile: error: records: '.*' is a directory; expected a records file",
                 id="records-of-a-directory"),
    pytest.param(lambda d: ["records", "summary", str(d / "tvm.log")], 1,
                 r"(?s)polytile: error: records: '.*tvm\.log' is not a polytile records file "
                 r"\(line 1: .*keys \[config, input, result, version\].*hint: logs of TVM",
                 id="records-of-a-tvm-log"),
    pytest.param(lambda d: [*TUNE, "--args", "16,16,16", "--log",
                            str(d / "file.txt" / "x.jsonl")], 1,
                 r"polytile: error: --log: cannot write log '.*file\.txt/x\.jsonl': '.*"
                 r"file\.txt' is a file, not a directory; expected a path in a directory",
                 id="unwritable-log-path"),
    pytest.param(lambda d: [*TUNE, "--args", "16,16,16", "--log", str(d)], 1,
                 r"(?s)polytile: error: --log: log '.*' is a directory; expected a records file "
                 r"path.*hint: pass '.*polytile_tune\.jsonl'", id="log-is-a-directory"),
    pytest.param(lambda d: [*TUNE, "--args", "16,16,16", "--log", str(d / "file.txt")], 1,
                 r"polytile: error: --log: '.*file\.txt' is not a polytile records file \(line "
                 r"1: it is not JSON\); nothing was appended to it", id="log-is-a-text-file"),
    pytest.param(lambda d: [*TUNE, "--resume", "--log", str(d / "missing.jsonl")], 1,
                 r"polytile: error: --resume: log '.*missing\.jsonl' does not exist",
                 id="resume-missing-log"),
    pytest.param(lambda d: ["tune", "depthwise_conv2d_nchw", "--target", "cuda"], 1,
                 r"polytile: error: template 'depthwise_conv2d_nchw': has no schedule for target "
                 r"kind 'cuda' \(it has llvm\); expected one of its targets; templates for "
                 r"'cuda': batch_matmul, conv2d_nchw, conv2d_nhwc, layernorm, matmul, rmsnorm, "
                 r"row_sum, softmax",
                 id="tune-cpu-template-for-cuda"),
]


@pytest.mark.parametrize("argv, code, match", CASES)
def test_cli_mistake(capsys, paths, argv, code, match):
    before = {p.name: p.read_bytes() for p in paths.iterdir() if p.is_file()}
    got, out, err = cli(capsys, argv(paths))
    assert got == code, err
    assert "Traceback" not in err
    assert re.search(match, err), err
    assert "tuning" not in err and "polytile tune matmul(" not in out  # nothing started
    assert {p.name: p.read_bytes() for p in paths.iterdir() if p.is_file()} == before
